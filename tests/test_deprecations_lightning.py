"""The Lightning monitors' 0.2 keyword arguments and checkpoints still work under 1.0, each argument with a warning
naming the new form, and give what the 1.0 form gives."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from monitor_setup import datamodule, monitors, tiny_lm, trainer
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_div.callbacks import NLIDiversityMonitor, RUQMonitor, SemanticDiversityMonitor, ThresholdGeneration
from lightning_div.callbacks.ruq import RUQPlot, RUQScoring
from lightning_div.measure.alerts import RUQAlert
from lightning_div.model.formatting import DialogueLayout
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Lexical, ModelAccess, Outputs

WARNS = r"is deprecated since lightning-div 1\.0 .* use "


def said(caught) -> str:
    """The messages of the warnings ``pytest.warns`` caught, one a line."""
    return "\n".join(str(w.message) for w in caught)


def test_the_common_flat_arguments_become_the_settings_objects():
    layout = DialogueLayout(max_turns=2)
    with pytest.warns(DeprecationWarning) as caught:
        old = RUQMonitor(
            model_attr="net",
            tokenizer_attr="tok",
            format=layout,
            batch_size=4,
            max_new_tokens=7,
            generation_kwargs={"top_k": 3},
            dirpath="cache",
            show_progress=False,
        )
    assert re.search(r"RUQMonitor\(batch_size=\.\.\.\) " + WARNS + r"generation=\.\.\.\(batch_size", said(caught))
    assert old.model_access == ModelAccess("net", "tok", layout)
    assert old.generation == Generation(4, 7, {"top_k": 3})
    assert old.outputs == Outputs(show_progress=False, dirpath="cache")
    # the 0.2 attributes read the objects; format is layout's read-only alias
    assert (old.model_attr, old.tokenizer_attr, old.batch_size, old.max_new_tokens) == ("net", "tok", 4, 7)
    assert (old.dirpath, old.show_progress, old.format, old.layout) == ("cache", False, layout, layout)
    with pytest.raises(AttributeError, match="has no setter"):
        old.format = DialogueLayout()  # type: ignore[misc]


def test_every_common_flat_argument_warns_once_naming_its_object():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RUQMonitor(model_attr="m", batch_size=2, dirpath="d", log_samples=1)
    said = sorted(str(w.message).split(" is ")[0] for w in caught if w.category is DeprecationWarning)
    assert said == [
        "RUQMonitor(batch_size=...)",
        "RUQMonitor(dirpath=...)",
        "RUQMonitor(log_samples=...)",
        "RUQMonitor(model_attr=...)",
    ]
    assert all(w.filename == __file__ for w in caught)  # each points at the user's line


def test_an_object_and_its_flat_fields_together_are_refused():
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValueError, match=r"RUQMonitor: generation= and the deprecated batch_size= were both given"),
    ):
        RUQMonitor(generation=Generation(), batch_size=4)
    with pytest.raises(TypeError, match=r"RUQMonitor\(\) got an unexpected keyword argument 'batch_sizes'"):
        RUQMonitor(batch_sizes=4)
    with pytest.raises(TypeError, match=r"RUQMonitor: outputs must be a lightning_div.Outputs or None"):
        RUQMonitor(outputs={"dirpath": "x"})  # type: ignore[arg-type]


def test_the_six_flat_space_arguments_build_the_space_of_before():
    encoder_kwargs = {"pooling": "mean"}
    with pytest.warns(DeprecationWarning) as caught:
        old = SemanticDiversityMonitor(
            encoder="minilm",
            num_clusters=7,
            variance_kept=0.8,
            kmeans_seed=3,
            encoder_kwargs=encoder_kwargs,
            clusters=None,
            batch_size=5,
            show_progress=False,
        )
    assert re.search(r"SemanticDiversityMonitor\(num_clusters=\.\.\.\) " + WARNS + r"space=", said(caught))
    new = SemanticDiversityMonitor(
        SemanticSpace("minilm", num_clusters=7, variance_kept=0.8, kmeans_seed=3, encoder_kwargs=encoder_kwargs),
        generation=Generation(batch_size=5),
        outputs=Outputs(show_progress=False),
    )
    assert (
        old.space.settings()
        == new.space.settings()
        == {
            "encoder": "minilm",
            "num_clusters": 7,
            "variance_kept": 0.8,
            "kmeans_seed": 3,
        }
    )
    assert old.space.encoder_kwargs == encoder_kwargs and old.state_key == new.state_key
    # the private space of 0.2 embedded with the monitor's batch size and bars, as before
    assert (old.space.batch_size, old.space.show_progress) == (5, False)
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValueError, match=r"space= and num_clusters= were both given"),
    ):
        SemanticDiversityMonitor(SemanticSpace(), num_clusters=4)


def test_gold_responses_and_the_lexical_arguments_of_the_semantic_monitor():
    with pytest.warns(DeprecationWarning) as caught:
        old = SemanticDiversityMonitor(
            gold_responses=["a", "b"],
            lexical_metrics=["distinct_1", "ead"],
            lexical_options={"base": 2},
            vocab_size=99,
            log_samples=3,
            cluster_views=False,
        )
    messages = " | ".join(str(w.message) for w in caught)
    assert "gold_responses=...) is deprecated" in messages and "use cluster_texts=..." in messages
    assert "use lexical=...(metrics=...)" in messages and "use outputs=...(cluster_views=...)" in messages
    new = SemanticDiversityMonitor(
        cluster_texts=["a", "b"],
        lexical=Lexical(["distinct_1", "ead"], {"base": 2}, 99),
        outputs=Outputs(log_samples=3, cluster_views=False),
    )
    with pytest.raises(
        ValueError, match=r"^SemanticDiversityMonitor: cluster_texts= and the deprecated gold_responses= were"
    ):
        with pytest.warns(DeprecationWarning, match=r"gold_responses="):
            SemanticDiversityMonitor(cluster_texts=["a"], gold_responses=["b"])  # one would be silently unused
    for mon in (old, new):
        assert mon.cluster_texts_arg == ["a", "b"] and mon.vocab_size == 99
        assert mon.lexical_metrics == ["distinct_1", "ead"] and mon.lexical_options == {"base": 2}
        assert (mon.log_samples, mon.cluster_views) == (3, False)


def test_the_ruq_monitors_flat_arguments():
    with pytest.warns(DeprecationWarning) as caught:
        old = RUQMonitor(
            num_val_prompts=5,
            num_train_prompts=6,
            num_plot_prompts=3,
            num_beams=2,
            warn_below=40.0,
            warn_drop=None,
            reference="first",
            shared_contexts=False,
        )
    messages = " | ".join(str(w.message) for w in caught)
    for old_name, new_form in [
        ("num_val_prompts", "num_contexts=..."),
        ("num_train_prompts", "num_train_contexts=..."),
        ("num_beams", "plot=...(num_beams=...)"),
        ("warn_below", "alert=...(warn_below=...)"),
        ("shared_contexts", "scoring=...(shared_contexts=...)"),
    ]:
        assert f"RUQMonitor({old_name}=...) is deprecated" in messages and f"use {new_form}" in messages
    new = RUQMonitor(
        num_contexts=5,
        num_train_contexts=6,
        plot=RUQPlot(num_contexts=3, num_beams=2),
        alert=RUQAlert(warn_below=40.0, warn_drop=None),
        scoring=RUQScoring(reference="first", shared_contexts=False),
    )
    for mon in (old, new):
        assert (mon.num_contexts, mon.num_train_contexts, mon.plot) == (5, 6, RUQPlot(3, 2))
        assert (mon.alert.warn_below, mon.alert.warn_drop) == (40.0, None)
        assert (mon.reference, mon.shared_contexts) == ("first", False)
        assert mon.settings() == {
            "idk_responses": list(mon.idk_responses),
            "num_train_contexts": 6,
            "num_contexts": 5,
            "seed": 0,
        }
    with pytest.warns(DeprecationWarning) as caught:
        assert RUQMonitor(plot=False, num_beams=9).plot is None  # the plot's settings are moot without it, as then
    assert re.search(r"RUQMonitor\(plot=False\) " + WARNS + "plot=None", said(caught))
    with pytest.warns(DeprecationWarning, match=r"RUQMonitor\(plot=True\) " + WARNS + r"plot=RUQPlot\(\.\.\.\)"):
        assert RUQMonitor(plot=True).plot == RUQPlot() == RUQMonitor().plot
    assert RUQMonitor().alert is not RUQMonitor().alert  # each its own state
    assert (RUQMonitor().alert.warn_below, RUQMonitor().alert.warn_drop) == (None, 10.0)  # 0.2's default


def test_the_nli_monitors_threshold_settings():
    with pytest.warns(DeprecationWarning) as caught:
        old = NLIDiversityMonitor(
            threshold_generation=True,
            threshold=4,
            max_samples=8,
            threshold_metric="baseline",
            threshold_rank_by="threshold",
        )
    messages = " | ".join(str(w.message) for w in caught)
    assert "NLIDiversityMonitor(threshold_generation=True) is deprecated" in messages
    assert "use threshold_generation=...(metric=...)" in messages
    new = NLIDiversityMonitor(
        threshold_generation=ThresholdGeneration(threshold=4, max_samples=8, metric="baseline", rank_by="threshold")
    )
    assert old.threshold_generation == new.threshold_generation
    assert old.nli.settings() == new.nli.settings()
    with pytest.warns(DeprecationWarning) as caught:
        off = NLIDiversityMonitor(threshold_generation=False, threshold=3)
    assert re.search(r"NLIDiversityMonitor\(threshold_generation=False\) " + WARNS, said(caught))
    # 0.2's flat fields without threshold_generation=True ran nothing, and still do: the record holds the defaults
    assert off.threshold_generation is None and off.nli.settings() == NLIDiversityMonitor().nli.settings()
    assert off.nli.settings()["threshold"] == 10 and off.nli.settings()["threshold_generation"] is False


def flat_state(monitor, state):
    """``state`` (1.0's nested checkpoint state of ``monitor``) as lightning-div 0.2 wrote it: flat."""
    flat = {k: state[k] for k in ("history", "validated_epoch") if k in state}
    if isinstance(monitor, SemanticDiversityMonitor):
        flat.update(indices=(state["samples"] or {}).get("val"), **state["space"], **state["measure"])
        flat["settings"] = state["settings"]
    else:
        renamed = {"num_train_contexts": "num_train_prompts", "num_contexts": "num_val_prompts"}
        flat.update(indices=state["samples"], last_val_ruq=state["alert"]["last"])
        flat["settings"] = {renamed.get(k, k): v for k, v in state["settings"].items()}
    return flat


def run(root, cache, max_epochs, ckpt_path=None):
    sem, ruq = monitors(cache)
    ruq.plot = None  # a figure of the model's beams, no state
    tr = trainer(
        root,
        [sem, ruq, ModelCheckpoint(dirpath=root / "ckpt", save_last=True)],
        max_epochs=max_epochs,
        limit_train_batches=2,
        limit_val_batches=1,
        enable_checkpointing=True,
    )
    tr.fit(tiny_lm(), datamodule=datamodule(), ckpt_path=ckpt_path)
    return sem, ruq


def measured(cb):
    return [{k: v for k, v in row.items() if not k.startswith("timing/")} for row in cb.history]


@pytest.mark.slow
def test_a_checkpoint_of_0_2_resumes_as_the_uninterrupted_run(tmp_path):
    cache = tmp_path / "cache"
    full = run(tmp_path / "full", cache, max_epochs=2)
    run(tmp_path / "part", cache, max_epochs=1)
    ckpt = torch.load(tmp_path / "part" / "ckpt" / "last.ckpt", weights_only=False)
    for cb in full:
        nested = ckpt["callbacks"][cb.state_key]
        assert set(nested) >= {"history", "settings", "samples"} and "indices" not in nested
        ckpt["callbacks"][cb.state_key] = flat_state(cb, nested)  # what lightning-div 0.2 wrote
    torch.save(ckpt, tmp_path / "flat.ckpt")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*other settings", RuntimeWarning)  # the same settings: nothing stale
        resumed = run(tmp_path / "resumed", cache, max_epochs=2, ckpt_path=tmp_path / "flat.ckpt")
    for a, b in zip(resumed, full):
        assert measured(a) == measured(b) and len(measured(a)) >= 2
        assert a.sample_state() == b.sample_state()
    assert resumed[1].alert.last == full[1].alert.last is not None
    assert resumed[0].measure.share_history == full[0].measure.share_history
