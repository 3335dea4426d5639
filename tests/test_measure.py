"""The measurement core without any trainer: hand-computed values through stand-in spaces and models."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from docs_blocks import marked_block

from lightning_div.measure import (
    FixedSample,
    GroupMeasure,
    RecordingReporter,
    RUQAlert,
    RUQMeasure,
    SemanticMeasure,
    guarded,
)
from lightning_div.pairs import DialoguePair

ROOT = Path(__file__).resolve().parents[1]


class WordClusters:
    """Clusters by a response's first word: 'a' -> 0, 'b' -> 1, anything else -> 2."""

    num_clusters = 3
    cards = None
    config_hash = "words"

    def histogram(self, ids):
        return np.bincount(np.asarray(ids, dtype=np.int64), minlength=3)


class WordSpace:
    """A stand-in SemanticSpace: no encoder, the cluster is the first word."""

    clusters_source = None

    def __init__(self):
        self.clusters = WordClusters()
        self.fitted, self.fit_calls = False, 0

    def fit(self, gold, **where):
        self.fitted, self.fit_calls = True, self.fit_calls + 1
        return self

    def assign(self, texts, device=None):
        first = [t.split()[0] if t.split() else "" for t in texts]
        return np.array([{"a": 0, "b": 1}.get(w, 2) for w in first], dtype=np.int64)


class ScriptedModel:
    """A stand-in adapter: every token of a response scores -1 if it is a reference, -2 if it says "know"."""

    def token_logprobs(self, contexts, responses):
        return [torch.full((len(r.split()),), -2.0 if "know" in r else -1.0) for r in responses]

    def generate(self, contexts, **kwargs):
        return ["a " + c[-1] for c in contexts]


SAMPLE = [DialoguePair(("hi",), "a one"), DialoguePair(("yo",), "b two"), DialoguePair(("hey",), "c three")]


def test_the_share_of_empty_replies_is_measured_beside_the_lexical_metrics():
    """Issue 63: 11 empty replies of 12 logged distinct-2 = 1.0 and warned only when all were empty."""
    measure = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_2"])
    measure.prepare(["a x", "b y"], SAMPLE)
    result = measure.scores(["", " ", "b z q"], SAMPLE)
    assert result.values["empty_share"] == pytest.approx(2 / 3)
    assert result.values["distinct_2"] == 1.0  # the one non-empty reply's: why the share stands beside it
    # the GRPO measure: the share of a step's completions, and the warning from half of them on, naming the front end
    group = GroupMeasure(WordSpace(), lexical_metrics=["distinct_2"])
    group.prepare(["a x"])
    with pytest.warns(
        RuntimeWarning, match=r"^Front: 3 of 4 responses generated for a step's completions are empty \(75%"
    ):
        values = group.measure(["", "", "", "a b c"], 2, who="Front")
    assert values["empty_share"] == 0.75 and values["distinct_2"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert group.measure(["", "a b", "b c", "a c"], 2)["empty_share"] == 0.25  # a quarter: no warning


def test_semantic_measure_hand_computed():
    measure = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"])
    measure.prepare(["a x", "b y"], SAMPLE)
    measure.prepare(["a x", "b y"], SAMPLE)  # once per run
    assert measure.space.fit_calls == 1 and measure.ready
    result = measure.scores(["a x", "a y", "b z"], SAMPLE)
    # clusters [0, 0, 1]: Sem-Ent = -(2/3 ln 2/3 + 1/3 ln 1/3); gold [0, 1, 2]: ln 3
    assert result.values["sem_ent"] == pytest.approx(-(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3))
    assert result.values["sem_ent_gold"] == pytest.approx(math.log(3))
    assert result.values["top_cluster_share"] == pytest.approx(2 / 3)
    assert result.values["distinct_1"] == pytest.approx(5 / 6)  # a, x, y, b, z of 6 tokens
    assert result.values["empty_share"] == 0.0
    assert result.shares == pytest.approx([2 / 3, 1 / 3, 0.0]) and result.gold_shares == pytest.approx([1 / 3] * 3)
    # JS divergence in bits between (2/3, 1/3, 0) and (1/3, 1/3, 1/3)
    p, q = np.array([2 / 3, 1 / 3, 0]), np.array([1 / 3] * 3)
    m = (p + q) / 2
    kl = lambda a, b: sum(x * math.log2(x / y) for x, y in zip(a, b) if x > 0)
    assert result.values["cluster_js"] == pytest.approx((kl(p, m) + kl(q, m)) / 2)
    again = measure.scores(["c", "c", "c"], SAMPLE)
    assert "sem_ent_gold" not in again.values and again.values["sem_ent"] == 0.0  # gold once per run
    with pytest.raises(ValueError, match="2 responses for 3 pairs"):
        measure.scores(["a", "b"], SAMPLE)


def test_semantic_measure_generates_keeps_its_history_and_restores_it():
    measure = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"], batch_size=2)
    measure.prepare(["a x"], SAMPLE)
    result = measure.measure(ScriptedModel(), SAMPLE, at=3)
    assert result.responses == ["a hi", "a yo", "a hey"] and result.values["sem_ent"] == 0.0
    measure.measure(ScriptedModel(), SAMPLE, at=3)  # a second measurement at the same step replaces it
    assert measure.share_history == [(3, [1.0, 0.0, 0.0])]
    other = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"])
    other.load_state_dict(measure.state_dict())
    assert other.state_dict() == measure.state_dict() and other.gold_logged
    for field, bad in (("gold_logged", "yes"), ("share_history", "garbage"), ("vocab_size", 0)):
        with pytest.raises(ValueError, match=field):
            other.load_state_dict({**measure.state_dict(), field: bad})
    with pytest.raises(ValueError, match="gold training responses"):
        SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"]).prepare(None, SAMPLE)


def test_ruq_hand_computed_and_an_empty_sample_is_one_error():
    ruq = RUQMeasure(("I don't know.",), shared_contexts=False)
    pairs = [DialoguePair(("q",), "fine thanks"), DialoguePair(("q",), "I know it", ("sure",))]
    values = ruq.measure(ScriptedModel(), pairs)
    # prompt 1: reference -1 > IDK -2; prompt 2: "lowest" reference is "I know it" at -2, not above -2
    assert values["ruq"] == values["ruq_idk1"] == pytest.approx(50.0)
    assert values["ruq_margin"] == pytest.approx(((-1 + 2) + (-2 + 2)) / 2)
    with pytest.raises(ValueError, match="RUQ sample is empty"):
        ruq.measure(ScriptedModel(), [])
    with pytest.raises(ValueError, match="idk_responses must be non-empty strings"):
        RUQMeasure(("",))


def test_ruq_alert_says_why_and_restores_its_last_value():
    alert = RUQAlert(warn_below=50.0, warn_drop=10.0)
    assert alert.check(72.0, "val/ruq") == []
    assert alert.check(60.0, "val/ruq") == ["val/ruq dropped from 72.0 to 60.0 (more than warn_drop = 10.0)"]
    with pytest.warns(RuntimeWarning, match=r"Probe: val/ruq = 40\.0 is below warn_below = 50\.0: .*'nope'"):
        assert alert.alert(40.0, "val/ruq", "Probe", "nope") == 1.0
    restored = RUQAlert(warn_drop=10.0)
    restored.load_state_dict(alert.last)
    assert restored.check(29.0, "x") == ["x dropped from 40.0 to 29.0 (more than warn_drop = 10.0)"]
    with pytest.raises(ValueError, match="a finite number or null"):
        restored.load_state_dict("abc")


def test_fixed_sample_is_one_rule():
    pairs = [DialoguePair(("c",), str(i)) for i in range(20)]
    sample = FixedSample(5, seed=1)
    first = sample.draw(pairs)
    assert sample.draw(pairs[:3]) == first  # drawn once
    restored = FixedSample(5, seed=99)
    restored.load_state_dict(sample.state_dict())
    assert restored.draw(pairs) == first  # restored indices win over the seed
    shrunk = FixedSample(5, seed=1)
    shrunk.load_state_dict([0, 30])
    assert shrunk.draw(pairs) == first  # the data shrank below them: drawn again
    for bad in (2.5, 0, True, "3"):
        with pytest.raises(ValueError, match="sample size must be an integer >= 1"):
            FixedSample(bad, seed=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="evaluation pairs are empty"):
        FixedSample(5, 0).draw([])


def test_guarded_applies_the_error_policy_and_times_the_block():
    said = []
    with guarded("warn", lambda key, msg: said.append((key, msg)), "Probe", "a thing", "step 4") as m:
        m.values["x"] = 1.0
    assert m.values == {"x": 1.0} and m.error is None and m.seconds >= 0.0 and said == []
    with guarded("warn", lambda key, msg: said.append((key, msg)), "Probe", "a thing", "step 4") as m:
        m.values["x"] = 1.0
        raise OSError("disk full")
    assert m.values == {} and isinstance(m.error, OSError)
    assert said[0][0] == "Probe:a thing:OSError" and said[0][1].startswith("Probe skipped a thing at step 4: OSError")
    with pytest.raises(RuntimeError, match=r"^stop$"), guarded("raise", lambda *_: None, "Probe", "a thing", "step 4"):
        raise RuntimeError("stop")
    with (
        pytest.raises(TypeError, match=r"^a programming error always propagates$"),
        guarded("warn", lambda *_: None, "Probe", "a thing", "step 4"),
    ):
        raise TypeError("a programming error always propagates")
    with pytest.raises(ValueError, match="on_error must be"), guarded("ignore", lambda *_: None, "P", "w", "s"):
        pass


def test_recording_reporter_keeps_scalars_and_writes_files(tmp_path):
    from lightning_div._internal.tracking import new_figure

    reporter = RecordingReporter(tmp_path, step=7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logged = reporter.scalars({"val/sem_ent": 1.5, "val/bad": float("nan")})
    assert logged == {"val/sem_ent": 1.5} and reporter.logged == [{"val/sem_ent": 1.5}]
    assert any("val/bad = nan is not finite" in str(w.message) for w in caught)  # said, never logged
    fig, _ = new_figure()
    assert reporter.figure("val/plot", fig) == tmp_path / "val_plot_step7.png"
    assert reporter.table("val/t", ["a"], [["x"]]).read_bytes() == b"a\r\nx\r\n"  # csv: CRLF rows
    assert reporter.once("k") and not reporter.once("k")


def _page_script(page: str) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return marked_block(text, "<!-- script -->", directly=True)


@pytest.mark.slow
def test_the_measure_page_script_runs_verbatim(tmp_path, monkeypatch, capsys):
    """docs/measure.md's script, as printed, measures a list of responses with no trainer.

    Compiled as printed and run in this process, in its own namespace (as test_hf_trl runs its page's): an
    error in it fails the test as its exit code did, and no fresh interpreter imports torch, transformers
    and lightning_div again (most of what is left is MiniLM embedding the 1,064 replies).
    """
    monkeypatch.chdir(tmp_path)  # the script's relative lightning_div_cache/ and measured/
    exec(compile(_page_script("measure.md"), str(ROOT / "docs" / "measure.md"), "exec"), {"__name__": "__main__"})
    values = dict(re.findall(r"^\s*(\w+)\s+([-\d.]+)$", capsys.readouterr().out, re.M))
    # half the replies replaced by "I don't know.": less diverse than the gold replies of the same contexts
    assert 0.0 < float(values["sem_ent"]) < float(values["sem_ent_gold"]) <= math.log(10) + 1e-9
    assert float(values["top_cluster_share"]) >= 0.5
    assert (tmp_path / "measured" / "val_cluster_histogram_step0.png").stat().st_size > 0


def test_semantic_measure_compares_each_sample_with_its_own_gold_responses():
    """Issue 54 H4: a second sample was compared with the first sample's gold clusters (cluster_js 1.0, not 0.0)."""
    measure = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"])
    measure.prepare(["a x"], SAMPLE)
    first = measure.scores(["a x", "b y", "c z"], SAMPLE)  # gold clusters [0, 1, 2]
    assert first.values["cluster_js"] == pytest.approx(0.0)
    other = [DialoguePair(("x",), "a p"), DialoguePair(("y",), "a q")]  # gold clusters [0, 0]
    second = measure.scores(["a 1", "a 2"], other)
    assert second.gold_ids.tolist() == [0, 0] and second.gold_shares == pytest.approx([1.0, 0.0, 0.0])
    assert second.values["cluster_js"] == pytest.approx(0.0)  # what a fresh measure gives
    fresh = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"])
    fresh.prepare(["a x"], other)
    assert fresh.scores(["a 1", "a 2"], other).values["cluster_js"] == second.values["cluster_js"]
    again = measure.scores(["b 1", "c 2", "a 3"], SAMPLE)  # back to the first sample: its own gold again
    assert again.gold_ids.tolist() == [0, 1, 2] and again.values["cluster_js"] == pytest.approx(0.0)


def test_semantic_measure_refuses_a_vocabulary_size_below_one_and_a_share_that_is_not_one():
    """Issue 54 L3 and L7: vocab_size=0 was accepted (every later measurement skipped); a NaN share was restored."""
    for bad in (0, -3, True, 2.5, "100"):
        with pytest.raises(ValueError, match="vocab_size must be an integer >= 1"):
            SemanticMeasure(WordSpace(), vocab_size=bad)  # type: ignore[arg-type]
    assert SemanticMeasure(WordSpace(), vocab_size=np.int64(7)).vocab_size == 7
    measure = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"])
    for bad in (float("nan"), 1.5, -0.1, float("inf")):
        with pytest.raises(ValueError, match=r"share_history at step 2: a share must be a number in \[0, 1\]"):
            measure.load_state_dict({"share_history": [[1, [0.5, 0.5]], [2, [bad, 0.5]]]})
    assert measure.share_history == []  # nothing of a damaged state is kept
    measure.load_state_dict({"share_history": [[2, [0.0, 1.0]]]})
    assert measure.share_history == [(2, [0.0, 1.0])]


def test_ruq_refuses_one_string_as_the_idk_list_and_alert_thresholds_that_are_not_points():
    """Issue 54 M8 and L7: idk_responses="Nope" became ['N', 'o', 'p', 'e']; RUQAlert took -5, NaN, 150 and '50'."""
    with pytest.raises(
        ValueError, match=r"idk_responses must be a list of strings, got one string 'Nope': pass \['Nope'\]"
    ):
        RUQMeasure("Nope")
    assert RUQMeasure(["Nope"]).idk_responses == ["Nope"]
    for name, bad in (("warn_drop", -5), ("warn_below", 150), ("warn_below", -1)):
        with pytest.raises(ValueError, match=f"{name} must be"):
            RUQAlert(**{name: bad})
    for name, bad in (("warn_drop", float("nan")), ("warn_drop", math.inf), ("warn_below", "50"), ("warn_below", True)):
        with pytest.raises(ValueError, match=f"{name} must be a number of RUQ points"):
            RUQAlert(**{name: bad})
    edges = RUQAlert(warn_below=np.float64(100.0), warn_drop=0)
    assert (edges.warn_below, edges.warn_drop) == (100.0, 0.0)
    assert edges.check(99.0, "r") == ["r = 99.0 is below warn_below = 100.0"]
    assert edges.check(98.5, "r") == [
        "r = 98.5 is below warn_below = 100.0",
        "r dropped from 99.0 to 98.5 (more than warn_drop = 0.0)",
    ]


def test_fixed_sample_refuses_a_seed_that_would_not_fix_it_and_damaged_indices():
    """Issue 54 M7, M11, L8: seed=None drew other pairs at every draw, seed='abc' was numpy's TypeError; [] and
    [3, 3, 3] were restored (an empty sample, a pair measured three times)."""
    pairs = [DialoguePair(("c",), str(i)) for i in range(20)]
    for bad in (None, "abc", -1, 1.5, True):
        with pytest.raises(ValueError, match="the sample's seed must be an integer >= 0"):
            FixedSample(8, seed=bad)  # type: ignore[arg-type]
    assert FixedSample(3, seed=np.int64(4)).draw(pairs) == FixedSample(3, seed=4).draw(pairs)
    from lightning_div.callbacks import SemanticDiversityMonitor

    with pytest.raises(ValueError, match="seed must be an integer >= 0, got None"):  # when built, not when measuring
        SemanticDiversityMonitor(seed=None)  # type: ignore[arg-type]
    sample = FixedSample(8, seed=0)
    with pytest.raises(ValueError, match="saved indices are empty"):
        sample.load_state_dict([])
    with pytest.raises(ValueError, match=r"saved indices repeat a pair, got \[3, 3, 3\]"):
        sample.load_state_dict([3, 3, 3])
    with pytest.raises(ValueError, match="a sample of size 2 cannot have 3 saved indices"):
        FixedSample(2, seed=0).load_state_dict([0, 1, 2])
    sample.load_state_dict([4, 1])  # fewer than size: the data had fewer pairs then
    assert [p.response for p in sample.draw(pairs)] == ["4", "1"]


def test_a_share_history_of_another_k_is_refused():
    """Issue 64 L09: five shares of 1.0 (another k, summing to 5) were restored; the collapse heatmap then failed."""
    measure = SemanticMeasure(WordSpace(), lexical_metrics=["distinct_1"])
    measure.prepare(["a x"], SAMPLE)  # k = 3
    with pytest.raises(ValueError, match=r"share_history at step 1: 5 shares, but the clusters are k = 3"):
        measure.load_state_dict({"share_history": [[1, [1.0] * 5]]})
    with pytest.raises(ValueError, match=r"share_history at step 1: the shares sum to 0\.75, not 1"):
        measure.load_state_dict({"share_history": [[1, [0.5, 0.25, 0.0]]]})
    assert measure.share_history == []
    measure.load_state_dict({"share_history": [[1, [0.5, 0.5, 0.0]], [2, [0.0, 0.0, 0.0]]]})  # none measured: 0s
    assert measure.share_history == [(1, [0.5, 0.5, 0.0]), (2, [0.0, 0.0, 0.0])]
    # before the clusters are read, the k asked for is the check
    from lightning_div.semantic.space import SemanticSpace

    unfitted = SemanticMeasure(SemanticSpace(encoder="minilm", num_clusters=4), lexical_metrics=["distinct_1"])
    with pytest.raises(ValueError, match=r"5 shares, but the clusters are k = 4"):
        unfitted.load_state_dict({"share_history": [[1, [0.2] * 5]]})


def test_an_explicit_vocab_size_is_not_replaced_on_resume():
    """Issue 64 M6: SemanticMeasure(vocab_size=5000).load_state_dict({"vocab_size": 12}) measured EAD with 12."""
    given = SemanticMeasure(WordSpace(), vocab_size=5000)
    with pytest.warns(RuntimeWarning, match=r"SemanticMeasure: vocab_size=5000 was given.*vocab_size=12"):
        given.load_state_dict({"vocab_size": 12})
    assert given.vocab_size == 5000 and given.state_dict()["vocab_size"] == 5000
    counted = SemanticMeasure(WordSpace())  # counted by the interrupted run: restored, so EAD stays comparable
    counted.load_state_dict({"vocab_size": 12})
    assert counted.vocab_size == 12


def test_the_ruq_alert_refuses_a_last_value_that_is_not_finite():
    """Issue 64 L08: a NaN last value was restored, after which a drop from 90 to 0 was not reported."""
    alert = RUQAlert(warn_drop=10.0)
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match=r"the last RUQ must be a finite number or null"):
            alert.load_state_dict(bad)
    assert alert.last is None
    alert.load_state_dict(90)
    assert alert.check(0.0, "val/ruq") == ["val/ruq dropped from 90.0 to 0.0 (more than warn_drop = 10.0)"]
