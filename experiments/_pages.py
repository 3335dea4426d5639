"""What the generated results pages share: the hand-written reading a regeneration keeps."""

from __future__ import annotations

from pathlib import Path

READING_START = "## Reading"


def kept_reading(path: Path) -> str:
    """The hand-written reading of an existing page: from its ``## Reading`` heading to the next ``## `` heading."""
    if not path.exists():
        return ""
    text = path.read_text(encoding="utf-8")
    start = text.find("\n" + READING_START)
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start + 1 : end if end >= 0 else len(text)]
