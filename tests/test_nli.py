"""NLIScorer: batching, label mapping and pair order against a one-pair-at-a-time reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import chitchat_pairs, tiny_nli_model, tokenizer

from lightning_div.nli.scorer import NLIScorer, SetResult, mean_set_stats, ordered_pairs

# Shuffled on purpose: the scorer must read the order, not assume MNLI's.
# Model output column of each canonical class (entailment, neutral, contradiction), by hand from ID2LABEL.
CANONICAL_COLUMNS = [2, 0, 1]
NAMES = ("entailment", "neutral", "contradiction")


@pytest.fixture(scope="module")
def model():
    return tiny_nli_model()


@pytest.fixture(scope="module")
def texts():
    # Real responses of varied lengths (1 to many tokens), so batches need padding.
    out = [p.response for p in chitchat_pairs("train", 20)][:9]
    assert len({len(t) for t in out}) > 5
    return out


def reference(model, premises, hypotheses, max_length=256):
    """One unpadded forward per pair; columns picked by hand with CANONICAL_COLUMNS."""
    tok = tokenizer(True)
    probs = []
    with torch.inference_mode():
        for p, h in zip(premises, hypotheses):
            enc = tok(p, h, return_tensors="pt", truncation=True, max_length=max_length)
            probs.append(model(**enc).logits[0].softmax(-1)[CANONICAL_COLUMNS].numpy())
    probs = np.array(probs, dtype=np.float64).reshape(-1, 3)
    return [NAMES[k] for k in probs.argmax(1)], probs


def test_score_pairs_matches_one_pair_at_a_time(model, texts):
    premises = texts + [texts[0], ""]  # a repeated pair and an empty premise
    hypotheses = texts[::-1] + [texts[-1], "ok"]
    scorer = NLIScorer.from_model(model, tokenizer(True), batch_size=3, show_progress=False)
    labels, probs = scorer.score_pairs(premises, hypotheses)
    ref_labels, ref_probs = reference(model, premises, hypotheses)
    assert len(set(ref_labels)) >= 2  # the mapping is really exercised
    assert labels == ref_labels
    np.testing.assert_allclose(probs, ref_probs, atol=1e-5)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-6)
    # the repeated pair (texts[0], texts[-1]) is pair 0 and pair 9
    np.testing.assert_array_equal(probs[0], probs[9])


def test_score_sets_orders_pairs_i_major_over_all_sets_in_one_pass(model, texts):
    sets = [texts[:3], texts[3:7], [texts[7]], texts[7:9] + [texts[7]]]
    scorer = NLIScorer.from_model(model, tokenizer(True), batch_size=4, show_progress=False)
    rows = []
    hook = model.register_forward_hook(
        lambda m, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        with pytest.warns(UserWarning, match=r"1 response set\(s\) have fewer than 2 responses \(sets 2\)"):
            results = scorer.score_sets(sets)
    finally:
        hook.remove()
    # 6 + 12 + 0 + 6 ordered pairs; set 3 = (a, b, a) holds only 3 distinct pairs (a,b), (a,a), (b,a),
    # so 21 pairs reach the model, in batches of 4: 4+4+4+4+4+1
    assert rows == [4, 4, 4, 4, 4, 1]
    assert ordered_pairs(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for responses, result in zip(sets, results):
        assert result.responses == tuple(responses)
        pairs = ordered_pairs(len(responses))
        ref_labels, ref_probs = reference(model, [responses[i] for i, _ in pairs], [responses[j] for _, j in pairs])
        assert list(result.labels) == ref_labels
        np.testing.assert_allclose(result.probs.reshape(-1, 3), ref_probs.reshape(-1, 3), atol=1e-5)
        assert sum(result.counts.values()) == len(responses) * (len(responses) - 1)
    assert results[2].labels == () and results[2].diversity() == 0.0
    # duplicates are scored: set 3 = (a, b, a), pairs (0, 2) and (2, 0) are the identical pair (a, a)
    np.testing.assert_array_equal(results[3].probs[1], results[3].probs[4])


def test_score_is_nli_diversity_of_the_set(model, texts):
    scorer = NLIScorer.from_model(model, tokenizer(True), show_progress=False)
    result = scorer.score_sets([texts[:4]])[0]
    c = result.counts
    assert scorer.score(texts[:4]) == c["contradiction"] - c["entailment"]
    assert scorer.score(texts[:4], "neutral") == c["contradiction"] + c["neutral"] - c["entailment"]
    signs = np.array([{"entailment": -1, "neutral": 0, "contradiction": 1}[lab] for lab in result.labels])
    assert scorer.score(texts[:4], "confidence") == pytest.approx(float((signs * result.probs.max(1)).sum()))
    with pytest.raises(ValueError, match="variant='bogus'"):
        scorer.score(texts[:4], "bogus")


def test_figure_1_example_through_set_result():
    # Stasaski & Hearst, Figure 1: 3 responses, 6 pairs: 2 contradictions, 3 neutral, 1 entailment.
    labels = ("contradiction", "neutral", "contradiction", "neutral", "entailment", "neutral")
    probs = np.array(
        [[0.1, 0.1, 0.8], [0.2, 0.7, 0.1], [0.0, 0.4, 0.6], [0.3, 0.5, 0.2], [0.9, 0.1, 0.0], [0.2, 0.6, 0.2]]
    )
    result = SetResult(("a", "b", "c"), labels, probs)
    assert result.counts == {"entailment": 1, "neutral": 3, "contradiction": 2}
    assert result.diversity() == 1.0  # 2*1 + 3*0 + 1*(-1)
    assert result.diversity("neutral") == 4.0  # 2 + 3 - 1
    assert result.diversity("confidence") == pytest.approx(0.5)  # 0.8 + 0.6 - 0.9
    np.testing.assert_allclose(result.confidences, [0.8, 0.7, 0.6, 0.5, 0.9, 0.6])
    stats = result.stats()
    assert stats == pytest.approx(
        {
            "nli_div_baseline": 1.0,
            "nli_div_neutral": 4.0,
            "nli_div_confidence": 0.5,
            "nli_pairs_entailment": 1.0,
            "nli_pairs_neutral": 3.0,
            "nli_pairs_contradiction": 2.0,
        }
    )
    empty = SetResult(("x",), (), np.zeros((0, 3)))
    mean = mean_set_stats([result, empty.stats()])
    assert mean["nli_div_baseline"] == 0.5 and mean["nli_pairs_neutral"] == 1.5  # (1 + 0) / 2, (3 + 0) / 2


def test_sets_smaller_than_two_are_zero_with_a_warning(model):
    scorer = NLIScorer.from_model(model, tokenizer(True), show_progress=False)
    for responses in (["only one"], []):
        with pytest.warns(UserWarning, match="fewer than 2 responses"):
            assert scorer.score(responses) == 0.0
    with pytest.warns(UserWarning, match="fewer than 2"):
        assert scorer.score(["x"], "confidence") == 0.0


def test_mode_and_rng_are_restored(model, texts):
    scorer = NLIScorer.from_model(model, tokenizer(True), show_progress=False)
    expected = scorer.score_pairs(texts[:3], texts[3:6])[1]
    model.train()
    try:
        state = torch.get_rng_state()
        got = scorer.score_pairs(texts[:3], texts[3:6])[1]
        assert torch.equal(state, torch.get_rng_state())
        assert model.training
    finally:
        model.eval()
    np.testing.assert_array_equal(got, expected)  # dropout was off while scoring


@pytest.mark.parametrize(
    "id2label, num_labels, match",
    [
        ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, 3, r"config.id2label.*LABEL_0.*label_map=\{0: 'contradiction'"),
        ({0: "entailment", 1: "ENTAILMENT", 2: "neutral"}, 3, "does not map one-to-one"),
        ({0: "entailment", 1: "not_entailment"}, 2, "not_entailment"),
        ({0: "entailment", 1: "contradiction"}, 2, "2 outputs"),
    ],
)
def test_unmappable_labels_are_an_error(id2label, num_labels, match):
    model = tiny_nli_model(id2label, num_labels)
    with pytest.raises(ValueError, match=match):
        NLIScorer.from_model(model, tokenizer(True))


def test_label_map_overrides_a_generic_id2label(model, texts):
    generic = tiny_nli_model({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})  # same seed: same weights as `model`
    scorer = NLIScorer.from_model(
        generic, tokenizer(True), label_map={0: "Neutral", 1: "contradiction", 2: "ENTAILMENT"}, show_progress=False
    )
    shuffled = NLIScorer.from_model(model, tokenizer(True), show_progress=False)
    a, b = scorer.score_pairs(texts[:4], texts[4:8]), shuffled.score_pairs(texts[:4], texts[4:8])
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])


def test_loads_a_saved_model_by_path(model, texts, tmp_path):
    model.save_pretrained(tmp_path)
    tokenizer(True).save_pretrained(tmp_path)
    loaded = NLIScorer(str(tmp_path), batch_size=2, device="cpu", show_progress=False)
    assert not loaded.model.training
    ref_labels, ref_probs = reference(model, texts[:5], texts[2:7])
    labels, probs = loaded.score_pairs(texts[:5], texts[2:7])
    assert labels == ref_labels
    np.testing.assert_allclose(probs, ref_probs, atol=1e-5)


def test_truncates_long_pairs_to_max_length(model, texts):
    long = " ".join(texts * 20)
    scorer = NLIScorer.from_model(model, tokenizer(True), max_length=40, show_progress=False)
    labels, probs = scorer.score_pairs([long, texts[0]], [texts[1], long])
    ref_labels, ref_probs = reference(model, [long, texts[0]], [texts[1], long], max_length=40)
    assert labels == ref_labels
    np.testing.assert_allclose(probs, ref_probs, atol=1e-5)


def test_bad_input_names_the_field(model):
    scorer = NLIScorer.from_model(model, tokenizer(True), show_progress=False)
    with pytest.raises(TypeError, match="one str"):
        scorer.score("a single response")
    with pytest.raises(TypeError, match=r"sets\[1\]\[2\] is int"):
        scorer.score_sets([["a", "b"], ["c", "d", 3]])
    with pytest.raises(TypeError, match=r"sets\[0\] is a str"):
        scorer.score_sets(["abc"])
    with pytest.raises(ValueError, match="2 premises but 1 hypotheses"):
        scorer.score_pairs(["a", "b"], ["c"])
    with pytest.raises(TypeError, match=r"hypotheses\[0\] is NoneType"):
        scorer.score_pairs(["a"], [None])
    labels, probs = scorer.score_pairs([], [])
    assert labels == [] and probs.shape == (0, 3)
    with pytest.raises(ValueError, match="batch_size and max_length"):
        NLIScorer.from_model(scorer.model, tokenizer(True), batch_size=0)
    with pytest.raises(ValueError, match="pad token"):
        NLIScorer.from_model(scorer.model, tokenizer(False))


def test_progress_bar_can_be_shown(model, texts, capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars draw on a terminal only (_internal/bars.py)
    scorer = NLIScorer.from_model(model, tokenizer(True), batch_size=2)
    scorer.score_sets([texts[:3]])
    assert "NLI pairs" in capsys.readouterr().err
    scorer.score_sets([texts[:3]], show_progress=False)
    assert "NLI pairs" not in capsys.readouterr().err


class LabelScorer:
    """A duck-typed NLI scorer answering ``label`` for every pair (``count``: how many labels it returns)."""

    def __init__(self, label, count=None):
        self.label, self.count = label, count

    def score_pairs(self, premises, hypotheses, show_progress=None):
        n = len(premises) if self.count is None else self.count
        return [self.label] * n, np.full((n, 3), 1 / 3)


def test_every_reader_of_a_scorers_labels_checks_them():
    """Issue 54 M6: 'ENTAILMENT' made nothing equivalent (4 identical completions each scored 1.0), 'yes' did the
    same silently, too few labels raised IndexError, and nli="roberta-large-mnli" failed at the first call."""
    from lightning_div.integrations.trl.reward import SemanticGroupReward, group_labels
    from lightning_div.metrics.nli import checked_labels
    from lightning_div.nli.threshold import _PairCache

    same = ["ok", "ok", "ok", "ok"]
    assert group_labels(same, 4, equivalence="nli", nli=LabelScorer("ENTAILMENT")).tolist() == [0, 0, 0, 0]
    assert group_labels(same, 4, equivalence="nli", nli=LabelScorer("neutral")).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"nli.score_pairs label \[0\] = 'yes' is not one of \('entailment'"):
        group_labels(same, 4, equivalence="nli", nli=LabelScorer("yes"))
    with pytest.raises(ValueError, match="nli.score_pairs returned 1 labels for 12 pairs: it must return one per pair"):
        group_labels(same, 4, equivalence="nli", nli=LabelScorer("entailment", count=1))
    for call in (
        lambda: group_labels(same, 4, equivalence="nli", nli="roberta-large-mnli"),
        lambda: SemanticGroupReward(num_generations=4, equivalence="nli", nli="roberta-large-mnli"),
    ):
        with pytest.raises(
            ValueError, match=r"nli='roberta-large-mnli' is a model name, not an NLI scorer: pass nli=NLIScorer\("
        ):
            call()
    with pytest.raises(ValueError, match="nli must be an NLIScorer or any object with score_pairs"):
        SemanticGroupReward(num_generations=4, equivalence="nli", nli=object())
    # Diversity Threshold Generation's pair cache reads them the same way
    cache = _PairCache(LabelScorer("CONTRADICTION"))
    cache.add_sets([["a", "b"]])
    assert cache.set_result(["a", "b"]).counts["contradiction"] == 2
    with pytest.raises(ValueError, match="scorer.score_pairs returned 3 labels for 2 pairs"):
        _PairCache(LabelScorer("neutral", count=3)).add_sets([["a", "b"]])
    with pytest.raises(ValueError, match="must return a list of labels"):
        checked_labels("entailment", 1)
