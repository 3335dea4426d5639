"""Response scores and position profiles; RUQ sanity with tiny models trained to opposite habits."""

import math

import numpy as np
import pytest
import torch
from helpers import causal_model, chitchat_pairs, seq2seq_model, tokenizer

from lightning_div.adapters import CausalLMAdapter, Seq2SeqAdapter
from lightning_div.formatting import DialogueFormat
from lightning_div.metrics import ruq_score
from lightning_div.scoring import position_profile, response_scores

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
        adapter = CausalLMAdapter(causal_model(), tokenizer(False), show_progress=False, batch_size=2)
    else:
        adapter = Seq2SeqAdapter(seq2seq_model(), tokenizer(True), show_progress=False, batch_size=2)
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
    fmt = DialogueFormat()
    adapter = Seq2SeqAdapter(model, tok, format=fmt, show_progress=False, batch_size=3)
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
    fmt = DialogueFormat(max_turns=1)  # short sequences keep the training cheap
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
    idk_adapter = CausalLMAdapter(idk_model, tok, format=fmt, show_progress=False)
    assert idk_adapter.generate(ctx) == [IDK] * 8  # greedy decoding, text cleaned of EOS/pads
    ref_scores = response_scores(idk_adapter, ctx, refs)
    idk_scores = response_scores(idk_adapter, ctx, [IDK] * 8)
    assert max(idk_scores) - min(idk_scores) < 0.05 and min(idk_scores) > -0.1
    assert ruq_score(ref_scores, idk_scores) == 0.0

    ref_model = causal_model(seed=4)
    assert train_responses(ref_model, tok, ctx, refs, 80, fmt) < 0.1
    ref_adapter = CausalLMAdapter(ref_model, tok, format=fmt, show_progress=False)
    ref_scores = response_scores(ref_adapter, ctx, refs)
    idk_scores = response_scores(ref_adapter, ctx, [IDK] * 8)
    assert min(ref_scores) > max(idk_scores) + 1.0
    assert ruq_score(ref_scores, idk_scores) == 100.0
    # the per-position profile of the memorised references stays near log 1 = 0
    mean, count = position_profile(ref_adapter, ctx, refs)
    assert count[0] == 8 and (mean > -0.5).all()
