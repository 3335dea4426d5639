"""Test environment: fully offline (no Hub, W&B offline), deterministic, quiet; ready for pytest-xdist.

The README's test command runs two xdist workers (``-n 2 --dist loadgroup``): each worker is one
process on one core, so it runs torch and OpenMP with one thread; each has its own port block
for process groups (``ddp_utils.free_port``, ``MASTER_PORT`` per test) and its own caches (the
tokenizer cache below, ``tmp_path``); the two-process tests share the ``xdist_group``
``two_processes``, so two of them never run at once (four processes on two cores).
"""

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# W&B writes its offline runs into ./wandb unless told otherwise: a run in the repository root would make
# ruff take "wandb" for a first-party package (and leave files to commit by mistake).
os.environ.setdefault("WANDB_DIR", tempfile.mkdtemp(prefix="lightning-div-test-wandb-"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads otherwise spin while waiting, which on a busy 2-core machine makes faiss and torch 10x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Under pytest-xdist each worker is one of as many processes as cores: one thread each (set before torch
# is imported; the subprocesses and DDP ranks a test starts inherit it).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
# Tokenizers trained on the embedded corpus ("local:chitchat") are cached here once per test session.
os.environ.setdefault("LIGHTNING_DIV_CACHE", tempfile.mkdtemp(prefix="lightning-div-test-cache-"))


import pytest
from ddp_utils import free_port
from session_cleanup import pytest_sessionfinish  # noqa: F401 (the hook: no forkserver outlives the session)


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.hookimpl(trylast=True)  # after xdist's own hook, which names each test's group in its node id
def pytest_collection_modifyitems(config, items):
    """Under xdist: every ``xdist_group`` test's node id ends in ``@<group>``, and the slow tests go first.

    ``--dist loadgroup`` schedules by that suffix, which pytest-xdist 3.8 writes to ``item._nodeid``;
    pytest 9.2 builds node ids from ``item._id`` instead, so the suffix was lost and the groups were
    silently handed out test by test (pytest-xdist issue 1386): it is written here where it is read,
    and a worker that still cannot name a test's group stops the run rather than ungroup it.
    Then the tests marked slow are handed out first (groups of several tests go ahead of single
    tests in any case), so the last test a worker starts is a short one. A serial run is unchanged.
    """
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix):
            from _pytest.nodes import coerce_node_id  # pytest >= 9.2: node ids are structured

            item._id = coerce_node_id(item.nodeid + suffix)
            if not item.nodeid.endswith(suffix):
                raise pytest.UsageError(f"--dist loadgroup: cannot put {item.nodeid} in its group {suffix[1:]}")
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: files' order otherwise


#: The xdist group of the tests that start two processes (``@pytest.mark.xdist_group(TWO_PROCESSES)``):
#: one worker runs them one after another, so two of them never share the 2 cores four ways.
TWO_PROCESSES = "two_processes"


@pytest.fixture(autouse=True)
def _own_master_port(request, monkeypatch):
    """The two-process tests' rendezvous port, from this worker's own block (``ddp_utils.free_port``).

    Lightning's launchers and accelerate read ``MASTER_PORT``; without it Lightning binds port 0, closes
    it and passes the number on, a port another process can be handed in between. Restored afterwards
    (Lightning's launchers leave theirs set in ``os.environ``).
    """
    marker = request.node.get_closest_marker("xdist_group")
    if marker is not None and marker.args[:1] == (TWO_PROCESSES,):
        monkeypatch.setenv("MASTER_PORT", str(free_port()))
    yield


@pytest.fixture(scope="session")
def _session_clusters(tmp_path_factory):
    return tmp_path_factory.mktemp("fitted_clusters")


def _clusters_files(folder: Path) -> list[Path]:
    return [*folder.glob("clusters-*.npz"), *folder.glob("assignments-*.npz")]


def _keep_new_files(folder: Path, session: Path) -> None:
    for f in _clusters_files(folder):
        if not (session / f.name).exists():
            tmp = session / f"{f.name}.tmp"
            shutil.copyfile(f, tmp)
            os.replace(tmp, session / f.name)  # whole or absent: another test may be copying from here


@pytest.fixture
def fitted_clusters(_session_clusters):
    """For fit tests that do not test the clusters cache: the clusters fitted so far in this session.

    ``fitted_clusters(folder)`` copies every clusters and assignments file this worker has fitted so far
    into ``folder`` (a callback's cache, its ``dirpath``) and returns it; what the test fits there joins
    them (at the next call, and after the test). The files are named by the hash of all that decides
    the clusters (encoder name and weights, k, seed, settings, the gold texts), so a callback reads
    only the clusters it would have fitted, without embedding its gold responses and running k-means
    again. Tests of the cache itself (misses, stale or damaged files) do not take this fixture.
    """
    seeded: list[Path] = []

    def seed(folder):
        folder = Path(folder)
        for earlier in seeded:  # a test's second run reads its first run's clusters
            _keep_new_files(earlier, _session_clusters)
        folder.mkdir(parents=True, exist_ok=True)
        for f in _clusters_files(_session_clusters):
            shutil.copyfile(f, folder / f.name)
        seeded.append(folder)
        return folder

    yield seed
    for folder in seeded:
        _keep_new_files(folder, _session_clusters)


@pytest.fixture(autouse=True)
def _no_wandb_run_leaks_between_tests():
    """A W&B run left open by one test would silently be reused by the next test's WandbLogger."""
    yield
    import sys

    if "wandb" in sys.modules and sys.modules["wandb"].run is not None:
        sys.modules["wandb"].finish()
