"""The rollouts of a GRPO/RLOO step as text, gathered from every process and cut into their prompt groups.

TRL's ``GRPOTrainer`` and ``RLOOTrainer`` sample ``num_generations`` (G) completions per prompt
and lay the step's completions out so that each prompt's G completions are consecutive in the
*global* batch: process 0's slice, then process 1's, and so on. A group may straddle two
processes, so a reward function, which TRL calls on its own process's slice only, cannot see
whole groups. :func:`gather_batch` puts the slices back together on every process (and says
where this process's slice starts); :func:`~lightning_div.metrics.group.split_groups` then cuts
the whole batch into its groups; :func:`cut_share` counts the completions cut at the length
limit by TRL's own rule, from their token ids; a :class:`RolloutBatch` holds one gathered batch.
Nothing here imports TRL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_div._internal.distributed import gather_objects, rank_and_world
from lightning_div.metrics.group import split_groups

__all__ = [
    "CompletionError",
    "GatheredRollouts",
    "RolloutBatch",
    "check_grouped",
    "column_texts",
    "completion_text",
    "completion_texts",
    "cut_share",
    "end_token_ids",
    "fewest_clusters_rows",
    "gather_batch",
    "gather_rollouts",
    "num_generations_of",
    "reward_call",
]


class CompletionError(TypeError, ValueError):
    """A completion that is not text or a list of messages, or text that is not valid Unicode.

    A ``TypeError`` by kind and a ``ValueError`` by cause: the trainer's data, not the code, is
    wrong, so a callback's ``on_error="warn"`` skips the measurement with a warning instead of
    stopping training.
    """


def _valid_text(text: str, index: int) -> str:
    """``text`` if it encodes as UTF-8; a lone surrogate (half of a UTF-16 pair) is named, with its position."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise CompletionError(
            f"completions[{index}] holds a lone surrogate {text[err.start]!r} at character {err.start}: "
            "not valid Unicode text (decode the model's output with errors='replace')"
        ) from None
    return text


def completion_text(completion: Any, index: int = 0) -> str:
    """A completion as text: a string as it is; a conversational completion (a list of messages) as its
    messages' contents joined by newlines (TRL's conversational completions hold one assistant message).

    A message without text content but with ``tool_calls`` stands for its tool calls, written as
    sorted JSON (two different calls are two different texts).

    Args:
        completion: a string, or a list of ``{"role": ..., "content": ...}`` messages whose
            ``content`` is a string or a list of ``{"type": "text", "text": ...}`` parts.
        index: the completion's index, for the error.

    Returns:
        The text.

    Raises:
        CompletionError: anything else (a message with no ``content`` and no ``tool_calls``, a
            ``content`` that is not text), or text with a lone surrogate, naming ``completions[index]``.

    Examples:
        >>> completion_text([{"role": "assistant", "content": "Hi there"}])
        'Hi there'
        >>> completion_text([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}])
        '[{"function": {"arguments": "{}", "name": "f"}}]'
    """
    if isinstance(completion, str):
        return _valid_text(completion, index)
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts = []
        for message in completion:
            if not isinstance(message, dict):
                raise CompletionError(
                    f"completions[{index}] has a message {message!r}: expected {{'role': ..., 'content': str}}"
                )
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):  # multimodal content blocks: keep the text parts
                parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
            elif content is None and message.get("tool_calls"):
                parts.append(json.dumps(message["tool_calls"], sort_keys=True, default=str))
            elif content is None:
                raise CompletionError(
                    f"completions[{index}] has a message {message!r:.200} with no 'content' and no 'tool_calls': "
                    "nothing to measure"
                )
            else:
                raise CompletionError(
                    f"completions[{index}] has a message {message!r:.200}: expected {{'role': ..., 'content': str}}"
                )
        return _valid_text("\n".join(parts), index)
    raise CompletionError(
        f"completions[{index}] is {type(completion).__name__}: expected a string or a list of messages "
        "(TRL's standard or conversational format)"
    )


def completion_texts(completions: Sequence[Any]) -> list[str]:
    """:func:`completion_text` of every completion.

    Raises:
        TypeError: ``completions`` is a single string.
        CompletionError: an element is not a completion (a TypeError and a ValueError).
    """
    if isinstance(completions, str):
        raise TypeError("completions must be a list of completions, got one str")
    return [completion_text(c, i) for i, c in enumerate(completions)]


def gather_batch(local: Sequence[Any]) -> tuple[list[Any], int]:
    """Every process's ``local`` items concatenated in rank order (the global batch), and where this process's start.

    Under an initialised process group of several processes every process must call it (it is a
    collective, :func:`lightning_div._internal.distributed.gather_objects`); in a single process
    it returns ``(list(local), 0)``. Slices of different lengths are put together as they are.

    Args:
        local: this process's items (e.g. the completions TRL gave a reward function).

    Returns:
        ``(all_items, offset)``: ``all_items[offset : offset + len(local)]`` is ``local``.
    """
    parts = gather_objects(list(local))
    offset = sum(len(p) for p in parts[: rank_and_world()[0]])
    return [item for part in parts for item in part], offset


def check_grouped(prompts: Sequence[Any], num_generations: int) -> None:
    """Check that each run of ``num_generations`` consecutive completions answers one prompt.

    TRL's samplers repeat each prompt G times consecutively; a batch in another order (a custom
    sampler, a shuffled buffer) would be measured in wrong groups, silently. Prompts are compared
    as they are (text, or lists of messages).

    Args:
        prompts: the prompt of each completion, in the batch's order.
        num_generations: G.

    Raises:
        ValueError: G does not divide the batch, or a group holds two different prompts (named by index).

    Examples:
        >>> check_grouped(["a", "a", "b", "b"], 2)
        >>> check_grouped(["a", "b", "a", "b"], 2)
        Traceback (most recent call last):
        ...
        ValueError: the completions are not grouped by prompt: completion 1 answers another prompt than completion 0 of its group of num_generations=2
    """
    from lightning_div.metrics.group import check_groups

    check_groups(len(prompts), num_generations)
    g = int(num_generations)
    for start in range(0, len(prompts), g):
        for i in range(start + 1, start + g):
            if prompts[i] != prompts[start]:
                raise ValueError(
                    f"the completions are not grouped by prompt: completion {i} answers another prompt than "
                    f"completion {start} of its group of num_generations={g}"
                )


@dataclass(frozen=True)
class RolloutBatch:
    """One generation batch of a GRPO/RLOO step, whole (gathered from every process, in the global order).

    Attributes:
        prompts: each completion's prompt (each prompt's G completions consecutive).
        completions: the completions, text or conversational, as TRL gave them.
        completion_ids: each completion's token ids (as TRL gave them: cut after the EOS), or None
            when the trainer gave none.
        num_generations: G.
        step: the optimizer step this batch trains (the trainer's ``global_step`` + 1 when it was sampled:
            the step of the log row its values land in).
    """

    prompts: list[Any]
    completions: list[Any]
    completion_ids: list[list[int]] | None
    num_generations: int
    step: int


def cut_share(completion_ids: Sequence[Sequence[int]], end_ids: Collection[int]) -> float:
    """The share of completions cut at the length limit: TRL's rule, a completion whose last token id is
    none of ``end_ids`` (the EOS ids and the pad id) was cut.

    TRL 1.16 logs the same share of a batch as ``completions/clipped_ratio`` (TRL 1.0.0 took only
    the tokenizer's EOS and pad ids as end ids, so with a model whose ``generation_config`` declares
    other EOS ids its ratio also counts the completions that ended on those). A completion without
    a token is not cut (nothing reached the limit); an empty batch has share 0.

    Args:
        completion_ids: each completion's token ids (TRL's ``completion_ids``, cut after the EOS).
        end_ids: the ids a finished completion ends with.

    Returns:
        The share, in [0, 1].

    Examples:
        >>> cut_share([[5, 2], [5, 6, 7], [2], [0]], end_ids={2, 0})
        0.25
    """
    ends = {int(i) for i in end_ids}
    ids = [list(c) for c in completion_ids]
    if not ids:
        return 0.0
    return sum(1 for c in ids if c and int(c[-1]) not in ends) / len(ids)


def end_token_ids(trainer: Any) -> set[int] | None:
    """The ids a finished completion of ``trainer`` ends with, as TRL's GRPO/RLOO trainers count them: the
    tokenizer's EOS and pad ids and the model's ``generation_config.eos_token_id`` (an int or a list).

    Read from public attributes: ``trainer.processing_class`` (or a processor's ``.tokenizer``) and
    ``trainer.model.generation_config``. None without a tokenizer (the cut share is then unknown).
    """
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor holds its tokenizer
    if tokenizer is None:
        return None
    config = getattr(getattr(trainer, "model", None), "generation_config", None)
    declared = getattr(config, "eos_token_id", None)
    declared = [declared] if isinstance(declared, int) else list(declared or [])
    ids = [getattr(tokenizer, "eos_token_id", None), getattr(tokenizer, "pad_token_id", None), *declared]
    return {int(i) for i in ids if i is not None}


def num_generations_of(trainer: Any) -> int:
    """G, from the trainer's public ``args.num_generations`` (GRPOConfig's and RLOOConfig's).

    Raises:
        TypeError: a trainer without it (not a GRPO/RLOO trainer).
    """
    g = getattr(getattr(trainer, "args", None), "num_generations", None)
    if isinstance(g, bool) or not isinstance(g, int):
        raise TypeError(
            f"{type(trainer).__name__} has no args.num_generations: GroupDiversityMonitor measures TRL's "
            "GRPOTrainer and RLOOTrainer (GRPOConfig / RLOOConfig)"
        )
    return g


@dataclass(frozen=True)
class GatheredRollouts:
    """Every process's (prompt, completion, token ids) rows, gathered; read into a batch by :meth:`batch`.

    Attributes:
        rows: the global batch's rows, in rank order (a prompt or ids None where a process had none).
        local_sizes: this process's numbers of prompts, completion ids and completions, as given.
    """

    rows: list[Any]  # (prompt, completion, token ids or None) tuples
    local_sizes: tuple[int, int, int]

    def batch(self, trainer: Any, step: int) -> tuple[RolloutBatch, float | None]:
        """The whole generation batch of ``trainer`` at ``step``, its groups checked, and its length-cut share.

        The share is None when a process gave no token ids or the trainer has no tokenizer.

        Raises:
            ValueError: this process's prompts or ids do not match its completions in number, or the
                batch is not grouped by prompt (:func:`check_grouped`).
            TypeError: the trainer has no ``args.num_generations``.
        """
        prompts, ids, completions = self.local_sizes
        if prompts != completions or ids != completions:
            raise ValueError(f"{prompts} prompts and {ids} completion_ids for {completions} completions")
        every_prompt, every_completion, every_ids = ([r[k] for r in self.rows] for k in range(3))
        g = num_generations_of(trainer)
        if all(p is not None for p in every_prompt):
            check_grouped(every_prompt, g)
        known_ids = None if any(i is None for i in every_ids) else every_ids
        ends = end_token_ids(trainer) if known_ids is not None else None
        share = cut_share(known_ids, ends) if known_ids is not None and ends is not None else None
        return RolloutBatch(every_prompt, every_completion, known_ids, g, step), share


def gather_rollouts(
    prompts: Sequence[Any] | None, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None
) -> GatheredRollouts:
    """Gather this process's slice of a generation batch (as TRL hands a reward function) with the others'.

    A collective: every process must call it, before anything can fail (a process that raised first
    would leave the others waiting). What does not fit is raised later, by :meth:`GatheredRollouts.batch`.
    """
    local = list(completions)
    local_prompts = list(prompts) if prompts is not None and not isinstance(prompts, str) else [None] * len(local)
    local_ids = [None] * len(local) if completion_ids is None else [list(c) for c in completion_ids]
    rows, _ = gather_batch(list(zip(local_prompts, local, local_ids)))
    return GatheredRollouts(rows, (len(local_prompts), len(local_ids), len(local)))


def fewest_clusters_rows(
    step: int, prompts: Sequence[Any], completions: Sequence[Any], ids: np.ndarray, num_generations: int
) -> list[list[Any]]:
    """The rows of a step's sample table: the group with the fewest clusters (the first such group).

    Each row: ``[step, group, prompt, completion, cluster]``, prompt and completion as text.
    """
    groups = split_groups(list(range(len(completions))), num_generations)
    if not groups:
        return []
    best = min(range(len(groups)), key=lambda k: len(np.unique(ids[groups[k]])))
    return [
        [step, best, completion_text(prompts[i], i), completion_text(completions[i], i), int(ids[i])]
        for i in groups[best]
    ]


def column_texts(trainer: Any, column: str, who: str) -> list[str]:
    """A column of the trainer's ``train_dataset`` as texts (text or conversational entries, as completions are read).

    Raises:
        ValueError: the training dataset has no such column (its columns named).
    """
    dataset = getattr(trainer, "train_dataset", None)
    columns = getattr(dataset, "column_names", None) or []
    if column not in columns:
        raise ValueError(
            f"{who}: cluster_column={column!r} is not a column of the training dataset (it has {list(columns)})"
        )
    return [completion_text(r, i) for i, r in enumerate(dataset[column])]  # type: ignore[index]


def reward_call(
    completions: Sequence[Any] | None, kwargs: dict[str, Any], name: str, who: str
) -> tuple[Sequence[Any], Callable[[str, float], None]]:
    """The completions and TRL's ``log_metric`` of a reward function's call (TRL >= 1.0's contract), checked.

    Args:
        completions: the call's ``completions=``.
        kwargs: the call's other keyword arguments (TRL's).
        name: the reward function's ``__name__``; who: its class, as the errors name them.

    Raises:
        TypeError: ``completions`` missing or a string, or no callable ``log_metric`` (a TRL older than
            1.0, or a trainer that is not GRPO/RLOO).
    """
    if completions is None or isinstance(completions, str):
        raise TypeError(f"{name} needs completions=, a list of completions")
    log_metric = kwargs.get("log_metric")
    if not callable(log_metric):
        raise TypeError(
            f"{who} was called without TRL's log_metric=: it needs TRL >= 1.0, whose GRPOTrainer "
            "and RLOOTrainer pass log_metric= to every reward function (pip install -U 'trl>=1.0')"
        )
    return completions, log_metric
