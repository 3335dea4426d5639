"""Pools of responses: N sampled replies per prompt, built from a causal LM or read from a JSONL file.

A :class:`Pool` is one prompt, its responses and (optionally) a quality score per response:
what :func:`~lightning_div.preference.pairs.diverse_preference_pairs` picks a chosen and a
rejected reply from.

**Building** (:func:`build_pools`): the prompts are cut into chunks of ``chunk_size`` in the
order given; each chunk is one left-padded ``generate`` call with ``num_return_sequences=N``,
inside a forked RNG seeded from ``(seed, chunk index)`` alone. A chunk's pools therefore do not
depend on which chunks ran before it, nor on which process ran it: a build resumed from its
file, or split over processes (each rank takes every ``world``-th chunk), gives the pools an
uninterrupted single-process build gives. The prompt is the text the model reads, verbatim (as
TRL's trainers read a ``prompt`` column): for the base model a turn followed by its EOS token;
a prompt given as chat messages is rendered with the tokenizer's chat template.

**The file** (JSONL): a first line ``{"settings": {...}}`` (what decides the pools: N, seed,
chunk size, decoding), then one pool per line ``{"prompt": ..., "responses": [...]}``. After
every chunk the whole file is written to a temporary file and renamed over the old one, so a
build killed at any moment leaves the pools of whole chunks, never half a line; a resumed build
checks that the settings and the prompts so far are the ones asked for.

**Reading a user's pools** (:func:`read_pools`): one JSON object per line with ``prompt`` (a
string, or a list of ``{"role", "content"}`` messages), ``responses`` (a list of strings) and
optionally ``quality`` (one finite number per response); a mistake is a ``ValueError`` naming
the file and the line. Every prompt of a file is text, or every prompt chat messages: TRL's
``DPOTrainer`` reads a dataset in one form, so a file mixing them (two sources joined) is refused
at the first line of the other form, not when the pairs become a dataset; to mix them, render the
messages as text with the tokenizer's chat template first. A string that is not Unicode text (a
lone surrogate, ``"\\ud800"``: valid JSON) is refused where it is read, naming its field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

__all__ = ["POOL_SAMPLING", "Pool", "as_pool", "build_pools", "read_pools", "write_pools"]

#: A prompt: the text the model reads, or chat messages (``[{"role": "user", "content": ...}]``).
Prompt = Union[str, list[dict[str, str]]]

POOL_SAMPLING: dict[str, Any] = {
    "do_sample": True,
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "no_repeat_ngram_size": 0,
}
"""Sampling defaults of :func:`build_pools`: plain ancestral sampling (temperature 1, no top-k or top-p cut,
no n-gram blocking), so that a pool shows what the policy itself would say."""


@dataclass
class Pool:
    """One prompt, its responses and (optionally) one quality score per response.

    Args:
        prompt: the text the model reads, or a list of chat messages.
        responses: the sampled replies (at least two for a pair).
        quality: one finite score per response, or None (scored later).

    Examples:
        >>> Pool("Hi!", ["Hello.", "Hey, how are you?"], [0.2, 0.9]).quality
        [0.2, 0.9]
    """

    prompt: Prompt
    responses: list[str]
    quality: list[float] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """The pool as one JSONL record (``quality`` only when it has one)."""
        out: dict[str, Any] = {"prompt": self.prompt, "responses": list(self.responses)}
        if self.quality is not None:
            out["quality"] = list(self.quality)
        return out


def _check_text(text: str, where: str, field: str) -> str:
    """``text`` if it is Unicode text; a lone surrogate (valid JSON ``"\\ud800"``, not text) is a ``ValueError``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}: {field} holds a lone surrogate ({text[e.start]!r} at character {e.start}), which is not "
            "Unicode text (half of an escaped pair?); fix the data"
        ) from None
    return text


def _check_prompt(prompt: Any, where: str) -> Prompt:
    if isinstance(prompt, str):
        return _check_text(prompt, where, "prompt")
    if isinstance(prompt, (list, tuple)) and prompt:
        messages = []
        for k, message in enumerate(prompt):
            if (
                not isinstance(message, Mapping)
                or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)
            ):
                raise ValueError(
                    f"{where}: prompt[{k}] must be a message {{'role': str, 'content': str}}, got {message!r}"
                )
            for key in ("role", "content"):
                _check_text(message[key], where, f"prompt[{k}][{key!r}]")
            messages.append({"role": str(message["role"]), "content": str(message["content"])})
        return messages
    raise ValueError(f"{where}: prompt must be a string or a non-empty list of chat messages, got {prompt!r}")


def _form(prompt: Prompt) -> str:
    return "text" if isinstance(prompt, str) else "chat messages"


def check_one_form(prompts: Sequence[Prompt], names: Sequence[str]) -> None:
    """Every prompt text, or every prompt chat messages: TRL's ``DPOTrainer`` reads a dataset in one form.

    Args:
        prompts: the checked prompts.
        names: how an error names each (``"pools[3]"``, ``"pools.jsonl line 4"``).

    Raises:
        ValueError: the first prompt of the other form than the first one, named with the first one.
    """
    if not prompts:
        return
    first = _form(prompts[0])
    for prompt, name in zip(prompts, names):
        if _form(prompt) != first:
            # "pools.jsonl line 4" and "pools.jsonl line 1" -> "... but line 1's is text": the file named once
            other = names[0]
            head, _, tail = other.rpartition(" line ")
            if tail and name.startswith(head + " line "):
                other = "line " + tail
            raise ValueError(
                f"{name}: a prompt of {_form(prompt)}, but {other}'s is {first}: the pools of one set are all "
                "text or all chat messages (TRL's DPOTrainer reads one form); split them, or render the "
                "messages with the tokenizer's chat template (tokenizer.apply_chat_template(..., tokenize=False))"
            )


def check_quality(values: Any, n: int, where: str, name: str = "quality") -> list[float]:
    """``values`` as ``n`` finite floats; a ``ValueError`` naming ``where``, ``name`` and the index otherwise."""
    # a string or a mapping is one value of the wrong kind, not a list to split into characters or keys
    if isinstance(values, (str, bytes, Mapping)):
        raise ValueError(f"{where}: {name} must be a list of numbers, got {type(values).__name__}")
    shape = getattr(values, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ValueError(f"{where}: {name} must be one number per response, got an array of shape {tuple(shape)}")
    if not isinstance(values, Sequence):
        try:
            values = list(values)
        except TypeError:
            raise ValueError(f"{where}: {name} must be a list of numbers, got {type(values).__name__}") from None
    if len(values) != n:
        raise ValueError(f"{where}: {name} has {len(values)} scores for {n} responses; give one per response")
    out = []
    for k, v in enumerate(values):
        if getattr(v, "shape", ()) != ():  # an array's element that is an array itself
            raise ValueError(f"{where}: {name}[{k}] is an array of shape {tuple(v.shape)}, not a number")
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise ValueError(f"{where}: {name}[{k}] = {v!r} is not a number")
        x = float(v)
        if not math.isfinite(x):
            raise ValueError(f"{where}: {name}[{k}] is {x!r}; scores must be finite numbers")
        out.append(x)
    return out


def as_pool(value: Pool | Mapping[str, Any], where: str = "pool") -> Pool:
    """A :class:`Pool` from a pool or a mapping with ``prompt``, ``responses`` and optional ``quality`` (checked).

    Args:
        value: the pool.
        where: names it in an error (``"pools[3]"``, ``"pools.jsonl line 4"``).

    Returns:
        A checked copy.

    Raises:
        ValueError: a missing field, a prompt that is neither text nor messages, a response that
            is not a string, a string holding a lone surrogate (not Unicode text), or quality
            that is not one finite number per response (a string, a mapping or a 2-D array is
            named whole, not split).

    Examples:
        >>> as_pool({"prompt": "Hi!", "responses": ["Hello.", "Hey."]}).responses
        ['Hello.', 'Hey.']
    """
    if isinstance(value, Pool):
        prompt, responses, quality = value.prompt, value.responses, value.quality
    elif isinstance(value, Mapping):
        for key in ("prompt", "responses"):
            if key not in value:
                raise ValueError(f"{where}: no {key!r} field (a pool has 'prompt', 'responses' and optional 'quality')")
        prompt, responses, quality = value["prompt"], value["responses"], value.get("quality")
    else:
        raise ValueError(f"{where}: expected a Pool or a mapping, got {type(value).__name__}")
    prompt = _check_prompt(prompt, where)
    if isinstance(responses, (str, bytes)) or not isinstance(responses, Sequence):
        raise ValueError(f"{where}: responses must be a list of strings, got {type(responses).__name__}")
    for k, r in enumerate(responses):
        if not isinstance(r, str):
            raise ValueError(f"{where}: responses[{k}] is {type(r).__name__}, expected str")
        _check_text(r, where, f"responses[{k}]")
    checked = None if quality is None else check_quality(quality, len(responses), where)
    return Pool(prompt, list(responses), checked)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        try:
            yield from enumerate(f, 1)
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e.reason})") from None


def read_pool_lines(path: str | os.PathLike) -> tuple[dict[str, Any] | None, list[Pool], list[int]]:
    """The settings line (or None), the pools and each pool's line number in the file."""
    path = Path(path)
    settings: dict[str, Any] | None = None
    pools: list[Pool] = []
    numbers: list[int] = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
        if isinstance(record, dict) and set(record) == {"settings"} and not pools and settings is None:
            settings = record["settings"]
            continue
        pools.append(as_pool(record, where))
        numbers.append(number)
        check_one_form([pools[0].prompt, pools[-1].prompt], [f"{path} line {numbers[0]}", where])
    return settings, pools, numbers


def read_pools(path: str | os.PathLike) -> list[Pool]:
    """The pools of a JSONL file (one ``{"prompt", "responses", "quality"?}`` per line).

    A first line ``{"settings": ...}`` (what :func:`build_pools` writes) is skipped; blank lines too.

    Args:
        path: the file.

    Returns:
        The pools, in file order.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line that is not JSON or not a pool, a lone surrogate in a string, or a
            prompt of the other form (text or chat messages) than the first line's, named by file
            and line number.
    """
    return read_pool_lines(path)[1]


def write_pools(path: str | os.PathLike, pools: Sequence[Pool], settings: Mapping[str, Any] | None = None) -> Path:
    """Write ``pools`` as JSONL, atomically (a temporary file renamed over ``path``).

    Args:
        path: the file (missing parent folders are made).
        pools: the pools.
        settings: written as a first line ``{"settings": ...}`` when given.

    Returns:
        The path.

    Raises:
        ValueError: a pool :func:`as_pool` refuses, or prompts mixing text and chat messages
            (:func:`read_pools` would refuse the file); nothing is written.
    """
    from lightning_div._internal.io import atomic_write

    checked = [as_pool(p, f"pools[{i}]") for i, p in enumerate(pools)]
    check_one_form([p.prompt for p in checked], [f"pools[{i}]" for i in range(len(checked))])
    lines = [] if settings is None else [json.dumps({"settings": dict(settings)}, ensure_ascii=False)]
    lines += [json.dumps(p.to_json(), ensure_ascii=False) for p in checked]
    with atomic_write(path, "wb", make_parents=True) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return Path(path)


def chunk_seed(seed: int, chunk: int) -> int:
    """The RNG seed of one chunk: a function of ``(seed, chunk)`` only (numpy's SeedSequence).

    Examples:
        >>> chunk_seed(0, 1) == chunk_seed(0, 1) != chunk_seed(0, 2)
        True
    """
    import numpy as np

    return int(np.random.SeedSequence([int(seed), int(chunk)]).generate_state(1)[0])


def _prompt_text(prompt: Prompt, tokenizer: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "a prompt given as chat messages needs a tokenizer with a chat template; this tokenizer has none "
            "(give the prompt as the text the model reads)"
        )
    return str(tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True))


def _sample_chunk(
    model: Any, tokenizer: Any, texts: list[str], n: int, seed: int, max_new_tokens: int, kwargs: dict[str, Any]
) -> list[list[str]]:
    from lightning_div.model.generation import _decode, _eos_ids, evaluation_mode, model_device, pad_batch, pad_id_of

    pad_id = pad_id_of(tokenizer)
    encoded = [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    for i, row in enumerate(encoded):
        if not row:
            raise ValueError(f"prompt {texts[i]!r} has no tokens; a pool needs something to reply to")
    ids, mask = pad_batch(encoded, pad_id, "left", model_device(model))
    with evaluation_mode(model, seed):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            num_return_sequences=n,
            pad_token_id=pad_id,
            **kwargs,
        )
    flat = _decode(tokenizer, out[:, ids.shape[1] :].cpu(), _eos_ids(model, tokenizer))
    return [flat[i * n : (i + 1) * n] for i in range(len(texts))]


def build_pools(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Prompt],
    num_responses: int,
    *,
    path: str | os.PathLike | None = None,
    seed: int = 0,
    chunk_size: int = 8,
    max_new_tokens: int = 40,
    show_progress: bool = True,
    **generation_kwargs: Any,
) -> list[Pool]:
    """Sample ``num_responses`` replies to each prompt from a causal LM: one :class:`Pool` per prompt.

    Decoding defaults to :data:`POOL_SAMPLING` (plain sampling at temperature 1); keywords
    override it (``top_p=0.9``, ``temperature=0.8``). Chunk ``c`` of ``chunk_size`` prompts is
    sampled with the seed :func:`chunk_seed` ``(seed, c)`` inside a forked RNG (the caller's
    random stream is untouched), so the pools do not depend on resuming or on the number of
    processes. Under ``torch.distributed`` each rank samples every ``world``-th chunk and the
    ranks exchange them; every rank returns all the pools, and rank 0 writes the file.

    Args:
        model: a Hugging Face causal LM (seq2seq models are not supported here).
        tokenizer: its tokenizer (never modified).
        prompts: the text each reply follows (verbatim, as TRL's trainers read a prompt), or chat messages.
        num_responses: N, replies per prompt (>= 2: a pair needs two).
        path: a JSONL file to write after every chunk and to resume from; None = nothing written.
        seed: the seed every chunk's seed derives from.
        chunk_size: prompts per ``generate`` call.
        max_new_tokens: the longest reply, in tokens.
        show_progress: a progress bar over chunks.
        **generation_kwargs: decoding options for ``model.generate``.

    Returns:
        One pool per prompt, in order, without quality scores.

    Raises:
        TypeError: ``prompts`` that is not a list of prompts (one string, a mapping).
        ValueError: N < 2, chunk_size < 1, a seq2seq model, a resumed file made with other
            settings or other prompts, a prompt without tokens, or prompts mixing text and
            chat messages (a DPO dataset is in one form).
    """
    from tqdm.auto import tqdm

    from lightning_div._internal.bars import bar_disabled
    from lightning_div._internal.distributed import gather_objects, rank_and_world
    from lightning_div.model.formatting import is_seq2seq

    if isinstance(prompts, (str, bytes, Mapping, Pool)) or not isinstance(prompts, Iterable):
        # a string is a sequence too: it was one pool per character, each one sampled
        raise TypeError(
            f"prompts must be a list of prompts (each the text the model reads, or chat messages), got "
            f"{type(prompts).__name__}; for one prompt give [prompt]"
        )
    if isinstance(num_responses, bool) or not isinstance(num_responses, int) or num_responses < 2:
        raise ValueError(f"num_responses must be an integer >= 2 (a pair needs two replies), got {num_responses!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if is_seq2seq(model):
        raise ValueError("build_pools samples from a causal LM; a seq2seq model's prompt and reply are not one text")
    checked = [_check_prompt(p, f"prompts[{i}]") for i, p in enumerate(prompts)]
    check_one_form(checked, [f"prompts[{i}]" for i in range(len(checked))])
    texts = [_prompt_text(p, tokenizer) for p in checked]
    kwargs = {**POOL_SAMPLING, **generation_kwargs}
    max_new = int(kwargs.pop("max_new_tokens", max_new_tokens))
    settings = {
        "num_responses": num_responses,
        "seed": int(seed),
        "chunk_size": chunk_size,
        "max_new_tokens": max_new,
        "generation": {k: kwargs[k] for k in sorted(kwargs)},
    }
    done: list[Pool] = []
    target = None if path is None else Path(path)
    if target is not None and target.exists():
        saved, done, _ = read_pool_lines(target)
        if saved != json.loads(json.dumps(settings)):
            raise ValueError(
                f"{target}: made with other settings ({saved}) than asked now ({settings}); "
                "give another path, or the same settings to resume"
            )
        for i, pool in enumerate(done):
            if i >= len(checked) or pool.prompt != checked[i]:
                raise ValueError(f"{target}: pool {i} answers another prompt than prompts[{i}]; give another path")
        if len(done) % chunk_size and len(done) != len(checked):
            raise ValueError(f"{target}: {len(done)} pools is not a whole number of chunks of {chunk_size}")
    rank, world = rank_and_world()
    n_chunks = -(-len(checked) // chunk_size)
    # whole chunks were written, or every pool (the last chunk may be short): start after them
    todo = list(range(-(-len(done) // chunk_size), n_chunks))
    pools = list(done)
    bar = tqdm(total=len(todo), desc="pools", unit="chunk", disable=bar_disabled(show_progress) or rank != 0)
    # the ranks go through the chunks in rounds of `world`, one chunk each, and write after every round
    for start in range(0, len(todo), world):
        round_chunks = todo[start : start + world]
        mine: list[list[str]] | None = None
        if rank < len(round_chunks):
            c = round_chunks[rank]
            lo, hi = c * chunk_size, min((c + 1) * chunk_size, len(checked))
            mine = _sample_chunk(model, tokenizer, texts[lo:hi], num_responses, chunk_seed(seed, c), max_new, kwargs)
        gathered = gather_objects(mine)
        for c, replies in zip(round_chunks, gathered):
            lo = c * chunk_size
            assert replies is not None  # every chunk of the round had a rank
            pools += [Pool(checked[lo + k], r) for k, r in enumerate(replies)]
        if target is not None and rank == 0:
            write_pools(target, pools, settings)
        bar.update(len(round_chunks))
    bar.close()
    return pools
