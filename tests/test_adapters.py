"""Adapters: exact batched token log-probs, untouched training state, resolve_adapter, bad input."""

import pytest
import torch
from helpers import causal_model, chitchat_pairs, seq2seq_model, tokenizer
from pytorch_lightning import LightningModule
from transformers import GPT2LMHeadModel

from lightning_div.model.adapters import DialogueModelAdapter, HuggingFaceAdapter, resolve_adapter
from lightning_div.model.formatting import DialogueLayout


def reference_logprobs(model, tok, context, response, fmt=DialogueLayout()):
    """One pair, one unpadded forward, full log-softmax: the definition batching must reproduce."""
    ctx, resp = fmt.encode_pair(context, response, tok, model)
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            start = model.generation_config.decoder_start_token_id
            logits = model(input_ids=torch.tensor([ctx]), decoder_input_ids=torch.tensor([[start] + resp[:-1]])).logits[
                0
            ]
            if resp[0] == tok.bos_token_id:  # BART's target <s>: read by the decoder, not scored (issue 24.4)
                return logits.log_softmax(-1)[torch.arange(1, len(resp)), torch.tensor(resp[1:])]
        else:
            # logits at position t predict token t+1, so the response is predicted from len(ctx)-1 on
            logits = model(input_ids=torch.tensor([ctx + resp])).logits[0, len(ctx) - 1 : -1]
    return logits.log_softmax(-1)[torch.arange(len(resp)), torch.tensor(resp)]


def mixed_pairs():
    """Real multi-turn chitchat of mixed lengths plus the edge cases: a bare string context,
    an empty response, and a context far longer than the 64-position test window."""
    pairs = chitchat_pairs("validation", 60)[:11]
    contexts = [list(p.context) for p in pairs] + ["just one string", ["word " * 120, "and a last turn"]]
    responses = [p.response for p in pairs] + ["", "a reply"]
    assert {len(c) for c in contexts[:11]} == {1, 2, 3}
    return contexts, responses


def make(kind, **kw):
    if kind == "causal":
        return HuggingFaceAdapter(causal_model(n_positions=64), tokenizer(False), show_progress=False, **kw)
    return HuggingFaceAdapter(seq2seq_model(max_position_embeddings=64), tokenizer(True), show_progress=False, **kw)


@pytest.mark.parametrize("kind,padding_side", [("causal", "left"), ("causal", "right"), ("seq2seq", None)])
@pytest.mark.parametrize("tokenizer_side", ["left", "right"])
def test_batched_logprobs_equal_unbatched_reference(kind, padding_side, tokenizer_side):
    adapter = make(kind, batch_size=4)  # 13 pairs -> buckets of 4, 4, 4, 1 with padding inside
    tok = adapter.tokenizer
    saved = (tok.padding_side, tok.pad_token_id)
    tok.padding_side = tokenizer_side  # a user's setting must not change the values...
    try:
        contexts, responses = mixed_pairs()
        got = adapter.token_logprobs(contexts, responses, padding_side=padding_side)
        assert len(got) == len(responses)
        for c, r, g in zip(contexts, responses, got):
            want = reference_logprobs(adapter.model, tok, c, r)
            assert g.device.type == "cpu" and g.dtype == torch.float32 and g.shape == want.shape
            torch.testing.assert_close(g, want, atol=1e-5, rtol=0)
        # ...and is not changed by us (GPT-2's tokenizer keeps having no pad token)
        assert (tok.padding_side, tok.pad_token_id) == (tokenizer_side, saved[1])
    finally:
        tok.padding_side = saved[0]
    # the empty response is its end-of-sequence token alone: causal [eos], BART [</s>] (its <s> is not scored)
    assert len(got[11]) == 1
    # the over-long context was left-truncated to fit: 64 positions in all
    ctx, resp = DialogueLayout().encode_pair(contexts[12], responses[12], tok, adapter.model)
    assert (len(ctx) + len(resp) == 64) if kind == "causal" else (len(ctx) == 64)


class ScaledLogitsGPT2(GPT2LMHeadModel):
    """Logits post-processed after the output layer (as soft-capping models do): the adapter
    must notice the output layer alone is not the model's answer and score from the logits."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, logits_to_keep=0, **kw):
        out = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logits_to_keep=logits_to_keep,
            **kw,
        )
        out.logits = 0.5 * out.logits + 1.0
        return out


class OpaqueGPT2(GPT2LMHeadModel):
    """A forward that hides its parameters: no position ids can be passed, so right padding."""

    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs)


@pytest.mark.parametrize("cls", [ScaledLogitsGPT2, OpaqueGPT2])
def test_models_that_change_logits_or_hide_their_signature(cls):
    base = causal_model(n_positions=64)
    model = cls(base.config).eval()
    model.load_state_dict(base.state_dict())
    adapter = HuggingFaceAdapter(model, tokenizer(False), show_progress=False, batch_size=4)
    contexts, responses = mixed_pairs()
    got = adapter.token_logprobs(contexts, responses)
    for c, r, g in zip(contexts, responses, got):
        torch.testing.assert_close(g, reference_logprobs(model, adapter.tokenizer, c, r), atol=1e-5, rtol=0)
    if cls is OpaqueGPT2:
        with pytest.raises(ValueError, match="takes no position_ids"):
            adapter.token_logprobs(["hi"], ["hello"], padding_side="left")
    if cls is ScaledLogitsGPT2:  # the scaling is visible: these are not the plain model's values
        plain = HuggingFaceAdapter(base, tokenizer(False), show_progress=False).token_logprobs(contexts, responses)
        assert (got[0] - plain[0]).abs().max() > 0.1


def test_seq2seq_refuses_left_padding():
    with pytest.raises(ValueError, match="right padding"):
        make("seq2seq").token_logprobs(["hi"], ["hello"], padding_side="left")


def _states(model):
    return [m.training for m in model.modules()]


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_training_state_grads_and_rng_untouched(kind):
    adapter = make(kind)
    model = adapter.model
    model.train()
    list(model.modules())[5].eval()  # a frozen submodule: must stay in eval, and the rest in train
    before = _states(model)
    assert True in before and False in before
    grad = torch.full_like(next(model.parameters()), 0.5)
    next(model.parameters()).grad = grad.clone()

    torch.manual_seed(123)
    torch.rand(3)
    expected = torch.rand(5)  # the draw that follows when nothing happens in between

    torch.manual_seed(123)
    torch.rand(3)
    adapter.generate(["hi there", "what do you like to do?"], do_sample=True, top_p=0.9, max_new_tokens=5)
    adapter.token_logprobs(["hi there"], ["hello"])
    assert torch.equal(torch.rand(5), expected)

    assert _states(model) == before
    params = list(model.parameters())
    assert torch.equal(params[0].grad, grad)
    assert all(p.grad is None for p in params[1:]) and all(p.requires_grad for p in params)


def test_results_are_ordinary_tensors():
    (lp,) = make("causal").token_logprobs(["hi"], ["hello there"])
    assert not lp.is_inference() and not lp.requires_grad
    (lp * torch.ones_like(lp, requires_grad=True)).sum().backward()  # usable in autograd code


class HFModule(LightningModule):
    def __init__(self, seq2seq=False):
        super().__init__()
        self.net = seq2seq_model() if seq2seq else causal_model()
        self.tok = tokenizer(seq2seq)


class ProtocolModule(LightningModule):
    def generate(self, contexts, **kw):
        return ["ok"] * len(contexts)

    def token_logprobs(self, contexts, responses):
        return [torch.zeros(1) for _ in responses]


def test_resolve_adapter_picks_the_right_wrapper():
    causal = resolve_adapter(HFModule(False), model_attr="net", tokenizer_attr="tok", batch_size=3)
    seq2seq = resolve_adapter(HFModule(True), model_attr="net", tokenizer_attr="tok")
    assert type(causal) is HuggingFaceAdapter and not causal.is_seq2seq and causal.batch_size == 3
    assert type(seq2seq) is HuggingFaceAdapter and seq2seq.is_seq2seq
    assert causal.device == torch.device("cpu")
    module = ProtocolModule()
    assert isinstance(module, DialogueModelAdapter) and resolve_adapter(module) is module


def test_resolve_adapter_error_shows_both_ways():
    with pytest.raises(
        TypeError, match=r"^cannot reach a dialogue model through HFModule: it has no attribute 'model' "
    ) as err:
        resolve_adapter(HFModule(False))  # attributes are called net/tok, not model/tokenizer
    msg = str(err.value)
    assert "'model'" in msg and "'tokenizer'" in msg and "HFModule" in msg
    assert "self.model = " in msg and "token_logprobs(contexts, responses)" in msg

    module = HFModule(False)
    module.model, module.tokenizer = torch.nn.Linear(2, 2), module.tok
    with pytest.raises(TypeError, match="Linear, which has no .generate"):
        resolve_adapter(module)


def test_one_adapter_class_reads_the_layout_from_the_model():
    # one class for both layouts (formerly one per layout, each refusing the other family)
    assert HuggingFaceAdapter(seq2seq_model(), tokenizer(True)).is_seq2seq
    assert not HuggingFaceAdapter(causal_model(), tokenizer(False)).is_seq2seq
    with pytest.raises(TypeError, match="HuggingFaceAdapter needs a Hugging Face generation model .*got Linear"):
        HuggingFaceAdapter(torch.nn.Linear(2, 2), tokenizer(False))


def test_adapter_sees_current_weights():
    module = HFModule(False)
    adapter = resolve_adapter(module, model_attr="net", tokenizer_attr="tok", show_progress=False)
    before = adapter.token_logprobs(["hi"], ["hello there"])[0]
    with torch.no_grad():
        module.net.transformer.wte.weight.mul_(3.0)  # e.g. an optimizer step
    after = adapter.token_logprobs(["hi"], ["hello there"])[0]
    assert not torch.allclose(before, after)
    torch.testing.assert_close(
        after, reference_logprobs(module.net, module.tok, ["hi"], "hello there"), atol=1e-5, rtol=0
    )


def test_bad_input_names_the_field():
    adapter = make("causal")
    with pytest.raises(ValueError, match="contexts has 2 entries but responses has 1"):
        adapter.token_logprobs(["a", "b"], ["x"])
    with pytest.raises(TypeError, match=r"responses\[1\] is int"):
        adapter.token_logprobs(["a", "b"], ["x", 3])
    with pytest.raises(TypeError, match=r"contexts\[1\] is NoneType"):
        adapter.token_logprobs(["a", None], ["x", "y"])
    with pytest.raises(TypeError, match=r"contexts\[0\]\[1\] is int"):
        adapter.generate([["a", 7]])
    with pytest.raises(TypeError, match="got one string"):
        adapter.generate("a single context")
    assert adapter.token_logprobs([], []) == [] and adapter.generate([]) == []
