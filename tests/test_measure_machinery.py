"""Measure's machinery: state declared once gives state_dict, a validating load_state_dict and reset; the
settings come from the constructor. The measures of the core keep 0.2's checkpoints and records."""

from __future__ import annotations

import json

import numpy as np
import pytest
from docs_blocks import ROOT, marked_block

from lightning_div.measure.base import Measure
from lightning_div.measure.dress import NegativeMiner
from lightning_div.measure.group import GroupMeasure
from lightning_div.measure.nli import NLIMeasure
from lightning_div.measure.ruq import RUQMeasure
from lightning_div.measure.semantic import SemanticMeasure
from lightning_div.semantic.space import SemanticSpace


def _count(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be an integer >= 0, got {value!r}")
    return value


class Longest(Measure):
    """The longest response seen so far, in words: a measure written as its computation."""

    def __init__(self, words_of: str = "split", scale=1.0, show_progress: bool = False) -> None:
        self.words_of, self.scale = words_of, scale
        self.add_state("longest", 0, _count)
        self.add_state("seen", [])

    def measure(self, responses):
        self.longest = max([self.longest, *(len(r.split()) for r in responses)])
        self.seen = [*self.seen, len(responses)]
        return {"longest": self.longest * self.scale}


def test_declared_state_round_trips_resets_and_refuses_a_damaged_checkpoint():
    measure = Longest()
    assert measure.state_dict() == {"longest": 0, "seen": []}
    assert measure.measure(["a b c", "d"]) == {"longest": 3.0}
    measure.measure(["a b"])
    state = measure.state_dict()
    assert state == {"longest": 3, "seen": [2, 1]} and json.loads(json.dumps(state)) == state
    fresh = Longest()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and fresh.measure(["a b c d"]) == {"longest": 4.0}
    # a damaged field is named, and nothing of the damaged state is restored
    with pytest.raises(ValueError, match=r"Longest state field 'longest': must be an integer >= 0, got -1"):
        fresh.load_state_dict({"longest": -1, "seen": []})
    with pytest.raises(ValueError, match=r"a Longest state must be a dict, got \[1\]"):
        fresh.load_state_dict([1])  # type: ignore[arg-type]
    assert fresh.state_dict() == {"longest": 4, "seen": [2, 1, 1]}
    fresh.load_state_dict({"seen": [5], "later": "a field of a later version"})  # missing: its default
    assert fresh.state_dict() == {"longest": 0, "seen": [5]}
    fresh.reset()
    assert fresh.state_dict() == {"longest": 0, "seen": []}
    other = Longest()  # the default is copied, never shared between measures or with reset
    fresh.seen.append(9)
    assert other.seen == [] and Longest().state_dict()["seen"] == []


def test_settings_are_the_constructor_arguments_as_held_now():
    measure = Longest("chars", scale=np.float32(0.5), show_progress=True)
    assert measure.settings() == {"words_of": "chars", "scale": 0.5}  # show_progress changes no number
    measure.words_of = "split"  # the attribute of that name, as it is now
    assert measure.settings() == {"words_of": "split", "scale": 0.5}
    assert Longest().settings() == {"words_of": "split", "scale": 1.0}  # the defaults too

    class Scaled(Longest):  # a subclass records its own constructor's arguments
        def __init__(self, factor: int = 3) -> None:
            super().__init__(scale=float(factor))

    assert Scaled(4).settings() == {"factor": 4}
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Longest(nope=1)  # type: ignore[call-arg]


def test_the_core_measures_keep_their_0_2_settings():
    """The run's record: the keys and values 0.2's hand-written settings() gave (NLI adds scorer_kwargs, batch_size)."""
    space = {"encoder": "minilm", "num_clusters": 4, "variance_kept": 0.9, "kmeans_seed": 27}
    semantic = SemanticMeasure(SemanticSpace(encoder="minilm", num_clusters=4), vocab_size=np.int64(50))
    assert semantic.settings() == {
        "space": space,
        "lexical_metrics": ["distinct_1", "distinct_2", "distinct_3", "avg_distinct", "ent_4", "ead"],
        "lexical_options": {},
        "vocab_size": 50,
        "generation_kwargs": {},
        "batch_size": 32,
    }
    assert RUQMeasure(("I don't know.",), reference="first", show_progress=True).settings() == {
        "idk_responses": ["I don't know."],
        "reference": "first",
        "shared_contexts": True,
        "batch_size": 32,
    }
    assert NLIMeasure(scorer="roberta-large-mnli", n=np.int64(2)).settings() == {
        "scorer": "roberta-large-mnli",
        "n": 2,
        "top_p": 0.9,
        "generation_kwargs": {},
        "threshold": 10,
        "max_samples": 20,
        "threshold_metric": "contradictions",
        "threshold_diversity_metric": None,
        "threshold_rank_by": "diversity",
        "threshold_generation": False,
        "scorer_kwargs": {},
        "batch_size": 32,
        "seed": 0,
    }
    miner = NegativeMiner(SemanticSpace(encoder="minilm", num_clusters=4), head_threshold=0.2)
    assert miner.settings() == {"space": space, "head_threshold": 0.2, "negative_weight": -1.0, "batch_size": 32}
    group = GroupMeasure(SemanticSpace(encoder="minilm", num_clusters=4), vocab_size=20, device="cpu")
    assert group.settings() == {
        "space": space,
        "lexical_metrics": ["distinct_1", "distinct_2", "ead"],
        "lexical_options": {},
        "vocab_size": 20,
        "ref_model": None,
        "ref_tokenizer": None,
    }


def test_0_2_checkpoints_load_and_give_the_same_state_back():
    """The state keys of 0.2: a resumed run reads a checkpoint 0.2 wrote."""
    old_semantic = {"gold_logged": True, "vocab_size": 12, "share_history": [[0, [0.5, 0.5, 0.0, 0.0]]]}
    semantic = SemanticMeasure(SemanticSpace(encoder="minilm", num_clusters=4))
    semantic.load_state_dict(old_semantic)
    assert semantic.state_dict() == old_semantic and semantic.share_history == [(0, [0.5, 0.5, 0.0, 0.0])]
    semantic.vocab_size = 30  # a V counted since: a checkpoint without one keeps it (0.2's rule)
    semantic.load_state_dict({"gold_logged": False})
    assert semantic.state_dict() == {"gold_logged": False, "vocab_size": 30, "share_history": []}
    with pytest.raises(ValueError, match=r"gold_logged must be true or false, got 'yes'"):
        semantic.load_state_dict({"gold_logged": "yes"})
    old_group = {"space": {"clusters_path": "/runs/c.npz"}, "vocab_size": 7}
    group = GroupMeasure(SemanticSpace(encoder="minilm", num_clusters=4))
    group.load_state_dict(old_group)
    assert group.state_dict() == old_group and group.space.clusters_path == "/runs/c.npz"
    with pytest.raises(ValueError, match=r"a GroupMeasure state must hold a 'space' dict, got None"):
        group.load_state_dict({"vocab_size": 7})
    with pytest.raises(ValueError, match=r"vocab_size 'x' is not an integer >= 1"):
        group.load_state_dict({"space": {}, "vocab_size": "x"})
    for stateless in (RUQMeasure(), NLIMeasure(), NegativeMiner(SemanticSpace(encoder="minilm"))):
        assert stateless.state_dict() == {}
        stateless.load_state_dict({"a field of a later version": 1})  # kept out, as 0.2's Stateless did
        assert stateless.ready


def test_a_new_measure_as_docs_measure_md_writes_it(capsys):
    """docs/measure.md's "A new measure" block, as printed."""
    text = (ROOT / "docs" / "measure.md").read_text(encoding="utf-8")
    code = marked_block(text, "<!-- new-measure -->", directly=True)
    exec(compile(code, str(ROOT / "docs" / "measure.md"), "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "{'longest': 3}",
        "{'longest': 3}",
        "{'longest': 4}",
        "{'words': 'split'}",
    ]
