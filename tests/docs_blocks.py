"""Reading the README's and the docs pages' sections and fenced code blocks, the one way every test does it.

A docs test runs a page's script as printed (``exec`` of the block) or checks a command it shows, so the
block is found here the same way for all: a ``## Heading`` section runs to the next ``## ``; a fenced block
is `````lang`` to the next fence; ``.ci/run`` reads "the first fenced block after a marker" (an HTML
comment such as ``<!-- ci:install -->``), and so does :func:`marked_block`. A heading or a block that is
not there fails the test with a message naming it (the page was edited: update the test).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = "```"


def read(page: str | Path) -> str:
    """A page's text: a path, or a name relative to the repository (``"README.md"``, ``"docs/grpo.md"``)."""
    return (ROOT / page).read_text(encoding="utf-8")


def section(text: str, heading: str, where: str = "the page") -> str:
    """The ``## heading`` section of ``text``: from its heading line to the next ``## `` heading."""
    assert f"\n## {heading}\n" in text, f"{where} has no section '## {heading}': update this test"
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def fenced_blocks(text: str, lang: str = "python") -> list[str]:
    """The bodies of the `````lang`` blocks of ``text``, in order."""
    return re.findall(rf"{FENCE}{re.escape(lang)}\n(.*?){FENCE}", text, re.DOTALL)


def fenced_block(text: str, lang: str = "python", where: str = "the text") -> str:
    """The body of the first `````lang`` block of ``text``."""
    blocks = fenced_blocks(text, lang)
    assert blocks, f"{where} has no {lang} block"
    return blocks[0]


def page_block(page: str | Path, heading: str, lang: str = "python") -> str:
    """The first `````lang`` block of a page's ``## heading`` section (a page's whole script)."""
    name = Path(page).relative_to(ROOT) if Path(page).is_absolute() else page
    return fenced_block(section(read(page), heading, f"{name}"), lang, f"{name}'s '{heading}'")


def marked_block(text: str, marker: str, lang: str = "python", directly: bool = False) -> str:
    """The first `````lang`` block after ``marker`` (the line right after it, with ``directly``)."""
    assert marker in text, f"no {marker} in the text"
    after = text.split(marker, 1)[1]
    if directly:
        assert after.startswith(f"\n{FENCE}{lang}\n"), f"{marker} is not followed by a {lang} block"
    return fenced_block(after, lang, f"the text after {marker}")


def snippet_block(text: str, name: str, lang: str = "python") -> str:
    """The one `````lang`` block that is the whole of the ``--8<--`` snippet ``name`` (the part another page
    includes): ``<!-- --8<-- [start:name] -->``, the block, ``<!-- --8<-- [end:name] -->``."""
    start, end = f"<!-- --8<-- [start:{name}] -->\n", f"<!-- --8<-- [end:{name}] -->"
    assert start in text and end in text, f"no snippet '{name}'"
    inner = text.split(start, 1)[1].split(end, 1)[0]
    opening = f"{FENCE}{lang}\n"
    assert inner.startswith(opening) and inner.endswith(f"{FENCE}\n"), f"snippet '{name}' is not one {lang} block"
    return inner[len(opening) : -len(f"{FENCE}\n")]


def run_page_script(page: str | Path, heading: str) -> dict:
    """Run the python block of a page's ``## heading`` section as printed, as a script (``__name__`` is
    ``"__main__"``) in this process; what it defined (its trainer, its callbacks, ...)."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(page_block(page, heading), str(page), "exec"), namespace)
    return namespace
