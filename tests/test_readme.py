"""The README's code runs exactly as printed, offline, on a CPU.

"Quick start" and "Your own module, offline" are whole scripts and run verbatim on their own;
"Quick start" also runs with its first line changed to ``import lightning.pytorch as pl``, as the
README says. "Add it to your Trainer" is marked a fragment in the README and is executed verbatim
with what it says the user supplies: their own LightningModule (``MyChatbot``, a Hugging Face model
and tokenizer as ``self.model`` / ``self.tokenizer``, nothing else), their ``train.jsonl`` /
``valid.jsonl``, and the imports of the quick start. The metric example is a doctest.

Both whole scripts run verbatim with Lightning's own environment default ``PL_TRAINER_LIMIT_TRAIN_BATCHES``
(read by ``Trainer.__init__`` for an argument the script does not pass), which shortens their epochs: the tests
check that the scripts run and what they log, not the fine-tuning; the README's measured times are of the
scripts as a user runs them.

The two quick start runs share one clusters cache (``lightning_div_cache``, the script's default
under its working directory, a link to one folder): its files are named by the hash of all that
decides the clusters, so the second run reads what the first fitted, as a user's second run does.
They are one xdist group, run one after the other, so that the second finds the file.
"""

import doctest
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import docs_blocks
import pytest
import pytorch_lightning as pl
import torch
from docs_blocks import fenced_block, fenced_blocks, marked_block
from helpers import causal_model, chitchat_pairs, tokenizer

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


class MyChatbot(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.tokenizer = tokenizer()
        self.model = causal_model().train()

    def training_step(self, batch, batch_idx):
        return self.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def section(title: str) -> str:
    return docs_blocks.section(README.read_text(encoding="utf-8"), title, "README.md")


def python_block(title: str) -> str:
    return fenced_block(section(title), "python", f"README.md's section '{title}'")


def write_jsonl(path: Path, pairs) -> None:
    path.write_text(
        "".join(json.dumps({"context": list(p.context), "response": p.response}) + "\n" for p in pairs),
        encoding="utf-8",
    )


def finite_metrics(trainer: pl.Trainer) -> dict[str, float]:
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    return metrics


def test_install_shows_the_user_install_first_and_the_developer_install_for_ci():
    """Issue 43 item 5: the only install block was the developer one (`.[dev]`: test, lint and docs tools)."""
    install = section("Install")
    blocks = fenced_blocks(install, "bash")
    assert len(blocks) == 2
    assert ".[cpu,demo,hf]" in blocks[0] and "[dev]" not in blocks[0]
    # the CPU-only line is inside the block a user copies, marked, before the extras (issue 55 item 1: copying
    # the block gave torch's CUDA build and ~4 GB of NVIDIA wheels); .ci/run installs this block in a venv of
    # its own and checks that torch is the CPU build
    lines = blocks[0].splitlines()
    cpu = next(i for i, line in enumerate(lines) if "--index-url https://download.pytorch.org/whl/cpu" in line)
    extras = next(i for i, line in enumerate(lines) if line.startswith('python -m pip install ".[cpu,demo]"'))
    assert (
        cpu < extras
        and lines[cpu] == 'python -m pip install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu'
    )
    assert lines[cpu - 1].startswith("# CPU-only machine") and "skip this line on a GPU" in lines[cpu - 1]
    user = marked_block(install, "<!-- ci:user-install -->", "bash")
    assert user == blocks[0]
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_block '<!-- ci:user-install -->'" in run and "torch.version.cuda is None" in run
    # .ci/run installs the first block after the marker: the developer install, litdata without its torchvision
    ci = marked_block(install, "<!-- ci:install -->", "bash")
    assert ci == blocks[1] and '-e ".[dev]"' in ci and '--no-deps "litdata' in ci
    assert install.index(blocks[0]) < install.index("<!-- ci:install -->")
    # CPU-only machines are told once how to get PyTorch's CPU wheel
    text = README.read_text(encoding="utf-8")
    assert text.count("--index-url https://download.pytorch.org/whl/cpu") == 1
    assert text.count("<!-- ci:user-install -->") == 1


def test_metric_example_is_a_passing_doctest():
    parser = doctest.DocTestParser()
    test = parser.get_doctest(python_block("A metric as a function"), {}, "README.md", str(README), 0)
    assert test.examples, "the README's metric example has no >>> lines"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


@pytest.fixture(scope="module")
def quick_start_clusters(tmp_path_factory):
    """One clusters cache for both quick start runs (content-addressed, so sharing it is safe)."""
    return tmp_path_factory.mktemp("quick_start_clusters")


def _share_clusters_cache(run_dir: Path, shared: Path) -> None:
    """``run_dir/lightning_div_cache`` (the callbacks' default cache) is the shared cache folder."""
    (run_dir / "lightning_div_cache").symlink_to(shared, target_is_directory=True)


def test_the_quick_start_keeps_the_ruq_plot_cheap():
    """Issue 43 item 2: the per-position plot's beam search (64 prompts x 5 beams, the old default) took 52-71 s
    of each quick start epoch. The default is now 16 x 5 beam hypotheses, and the quick start asks for no more
    (nor does the README's own-module script); the README says what the quick start took."""
    import ast
    import inspect

    from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot

    default = RUQPlot(num_contexts=16, num_beams=5)  # the default this test was written against
    assert inspect.signature(RUQMonitor).parameters["plot"].default == default
    for title in ("Quick start", "Your own module, offline"):
        calls = [
            node
            for node in ast.walk(ast.parse(python_block(title)))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RUQMonitor"
        ]
        assert len(calls) == 1
        given = [eval(ast.unparse(kw.value), {"RUQPlot": RUQPlot}) for kw in calls[0].keywords if kw.arg == "plot"]
        plot = given[0] if given else default
        assert plot is None or plot.num_contexts * plot.num_beams <= 16 * 5, title


def _quick_start_metrics(tmp_path, monkeypatch, capsys, code):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(code, "README.md: Quick start", "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.current_epoch == trainer.max_epochs
    _assert_printed_summary(capsys.readouterr().out, trainer)
    return namespace, finite_metrics(trainer)


def _assert_printed_summary(out: str, trainer) -> None:
    """The script's last line printed the summary: ordered, with units, no repeats (issue 43 item 3)."""
    from lightning_div.summary import summary

    assert out.rstrip("\n").endswith(summary(trainer))
    printed = summary(trainer)
    keys = [line.split()[0] for line in printed.splitlines()[1:]]
    assert "val/sem_ent" in keys and "val/ruq" in keys
    order = [k for k in ("val/loss", "val/sem_ent", "val/ruq", "timing/ruq_s") if k in keys]
    assert [keys.index(k) for k in order] == sorted(keys.index(k) for k in order)
    assert "train/loss_epoch" not in printed and "_step" not in printed and "ruq_idk" not in printed
    assert re.search(r"^  val/ruq +\d+\.\d %", printed, re.M)  # RUQ is a percentage
    assert re.search(r"^  val/sem_ent +\d\.\d{4} nats", printed, re.M)


def _assert_real_diversity(metrics, k):
    # the fine-tuned base model answers in words: non-zero diversity, every value in its range
    assert 0.0 < metrics["val/sem_ent"] <= math.log(k) + 1e-9
    assert 0.0 < metrics["val/sem_ent_gold"] <= math.log(k) + 1e-9
    for key in ("val/distinct_1", "val/distinct_2", "val/ead"):
        assert 0.0 < metrics[key] <= 1.0 + 1e-9, key
    for key in ("val/ruq", "train/ruq"):
        assert 0.0 <= metrics[key] <= 100.0, key
    assert math.isfinite(metrics["val/ruq_margin"])


@pytest.mark.slow
@pytest.mark.xdist_group("readme_quick_start")
def test_quick_start_runs_as_printed(tmp_path, monkeypatch, capsys, recwarn, quick_start_clusters):
    """The quick start, its epochs cut to 2 of their 13 batches by Lightning's environment default.

    The script's ``log_every_n_steps=10`` is below its 13 batches an epoch, so a user sees no logging-interval
    warning (issue 43 item 3). Cut to 2, Lightning warns that 2 batches are fewer than 10: that warning, naming
    the limit's 2, is the only one, and Lightning's condition is checked on the script's own epoch instead."""
    _share_clusters_cache(tmp_path, quick_start_clusters)
    monkeypatch.setenv("PL_TRAINER_LIMIT_TRAIN_BATCHES", "2")
    namespace, metrics = _quick_start_metrics(tmp_path, monkeypatch, capsys, python_block("Quick start"))
    trainer = namespace["trainer"]
    # no logging-interval warning for the script's own epochs (issue 43 item 3): Lightning warns when an epoch's
    # batches (pytorch_lightning/loops/fit_loop.py: max_batches) are fewer than log_every_n_steps
    interval = [str(w.message) for w in recwarn if "log_every_n_steps" in str(w.message)]
    assert len(interval) == 1 and interval[0].startswith("The number of training batches (2) is smaller"), interval
    assert len(namespace["data"].train_dataloader()) == 13 >= trainer.log_every_n_steps == 10
    assert type(trainer).__module__.startswith("pytorch_lightning")
    assert trainer.global_step == 2 * 2  # Lightning's environment default was read
    _assert_real_diversity(metrics, 10)
    assert metrics["val/loss"] < 5.0  # the base model's start, not a model from scratch (5.45 after the old demo)
    assert len(list(quick_start_clusters.glob("clusters-*.npz"))) == 1  # fitted (or read) through the shared cache


@pytest.mark.slow
@pytest.mark.xdist_group("readme_quick_start")
def test_quick_start_runs_under_the_unified_lightning_package(tmp_path, quick_start_clusters):
    """The quick start with ``import lightning.pytorch as pl``: lightning-div binds to the package the
    script imported (lightning_div._internal.lightning). A fresh process: this one bound to pytorch_lightning.

    The script runs verbatim; Lightning's own environment default ``PL_TRAINER_LIMIT_TRAIN_BATCHES=1``
    (read by ``Trainer.__init__`` for an argument the script does not pass) shortens each epoch to 1 of its
    13 batches: what this run checks is the binding, the metrics and the figures."""
    _share_clusters_cache(tmp_path, quick_start_clusters)
    code = python_block("Quick start")
    assert code.startswith("import pytorch_lightning as pl\n")
    code = "import lightning.pytorch as pl\n" + code.split("\n", 1)[1]  # the one change the README names
    code += (
        "\nimport json, sys\n"
        "print('RESULT', json.dumps({'trainer': type(trainer).__module__, 'model': type(model).__mro__[1].__module__,"
        " 'pytorch_lightning': 'pytorch_lightning' in sys.modules, 'epoch': trainer.current_epoch,"
        " 'global_step': trainer.global_step,"
        " 'log_dir': trainer.log_dir, 'metrics': {k: float(v) for k, v in trainer.callback_metrics.items()}}))\n"
    )
    (tmp_path / "quick_start.py").write_text(code)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PL_TRAINER_LIMIT_TRAIN_BATCHES": "1"}
    env.pop("LIGHTNING_DIV_LIGHTNING", None)
    done = subprocess.run(
        [sys.executable, "quick_start.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # its output is a pipe, as a log file: no bar of lightning-div's, no logging-interval warning (issue 43 item 3)
    for noise in ("Embedding responses", "Fitting semantic clusters", "RUQ scoring", "generating (", "tokenising"):
        assert noise not in done.stderr + done.stdout, noise
    # (the logging-interval warning is checked in the other quick start test: 1 batch is fewer than its 10 steps)
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["trainer"].startswith("lightning.pytorch") and result["model"].startswith("lightning.pytorch")
    assert not result["pytorch_lightning"]  # nothing of the other package was imported
    assert result["epoch"] == 2 and result["global_step"] == 2 * 1  # Lightning's environment default was read
    metrics = {k: v for k, v in result["metrics"].items() if math.isfinite(v)}
    _assert_real_diversity(metrics, 10)
    # the figure path: the cluster histogram written beside the unified package's logger files
    figures = list((Path(result["log_dir"]) / "lightning_div").glob("val_cluster_histogram_epoch*.png"))
    assert len(figures) == 2, sorted(p.name for p in Path(result["log_dir"]).rglob("*"))


@pytest.mark.slow
def test_add_to_your_trainer_example_runs_as_printed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pairs = chitchat_pairs("train", 150)
    # the fragment's defaults sample up to 256 RUQ prompts and 256 contexts: 160 training and 24 validation
    # pairs keep its three epochs of measurements small
    write_jsonl(tmp_path / "train.jsonl", pairs[:160])
    write_jsonl(tmp_path / "valid.jsonl", pairs[400:424])

    # what the fragment says the user brings: their module and data, and the quick start's imports
    from lightning_div import DialogueDataModule, SemanticSpace
    from lightning_div.callbacks import RUQMonitor, SemanticDiversityMonitor

    namespace = {
        "MyChatbot": MyChatbot,
        "pl": pl,
        "DialogueDataModule": DialogueDataModule,
        "SemanticSpace": SemanticSpace,
        "SemanticDiversityMonitor": SemanticDiversityMonitor,
        "RUQMonitor": RUQMonitor,
    }
    exec(compile(python_block("Add it to your Trainer"), "README.md: Add it to your Trainer", "exec"), namespace)

    trainer = namespace["trainer"]
    metrics = finite_metrics(trainer)
    assert trainer.current_epoch == trainer.max_epochs  # the fit ran to the end
    assert 0.0 <= metrics["val/sem_ent"] <= math.log(20) + 1e-9
    assert 0.0 < metrics["val/sem_ent_gold"] <= math.log(20) + 1e-9  # 24 real responses spread over clusters
    for key in ("val/ruq", "train/ruq"):
        assert 0.0 <= metrics[key] <= 100.0, key
    for key in ("val/distinct_1", "val/distinct_2"):  # an untrained model may answer with EOS alone: 0 is defined
        assert 0.0 <= metrics[key] <= 1.0, key
    # the clusters were fitted on the datamodule's training responses and cached under the run's root
    assert list((tmp_path / "lightning_div_cache").rglob("*.npz"))


@pytest.mark.slow
def test_your_own_module_offline_runs_as_printed(tmp_path, monkeypatch, capsys):
    """The script verbatim, its epochs cut to 1 of their 8 batches by Lightning's environment default."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PL_TRAINER_LIMIT_TRAIN_BATCHES", "1")
    namespace = {"__name__": "__main__"}
    exec(compile(python_block("Your own module, offline"), "README.md: Your own module, offline", "exec"), namespace)

    trainer = namespace["trainer"]
    metrics = finite_metrics(trainer)
    assert trainer.current_epoch == trainer.max_epochs and trainer.global_step == 2 * 1
    # no validation loop: the monitors measured at the training epochs' end, with the data they were given
    _assert_real_diversity(metrics, 8)
    _assert_printed_summary(capsys.readouterr().out, trainer)


def test_the_dress_line_runs_offline_and_a_hub_default_fails_in_one_message():
    """Issue 55 item 3: the README's ``DRESSReweighting()`` loaded the paper's DialoGPT-large from the Hub and,
    offline, failed after three chained tracebacks; the line now names the quick start's offline encoder."""
    import traceback

    from lightning_div import SemanticSpace
    from lightning_div.callbacks import DRESSReweighting
    from lightning_div.semantic.encoder import EncoderLoadError

    (line,) = re.findall(r"`(DRESSReweighting\([^`]*\))`", section("Add it to your Trainer"))
    # the line's ``space`` is the fragment's, the monitor's: the one object both are given
    (space_line,) = [s for s in python_block("Add it to your Trainer").splitlines() if s.startswith("space = ")]
    fragment: dict = {"SemanticSpace": SemanticSpace}
    exec(space_line, fragment)
    dress = eval(line, {"DRESSReweighting": DRESSReweighting, "space": fragment["space"]})
    assert dress.space is fragment["space"]
    encoder = dress.space.get_encoder("cpu")
    assert encoder.model_name_or_path == "sentence-transformers/all-MiniLM-L6-v2" and encoder.pooling == "mean"
    assert encoder.tokenizer("hello")["input_ids"]  # loaded offline (HF_HUB_OFFLINE=1, conftest)
    assert dress.space.num_clusters == 20  # the fragment's monitor's k
    with pytest.raises(
        EncoderLoadError, match=r"cannot load encoder 'microsoft/DialoGPT-large'.*encoder='minilm'"
    ) as e:
        _ = DRESSReweighting().space.get_encoder("cpu").tokenizer
    assert e.value.__cause__ is None and e.value.__suppress_context__
    printed = "".join(traceback.format_exception(e.value))
    assert printed.count("Traceback (most recent call last)") == 1, printed
