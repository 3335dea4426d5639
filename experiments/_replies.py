"""Held-out replies kept beside a run, so that another judge can score them later without a rerun (issue 62).

``grpo_diversity.py --save-replies`` and ``divpo.py --save-replies`` write one file per run (and per seed
for the untrained base model) under ``<out>/replies/``: ``<setting>_seed<seed>.json``, holding what the
run's held-out measures read: the experiment, the setting, the seed, the training step the replies were
sampled after (0: the untrained base model), G and one entry per held-out prompt with its G replies (and,
for GRPO, which were cut at the length limit). Written temp-then-rename (``lightning_div._internal.io``):
a file is whole or absent. ``experiments/rescore.py`` reads them back through :func:`read_replies`,
which checks every field and names the file and the field on a damaged one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _merge import MergeError, read_json_object

#: The experiments whose replies are kept.
EXPERIMENTS = ("grpo_diversity", "divpo")


def replies_path(out: Path, setting: str, seed: int) -> Path:
    """Where a run's held-out replies go: ``<out>/replies/<setting>_seed<seed>.json``."""
    return Path(out) / "replies" / f"{setting}_seed{seed}.json"


def save_replies(
    out: Path,
    experiment: str,
    setting: str,
    seed: int,
    step: int,
    prompts: list[str],
    replies: list[str],
    g: int,
    cut: list[bool] | None = None,
) -> Path:
    """Write one run's held-out replies (each prompt's G consecutive replies), whole or not at all.

    Args:
        out: the experiment's ``--out``; the file is :func:`replies_path`.
        experiment: ``"grpo_diversity"`` or ``"divpo"``.
        setting: the run's setting (``"base"``: the untrained base model).
        seed: the run's seed.
        step: the training step the replies were sampled after (0: untrained).
        prompts: the held-out prompts, in order.
        replies: ``len(prompts) * g`` replies, each prompt's ``g`` consecutive.
        g: replies per prompt.
        cut: per reply, whether it was cut at the length limit (GRPO measures the share), or None.

    Returns:
        The file written.

    Raises:
        ValueError: replies (or cut flags) that are not ``g`` per prompt.
    """
    from lightning_div._internal.io import atomic_write_text

    if g < 1 or len(replies) != len(prompts) * g or (cut is not None and len(cut) != len(replies)):
        raise ValueError(
            f"{setting} seed {seed}: {len(replies)} replies (cut flags: {None if cut is None else len(cut)}) "
            f"for {len(prompts)} prompts x G = {g}"
        )
    groups = []
    for i, prompt in enumerate(prompts):
        group: dict[str, Any] = {"prompt": prompt, "replies": replies[i * g : (i + 1) * g]}
        if cut is not None:
            group["cut"] = [bool(c) for c in cut[i * g : (i + 1) * g]]
        groups.append(group)
    record = {
        "experiment": experiment,
        "setting": setting,
        "seed": int(seed),
        "step": int(step),
        "num_generations": int(g),
        "groups": groups,
    }
    path = replies_path(out, setting, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False))
    return path


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_replies(path: Path) -> dict[str, Any]:
    """One saved-replies file, checked: what a rescoring reads is there and of the right kind.

    Returns:
        The record (``experiment``, ``setting``, ``seed``, ``step``, ``num_generations``, ``groups``).

    Raises:
        MergeError: naming the file and the field: unreadable, not JSON, another kind of file, a group
            without its prompt or without exactly G text replies.
    """
    record = read_json_object(path)
    if record.get("experiment") not in EXPERIMENTS:
        raise MergeError(
            f"{path}: 'experiment' is {record.get('experiment')!r}, not one of {list(EXPERIMENTS)}: "
            "not a saved-replies file (--save-replies writes <out>/replies/<setting>_seed<seed>.json)"
        )
    if not isinstance(record.get("setting"), str) or not record["setting"]:
        raise MergeError(f"{path}: 'setting' must be a setting's name, got {record.get('setting')!r}")
    for field in ("seed", "step", "num_generations"):
        if not _integer(record.get(field)) or record[field] < (1 if field == "num_generations" else 0):
            raise MergeError(f"{path}: {field!r} must be a non-negative integer (G >= 1), got {record.get(field)!r}")
    g, groups = record["num_generations"], record.get("groups")
    if not isinstance(groups, list) or not groups:
        raise MergeError(f"{path}: 'groups' must be a non-empty list of {{prompt, replies}} objects")
    for i, group in enumerate(groups):
        where = f"{path}: groups[{i}]"
        if not isinstance(group, dict) or not isinstance(group.get("prompt"), str):
            raise MergeError(f"{where}: an object with its 'prompt' (a string) expected")
        replies = group.get("replies")
        if not isinstance(replies, list) or len(replies) != g or not all(isinstance(r, str) for r in replies):
            raise MergeError(f"{where}: 'replies' must be {g} strings (num_generations), got {replies!r:.80}")
        cut = group.get("cut")
        if cut is not None and (
            not isinstance(cut, list) or len(cut) != g or not all(isinstance(c, bool) for c in cut)
        ):
            raise MergeError(f"{where}: 'cut' must be {g} true/false flags, got {cut!r:.80}")
    return record
