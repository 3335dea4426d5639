"""Batched generation: same text as one-by-one decoding, order kept, deterministic sampling, long contexts."""

import warnings

import pytest
import torch
from helpers import causal_model, chitchat_pairs, seq2seq_model, tokenizer

from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.formatting import DialogueLayout
from lightning_div.model.generation import generate_sets

# A random tiny GPT-2 answers an EOS-terminated context with EOS at once (tied embeddings
# echo the last token), so generation tests force a few tokens out of it.
FORCE = {"min_new_tokens": 6, "max_new_tokens": 10}


def context_dependent_bart(**kw):
    """Random BART at init scale barely reads its encoder (every context gets one answer, which
    would hide a mix-up of the order); 5x larger weight matrices make the answer depend on it."""
    model = seq2seq_model(seed=1, **kw)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(5.0)
    return model


def make(kind, **kw):
    if kind == "causal":
        return HuggingFaceAdapter(causal_model(seed=1), tokenizer(False), show_progress=False, **kw)
    return HuggingFaceAdapter(context_dependent_bart(), tokenizer(True), show_progress=False, **kw)


def contexts():
    """Real multi-turn contexts of clearly different lengths (so batches need padding)."""
    ctx = [list(p.context) for p in chitchat_pairs("validation", 60)[:7]] + ["hi"]
    return ctx


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_greedy_batched_equals_one_by_one(kind):
    batched = make(kind, batch_size=3)
    single = make(kind, batch_size=1)  # a batch of one has no padding at all
    ctx = contexts()
    got = batched.generate(ctx, **FORCE)
    assert len(got) == len(ctx) and all(isinstance(t, str) and t == t.strip() and t for t in got)
    assert got == single.generate(ctx, **FORCE)
    assert len(set(got)) >= 5  # different contexts, different answers: the order restoration is tested


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_defaults_are_greedy_with_3gram_blocking(kind):
    """Our output is exactly HF generate with the documented evaluation defaults."""
    adapter = make(kind)
    model, tok = adapter.model, adapter.tokenizer
    context = list(chitchat_pairs("validation", 60)[3].context)
    ids = DialogueLayout().encode_context(context, tok, adapter.is_seq2seq)
    extra = {"encoder_no_repeat_ngram_size": 3} if adapter.is_seq2seq else {}
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            do_sample=False,
            num_beams=1,
            no_repeat_ngram_size=3,
            pad_token_id=tok.pad_token_id or tok.eos_token_id,
            **FORCE,
            **extra,
        )[0]
    new = out[1:] if adapter.is_seq2seq else out[len(ids) :]
    assert adapter.generate([context], **FORCE) == [tok.decode(new, skip_special_tokens=True).strip()]
    # 3-gram blocking: no token 3-gram repeats inside a causal response (the prompt included)
    if not adapter.is_seq2seq:
        seq = out.tolist()
        grams = [tuple(seq[i : i + 3]) for i in range(len(seq) - 2)]
        assert len(grams) == len(set(grams))


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_response_sets_grouped_by_context(kind):
    """Beam search is deterministic, so a batched flat list must equal per-context sets, in order."""
    ctx = contexts()[:5]
    kw = {"do_sample": False, "num_beams": 4, "num_return_sequences": 3, **FORCE}
    flat = make(kind, batch_size=3).generate(ctx, **kw)
    single = make(kind, batch_size=1)
    sets = [single.generate([c], **kw) for c in ctx]
    assert [len(s) for s in sets] == [3] * 5 and len({tuple(s) for s in sets}) >= 3
    assert flat == [t for s in sets for t in s]


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_sampling_is_deterministic_for_a_seed(kind):
    adapter = make(kind, batch_size=4)
    ctx = contexts()[:4]
    torch.manual_seed(1)
    a = generate_sets(adapter, ctx, 3, **FORCE)  # nucleus sampling, p = 0.9, by default
    torch.manual_seed(2)  # the caller's RNG state must not matter
    b = generate_sets(adapter, ctx, 3, **FORCE)
    c = generate_sets(adapter, ctx, 3, seed=7, **FORCE)
    assert a == b and a != c
    assert [len(s) for s in a] == [3] * 4
    assert len({t for s in a for t in s}) > 4  # samples, not one greedy answer repeated


def test_context_longer_than_window_is_left_truncated():
    adapter = HuggingFaceAdapter(causal_model(n_positions=32), tokenizer(False), show_progress=False)
    long_ctx = ["word " * 200, "tell me about your day"]
    (text,) = adapter.generate([long_ctx], min_new_tokens=10, max_new_tokens=10)
    # the prompt kept 32 - 10 = 22 tokens, the newest ones, so the newest turn is still in
    kept = DialogueLayout().encode_context(
        long_ctx, adapter.tokenizer, False, DialogueLayout().context_budget(adapter.model, reserve=10)
    )
    assert len(kept) == 22 and "tell me about your day" in adapter.tokenizer.decode(kept)
    assert len(adapter.tokenizer(text)["input_ids"]) >= 5
    s2s = HuggingFaceAdapter(seq2seq_model(max_position_embeddings=32), tokenizer(True), show_progress=False)
    assert len(s2s.generate([long_ctx], **FORCE)) == 1


def test_bad_generation_arguments():
    adapter = make("causal")
    with pytest.raises(ValueError, match="num_return_sequences"):
        adapter.generate(["hi"], num_return_sequences=0)
    with pytest.raises(ValueError, match="n must be"):
        generate_sets(adapter, ["hi"], 0)


class GenerateSpy:
    """Wraps ``model.generate`` and records the keyword arguments of every call."""

    def __init__(self, model):
        self.calls = []
        self.inner = model.generate

        def spy(*args, **kwargs):
            self.calls.append(kwargs)
            return self.inner(*args, **kwargs)

        model.generate = spy


BLOCKING = ("no_repeat_ngram_size", "encoder_no_repeat_ngram_size")


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_sampling_paths_reach_generate_without_ngram_blocking(kind):
    """NLI sets, Diversity Threshold Generation and decTest sample with no blocking at all (explicit 0,
    so a model config that blocks, like BlenderBot's, is overridden); greedy evaluation keeps its 3-gram
    blocking (and the context's, on seq2seq); a caller may still ask for blocking while sampling."""
    from lightning_div.meta_eval.data import build_dec_test
    from lightning_div.nli.threshold import diversity_threshold_generate_many

    adapter = make(kind, batch_size=4)
    spy = GenerateSpy(adapter.model)
    ctx = contexts()[:2]

    generate_sets(adapter, ctx, 3, **FORCE)
    diversity_threshold_generate_many(
        adapter, ctx, n=2, threshold=10, max_samples=3, metric=lambda s: 0.0, show_progress=False, **FORCE
    )
    build_dec_test(adapter, ctx, [0.5, 1.0], n=2, show_progress=False, **FORCE)
    assert len(spy.calls) == 1 + 2 + 2  # sets; DTG's first n and one replacement round; two temperatures
    for kw in spy.calls:
        assert kw["do_sample"] is True
        assert {k: kw[k] for k in BLOCKING} == {"no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0}
    assert [kw["top_p"] for kw in spy.calls] == [0.9, 0.9, 0.9, 1.0, 1.0]
    assert [kw.get("temperature") for kw in spy.calls[3:]] == [0.5, 1.0]

    spy.calls.clear()
    adapter.generate(ctx, **FORCE)  # greedy evaluation decoding
    generate_sets(adapter, ctx, 2, no_repeat_ngram_size=3, **FORCE)  # asked for
    greedy, asked = spy.calls
    assert greedy["do_sample"] is False and greedy["no_repeat_ngram_size"] == 3
    assert greedy.get("encoder_no_repeat_ngram_size") == (3 if kind == "seq2seq" else None)
    assert asked["no_repeat_ngram_size"] == 3 and asked["encoder_no_repeat_ngram_size"] == 0


def test_mostly_empty_generations_are_named():
    """Issue 63: the warning fired only when all replies were empty; 11 of 12 empty said nothing."""
    from lightning_div._internal.checks import warn_if_mostly_empty

    with pytest.warns(RuntimeWarning, match=r"X: all 3 responses generated for the sample are empty"):
        warn_if_mostly_empty(["", " ", "\n"], "X", "the sample", 0.5)
    with pytest.warns(RuntimeWarning, match=r"X: 11 of 12 responses .* are empty \(92%; the warning is from 50%\)"):
        warn_if_mostly_empty([""] * 11 + ["ok"], "X", "the sample", 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_mostly_empty(["", "ok", "fine"], "X", "the sample", 0.5)  # a third: below the threshold
