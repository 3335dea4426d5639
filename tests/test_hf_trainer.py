"""TrainerDiversityMonitor in a real Hugging Face Trainer: the monitors' metrics in log_history, equal to the package's own."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import base_model_margin_tolerance, mlflow_artifacts, report_of_hugging_face_run
from transformers import Trainer, TrainingArguments

from lightning_div import load_base_model
from lightning_div.callbacks.ruq import RUQMonitor, RUQScoring
from lightning_div.datamodules import read_pairs
from lightning_div.datamodules.encoding import EncodedDialogues, encode_pairs
from lightning_div.integrations.transformers import RUQPlot, TrainerDiversityMonitor, eval_key
from lightning_div.measure.alerts import RUQAlert
from lightning_div.measure.ruq import DEFAULT_IDK, RUQMeasure
from lightning_div.measure.sample import sample_indices
from lightning_div.measure.semantic import SemanticMeasure
from lightning_div.metrics import (
    DEFAULT_LEXICAL,
    cluster_js_divergence,
    count_vocab,
    lexical_scores,
    semantic_entropy,
    top_cluster_share,
)
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.generation import pad_batch
from lightning_div.pairs import DialoguePair
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Outputs

K = 4
#: what the Trainer itself reports at an evaluation besides eval_loss
TRAINER = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "eval_model_preparation_time")
RUNTIME = "eval_diversity_runtime"  # seconds: differs from run to run
MAX_NEW = 12
LEXICAL = [eval_key(n) for n in DEFAULT_LEXICAL]
SEMANTIC = [eval_key(n) for n in ("sem_ent", "cluster_js", "top_cluster_share")]
RUQ = [
    eval_key(n)
    for n in ("ruq", "ruq_margin", "ruq_idk1", "ruq_idk2", "ruq_margin_idk1", "ruq_margin_idk2", "ruq_alert")
]


@cache
def _data() -> tuple[tuple, tuple]:
    train = tuple(read_pairs("chitchat:finetune", max_turns=2)[:32])
    val = tuple(read_pairs("chitchat:validation", max_turns=2)[:20])
    return train, val


QUIET = Outputs(show_progress=False)


def _collate(items):
    """input_ids / attention_mask / labels only (the model's forward takes nothing else)."""
    inputs = [it["context_ids"] + it["response_ids"] for it in items]
    targets = [[-100] * len(it["context_ids"]) + it["response_ids"] for it in items]
    input_ids, attention_mask = pad_batch(inputs, 4000, "right")
    labels, _ = pad_batch(targets, -100, "right")
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _trainer(tmp_path, model, tokenizer, train, val, **args):
    dataset = EncodedDialogues(encode_pairs(train, tokenizer, model, show_progress=False))
    eval_dataset = EncodedDialogues(encode_pairs(val, tokenizer, model, show_progress=False))
    settings = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 4,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "learning_rate": 1e-3,
        "eval_strategy": "steps",
        "eval_steps": 2,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "remove_unused_columns": False,
        "disable_tqdm": True,
        "seed": 0,
    }
    arguments = TrainingArguments(**{**settings, **args})
    return Trainer(
        model=model,
        args=arguments,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        data_collator=_collate,
        processing_class=tokenizer,
    )


def _callback(tmp_path, train, val, idk_responses=DEFAULT_IDK, shared_contexts=True, outputs=None, **kwargs):
    """The tests' callback: Sem-Ent in a MiniLM space of K clusters, and RUQ unless ``idk_responses=()``;
    ``outputs``: fields of its Outputs."""
    space = SemanticSpace(encoder="minilm", num_clusters=K, batch_size=8, show_progress=False)
    ruq = [RUQMeasure(idk_responses, shared_contexts=shared_contexts, batch_size=8)] if idk_responses else []
    arguments = {
        "cluster_texts": [p.response for p in train],
        "measures": [SemanticMeasure(space, batch_size=8), *ruq],
        "num_contexts": 12,
        "generation": Generation(batch_size=8, max_new_tokens=MAX_NEW),
        "outputs": Outputs(**{"dirpath": str(tmp_path / "cache"), "show_progress": False, **(outputs or {})}),
        "on_error": "raise",
    }
    return TrainerDiversityMonitor(eval_pairs=list(val), **{**arguments, **kwargs})


#: The tests sharing the one real training run (``trained``): one worker runs them, the run once.
TRAINED = "hf_trainer_run"


@dataclass
class Trained:
    """What the shared run left, read before any test touches its model or callback."""

    root: Path
    model: Any
    tokenizer: Any
    trainer: Any
    cb: TrainerDiversityMonitor
    history: list[dict[str, float]]
    share_history: list
    last_ruq: float | None
    last_responses: list[str]
    wandb_run_dir: Path
    mlflow_uri: str
    mlflow_run_id: str


def _trained_callback(root: Path, train, val, **kwargs) -> TrainerDiversityMonitor:
    """The shared run's callback: RUQ-train on, five samples in the tables, an alert at any RUQ drop."""
    outputs = {"log_samples": 5, **kwargs.pop("outputs", {})}
    settings = dict(train_pairs=list(train), num_train_contexts=10, alert=RUQAlert(warn_drop=0.0))
    return _callback(root, train, val, outputs=outputs, **settings, **kwargs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    """One 4-step training run, evaluated at steps 2 and 4 and checkpointed at both, reported to
    TensorBoard, W&B (offline) and MLflow (file store): the equality, tracker, figure and resume tests
    each trained a run of their own with these settings (the resume test's uninterrupted one)."""
    import mlflow
    import wandb

    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        mp.setenv("MLFLOW_TRACKING_URI", f"file:{root / 'mlruns'}")
        mp.setenv("MLFLOW_EXPERIMENT_NAME", "lightning-div-hf")
        mp.setenv("WANDB_DIR", str(root))
        mp.setenv("WANDB_PROJECT", "lightning-div-hf")
        mp.chdir(root)  # a tracker set up earlier in the process may write relative to the cwd
        torch.manual_seed(0)
        train, val = _data()
        model, tokenizer = load_base_model()
        trainer = _trainer(
            root,
            model,
            tokenizer,
            train,
            val,
            report_to=["tensorboard", "wandb", "mlflow"],
            save_strategy="steps",
            save_steps=2,
        )
        cb = _trained_callback(root, train, val).attach(trainer)
        assert cb in trainer.callback_handler.callbacks
        trainer.train()
        run_dir = Path(wandb.run.dir).parent  # WANDB_DIR is read once per process: ask the run where it is
        wandb.finish()
        run = mlflow.last_active_run()  # the tracking URI is process-wide once set: ask MLflow where the run went
        mlflow_uri = mlflow.get_tracking_uri()
    return Trained(
        root,
        model,
        tokenizer,
        trainer,
        cb,
        copy.deepcopy(cb.history),
        copy.deepcopy(cb.share_history),
        cb.last_ruq,
        list(cb.last_responses),
        run_dir,
        mlflow_uri,
        run.info.run_id,
    )


@pytest.mark.slow
@pytest.mark.xdist_group(TRAINED)
def test_trainer_logs_the_monitors_metrics_equal_to_the_package_functions(trained, tmp_path):
    """The shared run (``trained``) logs at every evaluation what the package's functions give."""
    train, val = _data()
    model, tokenizer, trainer, cb = trained.model, trained.tokenizer, trained.trainer, trained.cb

    rows = [r for r in trainer.state.log_history if eval_key("sem_ent") in r]
    assert [r["step"] for r in rows] == [2, 4]  # every evaluation, after the Trainer's own eval log
    assert all(any("eval_loss" in r and r["step"] == s for r in trainer.state.log_history) for s in (2, 4))
    for row in rows:
        for key in SEMANTIC + LEXICAL + RUQ + [eval_key("diversity_runtime")]:
            assert key in row and math.isfinite(row[key]), key
        assert 0.0 <= row[eval_key("sem_ent")] <= math.log(K) + 1e-9
        assert 0.0 <= row[eval_key("cluster_js")] <= 1.0
        assert 0.0 < row[eval_key("top_cluster_share")] <= 1.0
        for n in (1, 2, 3):
            assert 0.0 <= row[eval_key(f"distinct_{n}")] <= 1.0
        assert 0.0 <= row[eval_key("ruq")] <= 100.0
        assert row[eval_key("ruq")] == row[eval_key("ruq_idk1")]
    assert eval_key("sem_ent_gold") in rows[0] and eval_key("sem_ent_gold") not in rows[1]  # once, as the monitor
    assert trained.history[-1] == {"step": 4.0, **{k: v for k, v in rows[1].items() if k not in ("step", "epoch")}}

    # the fixed samples are the Lightning monitors' draws (seed; seed + 1 for RUQ's validation prompts)
    assert cb.sample() == [val[i] for i in sample_indices(len(val), 12, 0)]
    assert cb.evaluation.data.ruq_sample() == [val[i] for i in sample_indices(len(val), 12, 1)]
    assert cb.evaluation.data.train_ruq_sample() == [
        train[i] for i in sample_indices(len(train), 10, 0)
    ]  # RUQMonitor's train draw

    # the values the package's own functions give on the same responses of the final model
    last = rows[1]
    adapter = HuggingFaceAdapter(model, tokenizer, batch_size=8, max_new_tokens=MAX_NEW, show_progress=False)
    sample = cb.sample()
    assert adapter.generate([p.context for p in sample]) == trained.last_responses == cb.last_responses
    model.train()
    rng = torch.get_rng_state()
    assert cb.measure(model, tokenizer, tmp_path / "unused")[eval_key("sem_ent")] == last[eval_key("sem_ent")]
    assert model.training and torch.equal(torch.get_rng_state(), rng)  # train mode and random stream restored
    ids = cb.space.assign(cb.last_responses)
    gold_ids = cb.space.assign([p.response for p in sample])
    assert last[eval_key("sem_ent")] == pytest.approx(semantic_entropy(ids, K), abs=1e-12)
    assert rows[0][eval_key("sem_ent_gold")] == pytest.approx(semantic_entropy(gold_ids, K), abs=1e-12)
    histogram = cb.space.clusters.histogram
    assert last[eval_key("cluster_js")] == pytest.approx(cluster_js_divergence(histogram(ids), histogram(gold_ids)))
    assert last[eval_key("top_cluster_share")] == pytest.approx(top_cluster_share(ids, K))
    vocab = count_vocab([p.response for p in train])
    lexical = lexical_scores(cb.last_responses, DEFAULT_LEXICAL, vocab)
    for name, value in lexical.items():
        assert last[eval_key(name)] == pytest.approx(value, abs=1e-12), name
    ruq = RUQMonitor(num_contexts=12, generation=Generation(batch_size=8), outputs=QUIET).compute(
        adapter, cb.evaluation.data.ruq_sample()
    )
    for name in ("ruq", "ruq_margin", "ruq_idk2", "ruq_margin_idk2"):
        assert last[eval_key(name)] == pytest.approx(ruq[name], rel=1e-5, abs=1e-6), name
    # RUQ-train: un-prefixed, as the Trainer logs training metrics (charted train/ruq)
    ruq_train = RUQMonitor(num_train_contexts=10, generation=Generation(batch_size=8), outputs=QUIET).compute(
        adapter, cb.evaluation.data.train_ruq_sample()
    )
    for name in ("ruq", "ruq_margin", "ruq_idk2", "ruq_margin_idk2"):
        assert last[name] == pytest.approx(ruq_train[name], rel=1e-5, abs=1e-6), name

    # the clusters were fitted once and cached: a second callback reads them back
    cached = list((trained.root / "cache").glob("clusters-*.npz"))
    assert len(cached) == 1
    again = _callback(trained.root, train, val)
    again.evaluation.prepare(tmp_path / "unused")
    assert again.space.clusters_path == str(cached[0])


@pytest.mark.slow
def test_evaluate_returns_the_values_and_a_named_callback_prefixes_its_keys(tmp_path):
    train, val = _data()
    model, tokenizer = load_base_model()
    trainer = _trainer(tmp_path, model, tokenizer, train, val)
    cb = _callback(tmp_path, train, val, name="minilm", idk_responses=()).attach(trainer)
    with pytest.raises(ValueError, match="name='minilm'"):
        _callback(tmp_path, train, val, name="minilm").attach(trainer)
    metrics = trainer.evaluate()
    assert "eval_loss" in metrics
    assert "eval_minilm/sem_ent" in metrics and "eval_minilm/distinct_2" in metrics
    assert not any("ruq" in k for k in metrics)  # idk_responses=() measures no RUQ
    logged = trainer.state.log_history[-1]
    assert logged["eval_minilm/sem_ent"] == metrics["eval_minilm/sem_ent"]
    assert cb.history[-1]["eval_minilm/sem_ent"] == metrics["eval_minilm/sem_ent"]


def test_a_callback_passed_in_callbacks_says_to_attach_it(tmp_path):
    train, val = _data()
    model, tokenizer = load_base_model()
    cb = _callback(tmp_path, train, val)
    trainer = _trainer(tmp_path, model, tokenizer, train, val)
    trainer.add_callback(cb)  # as Trainer(callbacks=[cb]) does: the callback never sees the trainer
    with pytest.raises(ValueError, match=r"callback\.attach\(trainer\)"):
        trainer.evaluate()


def test_bad_settings_are_refused_when_built():
    with pytest.raises(ValueError, match="on_error"):
        TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], on_error="ignore")
    with pytest.raises(ValueError, match="without surrounding spaces and without '/'"):
        TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], name="a/b")
    space = SemanticSpace(encoder="minilm")
    with pytest.raises(ValueError, match="space= and measures= were both given"):
        TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], space=space, measures=[SemanticMeasure(space)])
    for measures in ([RUQMeasure()], [SemanticMeasure(space), SemanticMeasure(space)], [SemanticMeasure(space), 1]):
        with pytest.raises(ValueError, match="measures must be one SemanticMeasure and at most one RUQMeasure"):
            TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], measures=measures)
    default = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], space=space)  # the one-line common case
    assert default.space is space and default.evaluation.ruq is not None
    assert default.evaluation.ruq.idk_responses == list(DEFAULT_IDK)


def test_a_failed_measurement_warns_and_training_goes_on(tmp_path):
    train, val = _data()
    model, tokenizer = load_base_model()
    trainer = _trainer(tmp_path, model, tokenizer, train, val)
    TrainerDiversityMonitor(eval_pairs=list(val), space=SemanticSpace(encoder="minilm")).attach(trainer)
    with pytest.warns(RuntimeWarning, match="needs gold training responses"):
        metrics = trainer.evaluate()  # no gold responses, no clusters: skipped with a warning, timing still logged
    assert "eval_diversity_runtime" in metrics and "eval_loss" in metrics
    assert not any(k.startswith("eval_") for k in metrics if k not in ("eval_diversity_runtime", "eval_loss", *TRAINER))


def _evaluate_on(rank: int, world_size: int, root: str) -> dict[str, float]:
    """One trainer.evaluate() of the base model with the callback, on this rank of ``world_size`` processes."""
    import os
    from pathlib import Path

    if world_size > 1:  # in the spawned process only: what torchrun sets, which accelerate reads the layout from
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
        os.environ.update(LOCAL_WORLD_SIZE=str(world_size))
    torch.manual_seed(0)
    train, val = _data()
    model, tokenizer = load_base_model()
    trainer = _trainer(Path(root) / f"world{world_size}", model, tokenizer, train, val)
    assert trainer.args.world_size == world_size
    cb = _callback(Path(root), train, val, num_contexts=None).attach(trainer)
    metrics = trainer.evaluate()
    assert cb.history[-1] == {"step": 0.0, **{k: v for k, v in metrics.items() if k in cb.history[-1]}}
    ours = {k: v for k, v in metrics.items() if k.startswith("eval_") and k not in ("eval_loss", *TRAINER, RUNTIME)}
    return ours | {"responses": cb.last_responses}


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_two_processes_log_the_numbers_of_one(tmp_path):
    """Under DDP (gloo, 2 CPU processes) generation and scoring are sharded; the logged values are one process's."""
    from ddp_utils import run_distributed

    single = _evaluate_on(0, 1, str(tmp_path))
    rank0, rank1 = run_distributed(_evaluate_on, 2, str(tmp_path), timeout_s=300)
    assert rank0 == rank1  # every rank logs the gathered values
    assert rank0["responses"] == single["responses"] and len(single["responses"]) == 20  # all 20 contexts
    assert set(rank0) == set(single) and eval_key("ruq_margin") in single
    tolerance = base_model_margin_tolerance(_data()[1])
    assert 0 < tolerance < 1e-4
    for key, value in single.items():
        if key.startswith("eval_ruq_margin"):  # shared-context scoring: float32 rounding (as RUQMonitor's)
            assert rank0[key] == pytest.approx(value, rel=0, abs=tolerance), key
        else:
            assert rank0[key] == value, key


# That the Hugging Face front end imports no Lightning is checked in the fresh process of
# tests/test_base_model.py::test_load_base_model_in_a_fresh_process_is_fast_and_offline (one interpreter start, not two).


def test_a_diverged_model_is_named_not_measured(tmp_path):
    train, val = _data()
    model, tokenizer = load_base_model()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    trainer = _trainer(tmp_path, model, tokenizer, train, val)
    _callback(tmp_path, train, val, on_error="warn").attach(trainer)
    with pytest.warns(RuntimeWarning, match=r"TrainerDiversityMonitor: the model has diverged: its weights hold NaN"):
        metrics = trainer.evaluate()
    assert not any(k.startswith(("eval_sem", "eval_distinct", "eval_ruq")) for k in metrics)  # nothing measured


@pytest.mark.slow
@pytest.mark.xdist_group(TRAINED)
def test_the_trackers_chart_the_values_as_eval_slash_metric(trained):
    """report_to="tensorboard": the event file holds eval/sem_ent ... (the Trainer's eval_ -> eval/), the logged
    values, at both evaluations' steps (the shared run's)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = [r for r in trained.trainer.state.log_history if eval_key("sem_ent") in r]
    assert [r["step"] for r in rows] == [2, 4]
    charted = {}
    for events in (trained.root / "out").rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events)).Reload()
        for tag in accumulator.Tags()["scalars"]:
            charted[tag] = [(e.step, e.value) for e in accumulator.Scalars(tag)]

    def logged(key):
        return [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in rows if key in r]

    for metric in ("sem_ent", "sem_ent_gold", "distinct_2", "ead", "ruq", "ruq_margin", "diversity_runtime"):
        assert charted[f"eval/{metric}"] == logged(eval_key(metric)), metric
    assert [s for s, _ in charted["eval/sem_ent_gold"]] == [2] and [s for s, _ in charted["eval/sem_ent"]] == [2, 4]
    assert not any(tag.startswith("train/eval") for tag in charted)  # nothing charted under a wrong prefix
    for metric in ("ruq", "ruq_margin"):  # RUQ-train under the Lightning monitor's name
        assert charted[f"train/{metric}"] == logged(metric) and len(logged(metric)) == 2, metric


@pytest.mark.slow
@pytest.mark.xdist_group(TRAINED)
def test_the_report_of_the_output_dir_has_its_curves_samples_and_figures(trained, tmp_path):
    """`lightning-div report <output_dir>` of the shared run (report_to tensorboard): it said "no metrics.csv and
    no TensorBoard event files", the lightning_div/ folder making output_dir the run and runs/<date>/ unread."""
    rows = [r for r in trained.trainer.state.log_history if eval_key("sem_ent") in r]
    logged = {f"eval/{k}": [r[eval_key(k)] for r in rows] for k in ("sem_ent", "distinct_2", "ead", "ruq")}
    page = report_of_hugging_face_run(trained.root / "out", logged, "eval_samples_step4.csv", tmp_path / "r.html")
    assert 'alt="eval/cluster_histogram"' in page and 'alt="eval/cluster_shares"' in page  # the figures
    assert 'data-source="eval_cluster_cards.csv"' in page  # the cluster cards
    assert '<img alt="eval"' in page and '<img alt="train"' in page  # eval/sem_ent ... and train/loss, train/ruq


def test_the_ruq_alert_fires_below_warn_below_and_on_a_drop():
    cb = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], alert=RUQAlert(warn_below=50.0, warn_drop=10.0))
    assert cb.evaluation.ruq_alert(80.0) == 0.0  # first measurement: nothing to drop from
    assert cb.evaluation.ruq_alert(72.0) == 0.0  # a drop of 8 points: within warn_drop
    with pytest.warns(RuntimeWarning, match=r"eval_ruq dropped from 72\.0 to 60\.0 \(more than warn_drop = 10\.0\)"):
        assert cb.evaluation.ruq_alert(60.0) == 1.0
    with pytest.warns(RuntimeWarning, match=r"eval_ruq = 40\.0 is below warn_below = 50\.0.*\"I don't know\.\""):
        assert cb.evaluation.ruq_alert(40.0) == 1.0
    assert cb.last_ruq == 40.0
    quiet = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], alert=RUQAlert(warn_drop=None))
    assert [quiet.evaluation.ruq_alert(v) for v in (90.0, 0.0)] == [0.0, 0.0]  # both checks off


@pytest.mark.slow
@pytest.mark.xdist_group(TRAINED)
def test_the_figures_and_tables_reach_every_tracker_and_the_output_dir(trained, monkeypatch):
    """report_to tensorboard + wandb (offline) + mlflow (file store): the Lightning monitor's figures
    and tables, keyed eval/..., at each evaluation's step; PNG and CSV copies in <output_dir>/lightning_div.
    The run is the shared one (``trained``)."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the file store, read back below
    tmp_path, cb = trained.root, trained.cb
    steps = [int(r["step"]) for r in trained.history]
    steps = [int(r["step"]) for r in cb.history]
    assert steps == [2, 4]

    # TensorBoard: the figures as images, the tables as text, at the evaluations' steps
    images, texts = {}, {}
    for events in (tmp_path / "out").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events), size_guidance={"images": 0, "tensors": 0}).Reload()
        for tag in acc.Tags()["images"]:
            images[tag] = [e.step for e in acc.Images(tag)]
        for tag in acc.Tags()["tensors"]:
            texts[tag] = [e.step for e in acc.Tensors(tag)]
    assert images["eval/cluster_histogram"] == steps and images["eval/cluster_shares"] == steps
    assert any("eval/samples" in t and v == steps for t, v in texts.items()), texts
    assert any("eval/clusters/cards" in t and v == [2] for t, v in texts.items()), texts  # once

    # W&B offline: the figures and tables stored as media of the run
    media = [p.name for p in (trained.wandb_run_dir / "files" / "media").rglob("*") if p.is_file()]
    assert sum(n.startswith("cluster_histogram") for n in media) == 2, media
    assert any(n.startswith("samples") and n.endswith(".table.json") for n in media)
    assert any(n.startswith("cards") and n.endswith(".table.json") for n in media)

    # MLflow: PNG and JSON artifacts named by the step
    stored = mlflow_artifacts(MlflowClient(trained.mlflow_uri), trained.mlflow_run_id)
    assert {
        "eval_cluster_histogram/step_2.png",
        "eval_cluster_histogram/step_4.png",
        "eval_cluster_shares/step_4.png",
        "eval_samples/step_4.json",
        "eval_clusters_cards/step_2.json",
    } <= stored, stored

    # the files: the sample table holds what was generated, in the callback's sample order
    out = tmp_path / "out" / "lightning_div"
    for name in ("eval_cluster_histogram_step2.png", "eval_cluster_shares_step4.png", "eval_cluster_cards.csv"):
        assert (out / name).stat().st_size > 0, name
    # the run's record of what the numbers were measured with: the callback's measures and their settings
    record = json.loads((out / "settings" / "TrainerDiversityMonitor.json").read_text())
    measures = [cb.evaluation.semantic, cb.evaluation.ruq]
    assert record["measures"] == [{"measure": type(m).__name__, "settings": m.settings()} for m in measures]
    assert [m["measure"] for m in record["measures"]] == ["SemanticMeasure", "RUQMeasure"]
    assert record["callback"] == json.loads(json.dumps(cb.settings()))  # the samples around them
    import csv

    with open(out / "eval_samples_step4.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["generated"] for r in table] == trained.last_responses[:5]
    assert [r["gold"] for r in table] == [p.response for p in cb.sample()[:5]]
    with open(out / "eval_cluster_shares.csv", newline="") as f:
        shares = list(csv.DictReader(f))
    assert sorted({int(r["step"]) for r in shares}) == steps and len(shares) == 2 * K
    for step in steps:  # each measurement's shares sum to 1
        assert sum(float(r["generated_share"]) for r in shares if int(r["step"]) == step) == pytest.approx(
            1.0, abs=1e-5
        )


@pytest.mark.slow
@pytest.mark.xdist_group(TRAINED)
def test_a_resumed_run_logs_what_the_uninterrupted_one_logs(trained, tmp_path):
    """Resume from the step-2 checkpoint: the step-4 measurement equals the uninterrupted run's, the gold
    Sem-Ent is not logged again, and the heatmap's history holds both steps (state in trainer_state.json).
    The uninterrupted run is the shared one (``trained``, checkpointed at steps 2 and 4); the resumed run
    has its callback's settings, its clusters and no tracker (the trackers hold no state to resume)."""
    train, val = _data()
    model, tokenizer = load_base_model()
    trainer = _trainer(tmp_path, model, tokenizer, train, val, save_strategy="steps", save_steps=2)
    resumed = _trained_callback(tmp_path, train, val, outputs={"dirpath": str(trained.root / "cache")}).attach(trainer)
    trainer.train(resume_from_checkpoint=str(trained.root / "out" / "checkpoint-2"))
    whole = trained
    assert [r["step"] for r in whole.history] == [2.0, 4.0] and [r["step"] for r in resumed.history] == [4.0]
    assert eval_key("sem_ent_gold") in whole.history[0] and eval_key("sem_ent_gold") not in resumed.history[0]
    for key, value in whole.history[1].items():
        if key != RUNTIME:
            assert resumed.history[0][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert [s for s, _ in resumed.share_history] == [2, 4]
    assert resumed.share_history == whole.share_history
    assert resumed.last_ruq == pytest.approx(whole.last_ruq)


def test_a_state_saved_with_other_settings_is_not_restored():
    cb = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], num_contexts=8)
    shares = [0.5, 0.5] + [0.0] * 18  # one share per cluster of the default k = 20 (another k is refused)
    saved = cb.state_dict()
    saved["measure"].update(gold_logged=True, share_history=[[2, shares]])
    saved["alert"] = {"last": 40.0}
    other = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], num_contexts=16)
    with pytest.warns(RuntimeWarning, match="saved with other settings"):
        other.load_state_dict(saved)
    assert other.last_ruq is None and other.share_history == [] and not other.evaluation.semantic.gold_logged
    cb.load_state_dict(saved)
    assert cb.last_ruq == 40.0 and cb.share_history == [(2, shares)] and cb.evaluation.semantic.gold_logged
    assert cb.state_key() == "lightning_div.TrainerDiversityMonitor"
    assert set(saved) == {"settings", "samples", "measure", "alert"}  # each part's state, nested
    assert TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], name="x").state_key().endswith("[x]")


def test_a_misconfigured_callback_raises_when_training_starts(tmp_path):
    """Issue 44 M6/M7: no data or no clusters stop train() at its start; a bad sample size is refused when built."""
    train, val = _data()
    model, tokenizer = load_base_model()
    for kwargs, match in (
        (dict(eval_pairs=[], cluster_texts=["hi"]), "eval_pairs: no pairs given"),
        (dict(eval_pairs=list(val), cluster_texts=None), "needs gold training responses"),
    ):
        trainer = _trainer(tmp_path, model, tokenizer, train, val)
        TrainerDiversityMonitor(**kwargs, space=SemanticSpace(encoder="minilm")).attach(trainer)
        with pytest.raises(ValueError, match=match):
            trainer.train()
        assert trainer.state.global_step == 0  # before the first step
    for bad in (0, 2.5, -1, True):
        for field in ("num_contexts", "num_train_contexts"):
            with pytest.raises(ValueError, match=r"sample size must be an integer >= 1 or None"):
                TrainerDiversityMonitor(eval_pairs=list(val), **{field: bad})


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: s["measure"].pop("gold_logged"),
        lambda s: s["measure"].update(share_history="garbage"),
        lambda s: s.update(alert={"last": "abc"}),
        lambda s: s.update(samples={"eval": "x"}),
    ],
    ids=["missing gold_logged", "share_history garbage", "last_ruq abc", "indices garbage"],
)
def test_a_damaged_saved_state_warns_and_starts_afresh(damage):
    """Issue 44 M8: a damaged state in trainer_state.json no longer stops the resume; nothing of it is half-restored."""
    cb = TrainerDiversityMonitor(eval_pairs=[("hi", "hello"), ("yo", "hey")], num_contexts=1)
    shares = [0.5, 0.5] + [0.0] * 18  # one share per cluster of the default k = 20
    good = cb.state_dict()
    good["measure"].update(gold_logged=True, share_history=[[2, shares]])
    good.update(alert={"last": 40.0}, samples={"eval": [1], "ruq": None, "train": None})
    saved = copy.deepcopy(good)
    damage(saved)
    with pytest.warns(RuntimeWarning, match="trainer_state.json is damaged .*it starts afresh"):
        cb.load_state_dict(saved)
    assert cb.state_dict() == TrainerDiversityMonitor(eval_pairs=[("hi", "hello")], num_contexts=1).state_dict()
    cb.load_state_dict(good)  # a sound one is restored
    assert cb.last_ruq == 40.0 and cb.sample() == [DialoguePair(("yo",), "hey")]


def test_the_sample_is_drawn_once_and_restored_from_the_saved_state():
    """Issue 41: the Hugging Face sample was drawn again at every call and never saved; now as the monitors'."""
    pairs = [(f"c{i}", f"r{i}") for i in range(30)]
    cb = TrainerDiversityMonitor(eval_pairs=pairs, num_contexts=5)
    cb.read_arguments(TrainingArguments(output_dir="unused", seed=3))
    first = cb.sample()
    assert first == [DialoguePair((f"c{i}",), f"r{i}") for i in sample_indices(30, 5, 3)]  # drawn with args.seed
    assert cb.state_dict()["samples"]["eval"] == [int(p.context[0][1:]) for p in first]
    resumed = TrainerDiversityMonitor(eval_pairs=pairs, num_contexts=5)
    resumed.read_arguments(TrainingArguments(output_dir="unused", seed=3))
    resumed.load_state_dict({**cb.state_dict(), "samples": {"eval": [0, 1, 2, 3, 4]}})
    assert [p.response for p in resumed.sample()] == ["r0", "r1", "r2", "r3", "r4"]  # the saved indices win


def test_an_empty_ruq_sample_is_the_monitors_error():
    """Issue 41: HF's ruq() raised 'max() arg is an empty sequence'; both front ends share RUQMeasure's error."""
    cb = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")])
    with pytest.raises(ValueError, match="RUQ sample is empty"):
        cb.evaluation.ruq.measure(None, [])
    assert type(cb.evaluation.ruq) is type(RUQMonitor().ruq)
    assert cb.evaluation.alert.alert.__func__ is RUQMonitor().alert.alert.__func__  # one alert


@pytest.mark.slow
def test_an_evaluate_before_train_keeps_the_gold_sem_ent_in_the_training_log(tmp_path):
    """Issue 44 L3: the callback thought eval_sem_ent_gold was logged already by the earlier evaluate()."""
    train, val = _data()
    model, tokenizer = load_base_model()
    trainer = _trainer(tmp_path, model, tokenizer, train, val, max_steps=2)
    _callback(tmp_path, train, val, idk_responses=()).attach(trainer)
    assert eval_key("sem_ent_gold") in trainer.evaluate()
    trainer.train()
    rows = [r for r in trainer.state.log_history if eval_key("sem_ent") in r]  # train() starts a new log
    assert [r["step"] for r in rows] == [2] and eval_key("sem_ent_gold") in rows[0]


def test_string_contexts_are_one_turn_everywhere():
    """Issue 44 M9: a context given as a string was split into characters by as_messages and pairs_from_items."""
    from lightning_div.datamodules.formats import pairs_from_items
    from lightning_div.integrations.transformers import as_messages

    pair = DialoguePair("How are you?", "Fine.")
    assert pair.context == ("How are you?",)
    assert as_messages(pair)["messages"] == [
        {"role": "user", "content": "How are you?"},
        {"role": "assistant", "content": "Fine."},
    ]
    assert pairs_from_items([("How are you?", "Fine.")], name="p")[0].context == ("How are you?",)
    cb = TrainerDiversityMonitor(eval_pairs=[pair])
    assert cb.sample()[0].context == ("How are you?",)


def test_the_ruq_plot_setting_is_the_settings_module_s_and_checks_its_numbers():
    """One RUQPlot class (lightning_div.settings); a numpy integer is kept as an int, a zero refused by name."""
    import numpy as np

    from lightning_div.settings import RUQPlot as SettingsPlot

    assert RUQPlot is SettingsPlot
    plot = RUQPlot(num_contexts=np.int64(3), num_beams=2)
    assert (plot.num_contexts, type(plot.num_contexts)) == (3, int)
    assert RUQPlot() == RUQPlot(16, 5)
    with pytest.raises(ValueError, match=r"RUQPlot.num_beams must be an integer >= 1, got 0"):
        RUQPlot(num_beams=0)
    with pytest.raises(ValueError, match=r"RUQPlot.num_contexts must be an integer >= 1, got True"):
        RUQPlot(num_contexts=True)


@pytest.mark.slow
def test_shared_contexts_and_the_ruq_plot_reach_hugging_face_users(tmp_path):
    """Issue 41: the monitors' shared_contexts switch and RUQ's per-position plot, in the Hugging Face callback."""
    train, val = _data()
    model, tokenizer = load_base_model()
    trainer = _trainer(tmp_path, model, tokenizer, train, val)
    cb = _callback(tmp_path, train, val, shared_contexts=False, ruq_plot=RUQPlot(num_contexts=3, num_beams=2)).attach(
        trainer
    )
    metrics = trainer.evaluate()
    adapter = HuggingFaceAdapter(model, tokenizer, batch_size=8, max_new_tokens=MAX_NEW, show_progress=False)
    pairwise = RUQMonitor(
        num_contexts=12, generation=Generation(batch_size=8), outputs=QUIET, scoring=RUQScoring(shared_contexts=False)
    )
    expected = pairwise.compute(adapter, cb.evaluation.data.ruq_sample())
    for name in ("ruq", "ruq_margin", "ruq_margin_idk2"):  # pair by pair: bit-identical to the monitor's
        assert metrics[eval_key(name)] == expected[name], name
    plot = tmp_path / "out" / "lightning_div" / "eval_ruq_plot_step0.png"
    assert plot.stat().st_size > 10_000  # the figure was drawn and written
