"""ruff (lint and format) and mypy pass on the tree, with the configuration in pyproject.toml."""

from __future__ import annotations

import re
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


def test_no_test_module_imports_another():
    """Shared setup lives in helper modules (``helpers``, ``monitor_setup``, ``fakes``, ``docs_blocks``, ...), never
    in a test module another one imports: importing ``test_x`` runs its module-level setup and registers its tests
    twice under xdist, and a change to one test file broke another's (issue 61 item 6). A child process's script
    (a string run with ``python -c``) counts too."""
    pattern = re.compile(r"^\s*(?:from\s+(test_\w+)[\s.]|import\s+(test_\w+))", re.M)
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            line = path.read_text(encoding="utf-8").count("\n", 0, match.start()) + 1
            found.append(f"{path.name}:{line} imports {match.group(1) or match.group(2)}")
    assert found == [], "test modules importing test modules: " + "; ".join(found)
    # the pattern sees the forms it must see, and not a helper named like one
    seen = [m.group(1) or m.group(2) for m in pattern.finditer(TEST_IMPORT_FORMS)]
    assert seen == ["test_a", "test_b", "test_c", "test_d"]


TEST_IMPORT_FORMS = "\n".join(
    [
        "from test_a import x",
        "    from test_b import y",
        "import test_c",
        "from test_d.sub import z",
        "from testing_helpers import w",
        "from helpers import test_e",
    ]
)
