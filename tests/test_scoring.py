"""Response scores and position profiles; RUQ sanity with tiny models trained to opposite habits."""

import inspect
import math

import numpy as np
import pytest
import torch
from helpers import causal_model, chitchat_pairs, seq2seq_model, tokenizer

from lightning_div.metrics import ruq_score
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.formatting import DialogueLayout
from lightning_div.model.scoring import candidate_logprobs, candidate_scores, position_profile, response_scores

IDK = "i don't know ."


class FixedAdapter:
    """Any object with generate/token_logprobs is an adapter; this one has hand-chosen log-probs."""

    def __init__(self, logprobs):
        self.logprobs = logprobs

    def generate(self, contexts, **kw):
        return ["x"] * len(contexts)

    def token_logprobs(self, contexts, responses):
        return [torch.tensor(v) for v in self.logprobs]


def test_scores_and_profile_by_hand():
    adapter = FixedAdapter([[-1.0, -2.0, -3.0], [-3.0], [-2.0, -4.0]])
    ctx, resp = ["a", "b", "c"], ["x", "y", "z"]
    # means: (-1-2-3)/3 = -2, -3/1 = -3, (-2-4)/2 = -3
    assert response_scores(adapter, ctx, resp) == [-2.0, -3.0, -3.0]
    mean, count = position_profile(adapter, ctx, resp)
    # position 0: (-1-3-2)/3 = -2; position 1: (-2-4)/2 = -3; position 2: -3/1 = -3
    np.testing.assert_allclose(mean, [-2.0, -3.0, -3.0])
    assert count.tolist() == [3, 2, 1] and count.dtype == np.int64
    mean, count = position_profile(adapter, ctx, resp, max_positions=2)
    np.testing.assert_allclose(mean, [-2.0, -3.0])
    assert count.tolist() == [3, 2]
    empty = position_profile(FixedAdapter([]), [], [])
    assert empty[0].shape == (0,) and empty[1].shape == (0,)


def test_broken_adapter_output_is_refused():
    with pytest.raises(ValueError, match="pair 1 no tokens"):
        response_scores(FixedAdapter([[-1.0], []]), ["a", "b"], ["x", "y"])
    with pytest.raises(ValueError, match="pair 0 a NaN"):
        response_scores(FixedAdapter([[math.nan]]), ["a"], ["x"])
    with pytest.raises(ValueError, match="returned 1 tensors for 2 pairs"):
        position_profile(FixedAdapter([[-1.0]]), ["a", "b"], ["x", "y"])
    with pytest.raises(ValueError, match="contexts has 1 entries but responses has 2"):
        response_scores(FixedAdapter([[-1.0]]), ["a"], ["x", "y"])
    with pytest.raises(ValueError, match="max_positions"):
        position_profile(FixedAdapter([[-1.0]]), ["a"], ["x"], max_positions=0)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_scores_are_mean_token_logprobs_of_real_models(kind):
    if kind == "causal":
        adapter = HuggingFaceAdapter(causal_model(), tokenizer(False), show_progress=False, batch_size=2)
    else:
        adapter = HuggingFaceAdapter(seq2seq_model(), tokenizer(True), show_progress=False, batch_size=2)
    pairs = chitchat_pairs("validation", 60)[:5]
    ctx, resp = [list(p.context) for p in pairs] + ["hi"], [p.response for p in pairs] + [""]
    lps = adapter.token_logprobs(ctx, resp)
    scores = response_scores(adapter, ctx, resp)
    assert scores == pytest.approx([float(t.mean()) for t in lps], abs=1e-6)
    # empty response: a defined, finite score from its end-of-sequence token alone (BART's <s> is not scored)
    assert math.isfinite(scores[-1]) and len(lps[-1]) == 1
    mean, count = position_profile(adapter, ctx, resp)
    assert len(mean) == max(len(t) for t in lps) and count[0] == 6 and np.isfinite(mean).all()
    assert mean[0] == pytest.approx(float(torch.stack([t[0] for t in lps]).mean()), abs=1e-6)


def test_seq2seq_scores_response_and_eos_never_bos():
    """BART's tokenizer puts <s> before a target: the decoder reads it, the score leaves it out.

    By hand from the model's own logits: decoder input [decoder_start, <s>, y_1..y_n], the
    log-softmax row i predicts input i+1, so the score is over rows 1..n (y_1..y_n, EOS),
    and row 0 (predicting <s>) is not among them.
    """
    tok, model = tokenizer(True), seq2seq_model(seed=5)
    fmt = DialogueLayout()
    adapter = HuggingFaceAdapter(model, tok, format=fmt, show_progress=False, batch_size=3)
    contexts = [["hi , how are you ?", "fine , thanks"], ["what is your name ?"], ["ok"]]
    responses = ["i am fine too", "my name is bob and you ?", ""]
    lps = adapter.token_logprobs(contexts, responses)
    for ctx, resp, got in zip(contexts, responses, lps):
        words = tok(resp, add_special_tokens=False)["input_ids"]
        enc, target = fmt.encode_pair(ctx, resp, tok, model)
        assert target == [tok.bos_token_id] + words + [tok.eos_token_id]
        dec = [model.config.decoder_start_token_id] + target[:-1]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([enc]), decoder_input_ids=torch.tensor([dec])).logits[0]
        logp = logits.double().log_softmax(-1)
        want = [float(logp[i, target[i]]) for i in range(1, len(target))]  # y_1..y_n, EOS
        assert len(got) == len(words) + 1
        np.testing.assert_allclose(got.double().numpy(), want, atol=2e-5)
        assert response_scores(adapter, [ctx], [resp])[0] == pytest.approx(sum(want) / len(want), abs=2e-5)
        with_bos = (float(logp[0, target[0]]) + sum(want)) / len(target)
        assert abs(with_bos - sum(want) / len(want)) > 1e-3  # the BOS would have changed the score
    # position 0 of the profile is the first response token, not <s>
    mean, count = position_profile(adapter, contexts, responses)
    assert count[0] == 3 and mean[0] == pytest.approx(float(np.mean([t[0] for t in lps])), abs=1e-6)


def train_responses(model, tok, contexts, responses, steps, fmt, lr=3e-3):
    """Plain teacher-forced training on the response tokens, with the layout the adapter scores."""
    rows, masks = [], []
    for c, r in zip(contexts, responses):
        ctx, resp = fmt.encode_pair(c, r, tok, model)
        rows.append(ctx + resp)
        masks.append([0] * len(ctx) + [1] * len(resp))
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.eos_token_id] * (width - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    labels = ids.masked_fill(torch.tensor([m + [0] * (width - len(m)) for m in masks]) == 0, -100)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(steps):
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return float(loss.detach())


@pytest.mark.slow
def test_ruq_sanity_idk_model_and_reference_model():
    """RUQ -> 0 for a model that always says IDK, -> 100 for one trained on the references.

    Why this is robust: the references are 8 real validation replies of 4-12 words without
    "know". The IDK model puts almost all its mass on IDK's 7 tokens (6 + EOS) whatever the
    context, so IDK scores about 0 per token, while each reference is made of tokens it never
    predicts: measured about -0.02 vs -8 to -9.7 nats per token. The reference model memorises
    its 8 pairs (about -0.03 per token) and never produced IDK as a response: about -6 to -7.4
    per IDK token. Both gaps are several nats, so seeds/BLAS noise cannot flip a prompt.
    """
    tok = tokenizer(False)
    fmt = DialogueLayout(max_turns=1)  # short sequences keep the training cheap
    train = chitchat_pairs("train", 60)[:16]
    evals = [
        p
        for p in chitchat_pairs("validation", 60)
        if 4 <= len(p.response.split()) <= 12 and "know" not in p.response.lower()
    ][:8]
    assert len(evals) == 8
    ctx, refs = [list(p.context) for p in evals], [p.response for p in evals]

    idk_model = causal_model(seed=3)
    assert train_responses(idk_model, tok, [list(p.context) for p in train], [IDK] * 16, 60, fmt) < 0.05
    idk_adapter = HuggingFaceAdapter(idk_model, tok, format=fmt, show_progress=False)
    assert idk_adapter.generate(ctx) == [IDK] * 8  # greedy decoding, text cleaned of EOS/pads
    ref_scores = response_scores(idk_adapter, ctx, refs)
    idk_scores = response_scores(idk_adapter, ctx, [IDK] * 8)
    assert max(idk_scores) - min(idk_scores) < 0.05 and min(idk_scores) > -0.1
    assert ruq_score(ref_scores, idk_scores) == 0.0

    ref_model = causal_model(seed=4)
    assert train_responses(ref_model, tok, ctx, refs, 80, fmt) < 0.1
    ref_adapter = HuggingFaceAdapter(ref_model, tok, format=fmt, show_progress=False)
    ref_scores = response_scores(ref_adapter, ctx, refs)
    idk_scores = response_scores(ref_adapter, ctx, [IDK] * 8)
    assert min(ref_scores) > max(idk_scores) + 1.0
    assert ruq_score(ref_scores, idk_scores) == 100.0
    # the per-position profile of the memorised references stays near log 1 = 0
    mean, count = position_profile(ref_adapter, ctx, refs)
    assert count[0] == 8 and (mean > -0.5).all()


# --------------------------------------------------------------------------- shared-context scoring

IDKS = ["i don't know .", "i don't know what to do ."]


def mixed_candidates():
    """Contexts of 1-3 turns with 1-4 candidates each: references, IDK strings, an empty one, a long one."""
    pairs = chitchat_pairs("validation", 60)[:7]
    contexts = [list(p.context) for p in pairs]
    long = "well , " * 12 + "that is what i think about it ."
    candidates = [[p.response, *IDKS, "", long][: 1 + i % 5] for i, p in enumerate(pairs)]
    return contexts, candidates


def flat_scores(adapter, contexts, candidates, **kw):
    fc = [c for c, cs in zip(contexts, candidates) for _ in cs]
    return response_scores(adapter, fc, [r for cs in candidates for r in cs])


def make_adapter(kind, batch_size, model=None):
    if kind == "causal":
        return HuggingFaceAdapter(model or causal_model(), tokenizer(False), show_progress=False, batch_size=batch_size)
    return HuggingFaceAdapter(model or seq2seq_model(), tokenizer(True), show_progress=False, batch_size=batch_size)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_candidate_scores_equal_response_scores(kind, batch_size):
    """Each context once, its candidates from the cache / encoder output: the same scores as pair by pair."""
    contexts, candidates = mixed_candidates()
    adapter = make_adapter(kind, batch_size)
    got = candidate_scores(adapter, contexts, candidates)
    assert [len(g) for g in got] == [len(c) for c in candidates] == [1, 2, 3, 4, 5, 1, 2]
    want = flat_scores(adapter, contexts, candidates)
    np.testing.assert_allclose([x for g in got for x in g], want, atol=1e-5, rtol=0)
    # token by token too (EOS last; seq2seq: never BART's <s>), and one batch composition vs another
    lps = candidate_logprobs(adapter, contexts, candidates)
    flat = adapter.token_logprobs(
        [c for c, cs in zip(contexts, candidates) for _ in cs], [r for cs in candidates for r in cs]
    )
    for a, b in zip([t for g in lps for t in g], flat):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.double().numpy(), atol=1e-5, rtol=0)
    other = candidate_scores(make_adapter(kind, 2), contexts, candidates)
    np.testing.assert_allclose([x for g in other for x in g], want, atol=1e-5, rtol=0)


def test_causal_candidates_right_padding_falls_back_to_the_same_values():
    contexts, candidates = mixed_candidates()
    adapter = make_adapter("causal", 4)
    got = adapter.candidate_logprobs(contexts, candidates, padding_side="right")
    want = flat_scores(adapter, contexts, candidates)
    np.testing.assert_allclose([float(t.mean()) for g in got for t in g], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("batch_size", [3, 64])
@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_each_context_runs_through_the_model_once(kind, batch_size):
    """Counted on the model: every context's tokens go through it once, every candidate's once after it.

    Every forward pads at most 20 % (rows x longest <= 1.2 x the rows' lengths): contexts are
    batched by their length, at most ``batch_size`` per forward, and their candidates apart by
    theirs (RUQ's reference beside two short IDK strings padded the candidate forwards 2.5x), at
    most the candidates of one context batch per forward.
    """
    contexts, candidates = mixed_candidates()
    adapter = make_adapter(kind, batch_size)
    fmt = DialogueLayout()
    seen = []

    def record(module, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        mask = kwargs["attention_mask"]
        cached = kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None
        seen.append((module is encoder or (kind == "causal" and not cached), ids, mask))

    encoder = adapter.model.get_encoder() if kind == "seq2seq" else None
    modules = [adapter.model.transformer] if kind == "causal" else [encoder, adapter.model.get_decoder()]
    hooks = [m.register_forward_pre_hook(record, with_kwargs=True) for m in modules]
    try:
        candidate_scores(adapter, contexts, candidates)
    finally:
        for hook in hooks:
            hook.remove()
    pairs = [fmt.encode_pair(c, r, adapter.tokenizer, adapter.model) for c, cs in zip(contexts, candidates) for r in cs]
    context_passes = [(ids, mask) for is_context, ids, mask in seen if is_context]
    candidate_passes = [(ids, mask[:, -ids.shape[1] :]) for is_context, ids, mask in seen if not is_context]
    fed = sorted(tuple(row[m.bool()].tolist()) for ids, mask in context_passes for row, m in zip(ids, mask))
    assert fed == sorted({tuple(c) for c, _ in pairs}) and len(fed) == len(contexts)  # each context once
    # the candidates' tokens: all but the last (causal: the first is predicted by the context pass;
    # seq2seq: the decoder reads the start token and all but the last)
    fed_lengths = sorted(int(n) for _, mask in candidate_passes for n in mask.sum(1))
    if kind == "causal":
        assert [n for n in fed_lengths if n] == sorted(len(r) - 1 for _, r in pairs if len(r) > 1)
    else:
        assert fed_lengths == sorted(len(r) for _, r in pairs)
    per_context = max(len(cs) for cs in candidates)
    for is_candidates, passes in ((False, context_passes), (True, candidate_passes)):
        for ids, mask in passes:
            lengths = mask.sum(1).tolist()
            assert len(lengths) <= batch_size * (per_context if is_candidates else 1)
            assert ids.shape[1] == max(max(lengths), 1)  # padded to its longest row only
            if is_candidates and kind == "causal":
                lengths = [n + 1 for n in lengths]  # the batches are cut by a candidate's whole length
            assert len(lengths) * max(lengths) <= 1.2 * sum(lengths) + 1e-9
    if batch_size == 3:  # candidates of similar length share forwards beyond batch_size rows (the CPU's GEMM speed)
        assert max(ids.shape[0] for ids, _ in candidate_passes) > batch_size


def test_a_context_cut_for_a_long_candidate_gets_its_own_group():
    """Near the window a longer candidate keeps less context: grouped by the ids fed, values still equal."""
    adapter = HuggingFaceAdapter(causal_model(n_positions=48), tokenizer(False), show_progress=False, batch_size=8)
    context = [("so what do you think about the weather today ? " * 3).strip()]
    cands = [["ok", "well , " * 8 + "i do not know", "i think it is going to rain all day long , sadly ."]]
    fmt = DialogueLayout()
    ids = {tuple(fmt.encode_pair(context, r, adapter.tokenizer, adapter.model)[0]) for r in cands[0]}
    assert len(ids) == 3  # three different cuts of the one context
    got = candidate_scores(adapter, [context], cands)[0]
    np.testing.assert_allclose(got, flat_scores(adapter, [context], cands), atol=1e-5, rtol=0)


class ScaledLogits(torch.nn.Module):
    """A model whose forward post-processes its logits: the output layer alone is not its score."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config, self.generation_config = inner, inner.config, inner.generation_config

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache=None,
        logits_to_keep=0,
        output_hidden_states=None,
    ):
        # it keeps the old argument name (as a user's model written for transformers < 5.24 would)
        # and hands the cache on under whichever name the inner model takes
        cache_name = "cache" if "cache" in inspect.signature(self.inner.forward).parameters else "past_key_values"
        out = self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{cache_name: past_key_values},
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            output_hidden_states=output_hidden_states,
        )
        out.logits = out.logits * 0.5
        return out

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def generate(self, *a, **kw):
        return self.inner.generate(*a, **kw)


def test_post_processed_logits_are_scored_from_the_logits():
    """The projection check fails on the first candidate pass; the cache is cropped back and the logits used."""
    model = ScaledLogits(causal_model())
    adapter = HuggingFaceAdapter(model, tokenizer(False), show_progress=False, batch_size=64)
    contexts, candidates = mixed_candidates()
    got = candidate_scores(adapter, contexts, candidates)
    np.testing.assert_allclose(
        [x for g in got for x in g], flat_scores(adapter, contexts, candidates), atol=1e-5, rtol=0
    )
    plain = flat_scores(make_adapter("causal", 64), contexts, candidates)
    assert max(abs(a - b) for a, b in zip([x for g in got for x in g], plain)) > 0.1  # the scaling mattered


def test_candidate_scores_of_any_adapter_and_bad_input():
    """Adapters without candidate_logprobs get the flattened pairs; by hand: means of the fixed log-probs."""
    adapter = FixedAdapter([[-1.0, -3.0], [-2.0], [-4.0, -4.0, -1.0]])
    assert candidate_scores(adapter, ["a", "b"], [["x", "y"], ["z"]]) == [[-2.0, -2.0], [-3.0]]
    assert candidate_scores(adapter, [], []) == []
    with pytest.raises(TypeError, match="one string"):
        candidate_scores(adapter, ["a"], "x")
    with pytest.raises(TypeError, match=r"candidates\[0\] is str"):
        candidate_scores(adapter, ["a"], ["x"])
    with pytest.raises(TypeError, match=r"candidates\[1\]\[0\] is int"):
        candidate_scores(adapter, ["a", "b"], [["x"], [3]])
    with pytest.raises(ValueError, match="contexts has 1 entries but candidates has 2"):
        candidate_scores(adapter, ["a"], [["x"], ["y"]])
    with pytest.raises(ValueError, match="returned 3 tensors for 2 pairs"):
        candidate_scores(adapter, ["a"], [["x", "y"]])


def test_one_padding_check_for_both_paths_even_with_nothing_to_score():
    """Pair by pair and shared contexts refuse the same padding sides with the same words, empty input included."""
    from lightning_div.model.scoring import candidate_logprobs_batched, token_logprobs_batched

    causal, seq2seq = (causal_model(), tokenizer(False)), (seq2seq_model(), tokenizer(True))
    for contexts, responses in ((["hi"], ["hello"]), ([], [])):
        candidates = [[r] for r in responses]
        for model, tok in (causal, seq2seq):
            with pytest.raises(ValueError, match=r"padding_side must be 'left', 'right' or None, got 'top'"):
                token_logprobs_batched(model, tok, contexts, responses, padding_side="top", show_progress=False)
            with pytest.raises(ValueError, match=r"padding_side must be 'left', 'right' or None, got 'top'"):
                candidate_logprobs_batched(model, tok, contexts, candidates, padding_side="top", show_progress=False)
        with pytest.raises(ValueError, match="seq2seq models are scored with right padding only"):
            token_logprobs_batched(*seq2seq, contexts, responses, padding_side="left", show_progress=False)
        with pytest.raises(ValueError, match="seq2seq models are scored with right padding only"):
            candidate_logprobs_batched(*seq2seq, contexts, candidates, padding_side="left", show_progress=False)
    assert token_logprobs_batched(*causal, [], [], padding_side="left", show_progress=False) == []
    assert candidate_logprobs_batched(*causal, [], [], padding_side="right", show_progress=False) == []
