"""ruff (lint and format) and mypy pass on the tree, with the configuration in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "command",
    [("ruff", "check", "."), ("ruff", "format", "--check", "--diff", ".")],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(command):
    done = run(*command)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"


@pytest.mark.slow
def test_mypy():
    done = run("mypy")  # files and options from [tool.mypy] in pyproject.toml
    assert done.returncode == 0, f"mypy failed:\n{done.stdout[-8000:]}\n{done.stderr[-2000:]}"
    assert "Success" in done.stdout


def test_every_pytest_raises_in_the_tests_pins_its_message():
    """``pytest.raises(..., match=...)`` always: an error raised for another reason must not pass a test."""
    import ast

    missing = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "raises"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "pytest"
                and not any(k.arg == "match" for k in node.keywords)
            ):
                missing.append(f"{path.name}:{node.lineno}")
    assert missing == [], f"pytest.raises without match=: {', '.join(missing)}"
