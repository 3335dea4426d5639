"""The README's test command keeps its promise: tests of one ``xdist_group`` run on one worker, one after another.

With pytest 9.2 and pytest-xdist 3.8, ``--dist loadgroup`` silently handed the tests of a group out one by
one (pytest-xdist issue 1386); tests/conftest.py names each test's group where the scheduler reads it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

GROUPED = """
import json, os, time
import pytest

def record(name):
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], time.time()]) + "\\n")

@pytest.mark.xdist_group("two_processes")
def test_first():
    record("first"); time.sleep(0.5); record("first")

@pytest.mark.parametrize("i", range(4))
def test_single(i):
    time.sleep(0.2)

@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_second():
    record("second"); time.sleep(0.5); record("second")
"""


def test_a_group_runs_on_one_worker_one_test_after_another(tmp_path):
    """Fails without tests/conftest.py's node-id suffix: the two tests then ran on both workers at once."""
    for name in ("conftest.py", "ddp_utils.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    record = tmp_path / "record.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={**os.environ, "RECORD": str(record)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert len({worker for _, worker, _ in rows}) == 1  # one worker ran the group
    # one after another, the test marked slow first (tests/conftest.py hands the slow tests out first)
    assert [name for name, _, _ in sorted(rows, key=lambda r: r[2])] == ["second", "second", "first", "first"]
    assert "test_grouped.py::test_first@two_processes" in done.stdout  # the scheduler saw the group
