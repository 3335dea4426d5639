"""Test environment: fully offline (no Hub, W&B offline), deterministic, quiet."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads otherwise spin while waiting, which on a busy 2-core machine makes faiss and torch 10x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Tokenizers trained on the embedded corpus ("local:chitchat") are cached here once per test session.
os.environ.setdefault("LIGHTNING_DIV_CACHE", tempfile.mkdtemp(prefix="lightning-div-test-cache-"))


import pytest


@pytest.fixture(autouse=True)
def _no_wandb_run_leaks_between_tests():
    """A W&B run left open by one test would silently be reused by the next test's WandbLogger."""
    yield
    import sys

    if "wandb" in sys.modules and sys.modules["wandb"].run is not None:
        sys.modules["wandb"].finish()
