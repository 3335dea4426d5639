"""Lexical diversity of a set of responses: distinct-n, averaged distinct, Ent-n, EAD.

Distinct-n exists at two levels in the literature, and both are here by name:

* corpus level (``distinct_n``, names ``distinct_<n>``; Li et al. 2016, the Sem-Ent
  paper, EAD, Tevet & Berant within each set): #unique n-grams / #n-grams counted over
  the whole set of responses;
* utterance level (``distinct_n_utterance``, names ``distinct_<n>_utt``; as Topical-Chat
  reports it and as the neural-dialogue-metrics/Distinct-N package's
  ``distinct_n_corpus_level`` computes it): each response's #unique n-grams / #tokens,
  averaged over responses.

Every other metric is corpus level. All share the tokenisers of :mod:`lightning_div._internal.text`
(``tokenizer=`` by name: "13a" lowercased by default; "casual", "diversity_eval",
"13a_cased" are the authors' own). Where there is nothing to count (no n-grams at all:
an empty set, or only empty / too-short responses) the value is a defined 0.0, as in the
authors' code, not NaN.

References: distinct-n (Li et al., 2016); averaged distinct over n=1..5 (Tevet &
Berant, 2021); Ent-n (Serban et al., 2017; Zhang et al., 2018; in bits in the Sem-Ent
paper: ``base=2``); EAD / NewDistinct (Liu et al., 2022, "Rethinking and Refining the
Distinct Metric").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from lightning_div import keys
from lightning_div._internal.text import TokenizerSpec, tokenize_all


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return int(n)


def iter_ngrams(tokens: Sequence[str], n: int) -> Iterable[tuple[str, ...]]:
    """The n-grams of one token list (none when it is shorter than n)."""
    return zip(*(tokens[i:] for i in range(n)))


def ngram_counts(token_lists: Iterable[Sequence[str]], n: int) -> Counter:
    """Frequency of every n-gram over all token lists; n-grams never cross texts."""
    counts: Counter = Counter()
    for tokens in token_lists:
        counts.update(iter_ngrams(tokens, n))
    return counts


# Formulas on counts: shared by the functions below and the DDP-mergeable states.


def distinct_from_counts(num_unique: int, num_total: int) -> float:
    """unique / total; 0.0 when there is nothing to count (a defined value, as in the authors' code)."""
    return float(num_unique) / float(num_total) if num_total > 0 else 0.0


def entropy_from_counts(counts: Iterable[float], base: float = math.e) -> float:
    """Shannon entropy of the distribution given by (unnormalised) counts; 0.0 for no counts at all."""
    c = np.asarray(list(counts) if not isinstance(counts, np.ndarray) else counts, dtype=np.float64)
    c = c[c > 0]
    total = c.sum()
    if total <= 0:
        return 0.0
    p = c / total
    h = float(-(p * np.log(p)).sum())
    if base != math.e:
        if base <= 0 or base == 1:
            raise ValueError(f"base must be positive and != 1, got {base}")
        h /= math.log(base)
    return h if h > 0 else 0.0  # a single outcome gives -0.0; report a plain 0.0


def ead_from_counts(num_unique: int, num_tokens: int, vocab_size: int) -> float:
    """EAD = N / (V * (1 - ((V-1)/V)^C)); 0.0 for C = 0."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
    if num_tokens <= 0:
        return 0.0
    # ((V-1)/V)^C computed as exp(C * log1p(-1/V)) so large C and V stay accurate.
    expected_unique = vocab_size * -math.expm1(num_tokens * math.log1p(-1.0 / vocab_size)) if vocab_size > 1 else 1.0
    return float(num_unique) / expected_unique


# Functional API.


def distinct_n(texts: Sequence[str], n: int, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None) -> float:
    """Corpus-level distinct-n: #unique n-grams / #n-grams over the whole set (Li et al., 2016).

    Corpus level: the n-grams of all texts are pooled (they never cross texts), then the
    distinct ones are counted.

    Args:
        texts: the responses.
        n: the n-gram order, >= 1.
        tokenizer: a name of :mod:`lightning_div._internal.text` (``"13a"``, sacrebleu, the default; the
            authors' ``"casual"``, ``"diversity_eval"``, ``"13a_cased"``; ``"whitespace"``), a
            ``str -> list[str]`` callable or a Hugging Face tokenizer.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.

    Returns:
        The ratio in [0, 1]; 0.0 when the texts have no n-gram at all.

    Raises:
        ValueError: ``n`` is not a positive integer.
        TypeError: an element of ``texts`` is not a string (the message names its index).

    Examples:
        7 distinct bigrams of 10 (``i don't``, ``don't know``, ``know .`` twice):

        >>> distinct_n(["I don't know.", "I don't know.", "Where are you from?"], 2)
        0.7
        >>> distinct_n(["ok"], 2)  # no bigram
        0.0
    """
    n = _check_n(n)
    counts = ngram_counts(tokenize_all(texts, tokenizer, lowercase), n)
    return distinct_from_counts(len(counts), sum(counts.values()))


def distinct_n_utterance(
    texts: Sequence[str], n: int, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None
) -> float:
    """Utterance-level distinct-n: the mean over responses of #unique n-grams / #tokens of that response.

    The neural-dialogue-metrics/Distinct-N definition (``distinct_n_sentence_level`` averaged
    by ``distinct_n_corpus_level``), which Topical-Chat-style tables report: the denominator
    is the response's number of *tokens*, not of n-grams, so for n > 1 a response's value is
    below 1 even when none of its n-grams repeats ("a b c": distinct-2 = 2/3).

    Args:
        texts: the responses.
        n: the n-gram order, >= 1.
        tokenizer: as in :func:`distinct_n`.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.

    Returns:
        The mean in [0, 1]; a response without tokens counts 0.0, an empty set is 0.0.

    Examples:
        "a b a": 2 distinct bigrams / 3 tokens; "c": no bigram / 1 token:

        >>> round(distinct_n_utterance(["a b a", "c"], 2), 4)
        0.3333
        >>> distinct_n(["a b a", "c"], 2)  # corpus level: 2 bigrams, both distinct
        1.0
    """
    n = _check_n(n)
    tokens = tokenize_all(texts, tokenizer, lowercase)
    if not tokens:
        return 0.0
    return float(np.mean([len(set(iter_ngrams(t, n))) / len(t) if t else 0.0 for t in tokens]))


def averaged_distinct(
    texts: Sequence[str], max_n: int = 5, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None
) -> float:
    """Averaged distinct: the mean of corpus-level distinct-n for n = 1..max_n (Tevet & Berant, 2021).

    Their own split is ``tokenizer="diversity_eval"``.

    Args:
        texts: the responses.
        max_n: the highest n-gram order (the paper: 5).
        tokenizer: a name of :mod:`lightning_div._internal.text` (``"13a"``, sacrebleu, the default; the
            authors' ``"casual"``, ``"diversity_eval"``, ``"13a_cased"``; ``"whitespace"``), a
            ``str -> list[str]`` callable or a Hugging Face tokenizer.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.

    Returns:
        The mean in [0, 1].

    Examples:
        distinct-1 = 3/4 and distinct-2 = 2/2:

        >>> averaged_distinct(["a b", "a c"], max_n=2)
        0.875
    """
    max_n = _check_n(max_n)
    tokens = tokenize_all(texts, tokenizer, lowercase)
    values = []
    for n in range(1, max_n + 1):
        counts = ngram_counts(tokens, n)
        values.append(distinct_from_counts(len(counts), sum(counts.values())))
    return float(np.mean(values))


def ngram_entropy(
    texts: Sequence[str], n: int, base: float = math.e, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None
) -> float:
    """Ent-n: the entropy of the n-gram frequency distribution (Zhang et al., 2018).

    Args:
        texts: the responses.
        n: the n-gram order, >= 1.
        base: the logarithm's base: e (nats, the default) or 2 (bits, as the Sem-Ent paper's tables;
            their code also tokenises with ``tokenizer="casual"``, case kept).
        tokenizer: a name of :mod:`lightning_div._internal.text` (``"13a"``, sacrebleu, the default; the
            authors' ``"casual"``, ``"diversity_eval"``, ``"13a_cased"``; ``"whitespace"``), a
            ``str -> list[str]`` callable or a Hugging Face tokenizer.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.

    Returns:
        -sum_g p(g) log p(g) over the pooled n-gram counts; 0.0 without n-grams.

    Examples:
        Unigram frequencies 1/2, 1/4, 1/4:

        >>> ngram_entropy(["a b", "a c"], 1, base=2)
        1.5
        >>> round(ngram_entropy(["a b", "a c"], 1), 4)  # nats: 1.5 ln 2
        1.0397
    """
    n = _check_n(n)
    counts = ngram_counts(tokenize_all(texts, tokenizer, lowercase), n)
    return entropy_from_counts(counts.values(), base)


def expectation_adjusted_distinct(
    texts: Sequence[str], vocab_size: int, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None
) -> float:
    """EAD, expectation-adjusted distinct unigrams (Liu et al., 2022).

    EAD = N / (V * (1 - ((V-1)/V)^C)): the N distinct unigrams over the number expected
    when C tokens are drawn uniformly from a vocabulary of V, so longer outputs are not
    penalised as distinct-1 penalises them.

    Args:
        texts: the responses.
        vocab_size: V, e.g. ``count_vocab(gold_training_responses)``.
        tokenizer: a name of :mod:`lightning_div._internal.text` (``"13a"``, sacrebleu, the default; the
            authors' ``"casual"``, ``"diversity_eval"``, ``"13a_cased"``; ``"whitespace"``), a
            ``str -> list[str]`` callable or a Hugging Face tokenizer.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.

    Returns:
        EAD (can exceed 1); 0.0 without tokens.

    The EAD authors tokenise with case-sensitive 13a: ``tokenizer="13a_cased"`` (count V the
    same way with :func:`count_vocab`).

    Raises:
        ValueError: ``vocab_size`` is not an integer >= 1.

    Examples:
        2 distinct unigrams of C = 2 tokens, V = 2: the expected number is 2 (1 - 1/4) = 1.5:

        >>> round(expectation_adjusted_distinct(["a b"], vocab_size=2), 4)
        1.3333
    """
    counts = ngram_counts(tokenize_all(texts, tokenizer, lowercase), 1)
    return ead_from_counts(len(counts), sum(counts.values()), vocab_size)


def count_vocab(reference_texts: Sequence[str], tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None) -> int:
    """V for EAD, counted from a reference corpus: its number of distinct unigrams.

    Args:
        reference_texts: e.g. the gold training responses.
        tokenizer: a name of :mod:`lightning_div._internal.text` (``"13a"``, sacrebleu, the default; the
            authors' ``"casual"``, ``"diversity_eval"``, ``"13a_cased"``; ``"whitespace"``), a
            ``str -> list[str]`` callable or a Hugging Face tokenizer.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.

    Returns:
        The number of distinct tokens, at least 1.

    Examples:
        >>> count_vocab(["I don't know.", "I know!"])  # i, don't, know, ., !
        5
    """
    counts = ngram_counts(tokenize_all(reference_texts, tokenizer, lowercase, name="reference_texts"), 1)
    return max(len(counts), 1)


# Metrics by name, as the callbacks and the CLI ask for them.

# Defined in lightning_div.keys (the command line lists them without importing torch); the same objects here.
DEFAULT_LEXICAL = keys.DEFAULT_LEXICAL
"""The lexical metrics the callbacks log unless told otherwise (names as :func:`lexical_scores` takes them)."""
LEXICAL_PATTERN = keys.LEXICAL_PATTERN
"""What a lexical metric name looks like (the one definition: the meta-evaluation's names use it too)."""
_LEXICAL = LEXICAL_PATTERN
LEXICAL_NAMES = keys.LEXICAL_NAMES
"""The lexical metric names, as error messages and ``--help`` list them."""


def check_lexical_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The lexical metrics' keyword options as a dict: ``tokenizer``, ``lowercase`` and ``base`` only.

    Raises:
        ValueError: an option of another name.
    """
    checked = dict(options or {})
    bad = sorted(set(checked) - {"tokenizer", "lowercase", "base"})
    if bad:
        raise ValueError(f"lexical_options {bad} are unknown; use tokenizer, lowercase, base")
    return checked


def check_lexical_names(names: Sequence[str]) -> list[str]:
    """Validate lexical metric names: ``distinct_<n>``, ``distinct_<n>_utt``, ``ent_<n>``, ``avg_distinct``, ``ead``.

    Args:
        names: the names to check.

    Returns:
        The names, as a list.

    Raises:
        ValueError: a name is unknown (the message lists them).
        TypeError: ``names`` is one string rather than a list of names.

    Examples:
        >>> check_lexical_names(["distinct_2", "distinct_2_utt", "ent_4"])
        ['distinct_2', 'distinct_2_utt', 'ent_4']
    """
    if isinstance(names, str):
        raise TypeError(f"lexical metric names must be a list of names, got one string {names!r}")
    bad = [n for n in names if not isinstance(n, str) or not _LEXICAL.match(n)]
    if bad:
        raise ValueError(f"unknown lexical metrics {bad}; use {LEXICAL_NAMES}")
    return list(names)


def empty_share(texts: Sequence[str]) -> float:
    """The share of ``texts`` that are empty or whitespace only (0.0 for no texts).

    A reply made of special tokens only is empty here too: generation decodes with the special
    tokens removed. Beside the lexical metrics because they say nothing of such replies: the
    one non-empty reply among twelve has distinct-2 of 1.0.

    Examples:
        >>> empty_share(["", "  ", "a b", "\\n"])
        0.75
        >>> empty_share([])
        0.0
    """
    return sum(1 for t in texts if not t.strip()) / len(texts) if len(texts) else 0.0


def lexical_scores(
    texts: Sequence[str],
    names: Sequence[str] = DEFAULT_LEXICAL,
    vocab_size: int | None = None,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool | None = None,
    base: float = math.e,
) -> dict[str, float]:
    """The named lexical metrics of one set of responses.

    Args:
        texts: the responses.
        names: metric names (see :func:`check_lexical_names`).
        vocab_size: V for ``ead``; required when ``ead`` is asked for.
        tokenizer: the tokenisation of every metric (see :mod:`lightning_div._internal.text`).
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.
        base: logarithm base of Ent-n (2 for bits, as the Sem-Ent paper reports it).

    Returns:
        ``{name: value}`` in the order of ``names``.

    Raises:
        ValueError: an unknown name, or ``ead`` without ``vocab_size``.

    Examples:
        >>> lexical_scores(["a b", "a c"], ["distinct_1", "distinct_2"])
        {'distinct_1': 0.75, 'distinct_2': 1.0}
        >>> lexical_scores(["a b a", "c"], ["distinct_2", "distinct_2_utt"])  # utterance level: (2/3 + 0) / 2
        {'distinct_2': 1.0, 'distinct_2_utt': 0.3333333333333333}
    """
    out = {}
    for name in check_lexical_names(names):
        m = _LEXICAL.match(name)
        assert m is not None  # check_lexical_names accepted the name
        if m.group(2):
            fn = distinct_n_utterance if m.group(3) else distinct_n
            out[name] = fn(texts, int(m.group(2)), tokenizer, lowercase)
        elif m.group(4):
            out[name] = ngram_entropy(texts, int(m.group(4)), base, tokenizer, lowercase)
        elif name == "avg_distinct":
            out[name] = averaged_distinct(texts, tokenizer=tokenizer, lowercase=lowercase)
        else:
            if vocab_size is None:
                raise ValueError("the ead metric needs a vocab_size (or gold training responses to count it from)")
            out[name] = expectation_adjusted_distinct(texts, vocab_size, tokenizer, lowercase)
    return out
