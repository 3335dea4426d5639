"""Every measurement of the core has the one Measure shape, and is usable without a trainer."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from fakes import EchoSets, EqualityScorer, first_letter_encoder

from lightning_div._internal.tracking import Destination
from lightning_div.measure.base import Measure
from lightning_div.measure.dress import NegativeMiner
from lightning_div.measure.group import GroupMeasure
from lightning_div.measure.nli import NLIMeasure
from lightning_div.measure.reporting import RecordingReporter, RunMemory, TrackerReporter
from lightning_div.measure.ruq import RUQMeasure
from lightning_div.measure.semantic import SemanticMeasure
from lightning_div.semantic.space import SemanticSpace

#: One cheap instance of every Measure of the core (nothing is loaded or fitted to build them).
MEASURES = {
    "semantic": lambda: SemanticMeasure(SemanticSpace(encoder="minilm", num_clusters=4), vocab_size=50),
    "ruq": lambda: RUQMeasure(("I don't know.",)),
    "nli": lambda: NLIMeasure(scorer="roberta-large-mnli", n=2),
    "group": lambda: GroupMeasure(SemanticSpace(encoder="minilm", num_clusters=4), vocab_size=20),
    "dress_mining": lambda: NegativeMiner(SemanticSpace(encoder="minilm", num_clusters=4), head_threshold=0.2),
}


@pytest.mark.parametrize("make", MEASURES.values(), ids=list(MEASURES))
def test_every_measure_has_the_shape_and_its_state_round_trips(make):
    measure = make()
    assert isinstance(measure, Measure)
    settings = measure.settings()
    assert isinstance(settings, dict) and json.loads(json.dumps(settings)) == settings
    state = measure.state_dict()
    assert json.loads(json.dumps(state)) == state  # checkpointed as JSON (trainer_state.json)
    fresh = make()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and fresh.settings() == settings
    with pytest.raises(ValueError, match=r"state must be a dict"):
        fresh.load_state_dict("garbage")  # type: ignore[arg-type]


def test_the_settings_say_what_was_measured_with():
    semantic = MEASURES["semantic"]().settings()
    assert semantic["space"] == {"encoder": "minilm", "num_clusters": 4, "variance_kept": 0.9, "kmeans_seed": 27}
    assert semantic["vocab_size"] == 50 and semantic["lexical_metrics"][0] == "distinct_1"
    assert RUQMeasure(("I don't know.",), reference="first").settings() == {
        "idk_responses": ["I don't know."],
        "reference": "first",
        "shared_contexts": True,
        "batch_size": 32,
    }


def test_the_run_records_the_settings_once_and_again_when_they_change(tmp_path):
    """Reporter.record_settings: rank zero writes <out>/settings/<who>.json at the first call, then only on a change."""
    reporter = RecordingReporter(tmp_path)
    ruq, semantic = MEASURES["ruq"](), MEASURES["semantic"]()
    path = reporter.record_settings("SemanticDiversityMonitor-a", [semantic, ruq])
    assert path == tmp_path / "settings" / "SemanticDiversityMonitor-a.json"
    record = json.loads(path.read_text())
    assert record["who"] == "SemanticDiversityMonitor-a" and record["lightning_div"]
    assert record["measures"] == [
        {"measure": "SemanticMeasure", "settings": semantic.settings()},
        {"measure": "RUQMeasure", "settings": ruq.settings()},
    ]
    assert reporter.record_settings("SemanticDiversityMonitor-a", [semantic, ruq]) is None  # unchanged: not rewritten
    semantic.batch_size = 8  # a changed configuration is recorded again
    assert reporter.record_settings("SemanticDiversityMonitor-a", [semantic, ruq]) == path
    assert json.loads(path.read_text())["measures"][0]["settings"]["batch_size"] == 8
    assert "callback" not in json.loads(path.read_text())
    # the front end's own settings around its measures (its sample), as "callback"
    assert reporter.record_settings("SemanticDiversityMonitor-a", [semantic, ruq], {"num_contexts": 24}) == path
    assert json.loads(path.read_text())["callback"] == {"num_contexts": 24}
    assert [p.name for p in (tmp_path / "settings").iterdir()] == [path.name]  # no temporary file left

    class Odd:  # values JSON cannot hold are written as plain() makes them, never a failed run
        def settings(self):
            return {"device": object.__new__(Odd), 3: "an int key", "temperature": float("nan")}

    record = json.loads(reporter.record_settings("odd", [Odd()], {"top_p": float("inf"), 1: None}).read_text())
    assert record["measures"][0]["settings"] == {"device": "Odd", "3": "an int key", "temperature": "nan"}
    assert record["callback"] == {"top_p": "inf", "1": None}
    assert reporter.record_settings("nothing", []) is None and not (tmp_path / "settings" / "nothing.json").exists()
    # a folder that cannot be written (a file where it should be): one warning, and training goes on
    (tmp_path / "blocked").write_text("a file, not a folder")
    blocked = RecordingReporter(tmp_path / "blocked")
    with pytest.warns(RuntimeWarning, match=r"the settings record .*blocked/settings/x\.json was not written"):
        assert blocked.record_settings("x", [ruq]) is None
    # another process: writes nothing
    other = TrackerReporter(Destination([], 0, "step_0"), tmp_path / "rank1", print, RunMemory(), is_rank_zero=False)
    assert other.record_settings("x", [ruq]) is None and not (tmp_path / "rank1").exists()


def test_nli_measure_without_a_trainer():
    """n = 3: "same" has 6 entailed ordered pairs (baseline -6), the other 6 contradictions (+6); the means."""
    measure = NLIMeasure(scorer=EqualityScorer(), n=3, batch_size=3)  # one context per batch
    measure.prepare()
    values = measure.measure(EchoSets(), [["hi", "same"], ["hi", "other"]])
    assert values["nli_div_baseline"] == 0.0 and values["nli_div_neutral"] == 0.0
    assert values["nli_div_confidence"] == 0.0
    assert values["nli_pairs_entailment"] == 3.0 and values["nli_pairs_contradiction"] == 3.0
    assert measure.measure(EchoSets(), [["other"]])["nli_div_baseline"] == 6.0
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        NLIMeasure(n=1)
    with pytest.raises(ValueError, match=r"prepare\(\) must load the scorer"):
        NLIMeasure(scorer=EqualityScorer()).measure(EchoSets(), [["x"]])


def test_threshold_generation_checks_its_fields_when_built():
    """A typo in ThresholdGeneration fails at construction, naming the field; a numpy budget is recorded as an int."""
    from lightning_div.nli.threshold_settings import ThresholdGeneration

    with pytest.raises(ValueError, match=r"ThresholdGeneration\(diversity_metric='entail'\) is unknown; use one of"):
        ThresholdGeneration(diversity_metric="entail")
    with pytest.raises(ValueError, match=r"ThresholdGeneration\(rank_by='best'\) is unknown; use one of \('diversity'"):
        ThresholdGeneration(rank_by="best")
    for budget in (0, 2.5, True, None):
        with pytest.raises(
            ValueError, match=rf"ThresholdGeneration\.max_samples must be an integer >= 1, got {budget!r}"
        ):
            ThresholdGeneration(max_samples=budget)  # type: ignore[arg-type]
    assert type(ThresholdGeneration(max_samples=np.int64(7)).max_samples) is int
    assert ThresholdGeneration(threshold=3).arguments() == {
        "threshold": 3,
        "max_samples": 20,
        "metric": "contradictions",
        "diversity_metric": None,
        "rank_by": "diversity",
    }


class FirstWordSpace:
    """A stand-in SemanticSpace: the cluster is the first word's index in ("a", "b", "c", "d")."""

    clusters_source = None

    def __init__(self):
        self.fitted, self.fitted_on = False, None
        self.clusters = type("Clusters", (), {"num_clusters": 4})()

    def fit(self, texts, **where):
        self.fitted, self.fitted_on = True, list(texts)

    def assign(self, texts, device=None):
        return np.array(["abcd".index(t[0]) for t in texts], dtype=np.int64)


def test_group_measure_without_a_trainer():
    """G = 2: group 1 is two clusters (entropy ln 2), group 2 one (0); unprefixed keys; groups checked first."""
    space = FirstWordSpace()
    group = GroupMeasure(space, lexical_metrics=["distinct_1"], vocab_size=None)
    group.prepare(None)
    assert not space.fitted  # no references: it waits for the first batch
    group.prepare(["a x", "b y"])
    assert space.fitted_on == ["a x", "b y"] and group.ready  # EAD is not measured: no V needed
    values = group.measure(["a x", "b y", "c z", "c z"], 2, cut_share=0.5)
    assert values["group_sem_ent"] == pytest.approx(np.log(2) / 2)
    assert values["group_clusters"] == 1.5 and values["collapsed_groups"] == 0.5
    assert values["distinct_1"] == pytest.approx(6 / 8) and values["length_cut_share"] == 0.5
    assert not any("/" in k for k in values) and group.last_ids.tolist() == [0, 1, 2, 2]
    with pytest.raises(ValueError, match="3 completions .* 2"):
        group.measure(["a", "b", "c"], 2)
    with pytest.raises(ValueError, match="vocab_size 0 is not an integer >= 1"):
        group.load_state_dict({"space": {}, "vocab_size": 0})


class EchoLast:
    """A stand-in adapter: the response to a context is its last turn."""

    def generate(self, contexts, **kwargs):
        return [c[-1] for c in contexts]


def test_negative_miner_without_a_trainer():
    """5 generations, 3 in cluster a (60 %), 1 in b, 1 in c; head_threshold 0.3: a is the head, its 3 are negatives."""
    miner = NegativeMiner(FirstWordSpace(), head_threshold=0.3, negative_weight=-0.5)
    contexts = [["q", t] for t in ("a1", "a2", "a3", "b", "c")]
    mined = miner.measure(EchoLast(), contexts, keep_zero_weights=False)
    assert [p.response for p in mined.pairs] == ["a1", "a2", "a3"] and mined.pairs[0].context == ("q", "a1")
    assert mined.weights.tolist() == [-0.5] * 3 and mined.clusters.tolist() == [0, 0, 0]
    assert mined.heads.tolist() == [0] and mined.head_share == pytest.approx(0.6)
    kept = miner.negatives_of(contexts, [c[-1] for c in contexts], np.array([0, 0, 0, 1, 2]))
    assert kept.weights.tolist() == [-0.5, -0.5, -0.5, 0.0, 0.0]  # separate batches keep the zero weights
    with pytest.raises(ValueError, match="head_threshold must be a share"):
        NegativeMiner(FirstWordSpace(), head_threshold=1.5)


# -- round seven (issue 64): numpy settings, the k measured with, explicit settings on resume, empty input ----


TOPIC_TEXTS = [f"{t} {i}" for t in "abcd" for i in range(6)]


def _topic_space(tmp_path, num_clusters, **kwargs):
    return SemanticSpace(
        encoder=first_letter_encoder(), num_clusters=num_clusters, dirpath=tmp_path, show_progress=False, **kwargs
    )


def test_numpy_scalars_are_plain_numbers_in_the_record_and_the_checkpoint(tmp_path):
    """A k from np.arange: the record holds 3, not "int64", and the checkpointed state is JSON (issue 64 M1)."""
    from lightning_div.measure.base import plain

    assert plain({"k": np.int64(3), "t": np.float32(0.5), "on": np.bool_(True), "v": np.arange(2)}) == {
        "k": 3,
        "t": 0.5,
        "on": True,
        "v": [0, 1],
    }
    assert type(plain(np.int64(3))) is int and type(plain(np.float64(0.25))) is float
    space = SemanticSpace(encoder="minilm", num_clusters=np.int64(3), kmeans_seed=np.int64(5))
    assert type(space.num_clusters) is int and type(space.kmeans_seed) is int
    group = GroupMeasure(space, vocab_size=np.int64(500))
    assert json.loads(json.dumps(group.state_dict()))["vocab_size"] == 500  # trainer_state.json can hold it
    assert json.dumps(group.settings())  # the settings, as the callback's checkpoint holds them
    record = RecordingReporter(tmp_path).record_settings(
        "x", [group, RUQMeasure(("I don't know.",), batch_size=np.int64(8))]
    )
    measures = json.loads(record.read_text())["measures"]
    assert measures[0]["settings"]["space"]["num_clusters"] == 3 and measures[0]["settings"]["vocab_size"] == 500
    assert measures[1]["settings"]["batch_size"] == 8


def test_the_record_states_the_k_measured_with_and_names_the_clusters_file(tmp_path):
    """Clusters given as a k = 3 file beside the default num_clusters = 20: the record says 3 and the file (M2)."""
    fitted = _topic_space(tmp_path / "fit", 3).fit(TOPIC_TEXTS)
    path = fitted.clusters_path
    assert path is not None and fitted.clusters.num_clusters == 3
    group = GroupMeasure(
        SemanticSpace(encoder=first_letter_encoder(), clusters=path, show_progress=False), vocab_size=9
    )
    group.prepare(None)
    space = group.settings()["space"]
    assert space["num_clusters"] == 3 and space["clusters"] == path
    # what a checkpoint is checked against stays the settings asked for (a resume must find its state)
    assert group.space.settings()["num_clusters"] == 20


def test_a_state_of_another_k_is_warned_about_and_refitted(tmp_path):
    """GroupMeasure.load_state_dict of a k = 3 clusters file into a k = 5 measure: warned, fitted with 5 (M2, H1)."""
    k3 = _topic_space(tmp_path / "fit", 3).fit(TOPIC_TEXTS)
    group = GroupMeasure(_topic_space(tmp_path / "resumed", 5), vocab_size=9)
    group.load_state_dict({"space": k3.state_dict(), "vocab_size": 9})
    with pytest.warns(UserWarning, match=r"num_clusters: file has 3, requested 5.*fitting them again"):
        group.prepare(TOPIC_TEXTS)
    assert group.space.clusters.num_clusters == 5
    assert group.measure(TOPIC_TEXTS[:4], 2)["sem_ent"] >= 0.0  # measured in the k = 5 clusters
    # the same k: the checkpoint's very file is read, nothing fitted
    same = GroupMeasure(_topic_space(tmp_path / "same", 3), vocab_size=9)
    same.load_state_dict({"space": k3.state_dict(), "vocab_size": 9})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.prepare(TOPIC_TEXTS)
    assert same.space.clusters_path == k3.clusters_path


def test_an_explicit_vocab_size_is_kept_on_resume_and_a_counted_one_restored():
    """vocab_size=5000 given, the checkpoint says 12: warned, 5000 kept; without one, the checkpoint's 12 (M6)."""
    given = GroupMeasure(SemanticSpace(encoder="minilm", num_clusters=4), vocab_size=5000)
    with pytest.warns(RuntimeWarning, match=r"vocab_size=5000 was given.*checkpoint.*12.*5000 is kept"):
        given.load_state_dict({"space": {}, "vocab_size": 12})
    assert given.vocab_size == 5000
    counted = GroupMeasure(SemanticSpace(encoder="minilm", num_clusters=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counted.load_state_dict({"space": {}, "vocab_size": 12})
    assert counted.vocab_size == 12


def test_an_empty_batch_is_undefined_not_a_perfect_value():
    """GroupMeasure.measure([], 2) and reference_nll of nothing are an error saying so, never zeros (L12)."""
    from lightning_div.measure.group import reference_nll

    group = GroupMeasure(FirstWordSpace(), lexical_metrics=["distinct_1"])
    group.prepare(["a x", "b y"])
    with pytest.raises(ValueError, match=r"no completions to measure.*undefined"):
        group.measure([], 2)
    with pytest.raises(ValueError, match=r"no completions.*reference NLL .*undefined"):
        reference_nll(object(), object(), [], [])


def test_nli_n_must_be_an_integer_and_mined_lengths_must_agree():
    """NLIMeasure(n="5") and n=2.5 are named; negatives_of with lengths that differ is named (L12)."""
    with pytest.raises(ValueError, match=r"n must be an integer >= 2.*'5'"):
        NLIMeasure(n="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"n must be an integer >= 2.*2\.5"):
        NLIMeasure(n=2.5)  # type: ignore[arg-type]
    assert type(NLIMeasure(n=np.int64(3)).n) is int
    miner = NegativeMiner(FirstWordSpace(), head_threshold=0.3)
    with pytest.raises(ValueError, match=r"3 contexts, 2 generated responses and 3 cluster ids"):
        miner.negatives_of([["q"]] * 3, ["a", "b"], np.array([0, 1, 2]))


def test_a_name_the_record_cannot_use_is_a_warning_not_the_end_of_the_run(tmp_path):
    """A file name with a null byte cannot be written: one warning, the run goes on (L13)."""
    reporter = RecordingReporter(tmp_path)
    with pytest.warns(RuntimeWarning, match=r"the settings record .* was not written"):
        assert reporter.record_settings("a\x00b", [MEASURES["ruq"]()]) is None
