"""The `lightning-div` entry point: every config parses, the demo runs end to end (shortened), score and meta-eval."""

import csv
import json
import math
import re
from pathlib import Path

import pytest

from lightning_div.cli.main import main
from lightning_div.metrics import count_vocab, distinct_n, expectation_adjusted_distinct

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
OVERLAYS = {"ddp.yaml", "fsdp.yaml"}  # applied on top of demo.yaml


def test_there_are_configs():
    assert {p.name for p in CONFIGS} >= {
        "demo.yaml",
        "dialogpt-dailydialog.yaml",
        "blenderbot.yaml",
        "ddp.yaml",
        "fsdp.yaml",
        "gpu.yaml",
    }


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_config_parses(config, capsys):
    args = ["fit", "--config", str(ROOT / "configs" / "demo.yaml")] if config.name in OVERLAYS else ["fit"]
    with pytest.raises(SystemExit) as done:
        main(args + ["--config", str(config), "--print_config"])
    assert done.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "DialogueLM" in printed and "DialogueDataModule" in printed
    assert "lightning_div.callbacks" in printed
    if config.name == "ddp.yaml":
        assert "devices: 2" in printed and "strategy: ddp" in printed
    if config.name == "fsdp.yaml":
        assert "devices: 2" in printed and "class_path: pytorch_lightning.strategies.FSDPStrategy" in printed
        assert "- transformers.models.gpt2.modeling_gpt2.GPT2Block" in printed


PAPER_CONFIGS = sorted((ROOT / "configs" / "paper").glob("*.yaml"))
# what each paper config must keep: the authors' settings the docs' "Paper settings" page promises
PAPER_SETTINGS = {
    "sem-ent-dailydialog.yaml": [
        "num_clusters: 20",
        "kmeans_seed: 27",
        "tokenizer: casual",
        "base: 2.0",
        "no_repeat_ngram_size: 3",
        "lam: 30.0",
        "num_negative_contexts: 5000",
    ],
    "nli-diversity-dailydialog.yaml": [
        "n: 5",
        "top_p: 0.9",
        "threshold: 10",
        "max_samples: 20",
        "threshold_metric: contradictions",
        "threshold_rank_by: diversity",
    ],
    "ruq-dailydialog.yaml": [
        "- I don't know.",
        "- I don't know what to do.",
        "num_train_prompts: null",
        "max_history: 1",
    ],
}


def test_there_is_a_config_per_paper():
    assert {p.name for p in PAPER_CONFIGS} >= set(PAPER_SETTINGS)


@pytest.mark.parametrize("config", PAPER_CONFIGS, ids=lambda p: p.name)
def test_every_paper_config_parses(config, capsys):
    # each config names the subcommand it is for in its header: "#   lightning-div <command> --config ..."
    (command,) = [line.split()[2] for line in config.read_text().splitlines() if line.startswith("#   lightning-div ")]
    with pytest.raises(SystemExit) as done:
        main([command, "--config", str(config), "--print_config"])
    assert done.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "DialogueLM" in printed and "DialogueDataModule" in printed and "lightning_div.callbacks" in printed
    for setting in PAPER_SETTINGS.get(config.name, []):
        assert setting in printed, setting


@pytest.mark.slow
def test_demo_runs_end_to_end_shortened(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the demo writes runs/demo relative to the working directory
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "demo.yaml"),
            "--trainer.max_epochs=2",
            "--trainer.limit_train_batches=8",
            "--trainer.limit_val_batches=2",
            "--trainer.enable_progress_bar=false",
            "--data.init_args.max_train_examples=400",
            "--data.init_args.max_val_examples=64",
            "--data.init_args.show_progress=false",
        ]
    )
    out = capsys.readouterr().out
    assert "lightning-div: fit finished after 2 epoch(s)" in out and "tensorboard --logdir runs/demo" in out
    assert "one-page report: lightning-div report runs/demo --out report.html" in out
    rows = list(csv.DictReader(open(tmp_path / "runs/demo/csv/version_0/metrics.csv")))

    def values(key):
        return [float(r[key]) for r in rows if r.get(key)]

    assert len(values("val/sem_ent")) == 2 and all(0 <= v <= math.log(20) for v in values("val/sem_ent"))
    assert len(values("val/ruq")) == 2 and len(values("train/ruq")) == 2
    assert len(values("dress/head_clusters")) == 2 and values("dress/weight_min")
    assert values("val/sem_ent_gold")[0] > 1.0  # 64 real responses spread over 20 real-semantics clusters
    plots = {p.name for p in (tmp_path / "runs/demo/csv/version_0/lightning_div").iterdir()}
    assert {
        "val_cluster_histogram_epoch1.png",
        "val_ruq_plot_epoch1.png",
        "dress_weight_histogram_epoch1.png",
        "val_samples_epoch1.csv",
        "cluster_cards.csv",
        "cluster_shares.csv",
        "val_cluster_shares_epoch1.png",
        "dress_clusters_epoch1.png",
    } <= plots
    assert len(values("val/cluster_js")) == 2 and len(values("val/top_cluster_share")) == 2
    assert main(["report", "runs/demo", "--out", "report.html"]) == 0  # the command the summary names
    page = (tmp_path / "report.html").read_text()
    assert 'data-source="cluster_cards.csv"' in page and "lightning_div.callbacks.SemanticDiversityMonitor" in page
    assert list((tmp_path / "runs/demo/wandb").glob("offline-run-*"))
    import wandb

    assert wandb.run is None  # the CLI closes the run it opened; a later WandbLogger starts its own
    assert list((tmp_path / "runs/demo/cache").glob("clusters-*.npz"))  # shared by the monitor and DRESS
    assert len(list((tmp_path / "runs/demo/cache").glob("clusters-*.npz"))) == 1


@pytest.mark.slow
def test_validate_runs_the_monitors_on_an_untrained_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "validate",
            "--config",
            str(ROOT / "configs" / "demo.yaml"),
            "--trainer.limit_val_batches=2",
            "--trainer.enable_progress_bar=false",
            "--data.init_args.max_train_examples=300",
            "--data.init_args.max_val_examples=64",
            "--data.init_args.show_progress=false",
        ]
    )
    rows = list(csv.DictReader(open(tmp_path / "runs/demo/csv/version_0/metrics.csv")))
    logged = {k: float(v) for r in rows for k, v in r.items() if v}
    # no fit: the monitors prepare themselves at the first validation end
    assert 0.0 <= logged["val/sem_ent"] <= math.log(20) and 0.0 <= logged["val/ruq"] <= 100.0
    assert "dress/weight_mean" not in logged  # DRESS reweights training; validate trains nothing


def test_score_command(tmp_path, capsys):
    a = tmp_path / "system_a.txt"
    a.write_text("i don't know .\ni don't know .\nsure, why not?\n", encoding="utf-8")
    b = tmp_path / "system_b.jsonl"
    b.write_text('{"generated": "I love pizza!"}\n{"generated": "Where do you live?"}\n', encoding="utf-8")
    gold = tmp_path / "gold.txt"
    gold.write_text("I love pizza\nno idea, sorry\nwhere are you from?\nyes\n", encoding="utf-8")
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "score",
                str(a),
                str(b),
                "--gold",
                str(gold),
                "--metrics",
                "distinct_1",
                "distinct_2",
                "ead",
                "--output",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "system_a.txt" in table and "system_b.jsonl" in table and "gold" in table
    scores = json.loads(out.read_text())
    a_texts = ["i don't know .", "i don't know .", "sure, why not?"]
    # distinct-1 of system_a by hand: tokens i don't know . i don't know . sure , why not ? -> 13 tokens,
    # unique {i, don't, know, ., sure, ",", why, not, ?} = 9
    assert scores["system_a.txt"]["distinct_1"] == pytest.approx(9 / 13) == distinct_n(a_texts, 1)
    v = count_vocab(gold.read_text().splitlines())  # EAD's V comes from --gold
    assert scores["system_a.txt"]["ead"] == pytest.approx(expectation_adjusted_distinct(a_texts, v))
    assert scores["gold"]["responses"] == 4


def test_score_with_semantic_clusters(tmp_path):
    from helpers import chitchat_pairs

    gold = tmp_path / "gold.txt"
    gold.write_text("\n".join(p.response.replace("\n", " ") for p in chitchat_pairs("train", 40)[:120]) + "\n")
    gen = tmp_path / "gen.txt"
    gen.write_text("i don't know .\n" * 5 + "what is your favourite food?\n")
    out = tmp_path / "s.json"
    assert (
        main(
            [
                "score",
                str(gen),
                "--gold",
                str(gold),
                "--fit-clusters",
                "5",
                "--encoder",
                "minilm",
                "--metrics",
                "distinct_1",
                "--output",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    scores = json.loads(out.read_text())
    # 5 identical responses share a cluster; the sixth is either with them or alone
    p = 5 / 6
    assert scores["gen.txt"]["sem_ent"] in (
        pytest.approx(0.0, abs=1e-12),
        pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p))),
    )
    assert 0 < scores["gold"]["sem_ent"] <= math.log(5)


def test_score_reports_bad_files(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"response": "ok"}\n{"response": 1}\n', encoding="utf-8")
    # a user mistake is one line and exit code 2 (it was a traceback before issue 21)
    assert main(["score", str(bad)]) == 2
    assert re.match(r"lightning-div score: error: .*bad\.jsonl:2", capsys.readouterr().err)


def test_meta_eval_is_reachable_from_the_entry_point(tmp_path):
    out = tmp_path / "m.json"
    data = ROOT / "tests" / "data" / "con_test_sample.csv"
    assert main(["meta-eval", "--data", str(data), "--metrics", "avg_distinct", "--output", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["metrics"]["avg_distinct"]["test"] == "con"


def test_the_cli_creates_the_wandb_directory_before_wandb_starts(tmp_path):
    # W&B looks for a git repository from its run directory at start; a missing one printed
    # "wandb: WARNING git root runs/demo does not exist" on the demo's first run
    from types import SimpleNamespace

    from pytorch_lightning.loggers import WandbLogger

    from lightning_div.cli.main import DiversityCLI

    logger = WandbLogger(save_dir=str(tmp_path / "runs" / "demo"), offline=True, project="x")
    DiversityCLI.before_fit(SimpleNamespace(trainer=SimpleNamespace(loggers=[logger])))
    assert (tmp_path / "runs" / "demo").is_dir()
    assert logger._experiment is None  # W&B itself has not started
