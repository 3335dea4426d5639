"""SemanticDiversityMonitor and RUQMonitor in a real Trainer with CSV, TensorBoard, W&B (offline) and MLflow (files)."""

import copy
import csv
import json
import math
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from helpers import mlflow_artifacts
from monitor_setup import TRAIN, TinyChat, collate, common, fit, monitors, trainer
from pytorch_lightning.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger
from torch.utils.data import DataLoader

from lightning_div.callbacks.ruq import RUQMonitor
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Lexical, ModelAccess, Outputs

LEXICAL = ["val/distinct_1", "val/distinct_2", "val/distinct_3", "val/avg_distinct", "val/ent_4", "val/ead"]


def _csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _column(rows, key):
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


#: The two tests reading the one monitored run (``tracked``): one worker runs them, the run once.
TRACKED = "monitors_tracked_run"


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """The monitors' run with all four trackers, seeded as test_monitors_leave_training_bit_identical's
    plain run is: its weights and the RNG draw after fit are that test's watched run's (the trackers
    write what the monitors log; they touch neither weights nor RNG)."""
    tmp_path = tmp_path_factory.mktemp("tracked")
    sem, ruq = monitors(tmp_path)
    mlflow_uri = f"file:{tmp_path / 'mlruns'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow-skinny has no SQL store; the file store suffices
        loggers = [
            CSVLogger(tmp_path, name="csv"),
            TensorBoardLogger(tmp_path, name="tb"),
            WandbLogger(save_dir=str(tmp_path), offline=True, project="lightning-div-test"),
            MLFlowLogger(experiment_name="lightning-div-test", tracking_uri=mlflow_uri),
        ]
        torch.manual_seed(123)
        model = TinyChat()
        tr = trainer(tmp_path, [sem, ruq], loggers, max_epochs=2)
        tr.fit(model)
        after = torch.rand(3)
        loggers[2].experiment.finish()
    return tmp_path, tr, loggers, mlflow_uri, copy.deepcopy(model.state_dict()), after


@pytest.mark.slow
@pytest.mark.xdist_group(TRACKED)
def test_monitors_log_to_every_tracker(tracked, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the file store, read back below
    tmp_path, tr, loggers, mlflow_uri, _, _ = tracked
    rows = _csv_rows(Path(loggers[0].log_dir) / "metrics.csv")
    k = 4
    sem_ent = _column(rows, "val/sem_ent")
    assert len(sem_ent) == 2 and all(0.0 <= v <= math.log(k) + 1e-9 for v in sem_ent)
    gold = _column(rows, "val/sem_ent_gold")
    assert len(gold) == 1 and 0.0 < gold[0] <= math.log(k) + 1e-9  # logged once; real responses spread
    for key in LEXICAL:
        values = _column(rows, key)
        assert len(values) == 2 and all(math.isfinite(v) and v >= 0 for v in values), key
    for key in ("val/distinct_1", "val/distinct_2", "val/distinct_3", "val/avg_distinct"):
        assert all(v <= 1.0 for v in _column(rows, key))
    for key in ("val/ruq", "val/ruq_idk1", "val/ruq_idk2", "train/ruq", "train/ruq_idk1"):
        values = _column(rows, key)
        assert len(values) == 2 and all(0.0 <= v <= 100.0 for v in values), key
    assert _column(rows, "val/ruq") == _column(rows, "val/ruq_idk1")  # the headline is the first IDK string
    assert all(v > 0 for v in _column(rows, "timing/semantic_diversity_s"))
    assert _column(rows, "timing/ruq_s")

    # the same values reached TensorBoard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(loggers[1].log_dir, size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    assert [e.value for e in acc.Scalars("val/sem_ent")] == pytest.approx(sem_ent)
    assert [e.value for e in acc.Scalars("val/ruq")] == pytest.approx(_column(rows, "val/ruq"))
    assert {"val/cluster_histogram", "val/ruq_plot", "val/cluster_shares"} <= set(tags["images"])
    assert any("clusters/cards" in t for t in tags["tensors"])
    assert any("val/samples" in t for t in tags["tensors"])  # the sample table as text

    # W&B offline: the run file holds the metric keys, and the figures/tables were stored as media
    run_dir = next((tmp_path / "wandb").glob("offline-run-*"))
    blob = next(run_dir.glob("*.wandb")).read_bytes()
    for key in (b"val/sem_ent", b"val/ruq", b"train/ruq", b"val/distinct_2"):
        assert key in blob
    media = [p.name for p in (run_dir / "files" / "media").rglob("*") if p.is_file()]
    assert any(n.startswith("cluster_histogram") for n in media) and any(n.startswith("ruq_plot") for n in media)
    assert any(n.startswith("samples") and n.endswith(".table.json") for n in media)
    assert any(n.startswith("cards") and n.endswith(".table.json") for n in media)  # the cluster cards, once
    assert any(n.startswith("cluster_shares") for n in media)

    # MLflow (a local file store): the same values, the figures as PNG and the tables as JSON artifacts
    from mlflow.tracking import MlflowClient

    client, run_id = MlflowClient(mlflow_uri), loggers[3].run_id
    history = sorted(client.get_metric_history(run_id, "val/sem_ent"), key=lambda m: m.step)
    assert [m.value for m in history] == pytest.approx(sem_ent)
    assert [m.value for m in client.get_metric_history(run_id, "val/ruq")] == pytest.approx(_column(rows, "val/ruq"))

    stored = mlflow_artifacts(client, run_id)
    assert {
        "val_cluster_histogram/epoch_0.png",
        "val_cluster_histogram/epoch_1.png",
        "val_ruq_plot/epoch_1.png",
        "val_samples/epoch_1.json",
        "clusters_cards/epoch_0.json",
        "val_cluster_shares/epoch_1.png",
    } <= stored, stored

    # PNG / CSV copies beside the first logger's files (CSV-only users get them too)
    out = Path(tr.log_dir) / "lightning_div"
    for name in (
        "val_cluster_histogram_epoch0.png",
        "val_cluster_histogram_epoch1.png",
        "val_ruq_plot_epoch1.png",
        "val_samples_epoch1.csv",
    ):
        assert (out / name).stat().st_size > 0, name
    table = _csv_rows(out / "val_samples_epoch1.csv")
    assert len(table) == 4 and all(0 <= int(r["cluster"]) < k for r in table)
    # the run's record of what the numbers were measured with: each monitor's measure and its settings
    sem = next(c for c in tr.callbacks if isinstance(c, SemanticDiversityMonitor))
    record = json.loads((out / "settings" / "SemanticDiversityMonitor.json").read_text())
    assert record["lightning_div"] == version("lightning-div") and record["who"] == "SemanticDiversityMonitor"
    assert record["measures"] == [{"measure": "SemanticMeasure", "settings": sem.measure.settings()}]
    assert record["measures"][0]["settings"]["space"]["num_clusters"] == k
    assert record["callback"] == sem.settings() and record["callback"]["num_contexts"] == 24  # its sample
    ruq = next(c for c in tr.callbacks if isinstance(c, RUQMonitor))
    record = json.loads((out / "settings" / "RUQMonitor.json").read_text())
    assert record["measures"] == [{"measure": "RUQMeasure", "settings": ruq.ruq.settings()}]
    assert record["measures"][0]["settings"]["idk_responses"][0] == "I don't know."


@pytest.mark.slow
@pytest.mark.xdist_group(TRACKED)
def test_monitors_leave_training_bit_identical(tmp_path, tracked):
    """Generation, scoring and embedding at epoch ends must not touch weights, optimiser or RNG stream.

    The watched run is ``tracked`` (the monitors and four trackers, the same seed and settings)."""
    torch.manual_seed(123)
    model = TinyChat()
    trainer(tmp_path / "plain", [], max_epochs=2).fit(model)
    plain, rand_plain = model.state_dict(), torch.rand(3)
    *_, watched, rand_watched = tracked
    assert plain.keys() == watched.keys()
    for name in plain:
        assert torch.equal(plain[name], watched[name]), name
    assert torch.equal(rand_plain, rand_watched)  # the global RNG stream continues as without callbacks


def test_missing_data_is_a_clear_error(tmp_path):
    sem = SemanticDiversityMonitor(
        SemanticSpace("unused", num_clusters=4), on_error="raise", outputs=Outputs(show_progress=False)
    )
    with pytest.raises(ValueError, match=r"val_pairs=\[\(context, reference\)"):
        trainer(tmp_path, [sem], max_epochs=1).fit(TinyChat())
    ruq = RUQMonitor(outputs=Outputs(show_progress=False))  # raised at fit start even with on_error="warn"
    with pytest.raises(ValueError, match=r"train_pairs=\[.*or use a datamodule with a `train_pairs\(\)` method"):
        trainer(tmp_path, [ruq], max_epochs=1).fit(TinyChat())


def test_idk_and_metric_arguments_are_checked():
    with pytest.raises(ValueError, match="idk_responses"):
        RUQMonitor(idk_responses=[])
    with pytest.raises(ValueError, match="unknown lexical metrics"):
        SemanticDiversityMonitor(lexical=Lexical(["distinct"]))
    with pytest.raises(ValueError, match="every_n_epochs"):
        RUQMonitor(every_n_epochs=0)


@pytest.mark.slow
def test_nli_diversity_monitor_logs_set_metrics(tmp_path):
    from helpers import tiny_nli_model, tokenizer
    from monitor_setup import VAL

    from lightning_div.callbacks import NLIDiversityMonitor, ThresholdGeneration
    from lightning_div.nli.scorer import NLIScorer

    scorer = NLIScorer.from_model(tiny_nli_model(), tokenizer(True), show_progress=False)
    n = 3
    cb = NLIDiversityMonitor(
        scorer=scorer,
        num_contexts=5,
        n=n,
        val_pairs=VAL,
        threshold_generation=ThresholdGeneration(threshold=2, max_samples=5),
        outputs=Outputs(show_progress=False),
        generation=Generation(batch_size=6, max_new_tokens=8),
        on_error="raise",
    )
    tr = trainer(tmp_path, [cb], loggers=[CSVLogger(tmp_path, name="csv")], max_epochs=1)
    tr.fit(TinyChat())
    (row,) = [h for h in cb.history if "val/nli_div_baseline" in h]
    pairs = n * (n - 1)
    counts = [row[f"val/nli_pairs_{c}"] for c in ("entailment", "neutral", "contradiction")]
    assert sum(counts) == pytest.approx(pairs)  # every ordered pair of every set has one label
    # baseline = #contradiction - #entailment per set, so the means obey the same identity
    assert row["val/nli_div_baseline"] == pytest.approx(counts[2] - counts[0])
    assert row["val/nli_div_neutral"] == pytest.approx(counts[2] + counts[1] - counts[0])
    assert abs(row["val/nli_div_confidence"]) <= pairs
    assert n <= row["val/threshold_samples_drawn"] <= 5
    assert 0.0 <= row["val/threshold_reached"] <= 1.0
    # the stopping rule reads the criterion (#contradictions); the diversity is Baseline NLI Diversity
    assert (
        row["val/threshold_end_criterion"] >= row["val/threshold_start_criterion"]
        or row["val/threshold_samples_drawn"] == 5
    )
    assert 0 <= row["val/threshold_start_criterion"] <= pairs
    assert -pairs <= row["val/threshold_start_diversity"] <= pairs and -pairs <= row["val/threshold_end_diversity"]
    # the run's record: the NLI measure's settings and the monitor's sample around it
    record = json.loads((Path(tr.log_dir) / "lightning_div" / "settings" / "NLIDiversityMonitor.json").read_text())
    assert record["measures"] == [{"measure": "NLIMeasure", "settings": cb.nli.settings()}]
    assert record["callback"] == {"num_contexts": 5, "seed": 0}


def test_a_module_without_model_or_tokenizer_fails_at_fit_start(tmp_path):
    class NoModel(TinyChat):
        """Keeps its model under another name."""

        def __init__(self):
            super().__init__()
            self.net = self.model
            del self.model

        def training_step(self, batch, batch_idx):
            return self.net(**batch).loss

        def validation_step(self, batch, batch_idx):
            pass

        def train_dataloader(self):
            return DataLoader(TRAIN[:16], batch_size=8, collate_fn=lambda b: collate(b, self.tokenizer, self.net))

        val_dataloader = train_dataloader

    sem, ruq = monitors(tmp_path)
    with pytest.raises(TypeError, match=r"(?s)it has no attribute 'model'.*1\. keep the model.*2\. implement"):
        trainer(tmp_path, [ruq], max_epochs=1).fit(NoModel())
    # naming the attribute fixes it
    ok = RUQMonitor(
        model=ModelAccess(model_attr="net"),
        num_train_contexts=4,
        num_contexts=4,
        plot=None,
        outputs=Outputs(show_progress=False),
        train_pairs=ruq.train_pairs_arg,
        val_pairs=ruq.val_pairs_arg,
        generation=Generation(max_new_tokens=4),
        on_error="raise",
    )
    trainer(tmp_path, [ok], max_epochs=1, limit_train_batches=1, limit_val_batches=1).fit(NoModel())
    assert "val/ruq" in ok.history[0] or "val/ruq" in ok.history[1]


def test_the_validated_epoch_is_checkpointed(tmp_path):
    """Resumed from a checkpoint written after validation but before the epoch's end, the epoch is not re-measured."""
    from types import SimpleNamespace

    from lightning_div._internal.lightning import TrainerFn
    from lightning_div.callbacks.base import ValidationMonitor

    sem, ruq = monitors(tmp_path)
    at_epoch_3 = SimpleNamespace(sanity_checking=False, current_epoch=3, state=SimpleNamespace(fn=TrainerFn.FITTING))
    for cb in (sem, ruq):
        measured: list[tuple[str, int]] = []
        cb.measure_validation = lambda trainer, module: measured.append(("first", trainer.current_epoch))
        cb.on_validation_epoch_end(at_epoch_3, None)  # epoch 3 validated and measured, then checkpointed
        fresh = type(cb)(
            **(
                {"space": SemanticSpace("unused"), "val_pairs": [("a", "b")], "cluster_texts": ["b"]}
                if cb is sem
                else {"train_pairs": [("a", "b")], "val_pairs": [("a", "b")]}
            )
        )
        fresh.measure_validation = lambda trainer, module: measured.append(("resumed", trainer.current_epoch))
        fresh.load_state_dict(cb.state_dict())
        assert fresh.state_dict()["validated_epoch"] == 3
        # the resumed run ends epoch 3 (the validation monitor's part of the hook): not measured again
        ValidationMonitor.on_train_epoch_end(fresh, at_epoch_3, None)
        assert measured == [("first", 3)]
        state = cb.state_dict()
        del state["validated_epoch"]  # a checkpoint from before this field: measured as before
        fresh.load_state_dict(state)
        assert fresh.state_dict()["validated_epoch"] is None
        ValidationMonitor.on_train_epoch_end(fresh, at_epoch_3, None)
        assert measured == [("first", 3), ("resumed", 3)]


def test_lexical_options_are_checked_and_reach_the_metrics():
    from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor

    with pytest.raises(ValueError, match=r"lexical_options \['unit'\] are unknown"):
        SemanticDiversityMonitor(lexical=Lexical(options={"unit": "bits"}))
    mon = SemanticDiversityMonitor(
        lexical=Lexical(["distinct_1", "distinct_2_utt", "ent_1"], options={"tokenizer": "casual", "base": 2})
    )
    assert mon.lexical_metrics == ["distinct_1", "distinct_2_utt", "ent_1"]
    assert mon.lexical_options == {"tokenizer": "casual", "base": 2}


def test_a_model_with_finite_weights_but_nan_logits_is_named_diverged(tmp_path):
    # issue 31, CB2: before, val/sem_ent = 0.0 and distinct 0 were logged with "all responses empty"
    from monitor_setup import GOLD, VAL, minilm

    module = TinyChat()
    # NaN logits whenever the model is evaluated (training is left alone, so the weights stay finite)
    module.model.lm_head.register_forward_hook(lambda mod, args, out: out if mod.training else out * float("nan"))
    cb = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=4, batch_size=8, show_progress=False),
        num_contexts=4,
        val_pairs=VAL,
        cluster_texts=GOLD[:120],
        **common(tmp_path, log_samples=0),
    )
    with pytest.warns(
        RuntimeWarning,
        match=r"SemanticDiversityMonitor: the model has diverged: its weights are finite but its output is not "
        r"\(the log-probabilities of the probe response .* hold NaN or inf\); nothing it generates is measured",
    ):
        trainer(tmp_path, [cb], max_epochs=1, limit_train_batches=1, limit_val_batches=1).fit(module)
    assert all(bool(torch.isfinite(p).all()) for p in module.parameters())  # the weights were fine throughout
    logged = {k for row in cb.history for k in row}
    assert "val/sem_ent" not in logged and "val/distinct_1" not in logged  # no 0.0 from empty output
    assert logged == {"epoch", "timing/semantic_diversity_s"}


def test_resume_with_other_clusters_refits_them(tmp_path):
    from lightning_div.callbacks import SemanticDiversityMonitor

    old = SemanticDiversityMonitor(SemanticSpace("minilm", num_clusters=4), val_pairs=[("a", "b")], cluster_texts=["x"])
    old.load_sample_state([0])
    old.space.clusters_path, old.measure.gold_logged = str(tmp_path / "c4.npz"), True
    new = SemanticDiversityMonitor(SemanticSpace("minilm", num_clusters=8), val_pairs=[("a", "b")], cluster_texts=["x"])
    with pytest.warns(
        RuntimeWarning,
        match=r"other settings \(num_clusters 4 -> 8\): the clusters and the "
        r"validation sample are made again",
    ):
        new.load_state_dict(old.state_dict())
    assert new.space.clusters_path is None and new.state_dict()["samples"] is None and not new.measure.gold_logged
    assert new.history == old.history
    same = SemanticDiversityMonitor(
        SemanticSpace("minilm", num_clusters=4), val_pairs=[("a", "b")], cluster_texts=["x"]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unchanged settings: restored silently, as before
        same.load_state_dict(old.state_dict())
    assert same.space.clusters_path == str(tmp_path / "c4.npz") and same.state_dict()["samples"] == {"val": [0]}
    assert same.measure.gold_logged


def test_a_diverged_model_is_named_not_measured(tmp_path):
    from monitor_setup import GOLD, VAL, TinyChat, minilm

    from lightning_div.callbacks import SemanticDiversityMonitor

    module = TinyChat()
    with torch.no_grad():
        module.model.transformer.ln_f.weight.fill_(float("nan"))
    cb = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=4, batch_size=8, show_progress=False),
        num_contexts=4,
        val_pairs=VAL,
        cluster_texts=GOLD[:120],
        **common(tmp_path, log_samples=0),
    )
    # the NaN spreads to every weight at the first optimiser step: the first few are named
    with pytest.warns(
        RuntimeWarning,
        match=r"SemanticDiversityMonitor: the model has diverged: its weights hold NaN "
        r"or inf \(model\.transformer\.wte\.weight, .*\); nothing it generates",
    ):
        fit(tmp_path, [cb], module=module)
    logged = {k for row in cb.history for k in row}
    assert "val/sem_ent" not in logged and "val/distinct_1" not in logged  # no 0.0 from empty output


def test_a_callback_lists_every_missing_input_at_once(tmp_path):
    from lightning_div.callbacks import RUQMonitor, SemanticDiversityMonitor

    with pytest.raises(
        ValueError,
        match=r"SemanticDiversityMonitor is missing 2 input\(s\): val_pairs=\[\(context, "
        r"reference\), \.\.\.\] .* `val_pairs\(\)` method; cluster_texts="
        r"\[response, \.\.\.\] .* `train_responses\(\)` method",
    ):
        fit(tmp_path, [SemanticDiversityMonitor(SemanticSpace("minilm"), **common(tmp_path))])
    with pytest.raises(ValueError, match=r"RUQMonitor is missing 2 input\(s\): train_pairs=.*; val_pairs="):
        fit(tmp_path, [RUQMonitor(**common(tmp_path))])


def test_two_monitors_given_one_space_fit_it_once_and_checkpoint_it_once(tmp_path, fitted_clusters, monkeypatch):
    from monitor_setup import GOLD, VAL, minilm

    space = SemanticSpace(minilm(), num_clusters=4, batch_size=8, show_progress=False)
    fits = []
    fit_cached = space._fit_cached
    monkeypatch.setattr(space, "_fit_cached", lambda *a, **k: fits.append(1) or fit_cached(*a, **k))
    cache = fitted_clusters(tmp_path / "cache")

    def pair(space):
        args = dict(num_contexts=6, val_pairs=VAL, cluster_texts=GOLD, **common(tmp_path, dirpath=str(cache)))
        return [SemanticDiversityMonitor(space, name=name, **args) for name in ("a", "b")]

    a, b = pair(space)
    fit(tmp_path, [a, b])
    assert len(fits) == 1 and a.space is b.space  # fitted once, for both
    assert a.history[-1]["a/val/sem_ent"] == b.history[-1]["b/val/sem_ent"]  # one space, one sample: one value
    # checkpointed once: under the first monitor in the Trainer; the other names it
    assert a.state_dict()["space"] == {"clusters_path": space.clusters_path} and space.clusters_path
    assert b.state_dict()["space"] == {"owner": a.state_key}
    assert a.state_dict()["measure"] == b.state_dict()["measure"]  # each measure is its own: written by each
    # a resumed pair gets the one space's state back through its owner
    a2, b2 = pair(SemanticSpace(minilm(), num_clusters=4))
    b2.load_state_dict(b.state_dict())
    assert b2.space.clusters_path is None  # the owner restores it, not the other
    a2.load_state_dict(a.state_dict())
    assert b2.space.clusters_path == space.clusters_path and b2.measure.share_history == b.measure.share_history


def test_lightning_cli_configures_the_settings_objects_and_the_space_by_class_path():
    import yaml
    from jsonargparse import ArgumentParser

    from lightning_div.callbacks.ruq import RUQPlot

    config = yaml.safe_load(
        """
        sem:
          space:
            class_path: lightning_div.SemanticSpace
            init_args: {encoder: minilm, num_clusters: 7, kmeans_seed: 3}
          num_contexts: 12
          lexical: {metrics: [distinct_1], options: {base: 2}}
          generation: {batch_size: 4, max_new_tokens: 9}
          outputs: {log_samples: 0, show_progress: false}
        ruq:
          num_contexts: 5
          plot: {num_contexts: 2, num_beams: 3}
          alert:
            class_path: lightning_div.measure.alerts.RUQAlert
            init_args: {warn_below: 30.0}
        """
    )
    parser = ArgumentParser()
    parser.add_class_arguments(SemanticDiversityMonitor, "sem")
    parser.add_class_arguments(RUQMonitor, "ruq")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*lightning-div", DeprecationWarning)  # the 1.0 forms: no warning
        built = parser.instantiate_classes(parser.parse_object(config))
    sem, ruq = built.sem, built.ruq
    assert isinstance(sem.space, SemanticSpace)
    assert sem.space.settings() == {"encoder": "minilm", "num_clusters": 7, "variance_kept": 0.9, "kmeans_seed": 3}
    assert (sem.num_contexts, sem.lexical_metrics, sem.lexical_options) == (12, ["distinct_1"], {"base": 2})
    assert (sem.generation, sem.outputs) == (Generation(4, 9), Outputs(log_samples=0, show_progress=False))
    assert (ruq.num_contexts, ruq.plot, ruq.alert.warn_below, ruq.alert.warn_drop) == (5, RUQPlot(2, 3), 30.0, 10.0)


def test_the_layout_is_the_datamodules_unless_the_model_access_names_one():
    from types import SimpleNamespace

    from lightning_div.datamodules import DialogueDataModule
    from lightning_div.model.formatting import DialogueLayout

    dm = DialogueDataModule(train=[("a", "b")], val=[("c", "d")], layout=DialogueLayout(max_turns=2))
    own = DialogueLayout(max_turns=5, turn_separator=" | ")
    for access, datamodule, want in [
        (None, dm, DialogueLayout(max_turns=2)),  # the datamodule's, which training used
        (ModelAccess(layout=own), dm, own),  # given: it wins
        (None, SimpleNamespace(), DialogueLayout()),  # a datamodule without one: the default
        (None, SimpleNamespace(layout="not a layout"), DialogueLayout()),
    ]:
        cb = RUQMonitor(model=access)
        assert cb.layout == (own if access else DialogueLayout())  # before setup: no datamodule seen yet
        cb.setup(SimpleNamespace(callbacks=[cb], datamodule=datamodule, strategy=None), None, "validate")
        assert cb.layout == want and cb.format == want  # format: 0.2's name, read-only
