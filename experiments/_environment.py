"""What an experiment ran with: Python, the libraries that decide its numbers, the package and its commit.

Every experiment's ``results.json`` carries :func:`environment` under ``"environment"``, and its page
shows :func:`environment_lines`. A rerun is bit-identical only with the same versions: a float
difference of a newer torch or transformers at step 0 grows over many training steps
(:data:`RERUN_NOTE` gives the one measured case).
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The distributions whose versions decide the numbers (import names differ: ``lightning-div`` is the package).
PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "lightning",
    "pytorch-lightning",
    "numpy",
    "sentence-transformers",
    "scikit-learn",
    "faiss-cpu",
    "lightning-div",
)
#: How far one rerun on newer releases moved the numbers (measured; cited by every page).
RERUN_NOTE = (
    "Bit-identical reruns need the versions above (`results.json`'s `environment`). How far the numbers move on newer releases, from one "
    "measured case: `grpo_diversity`'s `grpo` seed 1, rerun on 2026-12-04 with transformers 5.25.0 from "
    "the runs' commit (`eff98d7`) and from that day's main alike (the two reruns equal each other to the last "
    "digit), differs from the stored run in the completions' NLL at step 0 in the eighth digit and in the "
    "token entropy at step 2 in the seventh, and ends at held-out judge group Sem-Ent 0.129 (stored 0.141), "
    "NLL 6.57 (6.67), task reward 0.805 (0.804): the code did not change the numbers, the libraries did "
    "(float differences that 120 steps at learning rate 5e-4 amplify). A move of that size is at most a tenth "
    "of the seed-to-seed standard deviation of those measures on the GRPO page (about 0.37 in judge group "
    "Sem-Ent, 1.0 in NLL), so the page's conclusions hold on newer releases while its digits do not."
)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def environment() -> dict[str, Any]:
    """The versions this process runs with, and the commit of the checkout the experiment runs from.

    Returns:
        ``{"python": ..., "packages": {distribution: version or None}, "commit": sha or None,
        "dirty": whether tracked files differ from the commit (None outside git)}``.
    """
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "commit": commit,
        "dirty": None if status is None else bool(status),
    }


def environments(parts: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The distinct environments of merged parts, in order; ``None`` for parts that recorded none (older runs)."""
    seen: list[dict[str, Any] | None] = []
    for part in parts:
        for env in part.get("environments") or [part.get("environment")]:
            if env not in seen:
                seen.append(env)
    return seen


def _line(env: dict[str, Any] | None) -> str:
    if env is None:
        return "not recorded (runs made before the record existed; the page's text names their commit where known)"
    packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v is not None)
    commit = env["commit"][:10] if env.get("commit") else "unknown"
    dirty = " (with uncommitted changes)" if env.get("dirty") else ""
    return f"Python {env['python']}, {packages}; commit `{commit}`{dirty}"


def environment_lines(result: dict[str, Any]) -> list[str]:
    """The page's ``## Environment`` section from a results.json: one line per environment, then the rerun note."""
    envs = result.get("environments") or [result.get("environment")]
    lines = ["## Environment", ""]
    lines += [f"- {_line(env)}" for env in envs]
    return [*lines, "", RERUN_NOTE, ""]
