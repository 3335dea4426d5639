"""Diversity Threshold Generation: drops known by hand, the S cap, seeds, and NLI pairs scored once."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from helpers import tiny_nli_model, tokenizer
from monitor_setup import common, fit

from lightning_div.metrics import NegativeMeanCosine, averaged_distinct
from lightning_div.nli.scorer import NLIScorer
from lightning_div.nli.threshold import (
    ThresholdStep,
    derive_seed,
    diversity_threshold_generate,
    diversity_threshold_generate_many,
    threshold_stats,
)


class ScriptedGenerator:
    """generate() hands out each context's scripted responses in order and records every call."""

    def __init__(self, scripts: dict[str, list[str]]):
        self.queues = {c: list(r) for c, r in scripts.items()}
        self.calls = []

    def generate(self, contexts, num_return_sequences=1, seed=None, **kwargs):
        self.calls.append({"contexts": list(contexts), "k": num_return_sequences, "seed": seed, **kwargs})
        out = []
        for c in contexts:
            out += self.queues[c][:num_return_sequences]
            del self.queues[c][:num_return_sequences]
        return out


def value_sum(texts):
    """Stub set metric: responses are "name:value", the set's diversity is the sum of the values."""
    return float(sum(int(t.split(":")[1]) for t in texts))


SCRIPT = ["x:1", "y:2", "z:1", "w:3", "v:5", "u:4", "t:9"]


def test_drops_known_by_hand_until_the_threshold_is_passed():
    gen = ScriptedGenerator({"ctx": SCRIPT})
    result = diversity_threshold_generate(gen, "ctx", n=3, threshold=10, metric=value_sum, seed=7)
    # start [x1, y2, z1] = 4 <= 10. Subsets without position 0/1/2: 3, 2, 3 -> tie 0 and 2: drop the last, z:1.
    # [x1, y2, w3] = 6.  Subsets: 5, 4, 3 -> drop position 0 (x:1).
    # [v5, y2, w3] = 10, still <= 10.  Subsets: 5, 8, 7 -> drop position 1 (y:2).
    # [v5, u4, w3] = 12 > 10: done after 3 + 3 samples.
    # a callable threshold metric is also the diversity metric (the paper's distinct-n / Sent-BERT runs)
    assert result.steps == [
        ThresholdStep(2, "z:1", "w:3", 3.0, 6.0, 6.0),
        ThresholdStep(0, "x:1", "v:5", 5.0, 10.0, 10.0),
        ThresholdStep(1, "y:2", "u:4", 8.0, 12.0, 12.0),
    ]
    assert (result.start_criterion, result.end_criterion) == (4.0, 12.0)
    assert result.responses == ["v:5", "u:4", "w:3"]
    assert result.start_responses == ["x:1", "y:2", "z:1"]
    assert (result.start_diversity, result.end_diversity, result.samples_drawn, result.reached) == (4.0, 12.0, 6, True)
    assert result.start_set is None and result.end_set is None
    # one call for the initial n, then one response per round, each with its own derived seed
    assert [(c["k"], c["seed"]) for c in gen.calls] == [
        (3, derive_seed(7, 0)),
        (1, derive_seed(7, 1)),
        (1, derive_seed(7, 2)),
        (1, derive_seed(7, 3)),
    ]
    assert len({c["seed"] for c in gen.calls}) == 4
    assert all(c["do_sample"] is True and c["top_p"] == 0.9 for c in gen.calls)


def test_max_samples_caps_the_number_drawn():
    gen = ScriptedGenerator({"ctx": SCRIPT})
    result = diversity_threshold_generate(gen, "ctx", n=3, threshold=10, max_samples=5, metric=value_sum)
    # same drops as above, stopped after the 2nd replacement: 5 drawn, the set sums to 10, not > 10
    assert result.responses == ["v:5", "y:2", "w:3"]
    assert (result.end_diversity, result.samples_drawn, result.reached) == (10.0, 5, False)
    assert len(gen.calls) == 3
    gen = ScriptedGenerator({"ctx": SCRIPT})
    result = diversity_threshold_generate(gen, "ctx", n=3, threshold=10, max_samples=3, metric=value_sum)
    assert (result.samples_drawn, result.reached, result.steps) == (3, False, []) and len(gen.calls) == 1


def test_a_set_already_above_the_threshold_is_kept():
    gen = ScriptedGenerator({"ctx": ["a:5", "b:6", "c:7"]})
    result = diversity_threshold_generate(gen, "ctx", n=3, threshold=10, metric=value_sum)
    assert (result.responses, result.samples_drawn, result.reached, result.steps) == (
        ["a:5", "b:6", "c:7"],
        3,
        True,
        [],
    )
    assert len(gen.calls) == 1


def test_many_contexts_share_rounds_and_match_one_at_a_time():
    scripts = {"c1": SCRIPT, "c2": ["a:5", "b:6", "c:7"], "c3": ["p:0", "q:0", "r:0", "s:11"]}
    gen = ScriptedGenerator(scripts)
    results = diversity_threshold_generate_many(
        gen, list(scripts), n=3, threshold=10, metric=value_sum, show_progress=False
    )
    # c2 starts above; c3: [0, 0, 0] all subsets tie -> drop position 2, s:11 -> 11 > 10 after one round
    assert [c["contexts"] for c in gen.calls] == [["c1", "c2", "c3"], ["c1", "c3"], ["c1"], ["c1"]]
    assert results[2].responses == ["p:0", "q:0", "s:11"] and results[2].samples_drawn == 4
    for context, result in zip(scripts, results):
        alone = diversity_threshold_generate(ScriptedGenerator(scripts), context, n=3, threshold=10, metric=value_sum)
        assert alone == result
    assert threshold_stats(results) == pytest.approx(
        {
            "threshold_start_diversity": (4 + 18 + 0) / 3,
            "threshold_end_diversity": (12 + 18 + 11) / 3,
            "threshold_start_criterion": (4 + 18 + 0) / 3,
            "threshold_end_criterion": (12 + 18 + 11) / 3,
            "threshold_samples_drawn": (6 + 3 + 4) / 3,
            "threshold_reached": 1.0,
        }
    )


class SeededGenerator:
    """A sampler whose output depends only on (context, seed), like a seeded model."""

    words = ["hi", "no", "yes sure", "maybe later", "i like cats", "dogs are loud", "what", "sure thing", "ok"]

    def generate(self, contexts, num_return_sequences=1, seed=None, **kwargs):
        out = []
        for c in contexts:
            rng = random.Random(f"{c}|{seed}")
            out += [rng.choice(self.words) for _ in range(num_return_sequences)]
        return out


def test_deterministic_for_a_seed_and_global_rng_untouched():
    state, py_state, np_state = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    runs = [
        diversity_threshold_generate(
            SeededGenerator(), "hello", n=4, threshold=0.99, max_samples=12, metric=averaged_distinct, seed=s
        )
        for s in (3, 3, 4)
    ]
    assert runs[0] == runs[1]
    assert runs[0].responses != runs[2].responses or runs[0].samples_drawn != runs[2].samples_drawn
    assert 4 < runs[0].samples_drawn <= 12
    assert torch.equal(state, torch.get_rng_state()) and random.getstate() == py_state
    assert np.array_equal(np_state, np.random.get_state()[1])


class TopicScorer:
    """NLI stub: "A1" vs "A2" (same topic letter) neutral, identical text entailment, other topic contradiction."""

    def __init__(self):
        self.calls = []

    def score_pairs(self, premises, hypotheses, show_progress=None):
        self.calls.append(list(zip(premises, hypotheses)))
        labels, probs = [], []
        for p, h in zip(premises, hypotheses):
            k = 0 if p == h else (1 if p[0] == h[0] else 2)
            labels.append(("entailment", "neutral", "contradiction")[k])
            row = np.full(3, 0.1)
            row[k] = 0.8
            probs.append(row)
        return labels, np.array(probs)


def test_nli_metric_scores_only_pairs_with_the_new_response():
    gen = ScriptedGenerator({"ctx": ["A1", "A2", "A3", "A4", "B1", "A5", "C1"]})
    scorer = TopicScorer()
    result = diversity_threshold_generate(gen, "ctx", scorer=scorer)  # n=5, > 10 contradictions of 20
    # start A1 A2 A3 A4 B1: contradictions = 4 A x 1 B x 2 directions = 8 <= 10.
    #   without an A: 3 x 1 x 2 = 6; without B1: 0 -> four-way tie of the A's: drop the last, A4 (position 3).
    # A1 A2 A3 A5 B1: again 8, same tie -> drop A5 (position 3).
    # A1 A2 A3 C1 B1: 20 pairs - 3*2 same-topic pairs = 14 > 10.
    assert [(s.index, s.dropped, s.replacement, s.diversity) for s in result.steps] == [
        (3, "A4", "A5", 8.0),
        (3, "A5", "C1", 14.0),
    ]
    assert (result.start_diversity, result.end_diversity, result.samples_drawn, result.reached) == (8.0, 14.0, 7, True)
    assert [len(c) for c in scorer.calls] == [20, 8, 8]
    for new, call in zip(["A5", "C1"], scorer.calls[1:]):
        others = ["A1", "A2", "A3", "B1"]
        assert sorted(call) == sorted([(new, o) for o in others] + [(o, new) for o in others])
    all_pairs = [p for c in scorer.calls for p in c]
    assert len(all_pairs) == len(set(all_pairs))  # nothing scored twice
    assert result.start_set.counts == {"entailment": 0, "neutral": 12, "contradiction": 8}
    assert result.end_set.counts == {"entailment": 0, "neutral": 6, "contradiction": 14}
    assert result.end_set.diversity("baseline") == 14.0 and result.end_set.responses == tuple(result.responses)


def test_nli_variants_as_the_metric():
    gen = ScriptedGenerator({"ctx": ["A1", "A1", "B1", "A2"]})
    # baseline of [A1, A1, B1]: (A1,A1) x2 entailment -2, A1<->B1 4 contradictions +4 -> 2 <= 2
    #   without A1(0): 2 contradictions; without A1(1): 2; without B1: -2 -> drop position 1 (last of the tie)
    # [A1, A2, B1]: A1<->A2 2 neutrals (0) + 4 contradictions with B1 -> 4 > 2
    result = diversity_threshold_generate(gen, "ctx", scorer=TopicScorer(), n=3, threshold=2, metric="baseline")
    assert result.responses == ["A1", "A2", "B1"]
    assert (result.start_diversity, result.end_diversity) == (2.0, 4.0)
    gen = ScriptedGenerator({"ctx": ["A1", "A1", "B1", "A2"]})
    result = diversity_threshold_generate(gen, "ctx", scorer=TopicScorer(), n=3, threshold=1.5, metric="confidence")
    # confidence = 0.8 x baseline here: start 1.6 > 1.5, no resampling; reported in Baseline NLI Diversity: 2
    assert result.start_criterion == pytest.approx(1.6) and result.samples_drawn == 3
    assert result.start_diversity == result.end_diversity == 2.0


def test_nli_path_with_a_real_model_reuses_consistent_predictions():
    model = tiny_nli_model()
    scorer = NLIScorer.from_model(model, tokenizer(True), batch_size=8, show_progress=False)
    rows = []
    hook = model.register_forward_hook(
        lambda m, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        result = diversity_threshold_generate(
            SeededGenerator(), "hello", scorer=scorer, n=4, threshold=6, max_samples=10, seed=2
        )
    finally:
        hook.remove()
    assert result.steps and result.reached == (result.end_diversity > 6)
    assert result.reached or result.samples_drawn == 10
    # every distinct (premise, hypothesis) of every set the loop held went through the model exactly once
    current, pairs = list(result.start_responses), set()
    for step in [None] + result.steps:
        if step is not None:
            current[step.index] = step.replacement
        pairs |= {(current[i], current[j]) for i in range(4) for j in range(4) if i != j}
    assert current == result.responses and sum(rows) == len(pairs)
    fresh = scorer.score_sets([result.responses])[0]
    assert result.end_set.labels == fresh.labels
    np.testing.assert_allclose(result.end_set.probs, fresh.probs, atol=1e-5)
    assert result.end_diversity == fresh.counts["contradiction"]


def test_negative_mean_cosine_by_hand_and_encodes_each_text_once():
    vectors = {"a": [1.0, 0.0], "b": [0.0, 2.0], "c": [3.0, 3.0]}
    seen = []

    def encode(texts):
        seen.append(list(texts))
        return np.array([vectors[t] for t in texts])

    metric = NegativeMeanCosine(encode)
    # cos(a,b) = 0, cos(a,c) = cos(b,c) = 1/sqrt(2): mean over the 3 pairs = sqrt(2)/3
    assert metric(["a", "b", "c"]) == pytest.approx(-math.sqrt(2) / 3)
    assert metric(["a", "c"]) == pytest.approx(-1 / math.sqrt(2))
    assert metric(["a", "a"]) == pytest.approx(-1.0)
    with pytest.warns(RuntimeWarning, match="set of 1 response"):  # no pair: undefined, not 0.0
        assert math.isnan(metric(["b"]))
    assert seen == [["a", "b", "c"]]
    with pytest.raises(ValueError, match="zero or non-finite"):
        NegativeMeanCosine(lambda t: np.zeros((len(t), 2)))(["x", "y"])
    with pytest.raises(ValueError, match="shape"):
        NegativeMeanCosine(lambda t: np.zeros(3))(["x", "y"])


def test_embedding_metric_drives_the_loop():
    vectors = {"a": [1.0, 0.0], "a2": [1.0, 0.1], "b": [0.0, 1.0], "c": [-1.0, 0.2]}
    gen = ScriptedGenerator({"ctx": ["a", "a2", "b", "c"]})
    metric = NegativeMeanCosine(lambda t: np.array([vectors[x] for x in t]))
    result = diversity_threshold_generate(gen, "ctx", n=3, threshold=0.0, metric=metric)
    # [a, a2, b]: cos(a,a2)=0.995, cos(a,b)=0, cos(a2,b)=0.0995 -> -mean = -0.365 <= 0.
    #   without a: -cos(a2,b) = -0.0995; without a2: -cos(a,b) = 0 (best); -> drop a2, c takes its place.
    # [a, c, b]: cos(a,c) = -0.98, cos(a,b) = 0, cos(c,b) = 0.196 -> -mean = 0.26 > 0
    assert result.responses == ["a", "c", "b"] and result.steps[0].dropped == "a2" and result.reached


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(metric="contradictions"), ValueError, "needs an NLI scorer"),
        (dict(metric="entropy", scorer=TopicScorer()), ValueError, "metric='entropy' is unknown"),
        (dict(metric=value_sum, n=1), ValueError, "n must be an integer >= 2"),
        (dict(metric=value_sum, n=5, max_samples=4), ValueError, "max_samples must be an integer >= n=5"),
        (dict(metric=value_sum, seed=-1), ValueError, "seed must be a non-negative integer"),
        (dict(metric=value_sum, threshold=float("nan")), ValueError, "threshold must be a finite"),
        (dict(metric=lambda t: float("nan")), ValueError, "metric returned nan"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    gen = ScriptedGenerator({"ctx": SCRIPT})
    with pytest.raises(error, match=match):
        diversity_threshold_generate(gen, "ctx", **{"n": 3, **kwargs})


def test_adapter_returning_the_wrong_number_is_an_error():
    gen = ScriptedGenerator({"ctx": ["a:1", "b:1"]})  # only 2 of the 3 asked for
    with pytest.raises(ValueError, match=r"returned 2 responses for 1 context\(s\) x num_return_sequences=3"):
        diversity_threshold_generate(gen, "ctx", n=3, metric=value_sum)


def test_nli_results_compare_equal_across_batched_and_single_runs():
    scripts = {"c1": ["A1", "A2", "A3", "B1"], "c2": ["B1", "B2", "C1"]}
    many = diversity_threshold_generate_many(
        ScriptedGenerator(scripts), list(scripts), scorer=TopicScorer(), n=3, threshold=3, show_progress=False
    )
    # c1: [A1, A2, A3] 0 contradictions, every subset 0 -> drop A3 (last), B1: 2 x 2 = 4 > 3.
    # c2: [B1, B2, C1]: B1<->C1, B2<->C1 = 4 > 3 at the start.
    assert [(r.start_diversity, r.end_diversity, r.samples_drawn) for r in many] == [(0.0, 4.0, 4), (4.0, 4.0, 3)]
    for context, result in zip(scripts, many):
        alone = diversity_threshold_generate(
            ScriptedGenerator(scripts), context, scorer=TopicScorer(), n=3, threshold=3
        )
        assert alone == result and alone.end_set == result.end_set
    assert many[0].end_set != many[1].end_set


def test_paper_procedure_ranks_and_reports_with_baseline_and_stops_on_contradictions():
    """Stasaski & Hearst section 5 / Table 4, worked by hand with the TopicScorer stub
    (same text: entailment, same letter: neutral, other letter: contradiction).

    Start [A2, A2, A1]: pairs A2-A2 entail x2, A2-A1 neutral x4 -> 0 contradictions (<= 2, resample),
    Baseline NLI Diversity = -2. Subsets without position 0 / 1 / 2: [A2, A1] (baseline 0, 0 contradictions),
    [A2, A1] (0, 0), [A2, A2] (-2, 0).
      by Baseline (default): best 0 at positions 0 and 1 -> drop the last, position 1 -> [A2, B1, A1]:
        4 contradictions (> 2, done), baseline 4 - 0 = 4.
      by the threshold metric: three-way tie at 0 -> drop position 2 (A1) -> [A2, A2, B1]:
        4 contradictions, baseline 4 - 2 = 2.
    """
    script = {"ctx": ["A2", "A2", "A1", "B1"]}
    paper = diversity_threshold_generate(ScriptedGenerator(script), "ctx", scorer=TopicScorer(), n=3, threshold=2)
    assert paper.responses == ["A2", "B1", "A1"]
    assert paper.steps == [ThresholdStep(1, "A2", "B1", 0.0, 4.0, 4.0)]
    assert (paper.start_diversity, paper.end_diversity) == (-2.0, 4.0)  # Baseline NLI Diversity, can be < 0
    assert (paper.start_criterion, paper.end_criterion, paper.reached, paper.samples_drawn) == (0.0, 4.0, True, 4)

    old = diversity_threshold_generate(
        ScriptedGenerator(script), "ctx", scorer=TopicScorer(), n=3, threshold=2, rank_by="threshold"
    )
    assert old.responses == ["A2", "A2", "B1"]
    assert old.steps == [ThresholdStep(2, "A1", "B1", 0.0, 2.0, 4.0)]
    assert (old.start_diversity, old.end_diversity, old.start_criterion, old.end_criterion) == (-2.0, 2.0, 0.0, 4.0)

    stats = threshold_stats([paper, old])  # what the monitor logs: both metrics
    assert stats == pytest.approx(
        {
            "threshold_start_diversity": -2.0,
            "threshold_end_diversity": 3.0,
            "threshold_start_criterion": 0.0,
            "threshold_end_criterion": 4.0,
            "threshold_samples_drawn": 4.0,
            "threshold_reached": 1.0,
        }
    )

    # any other diversity metric: here the neutral variant ranks (A2-A1 neutral +1) and reports
    neutral = diversity_threshold_generate(
        ScriptedGenerator(script), "ctx", scorer=TopicScorer(), n=3, threshold=2, diversity_metric="neutral"
    )
    assert (neutral.start_diversity, neutral.end_diversity) == (-2.0 + 4.0, 4.0 + 2.0)
    with pytest.raises(ValueError, match="rank_by='best' is unknown"):
        diversity_threshold_generate(ScriptedGenerator(script), "ctx", scorer=TopicScorer(), rank_by="best")
    with pytest.raises(ValueError, match="diversity_metric='baseline' needs an NLI scorer"):
        diversity_threshold_generate(ScriptedGenerator(script), "ctx", metric=value_sum, diversity_metric="baseline")


def test_set_metric_pieces_live_in_metrics_sets_without_aliases_at_their_old_homes():
    # they moved beside the other metrics (meta_eval and threshold both import them: no cycle); the
    # public facades (lightning_div.metrics, lightning_div.meta_eval) give the same objects, not copies,
    # and the threshold module no longer carries them as aliases (0.2.0)
    import lightning_div.meta_eval as meta_eval
    import lightning_div.metrics as metrics
    import lightning_div.nli.threshold as threshold
    from lightning_div.metrics import sets

    assert sets.NegativeMeanCosine is metrics.NegativeMeanCosine is meta_eval.NegativeMeanCosine
    assert sets.SetMetric is meta_eval.SetMetric
    assert not hasattr(threshold, "NegativeMeanCosine") and not hasattr(threshold, "fewer_than_two")
    assert sets.NegativeMeanCosine.__module__ == "lightning_div.metrics.sets"


def test_failing_threshold_generation_keeps_nli_diversity(tmp_path, monkeypatch):
    from helpers import tiny_nli_model, tokenizer
    from monitor_setup import VAL

    from lightning_div.callbacks import NLIDiversityMonitor, ThresholdGeneration
    from lightning_div.nli import threshold
    from lightning_div.nli.scorer import NLIScorer

    def broken(*args, **kwargs):
        raise RuntimeError("no more samples")

    monkeypatch.setattr(threshold, "diversity_threshold_generate_many", broken)
    scorer = NLIScorer.from_model(tiny_nli_model(), tokenizer(True), show_progress=False)  # with a pad token
    cb = NLIDiversityMonitor(
        scorer=scorer,
        num_contexts=2,
        n=2,
        threshold_generation=ThresholdGeneration(max_samples=3),
        val_pairs=VAL,
        **common(tmp_path),
    )
    with pytest.warns(
        RuntimeWarning,
        match=r"Diversity Threshold Generation failed at epoch 0: "
        r"RuntimeError\('no more samples'\)",
    ):
        fit(tmp_path, [cb])
    logged = {k: v for row in cb.history for k, v in row.items()}
    assert "val/nli_div_baseline" in logged and -2 <= logged["val/nli_div_baseline"] <= 2  # n=2: 2 ordered pairs
    assert "val/threshold_start_diversity" not in logged
