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
    for name in ("conftest.py", "ddp_utils.py", "session_cleanup.py"):
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


SLOW_SERVER = """
import os, sys
from multiprocessing import forkserver, set_forkserver_preload

def test_starts_a_forkserver():
    # a server still importing its preload (as the suite's forkserver imports torch) when the session ends
    sys.path.insert(0, os.path.dirname(__file__))
    set_forkserver_preload(["slow_import"])
    forkserver.ensure_running()
    with open(os.environ["RECORD"], "w") as f:
        f.write(str(forkserver._forkserver._forkserver_pid))
"""


def test_no_forkserver_outlives_the_test_session(tmp_path):
    """Issue 54: forkservers the suite started were alive half an hour after it, their parent gone."""
    import conftest
    import session_cleanup

    assert conftest.pytest_sessionfinish is session_cleanup.pytest_sessionfinish  # the suite's own hook
    (tmp_path / "test_server.py").write_text(SLOW_SERVER)
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(60)\n")
    record = tmp_path / "pid.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "session_cleanup", "test_server.py"],
        cwd=tmp_path,
        # the plugin alone, none of the installed ones: a session that starts in a fraction of a second
        env={**os.environ, "RECORD": str(record), "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pid = int(record.read_text())
    stat = Path(f"/proc/{pid}/stat")
    # gone, or a zombie its new parent has not reaped yet; without the hook it sleeps in its import for a minute
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
