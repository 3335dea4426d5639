"""What a test session starts, it stops at its end: the multiprocessing forkserver (a pytest plugin; standard library only).

The two-process tests and the streaming tests fork their processes from this process's forkserver
(``tests/ddp_utils.py``: ``PRELOAD`` imports torch, transformers and Lightning into it once). Python
stops a forkserver only when every holder of its "alive" pipe has closed it: the process that
started it, and every process forked from it. So a forkserver outlived the test session while it
was still importing ``PRELOAD`` (tens of seconds on a loaded machine, and the server reads the
pipe only after its imports), and as long as anything it forked was still running: forkservers
were seen alive half an hour after the suite, their parent gone. ``tests/conftest.py`` takes this
module's :func:`pytest_sessionfinish`, which stops them when the session ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any


def _children(pid: int) -> list[int]:
    """The running processes whose parent is ``pid`` (read from ``/proc``; none where there is no ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the command name (2nd field) may hold spaces and parentheses: the fields after its last ')'
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def stop_forkserver(timeout_s: float = 10.0) -> int | None:
    """Stop this process's forkserver and whatever it forked that still runs; the server's pid, or None if none ran.

    The processes it forked are killed first (at the end of a session nothing may use them), then
    the server is asked to stop (its pipe closed, SIGTERM: it may still be importing) and killed if
    it is still there after ``timeout_s``. A later use of the forkserver starts a new one.
    """
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # the process's one ForkServer (multiprocessing keeps no public handle)
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return None
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        try:
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)
        except ChildProcessError:  # reaped already
            pass
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
    return pid


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """At the end of every test session (each xdist worker's included): no forkserver outlives it."""
    stop_forkserver()
