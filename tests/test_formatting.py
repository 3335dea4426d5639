import pytest
from helpers import causal_model, seq2seq_model, tokenizer

from lightning_div.model.formatting import DialogueLayout, model_window


def test_causal_layout_is_dialogpt_style():
    tok = tokenizer()
    eos = tok.eos_token_id
    fmt = DialogueLayout()
    a = tok("Hi there", add_special_tokens=False)["input_ids"]
    b = tok("How are you?", add_special_tokens=False)["input_ids"]
    r = tok("Fine", add_special_tokens=False)["input_ids"]
    ctx, resp = fmt.encode_pair(["Hi there", "How are you?"], "Fine", tok, causal_model())
    assert ctx == a + [eos] + b + [eos]
    assert resp == r + [eos]
    # max_turns keeps the newest turns
    assert DialogueLayout(max_turns=1).encode_context(["Hi there", "How are you?"], tok, False) == b + [eos]
    # left truncation drops the oldest tokens
    assert fmt.encode_context(["Hi there", "How are you?"], tok, False, budget=3) == (b + [eos])[-3:]
    # an empty context still conditions on one token
    assert fmt.encode_context([], tok, False) == [eos]


def test_window_limits_context_and_response():
    tok = tokenizer()
    model = causal_model(n_positions=16)
    assert model_window(model) == 16
    ctx, resp = DialogueLayout().encode_pair(["word " * 40], "a reply", tok, model)
    assert len(ctx) + len(resp) == 16
    ctx, resp = DialogueLayout().encode_pair(["hi"], "long " * 40, tok, model)
    assert len(resp) == 15 and len(ctx) == 1


def test_seq2seq_layout():
    tok = tokenizer(seq2seq=True)
    model = seq2seq_model()
    bos, eos = tok.bos_token_id, tok.eos_token_id
    ctx, resp = DialogueLayout().encode_pair(["Hi there", "How are you?"], "Fine", tok, model)
    content = (
        tok("Hi there", add_special_tokens=False)["input_ids"]
        + tok("\n", add_special_tokens=False)["input_ids"]
        + tok("How are you?", add_special_tokens=False)["input_ids"]
    )
    assert ctx == [bos] + content + [eos]
    assert resp == [bos] + tok("Fine", add_special_tokens=False)["input_ids"] + [eos]
    # truncation keeps the special tokens and the newest content
    ctx = DialogueLayout().encode_context(["Hi there", "How are you?"], tok, True, budget=4)
    assert ctx == [bos] + content[-2:] + [eos]


@pytest.mark.parametrize("seq2seq", [False, True])
def test_many_at_once_equals_one_by_one(seq2seq):
    """encode_pairs / encode_contexts tokenise in batches but must give encode_pair / encode_context exactly."""
    tok = tokenizer(seq2seq=seq2seq)
    assert tok.is_fast  # else the batched path is skipped and this compares a function with itself
    model = seq2seq_model() if seq2seq else causal_model(n_positions=24)
    contexts = [["Hi there", "How are you?"], "How are you?", [], ["word " * 30, "Hi there", "ok"], ["", "  "]]
    responses = ["Fine", "", "Fine thanks, and you?", "long " * 30, "Hi there"]
    for fmt in (DialogueLayout(), DialogueLayout(max_turns=1), DialogueLayout(turn_separator=" | ")):
        direct = [fmt.encode_pair(c, r, tok, model) for c, r in zip(contexts, responses)]
        assert list(fmt.encode_pairs(contexts, responses, tok, model)) == direct
        assert list(fmt.encode_pairs(contexts, responses, tok, model, max_response_tokens=3)) == [
            fmt.encode_pair(c, r, tok, model, max_response_tokens=3) for c, r in zip(contexts, responses)
        ]
        assert fmt.encode_contexts(contexts, tok, seq2seq, budget=5) == [
            fmt.encode_context(c, tok, seq2seq, budget=5) for c in contexts
        ]
    # a malformed item is reported as the one-by-one call reports it
    with pytest.raises(TypeError, match=r"context\[1\]"):
        list(DialogueLayout().encode_pairs([["ok"], ["ok", 3]], ["a", "b"], tok, model))
    with pytest.raises(TypeError, match="response is int"):
        list(DialogueLayout().encode_pairs([["ok"], ["ok"]], ["a", 3], tok, model))


def test_bad_format_values():
    with pytest.raises(ValueError, match="max_turns"):
        DialogueLayout(max_turns=0)
    with pytest.raises(TypeError, match=r"context\[1\]"):
        DialogueLayout().encode_context(["ok", 3], tokenizer(), False)


class _Records:
    """Collects the messages of a logger (transformers' loggers do not propagate to pytest's caplog)."""

    def __init__(self, name: str) -> None:
        import logging

        self.messages: list[str] = []
        self.logger = logging.getLogger(name)
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.messages.append(record.getMessage())

    def __enter__(self):
        self.logger.addHandler(self.handler)
        return self.messages

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)


@pytest.mark.parametrize("seq2seq", [False, True])
def test_turns_longer_than_the_tokenizer_maximum_are_tokenised_only_as_far_as_kept(seq2seq):
    """A 1,100-token turn in a 24-token window: the same ids as one by one, and no 'Token indices sequence length
    is longer than the specified maximum' from tokenising the whole turn (the tokenizer truncates it itself)."""
    tok = tokenizer(seq2seq=seq2seq)
    model = seq2seq_model() if seq2seq else causal_model(n_positions=24)
    long_turn = "word " * (tok.model_max_length + 76)
    contexts = [[long_turn, "Hi there"], [long_turn], ["Hi there", long_turn + "end"]]
    responses = ["Fine", long_turn if not seq2seq else "ok", "Hi there"]
    tok.deprecation_warnings.pop("sequence-length-is-longer-than-the-specified-maximum", None)  # warned once only
    side = tok.truncation_side
    with _Records("transformers.tokenization_utils_base") as messages:
        batched = list(DialogueLayout().encode_pairs(contexts, responses, tok, model))
        contexts_only = DialogueLayout().encode_contexts(contexts, tok, seq2seq, budget=7)
    assert not [m for m in messages if "Token indices sequence length" in m]
    assert tok.truncation_side == side
    assert batched == [DialogueLayout().encode_pair(c, r, tok, model) for c, r in zip(contexts, responses)]
    assert contexts_only == [DialogueLayout().encode_context(c, tok, seq2seq, budget=7) for c in contexts]


def test_the_layouts_response_limit_applies_unless_one_is_given():
    tok = tokenizer()
    model = causal_model()
    eos = tok.eos_token_id
    reply = tok("one two three four five six", add_special_tokens=False)["input_ids"]
    assert len(reply) > 4  # else the limit below would cut nothing
    cut = DialogueLayout(max_response_tokens=4)
    assert cut.encode_pair("Hi", "one two three four five six", tok, model)[1] == reply[:4]  # the first 4, no EOS
    assert DialogueLayout().encode_pair("Hi", "one two three four five six", tok, model)[1] == reply + [eos]
    # an explicit limit wins over the layout's, one pair or many
    assert cut.encode_pair("Hi", "one two three four five six", tok, model, max_response_tokens=2)[1] == reply[:2]
    assert [r for _, r in cut.encode_pairs(["Hi"], ["one two three four five six"], tok, model)] == [reply[:4]]
