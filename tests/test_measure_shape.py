"""Every measurement of the core has the one Measure shape, and is usable without a trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest

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


class EchoSets:
    """A stand-in adapter: context "same" gets n copies of "a", any other n distinct responses."""

    def generate(self, contexts, num_return_sequences, **kwargs):
        n = num_return_sequences
        return [r for c in contexts for r in (["a"] * n if c[-1] == "same" else [f"r{i}" for i in range(n)])]


class EqualityScorer:
    """A stand-in NLI scorer: equal texts entail each other, different ones contradict (probability 1)."""

    def score_sets(self, sets, show_progress=None):
        from lightning_div.nli.scorer import SetResult, ordered_pairs

        out = []
        for responses in sets:
            labels = tuple(
                "entailment" if responses[i] == responses[j] else "contradiction"
                for i, j in ordered_pairs(len(responses))
            )
            probs = np.array([[1.0, 0, 0] if lab == "entailment" else [0, 0, 1.0] for lab in labels])
            out.append(SetResult(tuple(responses), labels, probs))
        return out


def test_nli_measure_without_a_trainer():
    """n = 3: "same" has 6 entailed ordered pairs (baseline -6), the other 6 contradictions (+6); the means."""
    measure = NLIMeasure(scorer=EqualityScorer(), n=3, batch_size=3)  # one context per batch
    measure.prepare()
    values = measure.measure(EchoSets(), [["hi", "same"], ["hi", "other"]])
    assert values["nli_div_baseline"] == 0.0 and values["nli_div_neutral"] == 0.0
    assert values["nli_div_confidence"] == 0.0
    assert values["nli_pairs_entailment"] == 3.0 and values["nli_pairs_contradiction"] == 3.0
    assert measure.measure(EchoSets(), [["other"]])["nli_div_baseline"] == 6.0
    with pytest.raises(ValueError, match="n must be >= 2"):
        NLIMeasure(n=1)
    with pytest.raises(ValueError, match=r"prepare\(\) must load the scorer"):
        NLIMeasure(scorer=EqualityScorer()).measure(EchoSets(), [["x"]])


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
