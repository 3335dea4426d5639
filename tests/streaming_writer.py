"""A chunk writer in a process of its own, for test_streaming's two-writer and killed-writer tests.

The test starts it from the tests' forkserver (tests/ddp_utils.py: torch, Lightning and lightning_div imported
once), so a writer is a fresh process that starts without importing them again: a ``python child.py``
writer imported them (about 13 s of CPU) and so did LitData's spawned worker inside it, two writers and
one killed writer five interpreters' worth of imports. Its LitData worker is forked ("fork", LitData's
choice in a notebook) for the same reason; LitData's default, spawn, writes in test_streaming's DDP test
and fails in its main-guard test.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write(stream_dir: str, marker: str, mode: str, tokenizer: Any, pairs: Sequence[Any]) -> None:
    """Write ``pairs``' chunks to ``stream_dir`` (``Chunks(chunk_bytes="4kb")``, as test_streaming's ``small_module``).

    Once LitData has written the chunks (not yet verified and renamed into place) it touches
    ``<marker>-<pid>`` and waits there: until two writers have ("meet"), or until it is killed ("kill").
    The folder it ends with goes to ``<marker>.<pid>.out``, an error's traceback to ``<marker>.<pid>.err``
    (its own stderr is the forkserver's).
    """
    os.setsid()  # a process group of its own: the killed-writer test kills it with whatever it started
    marker_path = Path(marker)
    said = marker_path.with_name(f"{marker_path.name}.{os.getpid()}")  # said.out / said.err
    try:
        import litdata

        from lightning_div.datamodules.options import Chunks
        from lightning_div.datamodules.streaming import StreamingDialogueDataModule

        real = litdata.optimize

        def optimize(**kwargs: Any) -> None:  # the chunks written, not yet verified and renamed
            real(**kwargs)
            marker_path.with_name(f"{marker_path.name}-{os.getpid()}").touch()
            while mode == "kill" or len(list(marker_path.parent.glob(marker_path.name + "-*"))) < 2:
                time.sleep(0.05)

        litdata.optimize = optimize
        dm = StreamingDialogueDataModule(
            train=list(pairs),
            val=None,
            tokenizer=tokenizer,
            show_progress=False,
            chunks=Chunks(dir=stream_dir, chunk_bytes="4kb", start_method="fork"),
        )
        said.with_name(said.name + ".out").write_text(str(dm.chunk_dir()))
    except BaseException:
        said.with_name(said.name + ".err").write_text(traceback.format_exc())
        raise
