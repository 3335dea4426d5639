"""Hand-computed values, invariants and error cases for the functional metric core."""

import math
import re

import numpy as np
import pytest
import torch

from lightning_div._internal.text import get_tokenizer
from lightning_div.metrics import (
    averaged_distinct,
    count_vocab,
    distinct_n,
    expectation_adjusted_distinct,
    lexical_scores,
    ngram_entropy,
    nli_diversity,
    ruq_score,
    semantic_entropy,
)
from lightning_div.metrics._states import (
    RUQ,
    AveragedDistinct,
    DistinctN,
    ExpectationAdjustedDistinct,
    NGramEntropy,
    SemanticEntropy,
)  # deprecated (docs/measure.md): tested until it goes

TEXTS = ["I do not know.", "I do not care!"]
# 13a + lowercase: ["i","do","not","know","."] and ["i","do","not","care","!"]


def test_default_tokeniser_is_lowercased_13a():
    assert get_tokenizer()("Hello, World! I don't know.") == ["hello", ",", "world", "!", "i", "don't", "know", "."]
    assert get_tokenizer("whitespace", lowercase=False)("Hi, you") == ["Hi,", "you"]
    assert get_tokenizer(lambda s: list(s))("Ab") == ["a", "b"]


def test_distinct_n_hand_computed():
    # unigrams: 10 tokens; unique {i, do, not, know, ., care, !} = 7 -> 7/10
    assert distinct_n(TEXTS, 1) == pytest.approx(7 / 10)
    # bigrams: 4 per text = 8; shared (i do), (do not) -> unique 8 - 2 = 6 -> 6/8
    assert distinct_n(TEXTS, 2) == pytest.approx(6 / 8)
    # trigrams: 3 per text = 6; shared (i do not) -> unique 5 -> 5/6
    assert distinct_n(TEXTS, 3) == pytest.approx(5 / 6)
    # n-grams never cross text boundaries: 5-grams: one per text, both unique -> 1.0
    assert distinct_n(TEXTS, 5) == 1.0


def test_distinct_n_edge_values():
    assert distinct_n([], 1) == 0.0
    assert distinct_n(["", "   "], 1) == 0.0
    assert distinct_n(["one two"], 3) == 0.0  # no trigrams, never NaN
    # identical texts: unique = tokens of one text, total = k times that
    for k in (1, 3, 10):
        assert distinct_n(["a b c d"] * k, 1) == pytest.approx(4 / (4 * k))
        assert distinct_n(["a b c d"] * k, 2) == pytest.approx(3 / (3 * k))


def test_averaged_distinct_is_mean_over_orders():
    # n=1: 7/10, n=2: 6/8, n=3: 5/6, n=4: 2 per text, (i do not know)/(i do not care) unique -> 4/4,
    # n=5: 2/2
    expected = (7 / 10 + 6 / 8 + 5 / 6 + 1 + 1) / 5
    assert averaged_distinct(TEXTS) == pytest.approx(expected)
    assert averaged_distinct(TEXTS, max_n=2) == pytest.approx((7 / 10 + 6 / 8) / 2)


def test_ngram_entropy_hand_computed():
    # unigrams of "a b a c": p(a)=1/2, p(b)=p(c)=1/4 -> H = -(1/2 ln 1/2 + 2 * 1/4 ln 1/4) = 1.5 ln 2
    assert ngram_entropy(["a b a c"], 1) == pytest.approx(1.5 * math.log(2))
    assert ngram_entropy(["a b a c"], 1, base=2) == pytest.approx(1.5)
    # uniform over k distinct bigrams -> ln k
    assert ngram_entropy(["a b", "c d", "e f"], 2) == pytest.approx(math.log(3))
    assert ngram_entropy(["same"], 1) == 0.0
    assert ngram_entropy([], 4) == 0.0


def test_ead_hand_computed():
    # tokens "a b c a": N = 3 unique, C = 4, V = 10:
    # E = 10 * (1 - 0.9^4) = 10 * (1 - 0.6561) = 3.439 -> 3 / 3.439
    assert expectation_adjusted_distinct(["a b c a"], 10) == pytest.approx(3 / 3.439)
    # V = 1: E = 1 * (1 - 0^C) = 1
    assert expectation_adjusted_distinct(["a a"], 1) == pytest.approx(1.0)
    assert expectation_adjusted_distinct([""], 50) == 0.0
    # as C grows, EAD -> N / V (paper property 2)
    assert expectation_adjusted_distinct(["a b " * 5000], 100) == pytest.approx(2 / 100, rel=1e-9)
    assert count_vocab(["A b", "a C ."]) == 4  # {a, b, c, .}


def test_semantic_entropy_hand_computed_and_invariants():
    # ids [0,0,1,2] over 4 bins: p = (1/2, 1/4, 1/4, 0) -> 1.5 ln 2
    assert semantic_entropy([0, 0, 1, 2], 4) == pytest.approx(1.5 * math.log(2))
    for k in (2, 5, 20):
        assert semantic_entropy(list(range(k)) * 3, k) == pytest.approx(math.log(k))  # uniform -> ln k
    assert semantic_entropy([3] * 9, 20) == 0.0
    assert semantic_entropy([], 20) == 0.0
    assert semantic_entropy(np.array([1.0, 2.0]), 3) == pytest.approx(math.log(2))


def test_ruq_hand_computed():
    # 4 prompts, reference wins on prompts 0 and 2 (ties do not count) -> 50
    assert ruq_score([-1.0, -3.0, -2.0, -2.5], [-2.0, -1.0, -4.0, -2.5]) == 50.0
    # several references: the lowest is used; prompt 0 min(-1, -5) = -5 < -2 -> not preferred
    assert ruq_score([[-1.0, -5.0], [-0.5]], [-2.0, -2.0]) == 50.0
    assert ruq_score([[-1.0, -1.5]], [-2.0]) == 100.0


def test_nli_diversity_paper_figure_1():
    # Figure 1: 2 contradictions, 3 neutrals, 1 entailment -> (2*1) + (3*0) + (1*-1) = 1
    labels = ["contradiction", "contradiction", "neutral", "neutral", "neutral", "entailment"]
    assert nli_diversity(labels) == 1.0
    # Neutral variant: 2 + 3 - 1 = 4
    assert nli_diversity(labels, "neutral") == 4.0
    # Confidence: 0.9 + 0.6 + 0*(...) - 0.7 = 0.8
    conf = [0.9, 0.6, 0.5, 0.4, 0.8, 0.7]
    assert nli_diversity(labels, "confidence", conf) == pytest.approx(0.8)
    assert nli_diversity(["CONTRADICTION", "Entailment"]) == 0.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: nli_diversity(["contradiction"], "bogus"), "variant='bogus'"),
        (lambda: nli_diversity(["maybe"]), "labels[0]"),
        (lambda: nli_diversity(["neutral"], "confidence"), "needs confidences"),
        (lambda: nli_diversity(["neutral", "neutral"], "confidence", [0.5]), "1 values but labels has 2"),
        (lambda: nli_diversity(["neutral"], "confidence", [1.5]), "not a probability"),
        (lambda: ruq_score([-1.0, -2.0], [-1.0]), "2 prompts but idk_scores has 1"),
        (lambda: ruq_score([], []), "at least one prompt"),
        (lambda: ruq_score([float("nan")], [-1.0]), "reference_scores[0]"),
        (lambda: ruq_score([[]], [-1.0]), "empty list of references"),
        (lambda: expectation_adjusted_distinct(["a"], 0), "vocab_size"),
        (lambda: semantic_entropy([0, -1], 3), "cluster_ids[1] = -1 is negative"),
        (lambda: semantic_entropy([0, 3], 3), ">= num_clusters=3"),
        (lambda: semantic_entropy([0], 0), "num_clusters"),
        (lambda: distinct_n(["a"], 0), "positive integer"),
        (lambda: distinct_n("a string", 1), "not a single string"),
        (lambda: distinct_n(["ok", None], 1), "texts[1] is NoneType"),
        (lambda: distinct_n(["ok"], 1, tokenizer="nope"), "tokenizer='nope'"),
    ],
)
def test_errors_name_the_problem(call, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)) as err:
        call()
    assert message in str(err.value)


CORPUS = [
    "Hello there, how are you?",
    "I'm fine. You?",
    "I don't know.",
    "I don't know.",
    "What a lovely day it is today",
    "yes",
    "",
    "I love going to the beach on sunny days!",
]


@pytest.mark.parametrize(
    "metric, fn",
    [
        (DistinctN(1), lambda t: distinct_n(t, 1)),
        (DistinctN(3), lambda t: distinct_n(t, 3)),
        (AveragedDistinct(), averaged_distinct),
        (NGramEntropy(4), lambda t: ngram_entropy(t, 4)),
        (NGramEntropy(2, base=2), lambda t: ngram_entropy(t, 2, base=2)),
        (ExpectationAdjustedDistinct(1000), lambda t: expectation_adjusted_distinct(t, 1000)),
    ],
)
def test_states_equal_functional_in_any_batching(metric, fn):
    for chunk in (CORPUS[:3], CORPUS[3:4], [], CORPUS[4:]):
        metric.update(chunk)
    assert float(metric.compute()) == pytest.approx(fn(CORPUS), abs=1e-12)
    metric.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert float(metric.compute()) == 0.0  # nothing counted: a defined 0, not NaN


def test_semantic_entropy_and_ruq_states():
    m = SemanticEntropy(4)
    m.update(torch.tensor([0, 0]))
    m.update([1, 2])
    assert float(m.compute()) == pytest.approx(1.5 * math.log(2))
    r = RUQ()
    r.update([-1.0, -3.0], [-2.0, -1.0])
    r.update([[-2.0, -1.0]], [-4.0])
    assert float(r.compute()) == pytest.approx(100 * 2 / 3)
    with pytest.raises(ValueError, match="no prompts"), pytest.warns(UserWarning):
        RUQ().compute()


def test_lexical_scores_by_name():
    out = lexical_scores(TEXTS, ["distinct_2", "ent_1", "avg_distinct", "ead"], vocab_size=10)
    assert out["distinct_2"] == distinct_n(TEXTS, 2)
    assert out["ent_1"] == ngram_entropy(TEXTS, 1)
    assert out["avg_distinct"] == averaged_distinct(TEXTS)
    assert out["ead"] == expectation_adjusted_distinct(TEXTS, 10)
    with pytest.raises(ValueError, match="unknown lexical metrics"):
        lexical_scores(TEXTS, ["distinct"])
    with pytest.raises(ValueError, match="needs a vocab_size"):
        lexical_scores(TEXTS, ["ead"])


# ---------------------------------------------------------------- the authors' tokenisations (issue 24, item 6)


def test_named_tokenisers_are_the_authors_with_their_case():
    text = "Hello!! :) I don't know. Yes."
    assert get_tokenizer("casual")(text) == ["Hello", "!", "!", ":)", "I", "don't", "know", ".", "Yes", "."]
    assert get_tokenizer("diversity_eval")(text) == ["Hello!!", ":)", "I", "don't", "know", "Yes"]
    assert get_tokenizer("13a_cased")(text) == ["Hello", "!", "!", ":", ")", "I", "don't", "know", ".", "Yes", "."]
    assert get_tokenizer("13a")(text) == [t.lower() for t in get_tokenizer("13a_cased")(text)]
    # lowercase=True/False overrides each name's own setting
    assert get_tokenizer("casual", lowercase=True)("Hi :D") == ["hi", ":d"]
    assert get_tokenizer("13a", lowercase=False)("Hi") == ["Hi"]
    # the real library, not a copy
    from nltk.tokenize.casual import casual_tokenize

    assert get_tokenizer("casual")("@bob soooo coool #tag <3") == casual_tokenize("@bob soooo coool #tag <3")
    with pytest.raises(ValueError, match="tokenizer='nltk' is unknown"):
        distinct_n(["a"], 1, tokenizer="nltk")


def _sem_ent_authors_ent(instances, k):
    """The Sem-Ent authors' EntKCalculator (codes/utils/ent.py): casual_tokenize, nltk ngrams, log2."""
    from collections import Counter

    from nltk.tokenize.casual import casual_tokenize
    from nltk.util import ngrams

    grams = [g for text in instances for g in ngrams(casual_tokenize(text), k)]
    return -sum(v / len(grams) * math.log2(v / len(grams)) for v in Counter(grams).values())


def test_ent_n_in_bits_with_casual_tokens_is_the_sem_ent_authors():
    # the authors' own assertion in codes/utils/ent.py
    instances = ["Hello", "Hello World", "World Hi"]
    expected = -(4 / 5 * math.log2(2 / 5) + 1 / 5 * math.log2(1 / 5))
    assert ngram_entropy(instances, 1, base=2, tokenizer="casual") == pytest.approx(expected, abs=1e-12)
    texts = ["Hello!! How are you? :)", "I don't know... I DON'T know", "hello how are you", ""]
    for k in (1, 2, 3):
        assert ngram_entropy(texts, k, base=2, tokenizer="casual") == pytest.approx(_sem_ent_authors_ent(texts, k))
    # one argument, by name too: the bits are the nats / ln 2
    got = lexical_scores(texts, ["ent_2"], tokenizer="casual", base=2)["ent_2"]
    assert got == pytest.approx(lexical_scores(texts, ["ent_2"], tokenizer="casual")["ent_2"] / math.log(2))
    # case kept: "Hello" and "hello" are two unigrams for the authors, one for our lowercased default
    assert distinct_n(["Hello", "hello"], 1, tokenizer="casual") == 1.0
    assert distinct_n(["Hello", "hello"], 1) == 0.5


def test_diversity_eval_split_reproduces_the_authors_example():
    # diversity_metrics.py's own example set: distinct-3 over lines_to_ngrams(n=3)
    resp_set = ["i am going", "i am going", "lets go i i"]
    assert distinct_n(resp_set, 3, tokenizer="diversity_eval") == pytest.approx(3 / 4)
    # n=1: 10 tokens, 5 unique; n=2: 7 bigrams, 5 unique; n=3: 3/4; n=4: 1/1; n=5: none -> 0
    assert averaged_distinct(resp_set, tokenizer="diversity_eval") == pytest.approx((1 / 2 + 5 / 7 + 3 / 4 + 1) / 5)
    # periods vanish ("going." is "going"), case is kept
    assert distinct_n(["I am going.", "i am going"], 1, tokenizer="diversity_eval") == pytest.approx(4 / 6)


def test_ead_case_sensitive_13a():
    # "The cat" / "the cat": C = 4 tokens; V = 10 -> expected unique 10 (1 - 0.9^4) = 3.439
    expected = 10 * (1 - 0.9**4)
    assert expectation_adjusted_distinct(["The cat", "the cat"], 10, tokenizer="13a_cased") == pytest.approx(
        3 / expected
    )
    assert expectation_adjusted_distinct(["The cat", "the cat"], 10) == pytest.approx(2 / expected)
    assert count_vocab(["The cat", "the cat"], tokenizer="13a_cased") == 3


def test_lowercase_is_honoured_by_the_ngram_cosine_similarity():
    from lightning_div.meta_eval import make_metrics, ngram_cosine_similarity

    # n=1: {I, am} vs {i, am}: cosine 1/2; n=2: nothing shared; n=3..5: no n-grams -> 0. Mean 0.1.
    assert ngram_cosine_similarity("I am", "i am", tokenizer="diversity_eval") == pytest.approx(0.1)
    assert ngram_cosine_similarity("I am", "i am", lowercase=False) == pytest.approx(0.1)
    # lowercased: identical at n = 1 and 2 -> (1 + 1) / 5
    assert ngram_cosine_similarity("I am", "i am") == pytest.approx(0.4)
    assert ngram_cosine_similarity("I am", "i am", tokenizer="diversity_eval", lowercase=True) == pytest.approx(0.4)
    cos = make_metrics(["cos_sim"], tokenizer="diversity_eval")["cos_sim"]
    assert cos(["I am", "i am"]) == pytest.approx(-0.1)


def test_utterance_level_distinct_is_the_distinct_n_package():
    from lightning_div.metrics import distinct_n_utterance

    def package_sentence_level(tokens, n):  # neural-dialogue-metrics/Distinct-N, distinct_n_sentence_level
        return len(set(zip(*(tokens[i:] for i in range(n))))) / len(tokens) if tokens else 0.0

    texts = ["a b a", "c", ""]
    # n=1: 2/3, 1/1, 0 (empty) -> 5/9; n=2: "a b a" 2 bigrams / 3 tokens, "c" 0 / 1, "" 0 -> 2/9
    assert distinct_n_utterance(texts, 1) == pytest.approx(5 / 9)
    assert distinct_n_utterance(texts, 2) == pytest.approx(2 / 9)
    assert distinct_n(texts, 2) == 1.0  # corpus level: 2 bigrams, both unique
    real = ["I do not know.", "I do not care!", "yes yes yes", "ok"]
    for n in (1, 2, 3):
        expected = np.mean([package_sentence_level(get_tokenizer()(t), n) for t in real])
        assert distinct_n_utterance(real, n) == pytest.approx(expected)
    assert distinct_n_utterance([], 2) == 0.0
    scores = lexical_scores(texts, ["distinct_2", "distinct_2_utt"])
    assert scores == pytest.approx({"distinct_2": 1.0, "distinct_2_utt": 2 / 9})
    with pytest.raises(ValueError, match="distinct_<n>_utt"):
        lexical_scores(texts, ["distinct_utt"])
