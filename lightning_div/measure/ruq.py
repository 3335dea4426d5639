"""RUQ (Khayrallah & Sedoc, 2021) of a model on a fixed sample: its value, its margin, its alert and its plot.

One implementation for every front end: the Lightning :class:`~lightning_div.callbacks.RUQMonitor`
and the Hugging Face :class:`~lightning_div.integrations.transformers.TrainerDiversityMonitor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightning_div._internal.distributed import distributed_map
from lightning_div.measure.alerts import RUQAlert  # RUQ's alert, beside the group alert; importable from here too
from lightning_div.measure.base import Measure
from lightning_div.metrics.ruq import ReferenceChoice, check_reference, ruq_per_idk
from lightning_div.model.generation import generate_responses
from lightning_div.model.scoring import candidate_logprobs, profile_from_logprobs, scores_from_logprobs
from lightning_div.pairs import DialoguePair

__all__ = ["DEFAULT_IDK", "RUQAlert", "RUQMeasure", "check_idk_responses", "ruq_profile_figure"]

#: The paper's two IDK responses; the first is the headline.
DEFAULT_IDK = ("I don't know.", "I don't know what to do.")


def check_idk_responses(idk_responses: Sequence[str], allow_empty: bool = False) -> list[str]:
    """The IDK strings as a list, or a ValueError: each must be a non-empty string."""
    if isinstance(idk_responses, (str, bytes)):  # a string is a sequence too: it would become its characters
        raise ValueError(
            f"idk_responses must be a list of strings, got one string {idk_responses!r}: pass [{idk_responses!r}]"
        )
    idk = list(idk_responses)
    if (not idk and not allow_empty) or not all(isinstance(s, str) and s.strip() for s in idk):
        raise ValueError(f"idk_responses must be non-empty strings, got {idk_responses!r}")
    return idk


class RUQMeasure(Measure):
    """RUQ and its margin against every IDK string, over a sample of pairs (one batched, sharded scoring pass).

    RUQ = 100 x the share of prompts whose reference has a higher length-normalised
    log-likelihood than the IDK response; the margin is the mean of (reference score - IDK
    score) in nats per token (:func:`~lightning_div.metrics.ruq.ruq_per_idk`).

    Args:
        idk_responses: the IDK strings; the first is the headline (``ruq``, ``ruq_margin``).
        reference: with several references, ``"lowest"`` or ``"first"``.
        shared_contexts: score a prompt's references and IDK strings after one pass over its
            context (:func:`~lightning_div.model.scoring.candidate_logprobs`); ``False`` scores
            pair by pair, bit-identical on any number of processes.
        batch_size: pairs per scoring batch.
        show_progress: progress bars.
    """

    def __init__(
        self,
        idk_responses: Sequence[str] = DEFAULT_IDK,
        reference: ReferenceChoice = "lowest",
        shared_contexts: bool = True,
        batch_size: int = 32,
        show_progress: bool = False,
    ) -> None:
        self.idk_responses = check_idk_responses(idk_responses)
        self.reference = check_reference(reference)
        self.shared_contexts = shared_contexts
        self.batch_size, self.show_progress = batch_size, show_progress

    def logprobs(self, adapter: Any, items: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Any]:
        """Token log-probs of every ``(context, candidates)`` item, whole prompts sharded over the processes.

        The batch plan is the same on any number of processes. Every process must call it.
        """
        prompts: list[tuple[tuple[str, ...], list[str]]] = [(tuple(c), list(rs)) for c, rs in items]
        if not prompts:
            return []

        def score(batch: list[tuple[tuple[str, ...], list[str]]]) -> list[Any]:
            contexts = [list(c) for c, _ in batch]
            if self.shared_contexts:
                return candidate_logprobs(adapter, contexts, [rs for _, rs in batch])
            flat = adapter.token_logprobs(
                [c for c, (_, rs) in zip(contexts, batch) for _ in rs], [r for _, rs in batch for r in rs]
            )
            out, at = [], 0
            for _, rs in batch:
                out.append(flat[at : at + len(rs)])
                at += len(rs)
            return out

        key = [sum(len(t) for t in c) + max(map(len, rs), default=0) for c, rs in prompts]
        per_prompt = max(len(rs) for _, rs in prompts)
        return distributed_map(
            score,
            prompts,
            max(1, self.batch_size // per_prompt),
            sort_key=key,
            show_progress=self.show_progress,
            desc=f"RUQ scoring ({sum(len(rs) for _, rs in prompts)} pairs)",
        )

    def measure(self, adapter: Any, pairs: Sequence[DialoguePair]) -> dict[str, float]:
        """``ruq``, ``ruq_margin``, ``ruq_idk<j>`` and ``ruq_margin_idk<j>`` over ``pairs``.

        Args:
            adapter: the model (a :class:`~lightning_div.model.adapters.DialogueModelAdapter`).
            pairs: the prompts with their references.

        Returns:
            The values by name (unprefixed).

        Raises:
            ValueError: ``pairs`` is empty (RUQ of no prompt is undefined), the same on every front end.
        """
        if not pairs:
            raise ValueError("RUQ needs at least one prompt: the RUQ sample is empty")
        items = [(p.context, [*p.all_references, *self.idk_responses]) for p in pairs]
        scores = [scores_from_logprobs(lp) for lp in self.logprobs(adapter, items)]
        return ruq_per_idk(scores, [len(p.all_references) for p in pairs], len(self.idk_responses), self.reference)

    def profile(
        self, adapter: Any, pairs: Sequence[DialoguePair], num_beams: int = 5
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The paper's Figure 1 data: mean log-prob by token position of each line, with how many responses reach it.

        The lines are the references, the model's beam-search output and each IDK string. Every
        process must call it (generation and scoring are sharded).

        Args:
            adapter: the model.
            pairs: the prompts.
            num_beams: beam size of the model-output line (the costly part).

        Returns:
            ``{line label: (mean log-prob per position, number of responses per position)}``.
        """
        pairs = list(pairs)
        beams = generate_responses(
            adapter,
            [p.context for p in pairs],
            {"num_beams": num_beams, "do_sample": False},
            self.batch_size,
            self.show_progress,
            "RUQ plot: beam search",
        )
        lines = {"reference": [p.response for p in pairs], f"beam ({num_beams})": beams}
        for j, s in enumerate(self.idk_responses):
            lines[f"IDK {j + 1}: {s}"] = [s] * len(pairs)
        # one item per prompt: its context is encoded once for all the lines
        items = [(p.context, [rs[i] for rs in lines.values()]) for i, p in enumerate(pairs)]
        logprobs = self.logprobs(adapter, items)
        return {name: profile_from_logprobs([per[k] for per in logprobs]) for k, name in enumerate(lines)}


def ruq_profile_figure(profile: dict[str, tuple[np.ndarray, np.ndarray]], num_prompts: int, title: str) -> Any:
    """The per-position plot of :meth:`RUQMeasure.profile` (positions fewer than 10 % of the responses reach are left out).

    Args:
        profile: :meth:`RUQMeasure.profile`'s lines.
        num_prompts: how many prompts the profile is over.
        title: the figure's title.

    Returns:
        A matplotlib figure.
    """
    from lightning_div._internal.tracking import new_figure

    fig, ax = new_figure(figsize=(7, 4))
    for name, (means, counts) in profile.items():
        # A position only a handful of long responses reach is noise, not a profile.
        keep = counts >= max(1, int(0.1 * num_prompts))
        ax.plot(np.arange(1, len(means) + 1)[keep], means[keep], marker="o", markersize=3, label=name)
    ax.set_xlabel("token position in the response (EOS included)")
    ax.set_ylabel("mean log p(token)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
