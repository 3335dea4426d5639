"""How a (context, response) pair becomes token ids — one definition for training, generation and scoring.

Causal LMs (DialoGPT / GPT-2): every context turn is followed by the separator
(default: the EOS token, DialoGPT's format ``t1<eos>t2<eos>``), then the response and
EOS. Seq2seq (BlenderBot / BART / T5): the turns joined by the separator (default
``"\\n"``) with the tokenizer's own special tokens go to the encoder; the decoder
target is the response with the tokenizer's special tokens (EOS included).

Contexts keep at most ``max_turns`` turns and are truncated from the left (oldest
tokens first) to fit ``max_context_tokens`` or the model's window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Union

from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.counts import check_count
from lightning_div._internal.deprecation import moved_names

Context = Union[str, Sequence[str]]


def is_seq2seq(model: Any) -> bool:
    """True for encoder-decoder models (read from ``model.config.is_encoder_decoder``)."""
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def model_window(model: Any) -> int | None:
    """Maximum number of positions the model accepts (None when the config does not say)."""
    config = getattr(model, "config", None)
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None  # e.g. T5 (relative positions)


def special_tokens_around(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after a single text (e.g. BART: [<s>], [</s>]).

    Read off by probing, because transformers 4 and 5 expose different helpers for it.
    """
    probe = "hello"
    bare = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(probe, add_special_tokens=True)["input_ids"])
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    raise ValueError(f"cannot tell which special tokens {type(tokenizer).__name__} adds around a text")


def target_prefix(tokenizer: Any) -> list[int]:
    """The ids a tokenizer puts before a decoder target (BART: ``[<s>]``; BlenderBot, T5: none).

    :meth:`DialogueLayout.encode_response` keeps them (the model was trained to see them), and
    scoring conditions on them but never scores them: an RUQ score is over the response
    tokens and EOS, as fairseq, the RUQ paper's toolkit, scores it.
    """
    probe = "hello"
    bare = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(text_target=probe)["input_ids"])
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start]
    raise ValueError(f"cannot tell which special tokens {type(tokenizer).__name__} puts before a target text")


def as_turns(context: Context, where: str = "context") -> list[str]:
    """A context given as one string or a list of turns, as a list of turns."""
    if isinstance(context, str):
        return [context]
    turns = list(context)
    for i, t in enumerate(turns):
        if not isinstance(t, str):
            raise TypeError(f"{where}[{i}] is {type(t).__name__}, expected str")
    return turns


class MemoTokenizer:
    """A tokenizer whose single-text calls are answered from a cache filled by one batched call.

    ``encode_pair`` tokenises turn by turn; turns recur in up to ``max_history + 1``
    examples and a fast tokenizer encodes a list far quicker than one text at a time, so
    every distinct text is encoded once, in batches. Results equal the direct calls.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[tuple, list[int]] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._tokenizer, name)
        if not callable(value):  # e.g. eos_token_id, read once per example: look it up once
            self.__dict__[name] = value
        return value

    def warm(
        self,
        texts: Sequence[str],
        target: bool = False,
        batch_size: int = 4096,
        keep: int | None = None,
        side: str = "left",
    ) -> None:
        """Encode ``texts`` in batches (no-op for slow tokenizers, whose batch call is no faster).

        ``keep``: only this many tokens of each text can matter to the caller (its last ones
        for ``side="left"``, its first for ``"right"``); the tokenizer truncates to them itself,
        so a turn longer than the tokenizer's ``model_max_length`` is not reported as one that
        would overflow the model (it never reaches the model whole). Targets are never truncated.
        """
        if not getattr(self._tokenizer, "is_fast", False):
            return
        todo = [t for t in dict.fromkeys(texts) if self._key(t, target) not in self._cache]
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            if target:
                ids = self._tokenizer(text_target=chunk)["input_ids"]
            elif keep is None:
                ids = self._tokenizer(chunk, add_special_tokens=False)["input_ids"]
            else:
                with _truncation_side(self._tokenizer, side):
                    ids = self._tokenizer(chunk, add_special_tokens=False, truncation=True, max_length=max(keep, 1))[
                        "input_ids"
                    ]
            for text, row in zip(chunk, ids):
                self._cache[self._key(text, target)] = list(row)

    @staticmethod
    def _key(text: str, target: bool) -> tuple:
        # warm() encodes texts as encode_pair asks for them: contexts without special tokens, seq2seq targets with
        return ("target", text, True) if target else ("text", text, False)

    def __call__(
        self, text: Any = None, text_target: Any = None, add_special_tokens: bool = True, **kwargs: Any
    ) -> Any:
        single = text if text_target is None else text_target
        if kwargs or (text is None) == (text_target is None) or not isinstance(single, str):
            return self._tokenizer(text, text_target=text_target, add_special_tokens=add_special_tokens, **kwargs)
        kind = "text" if text_target is None else "target"
        key = (kind, single, add_special_tokens)
        if key not in self._cache:
            ids = self._tokenizer(
                **{"text" if kind == "text" else "text_target": single}, add_special_tokens=add_special_tokens
            )["input_ids"]
            self._cache[key] = list(ids)
        return {"input_ids": self._cache[key]}


@contextmanager
def _truncation_side(tokenizer: Any, side: str) -> Iterator[None]:
    """The tokenizer truncating from ``side`` for the block (Hugging Face has no per-call argument)."""
    before = tokenizer.truncation_side
    tokenizer.truncation_side = side
    try:
        yield
    finally:
        tokenizer.truncation_side = before


def model_layout(seq2seq: bool, window: int | None = None) -> Any:
    """A stand-in for a model carrying only what DialogueLayout reads from one: encoder-decoder or not, window.

    Used before a model exists, and instead of the real model while encoding a corpus
    (reading a Hugging Face config attribute is slow enough to matter 100,000 times over).
    """
    return SimpleNamespace(config=SimpleNamespace(is_encoder_decoder=seq2seq, max_position_embeddings=window))


@dataclass(frozen=True)
class DialogueLayout:
    """How a dialogue becomes tokens: the turn separator and the limits, shared by the datamodule and the monitors.

    A datamodule exposes its layout as ``dm.layout``; a Lightning monitor given none uses it, so
    that what is measured is laid out as what is trained on. In a LightningCLI config it is a
    nested mapping (``layout: {max_turns: 2}``).

    Args:
        turn_separator: text placed after each turn (causal) or between turns (seq2seq);
            ``None`` = the EOS token for causal models and ``"\\n"`` for seq2seq.
        max_turns: keep only the last ``max_turns`` turns of a context (None = all).
        max_context_tokens: left-truncate the context to this many tokens (None = fit the
            model window, e.g. BlenderBot's 128).
        max_response_tokens: keep a response's first this many tokens when a pair is encoded
            (:meth:`encode_pair`; None = what leaves one context token in a causal window, the
            whole window for seq2seq).

    Raises:
        ValueError: a limit that is not an integer >= 1 or None (named).
    """

    turn_separator: str | None = None
    max_turns: int | None = None
    max_context_tokens: int | None = None
    max_response_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_context_tokens", "max_response_tokens"):
            object.__setattr__(self, name, check_count(f"DialogueLayout.{name}", getattr(self, name)))
        if self.turn_separator is not None and not isinstance(self.turn_separator, str):
            raise ValueError(f"DialogueLayout.turn_separator must be a string or None, got {self.turn_separator!r}")

    def _turns(self, context: Context) -> list[str]:
        turns = as_turns(context)
        return turns[-self.max_turns :] if self.max_turns else turns

    def context_budget(self, model: Any, reserve: int = 0) -> int | None:
        """How many context tokens fit: ``max_context_tokens`` and the window minus ``reserve``.

        Args:
            model: the model (its window is read from its config).
            reserve: positions kept free, e.g. for generated tokens.

        Returns:
            The number of context tokens, or None when nothing limits it.
        """
        limits = []
        if self.max_context_tokens is not None:
            limits.append(self.max_context_tokens)
        window = model_window(model)
        if window is not None:
            limits.append(max(window - (0 if is_seq2seq(model) else reserve), 1))
        return min(limits) if limits else None

    def encode_context(self, context: Context, tokenizer: Any, seq2seq: bool, budget: int | None = None) -> list[int]:
        """Context token ids, oldest tokens dropped first when over ``budget``; never empty.

        Args:
            context: a string or a list of turns (oldest first).
            tokenizer: the model's tokenizer.
            seq2seq: the encoder-decoder layout.
            budget: the most context tokens (None = no limit but ``max_context_tokens``).

        Returns:
            The token ids.
        """
        turns = self._turns(context)
        if seq2seq:
            sep = "\n" if self.turn_separator is None else self.turn_separator
            sep_ids = tokenizer(sep, add_special_tokens=False)["input_ids"] if sep else []
            content: list[int] = []
            for i, turn in enumerate(turns):
                if i:
                    content.extend(sep_ids)
                content.extend(tokenizer(turn, add_special_tokens=False)["input_ids"])
            prefix, suffix = special_tokens_around(tokenizer)
            if budget is not None:
                content = content[max(0, len(content) - max(budget - len(prefix) - len(suffix), 1)) :]
            return prefix + content + suffix

        if self.turn_separator is None:
            if tokenizer.eos_token_id is None:
                raise ValueError("the tokenizer has no EOS token; set DialogueLayout(turn_separator=...)")
            sep_ids = [tokenizer.eos_token_id]
        else:
            sep_ids = tokenizer(self.turn_separator, add_special_tokens=False)["input_ids"]
        ids: list[int] = []
        for turn in turns:
            ids.extend(tokenizer(turn, add_special_tokens=False)["input_ids"])
            ids.extend(sep_ids)
        if budget is not None:
            ids = ids[max(0, len(ids) - budget) :]
        if not ids:  # an empty context still needs one position to condition on
            start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
            ids = [start]
        return ids

    def _memo(self, contexts: Sequence[Any], tokenizer: Any, budget: int | None = None) -> MemoTokenizer:
        """A MemoTokenizer already holding every turn the contexts keep.

        With ``budget`` (the most context tokens any of these contexts may keep) each turn is
        tokenised to its last ``budget`` tokens only: a context keeps at most its last
        ``budget`` tokens, so no token beyond a turn's last ``budget`` can be among them, and
        the encoded contexts are the same as from whole turns.
        """
        turns: list[str] = []
        for context in contexts:
            try:
                turns.extend(self._turns(context))
            except TypeError:  # a malformed context is reported by encode_context, in order
                pass
        memo = MemoTokenizer(tokenizer)
        memo.warm(turns, keep=budget, side="left")
        return memo

    def encode_contexts(
        self, contexts: Sequence[Context], tokenizer: Any, seq2seq: bool, budget: int | None = None
    ) -> list[list[int]]:
        """:meth:`encode_context` of many contexts, every distinct turn tokenised once, in batches.

        Args:
            contexts: strings or lists of turns.
            tokenizer: the model's tokenizer.
            seq2seq: the encoder-decoder layout.
            budget: the most context tokens per context.

        Returns:
            One id list per context, equal to :meth:`encode_context`'s.
        """
        memo = self._memo(contexts, tokenizer, budget)
        return [self.encode_context(c, memo, seq2seq, budget) for c in contexts]

    @staticmethod
    def encode_response(response: str, tokenizer: Any, seq2seq: bool) -> list[int]:
        """Target token ids of a response, ending with EOS (the token RUQ scores include).

        Args:
            response: the response text ("" gives EOS alone).
            tokenizer: the model's tokenizer.
            seq2seq: the encoder-decoder layout.

        Returns:
            The token ids, EOS last.
        """
        if not isinstance(response, str):
            raise TypeError(f"response is {type(response).__name__}, expected str")
        if seq2seq:
            ids = list(tokenizer(text_target=response)["input_ids"])
            if tokenizer.eos_token_id is not None and (not ids or ids[-1] != tokenizer.eos_token_id):
                ids.append(tokenizer.eos_token_id)
            return ids
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token, so the end of a response cannot be scored")
        return list(tokenizer(response, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]

    def encode_pair(
        self, context: Context, response: str, tokenizer: Any, model: Any, max_response_tokens: int | None = None
    ) -> tuple[list[int], list[int]]:
        """(context ids, response ids) for training or scoring, both fitted to the model window.

        Responses longer than ``max_response_tokens`` keep their first tokens.

        Args:
            context: a string or a list of turns.
            response: the response text.
            tokenizer: the model's tokenizer.
            model: the model (its window and layout are read from it).
            max_response_tokens: the most response tokens (None = the layout's ``max_response_tokens``).

        Returns:
            ``(context_ids, response_ids)``.
        """
        return self._encode_pair(context, response, tokenizer, tokenizer, model, max_response_tokens)

    def _response_limit(self, model: Any, max_response_tokens: int | None) -> int | None:
        if max_response_tokens is None:
            max_response_tokens = self.max_response_tokens
        window = model_window(model)
        if max_response_tokens is None and window is not None:
            return window if is_seq2seq(model) else window - 1
        return max_response_tokens

    def _encode_pair(
        self,
        context: Context,
        response: str,
        context_tokenizer: Any,
        response_tokenizer: Any,
        model: Any,
        max_response_tokens: int | None,
    ) -> tuple[list[int], list[int]]:
        seq2seq = is_seq2seq(model)
        response_ids = self.encode_response(response, response_tokenizer, seq2seq)
        limit = self._response_limit(model, max_response_tokens)
        if limit is not None and len(response_ids) > limit:
            response_ids = response_ids[:limit]
        budget = self.context_budget(model, reserve=len(response_ids))
        return self.encode_context(context, context_tokenizer, seq2seq, budget), response_ids

    def encode_pairs(
        self,
        contexts: Sequence[Context],
        responses: Sequence[str],
        tokenizer: Any,
        model: Any,
        max_response_tokens: int | None = None,
        show_progress: bool = False,
        desc: str = "tokenising",
    ) -> Iterator[tuple[list[int], list[int]]]:
        """:meth:`encode_pair` of many pairs, equal to it pair by pair, with every distinct text tokenised once, in batches.

        Args:
            contexts: strings or lists of turns.
            responses: one response per context.
            tokenizer: the model's tokenizer.
            model: the model (its window and layout are read from it).
            max_response_tokens: the most response tokens (None = the layout's ``max_response_tokens``).
            show_progress: a tqdm bar.
            desc: the bar's label.

        Returns:
            One ``(context_ids, response_ids)`` per pair.
        """
        seq2seq = is_seq2seq(model)
        layout = model_layout(seq2seq, model_window(model))
        # Turns and responses are tokenised only as far as they can be kept (see _memo): the most
        # context any pair keeps is the budget with no response reserved; a causal response keeps
        # its first `limit` tokens (EOS follows them). Two memos: a text can be a turn and a response.
        memo = self._memo(contexts, tokenizer, self.context_budget(layout, reserve=0))
        responses_memo = MemoTokenizer(tokenizer)
        limit = self._response_limit(layout, max_response_tokens)
        responses_memo.warm(
            [r for r in responses if isinstance(r, str)],
            target=seq2seq,  # encode_pair names bad ones
            keep=None if seq2seq or limit is None else limit,
            side="right",
        )
        for context, response in tqdm(
            zip(contexts, responses), total=len(contexts), desc=desc, disable=bar_disabled(show_progress), leave=False
        ):
            yield self._encode_pair(context, response, memo, responses_memo, layout, max_response_tokens)


# 0.2's name of DialogueLayout ("format" also meant a file format): importable, with a warning, for one release
__getattr__ = moved_names(__name__, {"DialogueFormat": (__name__, "DialogueLayout")})
