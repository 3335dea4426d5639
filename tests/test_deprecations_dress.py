"""DRESS's 0.2 names and keyword arguments still work for one release, each warning with the new form, and build
the same DRESS as the 1.0 form (issue 61)."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from monitor_setup import TRAIN, tiny_lm

import lightning_div.dress as dress_package
from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor
from lightning_div.callbacks.base import DiversityCallback
from lightning_div.callbacks.dress_checks import reweightable_datamodule
from lightning_div.dress import degeneration
from lightning_div.dress.degeneration import Thresholds
from lightning_div.integrations.transformers import dress_dataset, gold_dress_state
from lightning_div.measure.alerts import DRESSAlert, GroupAlert, RUQAlert
from lightning_div.model.formatting import DialogueLayout
from lightning_div.pairs import DialoguePair
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Mining

DEPRECATED = r"is deprecated since lightning-div 1\.0 and is removed in the next release: use "


def same(old: DRESSReweighting, new: DRESSReweighting) -> None:
    """Two DRESS built alike: the same settings (what the weights depend on), mining, schedule and alert."""
    assert old.settings() == new.settings()
    assert (old.mining, old.negatives, old.mining_settings) == (new.mining, new.negatives, new.mining_settings)
    assert (old.negative_loss, old.negative_batches, old.mine_at, old.num_contexts) == (
        new.negative_loss,
        new.negative_batches,
        new.mine_at,
        new.num_contexts,
    )
    assert old.alert.thresholds == new.alert.thresholds and old.monitor == new.monitor


@pytest.mark.parametrize(
    ("old", "new_form", "new"),
    [
        ({"encoder": "minilm"}, r"space=\.\.\.\(encoder=\.\.\.\)", {"space": SemanticSpace("minilm")}),
        ({"num_clusters": 7}, r"space=\.\.\.\(num_clusters=\.\.\.\)", {"space": SemanticSpace(num_clusters=7)}),
        ({"variance_kept": 0.8}, r"space=\.\.\.\(variance_kept=", {"space": SemanticSpace(variance_kept=0.8)}),
        ({"kmeans_seed": 3}, r"space=\.\.\.\(kmeans_seed=\.\.\.\)", {"space": SemanticSpace(kmeans_seed=3)}),
        ({"negatives": False}, r"mining=\.\.\.", {"mining": None}),
        ({"num_negative_contexts": 64}, r"mining=\.\.\.\(num_contexts=", {"mining": Mining(num_contexts=64)}),
        ({"head_threshold": 0.2}, r"mining=\.\.\.\(head_threshold=", {"mining": Mining(head_threshold=0.2)}),
        ({"negative_weight": -0.5}, r"mining=\.\.\.\(weight=\.\.\.\)", {"mining": Mining(weight=-0.5)}),
        ({"mine_at": "end"}, r"mining=\.\.\.\(at=\.\.\.\)", {"mining": Mining(at="end")}),
        ({"negative_loss": "nll"}, r"mining=\.\.\.\(loss=\.\.\.\)", {"mining": Mining(loss="nll")}),
        ({"negative_batches": "mixed"}, r"mining=\.\.\.\(batches=\.\.\.\)", {"mining": Mining(batches="mixed")}),
        ({"collapse_monitor": "sem"}, r"monitor=\.\.\.", {"monitor": "sem"}),
        (
            {"collapse_thresholds": {"sem_ent_ratio": 0.3, "negative_loss_ratio": 2}},
            r"alert=\.\.\.",
            {"alert": DRESSAlert(sem_ent_ratio=0.3, negative_loss_ratio=2.0)},
        ),
    ],
)
def test_each_0_2_keyword_warns_and_builds_the_same_dress(old, new_form, new):
    name = next(iter(old))
    with pytest.warns(DeprecationWarning, match=rf"DRESSReweighting\({name}=\.\.\.\) {DEPRECATED}{new_form}"):
        built = DRESSReweighting(**old)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the 1.0 form warns of nothing
        same(built, DRESSReweighting(**new))


def test_generation_kwargs_reach_the_mining_generation_as_generation_options():
    from lightning_div.settings import Generation

    with pytest.warns(DeprecationWarning, match=rf"DRESSReweighting\(generation_kwargs=\.\.\.\) {DEPRECATED}"):
        old = DRESSReweighting(generation_kwargs={"num_beams": 2})
    assert old.generation == DRESSReweighting(generation=Generation(options={"num_beams": 2})).generation
    assert old.generation.options == {"num_beams": 2}


def test_a_0_2_call_with_several_keywords_gives_the_1_0_objects():
    """The paper's settings of 0.2 spelled out flat, as configs/paper/*.yaml did: the same DRESS as PAPER_MINING."""
    flat = dict(
        negatives=True,
        num_negative_contexts=5000,
        head_threshold=0.1,
        negative_weight=-1.0,
        negative_loss="nll",
        mine_at="start",
        negative_batches="separate",
    )
    with pytest.warns(DeprecationWarning) as caught:
        old = DRESSReweighting(lam=30.0, normalize=False, **flat)
    assert len(caught) == len(flat)  # one warning a keyword
    same(old, DRESSReweighting.paper())


def test_the_old_and_new_forms_together_are_refused():
    with pytest.raises(ValueError, match=r"space= and encoder= were both given"):
        with pytest.warns(DeprecationWarning):
            DRESSReweighting(space=SemanticSpace(), encoder="minilm")
    with pytest.raises(ValueError, match=r"alert= and collapse_thresholds= were both given"):
        with pytest.warns(DeprecationWarning):
            DRESSReweighting(alert=DRESSAlert(), collapse_thresholds={"sem_ent_ratio": 0.3})
    with pytest.raises(ValueError, match=r"monitor= and collapse_monitor= were both given"):
        with pytest.warns(DeprecationWarning):
            DRESSReweighting(monitor="a", collapse_monitor="b")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'negative'"):
        DRESSReweighting(negative=True)


def test_collapse_thresholds_is_the_alerts_thresholds_with_a_warning():
    for module in (degeneration, dress_package):
        with pytest.warns(
            DeprecationWarning,
            match=rf"lightning_div\.dress\.degeneration\.CollapseThresholds {DEPRECATED}lightning_div\.measure\.alerts"
            r"\.DRESSAlert",
        ):
            old = module.CollapseThresholds
        assert old is Thresholds
    with pytest.raises(AttributeError, match="has no attribute 'CollapseThreshold'"):
        degeneration.CollapseThreshold  # noqa: B018 - a name that never existed is still an error
    # a CollapseThresholds given as collapse_thresholds= is the alert of the same thresholds
    with pytest.warns(DeprecationWarning, match=r"collapse_thresholds=\.\.\.\) "):
        dress = DRESSReweighting(collapse_thresholds=Thresholds(top_share_floor=0.9))
    assert dress.alert.thresholds == DRESSAlert(top_share_floor=0.9).thresholds
    # issue 54 M9: a dict of the fields is taken; an unknown field or a non-number is named
    with pytest.raises(ValueError, match="collapse_thresholds has no field 'ratio'; its fields are sem_ent_ratio"):
        with pytest.warns(DeprecationWarning):
            DRESSReweighting(collapse_thresholds={"ratio": 0.3})
    with pytest.raises(ValueError, match="DRESSAlert.top_share_floor must be a number >= 0"):
        with pytest.warns(DeprecationWarning):
            DRESSReweighting(collapse_thresholds={"top_share_floor": "0.8"})


def test_the_collapse_monitor_name_reads_the_same_monitor_as_monitor():
    from types import SimpleNamespace

    named, other = SemanticDiversityMonitor(name="sem"), SemanticDiversityMonitor(name="other")
    trainer = SimpleNamespace(callbacks=[named, other])
    with pytest.warns(DeprecationWarning, match=r"collapse_monitor=\.\.\.\) .*use monitor=\.\.\."):
        old = DRESSReweighting(collapse_monitor="other")
    assert old.guard_monitor(trainer) == DRESSReweighting(monitor=other).guard_monitor(trainer) == "other"


def test_a_0_2_datamodule_with_gold_train_responses_is_reweighted_with_a_warning(monkeypatch):
    """Issue 61: a datamodule of 0.2 names its training responses gold_train_responses(); DRESS still reads them."""
    from types import SimpleNamespace

    class Old:
        def gold_train_responses(self):
            return ["a", "b", "a"]

        def train_contexts(self):
            return [["x"], ["y"], ["z"]]

        def apply_weights(self, weights, negatives, mode):
            self.weights = weights

    dm = Old()
    assert reweightable_datamodule(SimpleNamespace(datamodule=dm)) is dm  # not refused
    with pytest.raises(ValueError, match="needs a datamodule that implements"):
        reweightable_datamodule(SimpleNamespace(datamodule=object()))

    class Space(SemanticSpace):  # the two responses in two clusters, no encoder
        clusters = SimpleNamespace(num_clusters=2)

        def fit(self, texts, **kwargs):
            assert list(texts) == ["a", "b", "a"]  # the responses of gold_train_responses()

        def gold_assignments(self, texts, device=None):
            return np.array([0 if t == "a" else 1 for t in texts])

    dress = DRESSReweighting(space=Space(), lam=1.0, normalize=False, mining=None)
    trainer = SimpleNamespace(datamodule=dm, current_epoch=0, fit_loop=None)
    module = SimpleNamespace(device="cpu")
    # the base's fit start reaches the model (none here): DRESS's own part is what is tested
    monkeypatch.setattr(DiversityCallback, "on_fit_start", lambda *a: None)
    dress.space_context = lambda trainer, pl_module: {}
    dress.announced = lambda *a: __import__("contextlib").nullcontext()
    with pytest.warns(DeprecationWarning, match=r"a datamodule's gold_train_responses\(\) is deprecated .* use train_"):
        dress.on_fit_start(trainer, module)
    # w = (1 - p(c))^1: "a" is 2 of 3, "b" 1 of 3
    assert np.allclose(dm.weights, [1 / 3, 2 / 3, 1 / 3])


def test_every_alert_has_one_shape_and_the_old_calls_give_the_same_numbers():
    """RUQAlert, GroupAlert and DRESSAlert: update(values, step) -> (kind or None, reasons); state_dict / load_state_dict."""
    for alert in (RUQAlert(), GroupAlert(), DRESSAlert()):
        for method in ("update", "state_dict", "load_state_dict"):
            assert callable(getattr(alert, method)), (type(alert).__name__, method)
    ruq, old = RUQAlert(warn_below=30.0, warn_drop=10.0), RUQAlert(warn_below=30.0, warn_drop=10.0)
    assert ruq.update({"val/ruq": 60.0}, 0) == (None, [])
    assert ruq.update({"val/ruq": 25.0}, 1) == ("RUQ alert", old.check(60.0, "val/ruq") or old.check(25.0, "val/ruq"))
    assert ruq.state_dict() == {"last": 25.0}
    fresh = RUQAlert()
    fresh.load_state_dict(ruq.state_dict())
    fresh.load_state_dict(fresh.last)  # the bare value the front ends of 0.2 checkpointed
    assert fresh.last == 25.0
    with pytest.raises(ValueError, match=r"RUQAlert.update needs one RUQ value"):
        ruq.update({"val/sem_ent": 1.0}, 2)
    group = GroupAlert(warn_drop=0.25, start_steps=1)
    assert group.update({"group_sem_ent": 1.0}, 0) == (None, [])
    kind, reasons = group.update({"group_sem_ent": 0.5}, 1)
    assert kind == "collapse" and reasons == [
        "group Sem-Ent is 0.500, down 50% from 1.000 at the start (warn_drop = 0.25)"
    ]
    assert math.isclose(group.start("group_sem_ent"), 1.0)


class FirstLetterSpace:
    """A space without an encoder: a response's cluster is 0 when it starts with "a", else 1 (2 clusters)."""

    clusters = SimpleNamespace(num_clusters=2)

    def fit(self, texts, device=None, cache_dir=None):
        self.fitted_on = list(texts)

    def gold_assignments(self, texts, device=None):
        return np.array([0 if t.startswith("a") else 1 for t in texts])


def test_gold_dress_state_takes_gold_responses_as_train_responses_with_a_warning():
    responses = ["a one", "a two", "b three"]
    new = gold_dress_state(FirstLetterSpace(), train_responses=responses, lam=1.0, normalize=False)
    space = FirstLetterSpace()
    with pytest.warns(DeprecationWarning, match=r"gold_dress_state\(gold_responses=\.\.\.\) " + DEPRECATED + "train_"):
        old = gold_dress_state(space, gold_responses=responses, lam=1.0, normalize=False)
    assert space.fitted_on == responses
    # w = (1 - p(c))^1: "a" is 2 of 3 responses, "b" 1 of 3
    assert np.allclose(old.weights, [1 / 3, 1 / 3, 2 / 3]) and np.array_equal(old.weights, new.weights)
    with pytest.raises(
        ValueError,
        match=r"gold_dress_state: train_responses= and the deprecated gold_responses= were both given: pass train",
    ):
        with pytest.warns(DeprecationWarning, match="gold_responses"):
            gold_dress_state(FirstLetterSpace(), responses, gold_responses=responses)
    with pytest.raises(TypeError, match=r"gold_dress_state\(\) missing its argument train_responses"):
        gold_dress_state(FirstLetterSpace())
    with pytest.raises(TypeError, match=r"gold_dress_state\(\) got an unexpected keyword argument 'gold'"):
        gold_dress_state(FirstLetterSpace(), responses, gold=responses)


def test_dress_dataset_takes_format_as_layout_with_a_warning():
    lm, pairs = tiny_lm(), TRAIN[:6]
    layout = DialogueLayout(max_turns=1)
    new, _ = dress_dataset(pairs, lm.tokenizer, lm.model, layout=layout)
    with pytest.warns(DeprecationWarning, match=r"dress_dataset\(format=\.\.\.\) " + DEPRECATED + r"layout=\.\.\."):
        old, _ = dress_dataset(pairs, lm.tokenizer, lm.model, format=layout)
    default, _ = dress_dataset(pairs, lm.tokenizer, lm.model)
    # (context ids, response ids) per example
    items = [[tuple(map(list, data.encoded[j])) for j in range(len(data))] for data in (old, new, default)]
    assert items[0] == items[1]
    assert items[0] != items[2]  # the layout was applied: one turn of context, not the default's several
    with pytest.raises(
        ValueError, match=r"dress_dataset: layout= and the deprecated format= were both given: pass layout= alone"
    ):
        with pytest.warns(DeprecationWarning, match="format"):
            dress_dataset(pairs, lm.tokenizer, lm.model, layout=layout, format=layout)


def test_a_0_2_flat_dress_checkpoint_resumes_into_the_nested_parts():
    """0.2 wrote DRESS's decisions and the space side by side; 1.0 nests them as every callback does, and reads both."""
    from lightning_div.callbacks.parts import SHARED

    def dress(space):
        return DRESSReweighting(space=space, mining=Mining(num_contexts=4))

    saved = dress(SemanticSpace("minilm", num_clusters=3))
    saved.state.weights = np.array([0.5, 1.5, 1.0])
    saved.state.set_negatives(
        [DialoguePair(TRAIN[0].context, "again")],
        np.array([-1.0]),
        np.array([2]),
        heads=np.array([2]),
        head_share=0.75,
        mined_for=1,
    )
    saved.space.clusters_path = "/runs/clusters.npz"
    saved.alert.since = 3
    saved.history = [{"dress/weight_mean": 1.0}]
    nested = saved.state_dict()
    assert set(nested) == {"history", "settings", "samples", "reweighting", "space", "alert"}
    assert nested["space"] == {"clusters_path": "/runs/clusters.npz"} and nested["reweighting"]["mined_for"] == 1
    flat = {"history": nested["history"], "settings": nested["settings"], **nested["reweighting"], **nested["space"]}
    for state, alert_since in ((nested, 3), (flat, None)):  # 0.2 wrote no alert: it starts afresh
        resumed = dress(SemanticSpace("minilm", num_clusters=3))
        resumed.load_state_dict(state)
        assert resumed.state.state_dict() == saved.state.state_dict() and resumed.history == saved.history
        assert resumed.space.clusters_path == "/runs/clusters.npz" and resumed.alert.since == alert_since
    # under other settings the weights are stale: recomputed at fit start, as the warning says
    other = DRESSReweighting(space=SemanticSpace("minilm", num_clusters=3), lam=5.0, mining=Mining(num_contexts=4))
    with pytest.warns(RuntimeWarning, match="the weights are recomputed and the negatives mined again"):
        other.load_state_dict(nested)
    assert other.state.weights is None and other.state.negative_pairs == [] and other.history == saved.history
    assert SHARED == "owner"  # the marker a callback writes for a space another one checkpoints (test_monitors)
