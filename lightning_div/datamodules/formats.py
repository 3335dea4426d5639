"""Dialogue readers: every format becomes a list of :class:`DialoguePair`.

A conversation of turns t0..tm becomes one example per response turn: for i >= 1,
(context = t0..t(i-1), response = ti), the history cut to the last ``max_history``
turns when that is set. Formats that already hold (context, response) records keep
one example per record, their context cut the same way.

Every ``read_*`` function returns a :class:`ReadResult`: the list of pairs, with the
reader's counts in ``.stats``. Malformed
input raises :class:`DataFormatError` whose message starts with ``file:line``.
:func:`read_pairs` picks the reader from a path's extension, a format name, a
``datasets.Dataset``, the word ``"chitchat"`` or an in-memory list.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lightning_div._internal.extras import missing_extra
from lightning_div.chitchat import check_split, chitchat_conversations
from lightning_div.pairs import DataFormatError, DialoguePair, _str_list, as_pair

EOU = "__eou__"
CONTEXT_SEPARATOR = " __eou__ "
REFERENCES_SEPARATOR = " ||| "
FORMATS = ("dailydialog", "dailydialog++", "json", "jsonl", "csv", "tsv", "parlai", "hf")


@dataclass
class ReadStats:
    """What a reader did: records read, examples kept, and why others were not kept."""

    source: str = ""
    records: int = 0  # lines / rows / conversations / episodes read
    examples: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    truncated: int = 0  # examples whose context lost turns to max_history
    duplicates: int = 0  # exact duplicates removed (dedupe=True)

    def drop(self, reason: str, count: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def summary(self) -> str:
        """One line for the log."""
        dropped = ", ".join(f"{n:,} {reason}" for reason, n in sorted(self.dropped.items())) or "none"
        return (
            f"{self.source}: {self.examples:,} examples from {self.records:,} records; dropped: {dropped}; "
            f"contexts truncated: {self.truncated:,}; duplicates removed: {self.duplicates:,}"
        )


class ReadResult(list):
    """The pairs a reader produced (it *is* that list) with the reader's :class:`ReadStats` in ``.stats``."""

    def __init__(self, pairs: Iterable[DialoguePair] = (), stats: ReadStats | None = None) -> None:
        super().__init__(pairs)
        self.stats = stats if stats is not None else ReadStats()


def conversation_to_pairs(turns: Sequence[str], max_history: int | None = None, source: str = "") -> list[DialoguePair]:
    """One pair per response turn; the first turn only ever serves as context."""
    _check_max_history(max_history)
    pairs = []
    for i in range(1, len(turns)):
        start = 0 if max_history is None else max(0, i - max_history)
        pairs.append(DialoguePair(tuple(turns[start:i]), turns[i], source=source))
    return pairs


def _check_max_history(max_history: int | None) -> None:
    if max_history is not None and (not isinstance(max_history, int) or max_history < 1):
        raise ValueError(f"max_history must be an int >= 1 or None, got {max_history!r}")


def read_chitchat(
    split: str = "train", max_history: int | None = 3, max_conversations: int | None = None
) -> list[DialoguePair]:
    """The embedded corpus as pairs (see :func:`chitchat_conversations`).

    With ``max_history=3``: 118,529 / 6,025 / 7,003 train / validation / test examples.

    Args:
        split: ``"train"``, ``"validation"`` or ``"test"``.
        max_history: context turns kept per example (None = all).
        max_conversations: read at most this many conversations (None = all).

    Returns:
        The pairs, with ``.stats``.

    Raises:
        ValueError: an unknown split, or ``max_conversations`` < 1.
    """
    pairs: list[DialoguePair] = []
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        pairs.extend(conversation_to_pairs(turns, max_history, source=f"chitchat:{conv_id}"))
    return pairs


def iter_texts(pairs: Iterable[DialoguePair]) -> Iterable[str]:
    """Every context turn and response of some pairs (e.g. to train a tokenizer)."""
    for p in pairs:
        yield from p.context
        yield p.response


# ----------------------------------------------------------------------------------------------
# Collecting examples with statistics


def check_text(text: str, where: str, name: str = "text") -> str:
    """``text`` if it is valid Unicode; a DataFormatError naming ``where`` for a lone surrogate.

    A JSON escape of half a UTF-16 pair (``"\\ud83d"`` without its ``"\\ude00"``) decodes to a lone
    surrogate: not a character, so every tokenizer and the UTF-8 encoder fail on it later,
    far from the file. It is refused here, where the file and line are known.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataFormatError(
            where,
            f"{name} contains a lone surrogate (U+{ord(text[e.start]):04X} at character "
            f"{e.start + 1}), which is not a character: a JSON escape such as \\ud83d must "
            "be followed by its second half (e.g. \\ude00), or write the character "
            "itself",
        ) from None
    return text


class _Collector:
    """Turns conversations and records into pairs while counting what happened."""

    def __init__(self, source: str, max_history: int | None) -> None:
        _check_max_history(max_history)
        self.max_history = max_history
        self.pairs: list[DialoguePair] = []
        self.stats = ReadStats(source=source)

    def pair(self, context: Sequence[str], response: str, references: Sequence[str] = (), where: str = "") -> None:
        for i, turn in enumerate(context):
            check_text(turn, where, f"context[{i}]")
        check_text(response, where, "the response")
        for i, ref in enumerate(references):
            check_text(ref, where, f"references[{i}]")
        self._add(context, response, tuple(references), where)

    def conversation(self, turns: Sequence[str], where: str) -> None:
        if len(turns) < 2:
            self.stats.drop("conversations with fewer than 2 turns")
            return
        # each turn is checked once, as the first turn or as a response: a conversation of n turns is n - 1
        # pairs whose contexts hold its earlier turns, and checking every context again was O(n^2) (most
        # of the time reading Chit-Chat took)
        check_text(turns[0], where, "context[0]")
        for i in range(1, len(turns)):
            check_text(turns[i], where, "the response")
            self._add(turns[:i], turns[i], (), where)

    def _add(self, context: Sequence[str], response: str, references: tuple[str, ...], where: str) -> None:
        """Keeps a checked pair: an empty response is dropped, a long context truncated, both counted."""
        if not response.strip():
            self.stats.drop("empty response")
            return
        context = tuple(context)
        if self.max_history is not None and len(context) > self.max_history:
            context = context[-self.max_history :]
            self.stats.truncated += 1
        self.pairs.append(DialoguePair(context, response, references, source=where))

    def result(self, dedupe: bool = False) -> ReadResult:
        pairs = self.pairs
        if dedupe:
            seen: set[DialoguePair] = set()
            unique = []
            for p in pairs:  # DialoguePair equality ignores `source`: same context, response, references
                if p not in seen:
                    seen.add(p)
                    unique.append(p)
            self.stats.duplicates = len(pairs) - len(unique)
            pairs = unique
        self.stats.examples = len(pairs)
        return ReadResult(pairs, self.stats)


def _split_cell(cell: str, separator: str) -> list[str]:
    """Turns of a cell joined by ``separator`` (surrounding spaces optional); a trailing separator ends the list."""
    token = separator.strip() or separator
    parts = [p.strip() for p in cell.split(token)]
    if len(parts) > 1 and not parts[-1]:
        parts.pop()
    return [] if parts == [""] else parts


@dataclass(frozen=True)
class Fields:
    """Field / column names of record formats (JSON, JSONL, CSV/TSV, Hugging Face datasets).

    A record is read as the first of: a pair (``response`` present; ``context`` a list of
    turns or one string; optional ``references`` list), a multi-reference pair
    (``positive_responses`` present, DailyDialog++: the first is the response, the rest
    references), or a whole conversation (``dialog``: list of turns, as in the Hub's
    ``daily_dialog``).
    """

    context: str = "context"
    response: str = "response"
    references: str = "references"
    positive_responses: str = "positive_responses"
    dialog: str = "dialog"


@dataclass(frozen=True)
class ReaderOptions:
    """Where the readers find a pair: the field / column names and the CSV/TSV separators, in one object.

    :class:`~lightning_div.datamodules.dialogue.DialogueDataModule` takes it as ``reader=``;
    its attributes are the :func:`read_pairs` keywords of the same names. In a LightningCLI
    config::

        reader:
          fields: {context: history, response: reply}
          delimiter: ";"

    Args:
        fields: record field / column names.
        delimiter: CSV/TSV field delimiter, one character (None = from the extension).
        context_separator: CSV/TSV: separator of the turns in a context cell.
        references_separator: CSV/TSV: separator of the references in a references cell.

    Raises:
        TypeError: an attribute of the wrong type (named).
        ValueError: a delimiter that is not one character, or an empty separator.
    """

    fields: Fields = field(default_factory=Fields)
    delimiter: str | None = None
    context_separator: str = CONTEXT_SEPARATOR
    references_separator: str = REFERENCES_SEPARATOR

    def __post_init__(self) -> None:
        if not isinstance(self.fields, Fields):
            raise TypeError(f"ReaderOptions.fields must be a Fields, got {type(self.fields).__name__}")
        for name in ("context_separator", "references_separator"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"ReaderOptions.{name} must be a non-empty string, got {value!r}")
        if self.delimiter is not None and (not isinstance(self.delimiter, str) or len(self.delimiter) != 1):
            raise ValueError(f"ReaderOptions.delimiter must be one character or None, got {self.delimiter!r}")

    def csv_options(self) -> dict[str, Any]:
        """The CSV/TSV keywords of :func:`read_pairs`: ``delimiter``, ``context_separator``, ``references_separator``."""
        return {
            "delimiter": self.delimiter,
            "context_separator": self.context_separator,
            "references_separator": self.references_separator,
        }

    def as_dict(self) -> dict[str, Any]:
        """Plain values (``fields`` a dict), as a checkpoint's hyperparameters keep them; :meth:`of` reads them back."""
        return {"fields": dict(vars(self.fields)), **self.csv_options()}

    @classmethod
    def of(cls, value: ReaderOptions | Mapping[str, Any] | None) -> ReaderOptions:
        """``value`` itself, the defaults for None, or the options a dict of :meth:`as_dict`'s form holds.

        Raises:
            TypeError: neither, or a dict with a key that is not an option or a field name.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"reader must be a ReaderOptions (or a dict of its options), got {type(value).__name__}")
        options = dict(value)
        unknown = set(options) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(
                f"unknown reader option(s) {sorted(unknown)}; the options are {list(cls.__dataclass_fields__)}"
            )
        names = options.pop("fields", None)
        if isinstance(names, Mapping):
            names = _fields(None, dict(names))
        return cls(**options) if names is None else cls(fields=names, **options)


def _add_record(out: _Collector, record: Any, where: str, fields: Fields) -> None:
    if not isinstance(record, dict):
        raise DataFormatError(where, f"expected an object with named fields, got {type(record).__name__}")
    if fields.response in record or fields.positive_responses in record:
        if fields.context not in record:
            raise DataFormatError(where, f"missing field '{fields.context}'")
        context = _str_list(record[fields.context], where, fields.context, allow_str=True)
        if fields.response in record:
            response = record[fields.response]
            if not isinstance(response, str):
                raise DataFormatError(
                    where, f"field '{fields.response}' must be a string, got {type(response).__name__}"
                )
            refs = record.get(fields.references)
            references = [] if refs is None else _str_list(refs, where, fields.references)
        else:
            candidates = _str_list(record[fields.positive_responses], where, fields.positive_responses)
            if not candidates:
                raise DataFormatError(where, f"field '{fields.positive_responses}' is an empty list")
            response, references = candidates[0], candidates[1:]
        out.pair(context, response, references, where)
    elif fields.dialog in record:
        out.conversation(_str_list(record[fields.dialog], where, fields.dialog), where)
    else:
        present = ", ".join(map(repr, list(record)[:8])) or "none"
        raise DataFormatError(
            where,
            f"missing field '{fields.response}' (or '{fields.positive_responses}', "
            f"or a '{fields.dialog}' list of turns); fields present: {present}",
        )
    out.stats.records += 1


# ----------------------------------------------------------------------------------------------
# Files


def _read_text(path: str | os.PathLike) -> str:
    """The file as text; empty files and non-UTF-8 bytes raise a DataFormatError with the line."""
    path = Path(path)
    if path.is_dir():  # not "no such file": it is there, and the reader would only doubt their eyes
        raise DataFormatError(
            str(path), "a directory, but not a saved Hugging Face dataset (save_to_disk's folder): give a file"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    data = path.read_bytes()
    if not data.strip():
        raise DataFormatError(f"{path}:1", "the file is empty (no dialogues)")
    try:
        # universal newlines, as open() reads text: a file with CR-only (old Mac) line ends has lines too
        return data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataFormatError(
            f"{path}:{line}",
            f"not valid UTF-8 (byte 0x{data[e.start]:02x} at column {column}); re-encode the file as UTF-8",
        ) from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the non-blank lines."""
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if line.strip():
            yield number, line


def read_dailydialog(
    path: str | os.PathLike, max_history: int | None = None, dedupe: bool = False, eou: str = EOU
) -> ReadResult:
    """DailyDialog text (``dialogues_text.txt``): one dialogue a line, each turn ended by ``__eou__``."""
    text = _read_text(path)
    out = _Collector(str(path), max_history)
    for number, line in _lines(text):
        where = f"{path}:{number}"
        if eou not in line:
            raise DataFormatError(where, f"no '{eou}' turn marker; is this a DailyDialog dialogues_text file?")
        out.conversation(_split_cell(line, eou), where)
        out.stats.records += 1
    return out.result(dedupe)


# Python's JSON decoder recurses once per nesting level: "[" x 100,000 raised RecursionError, a crash, not a line
TOO_DEEP = (
    "invalid JSON (nested deeper than Python's JSON decoder can read; no record of ours nests more than 3 levels)"
)


def _json_records(path: str | os.PathLike, text: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of a JSON list of records or of JSON Lines (one value a line)."""
    decoder = json.JSONDecoder()
    stripped = text.lstrip()
    if not stripped.startswith("["):
        for number, line in _lines(text):
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path}:{number}", f"invalid JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise DataFormatError(f"{path}:{number}", TOO_DEEP) from None
            yield number, value
        return

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    pos = skip(len(text) - len(stripped) + 1)
    if pos < len(text) and text[pos] == "]":
        raise DataFormatError(f"{path}:{line_of(pos)}", "the JSON list is empty (no dialogues)")
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{path}:{e.lineno}", f"invalid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise DataFormatError(f"{path}:{line_of(pos)}", TOO_DEEP) from None
        yield line_of(pos), value
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]" and not text[pos + 1 :].strip():
            return
        raise DataFormatError(f"{path}:{line_of(pos)}", "invalid JSON (expected ',' or the closing ']' of the list)")


def read_json(
    path: str | os.PathLike, max_history: int | None = None, dedupe: bool = False, fields: Fields = Fields()
) -> ReadResult:
    """JSON Lines or a JSON list of records (see :class:`Fields`); DailyDialog++ files included."""
    text = _read_text(path)
    out = _Collector(str(path), max_history)
    for number, record in _json_records(path, text):
        _add_record(out, record, f"{path}:{number}", fields)
    return out.result(dedupe)


def read_csv(
    path: str | os.PathLike,
    max_history: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    delimiter: str | None = None,
    context_separator: str = CONTEXT_SEPARATOR,
    references_separator: str = REFERENCES_SEPARATOR,
) -> ReadResult:
    """CSV / TSV with a header row.

    The context cell holds the turns joined by ``context_separator`` (default ``" __eou__ "``),
    the optional references cell holds references joined by ``references_separator``
    (default ``" ||| "``, which ordinary sentences do not contain). A ``dialog`` column
    (turns joined by ``context_separator``) is read as a whole conversation. The delimiter
    is ``","`` for ``.csv`` and a tab for ``.tsv`` unless given.
    """
    text = _read_text(path)
    if delimiter is None:
        delimiter = "\t" if str(path).lower().endswith(".tsv") else ","
    out = _Collector(str(path), max_history)
    header: list[str] | None = None
    for line, row in _csv_rows(path, text, delimiter):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
            if fields.dialog not in header:
                for name in (fields.context, fields.response):
                    if name not in header:
                        raise DataFormatError(
                            f"{path}:{line}", f"no '{name}' column in the header (columns: {', '.join(header)})"
                        )
            continue
        where = f"{path}:{line}"
        if len(row) != len(header):
            raise DataFormatError(where, f"{len(row)} fields but the header has {len(header)}")
        cells = dict(zip(header, row))
        record: dict[str, Any] = {}
        if fields.response in cells and fields.context in cells:
            record[fields.context] = _split_cell(cells[fields.context], context_separator)
            record[fields.response] = cells[fields.response].strip()
            if cells.get(fields.references, "").strip():
                record[fields.references] = _split_cell(cells[fields.references], references_separator)
        else:
            record[fields.dialog] = _split_cell(cells[fields.dialog], context_separator)
        _add_record(out, record, where, fields)
    if header is None:
        raise DataFormatError(f"{path}:1", "the file has no header row")
    return out.result(dedupe)


# a quoted cell spanning lines of which this many read as complete rows: a stray quote swallowed them
_ROWS_IN_A_CELL = 2
_UNBALANCED_HINT = 'close the quote where the cell ends, or double a quote inside a quoted cell ("")'


def _csv_rows(path: str | os.PathLike, text: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, cells) of each row of a CSV text (blank lines skipped); the first row is the header.

    The csv module reads one unbalanced quote as a cell running to the next quote or to the end
    of the file, silently swallowing the rows between. Both are refused at the line the quote
    opened: a cell still open at the end of the file, and a cell spanning lines of which
    :data:`_ROWS_IN_A_CELL` or more read as rows of the header's width on their own. A quoted
    cell over a few lines (a response with a line break) still reads. Text after a closing quote
    (``"a"b``) is invalid CSV (``strict``), not silently joined.

    Raises:
        DataFormatError: naming ``path`` and the line.
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    start, width = 1, 0
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row:
                continue
            if width and reader.line_num > line:
                _check_spanning_row(path, line, row, width, delimiter)
            if not width and any(cell.strip() for cell in row):
                width = len(row)  # the header's
            yield line, row
    except csv.Error as e:
        if "end of data" in str(e):  # CPython's "unexpected end of data": EOF inside a quoted cell
            raise DataFormatError(
                f"{path}:{start}",
                f"a quoted cell opened on this line is never closed: lines {start}-{reader.line_num} would be "
                f"one cell; {_UNBALANCED_HINT}",
            ) from None
        if reader.line_num > start:  # the row began lines earlier: most likely at a stray quote there
            raise DataFormatError(
                f"{path}:{start}",
                f"invalid CSV in the row from this line to line {reader.line_num} ({e}): an unbalanced quote? "
                f"{_UNBALANCED_HINT}",
            ) from None
        raise DataFormatError(f"{path}:{reader.line_num}", f"invalid CSV ({e})") from None


def _check_spanning_row(path: str | os.PathLike, line: int, row: list[str], width: int, delimiter: str) -> None:
    """Refuse a row whose quoted cell swallowed lines that read as rows of their own (see :func:`_csv_rows`)."""
    for cell in row:
        later = cell.split("\n")[1:]
        looks_like_rows = [
            i for i, text in enumerate(later, 1) if len(next(csv.reader([text], delimiter=delimiter), [])) == width
        ]
        if len(looks_like_rows) >= _ROWS_IN_A_CELL:
            first = looks_like_rows[0]
            raise DataFormatError(
                f"{path}:{line}",
                f"a quoted cell opened on this line spans lines {line}-{line + len(later)}, and "
                f"{len(looks_like_rows)} of them read as rows of their own (line {line + first}: "
                f"{later[first - 1][:40]!r}): an unbalanced quote? {_UNBALANCED_HINT}",
            )


def _parlai_unescape(value: str) -> str:
    return value.replace("\\t", "\t").replace("\\n", "\n").replace("__PIPE__", "|")


def read_parlai(path: str | os.PathLike, max_history: int | None = None, dedupe: bool = False) -> ReadResult:
    """ParlAI dialog text: ``text:...<TAB>labels:...[<TAB>episode_done:True]`` a line.

    Within an episode every example sees the earlier texts and first labels as history;
    ``\\n`` inside ``text`` separates turns (e.g. persona lines). ``labels`` (or
    ``eval_labels``) may hold several candidates separated by ``|``: the first is the
    response, the rest references. ``\\t``, ``\\n`` and ``__PIPE__`` are unescaped as ParlAI
    does. ``episode_done`` must be True/False (ParlAI reads any non-empty value as True).
    """
    text = _read_text(path)
    out = _Collector(str(path), max_history)
    history: list[str] = []
    for number, line in _lines(text):
        where = f"{path}:{number}"
        message: dict[str, str] = {}
        for part in line.split("\t"):
            if not part:
                continue
            key, colon, value = part.partition(":")
            if not colon:
                raise DataFormatError(where, f"field {part[:40]!r} is not of the form name:value")
            message[key.strip()] = value
        if "text" not in message:
            raise DataFormatError(where, "missing field 'text'")
        labels = message.get("labels", message.get("eval_labels"))
        if labels is None:
            raise DataFormatError(where, "missing field 'labels'")
        done = message.get("episode_done", "False").strip().lower()
        if done not in ("true", "false", "1", "0", ""):
            raise DataFormatError(where, f"episode_done must be True or False, got {message['episode_done']!r}")
        turns = _parlai_unescape(message["text"]).split("\n")
        if turns == [""]:
            turns = []  # an episode may open with the model speaking
        candidates = [_parlai_unescape(c) for c in labels.split("|")]
        context = history + turns
        out.pair(context, candidates[0], candidates[1:], where)
        out.stats.records += 1
        history = context + [candidates[0]]
        if done in ("true", "1"):
            history = []
    return out.result(dedupe)


# ----------------------------------------------------------------------------------------------
# Hugging Face datasets


def _is_hf_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("datasets.") and hasattr(obj, "column_names")


def read_hf(
    data: Any,
    split: str | None = None,
    max_history: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    name: str | None = None,
) -> ReadResult:
    """A ``datasets.Dataset``, a ``DatasetDict`` (pick ``split``) or a ``save_to_disk`` directory.

    Rows are read as records (see :class:`Fields`); errors name the dataset and row.
    """
    try:
        import datasets
    except ModuleNotFoundError as err:
        raise missing_extra("datasets", "reading a Hugging Face dataset") from err

    if isinstance(data, (str, os.PathLike)):
        name = name or str(data)
        try:
            data = datasets.load_from_disk(str(data))
        except FileNotFoundError as err:
            if not Path(data).is_dir():
                raise
            # said before as "<dir>: no such file" (datasets' FileNotFoundError), which the reader can only doubt
            raise DataFormatError(
                str(data), "a directory, but not a saved Hugging Face dataset (save_to_disk's folder): give a file"
            ) from err
    name = name or "dataset"
    if isinstance(data, datasets.DatasetDict):
        available = list(data)
        if split is None and len(available) == 1:
            split = available[0]
        if split not in data:
            raise ValueError(f"{name}: no split {split!r}; the dataset has {available}")
        data = data[split]
        name = f"{name}[{split}]"
    if not isinstance(data, datasets.Dataset):
        raise TypeError(f"{name}: expected a datasets.Dataset or DatasetDict, got {type(data).__name__}")
    columns = set(data.column_names)
    if not ({fields.response, fields.positive_responses, fields.dialog} & columns):
        raise DataFormatError(
            name,
            f"no '{fields.response}', '{fields.positive_responses}' or '{fields.dialog}' "
            f"column (columns: {', '.join(data.column_names)}); set the column names",
        )
    if len(data) == 0:
        raise DataFormatError(name, "the dataset has no rows")
    out = _Collector(name, max_history)
    for i, row in enumerate(data):
        _add_record(out, row, f"{name} row {i}", fields)
    return out.result(dedupe)


# ----------------------------------------------------------------------------------------------
# Pairs given in memory and the dispatcher


def pairs_from_items(
    items: Iterable[Any],
    max_history: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    name: str = "pairs",
) -> ReadResult:
    """Normalise DialoguePairs, (context, response) / (context, [references]) tuples or record dicts.

    Errors name the index of the bad item, e.g. ``pairs[3]: response must be a string``.
    """
    out = _Collector(name, max_history)
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if isinstance(item, dict):
            _add_record(out, item, where, fields)
            continue
        pair = as_pair(item, where)
        out.pair(pair.context, pair.response, pair.references, pair.source or where)
        out.stats.records += 1
    if out.stats.records == 0:
        raise DataFormatError(name, "no pairs given")
    return out.result(dedupe)


def read_chitchat_pairs(
    split: str = "train", max_history: int | None = None, dedupe: bool = False, max_conversations: int | None = None
) -> ReadResult:
    """The embedded corpus (see :func:`chitchat_conversations`) with statistics."""
    out = _Collector(f"chitchat:{split}", max_history)
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        out.conversation(turns, f"chitchat:{conv_id}")
        out.stats.records += 1
    return out.result(dedupe)


_EXTENSIONS = {".txt": None, ".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}


def detect_format(path: str | os.PathLike) -> str:
    """The format name of a path: a directory is a saved HF dataset, else by extension (``.txt`` by content)."""
    p = Path(path)
    if p.is_dir():
        return "hf"
    suffix = p.suffix.lower()
    if suffix not in _EXTENSIONS:
        raise ValueError(f"{path}: cannot tell the format from the extension {suffix!r}; pass format= one of {FORMATS}")
    known = _EXTENSIONS[suffix]
    if known is not None:
        return known
    first = next((line for _, line in _lines(_read_text(p))), "")
    if first.startswith("text:"):
        return "parlai"
    if EOU in first:
        return "dailydialog"
    raise ValueError(
        f"{path}:1: a .txt file that is neither ParlAI ('text:...') nor DailyDialog ('... __eou__'); pass format="
    )


def read_pairs(
    source: Any,
    format: str = "auto",
    *,
    split: str = "train",
    max_history: int | None = None,
    dedupe: bool = False,
    fields: Fields | None = None,
    delimiter: str | None = None,
    context_separator: str = CONTEXT_SEPARATOR,
    references_separator: str = REFERENCES_SEPARATOR,
    max_conversations: int | None = None,
    **field_names: str,
) -> ReadResult:
    """Read dialogue pairs from anything the project accepts.

    ``source`` is a file path (format from the extension or ``format``), a saved
    ``datasets`` directory, ``"chitchat"`` / ``"chitchat:<split>"`` (the embedded corpus),
    a ``datasets.Dataset`` / ``DatasetDict``, or a list of DialoguePairs / tuples / dicts.
    ``split`` picks the chitchat split and the DatasetDict split. Field names may be
    given as a :class:`Fields` or as keywords (``context="history"``, ``response="reply"``).

    Args:
        source: what to read, as above.
        format: ``"auto"`` or one of ``FORMATS`` (``dailydialog``, ``dailydialog++``, ``json``,
            ``jsonl``, ``csv``, ``tsv``, ``parlai``, ``hf``).
        split: the chitchat / DatasetDict split.
        max_history: context turns kept per example (None = all).
        dedupe: drop exact duplicate examples (counted in the statistics).
        fields: record field / column names.
        delimiter: CSV/TSV delimiter (None = from the extension).
        context_separator: CSV/TSV: separator of the turns in a context cell.
        references_separator: CSV/TSV: separator of the references in a references cell.
        max_conversations: read at most this many chitchat conversations.
        **field_names: field names as keywords (``context=``, ``response=``, ``references=``,
            ``dialog=``, ``positive_responses=``).

    Returns:
        The list of :class:`DialoguePair`; its ``.stats`` (:class:`ReadStats`) says what was
        read, dropped, truncated and deduplicated.

    Raises:
        DataFormatError: a record, line or file that cannot be read, naming file and line
            (or the list index).
        ValueError: an unknown ``format`` or split.

    Examples:
        >>> pairs = read_pairs([(["Hi!", "Hello, how are you?"], "Fine, thanks.")])
        >>> pairs[0].context, pairs[0].response
        (('Hi!', 'Hello, how are you?'), 'Fine, thanks.')
        >>> pairs.stats.summary()
        'pairs: 1 examples from 1 records; dropped: none; contexts truncated: 0; duplicates removed: 0'
    """
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format={format!r} is unknown; use 'auto' or one of {FORMATS}")
    fields = _fields(fields, field_names)
    common: dict[str, Any] = dict(max_history=max_history, dedupe=dedupe)
    if isinstance(source, str) and (source == "chitchat" or source.startswith("chitchat:")):
        chosen = source.partition(":")[2] or split
        return read_chitchat_pairs(check_split(chosen), max_conversations=max_conversations, **common)
    if _is_hf_dataset(source):
        return read_hf(source, split=split, fields=fields, **common)
    if isinstance(source, (str, os.PathLike)):
        csv_options = dict(
            delimiter=delimiter, context_separator=context_separator, references_separator=references_separator
        )
        return _read_path(source, format, split, fields, csv_options, **common)
    if isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
        return pairs_from_items(source, fields=fields, **common)
    raise TypeError(
        f"cannot read dialogue pairs from {type(source).__name__}; give a path, 'chitchat', "
        "a datasets.Dataset or a list of pairs"
    )


def _read_path(
    path: str | os.PathLike,
    format: str,
    split: str,
    fields: Fields,
    csv_options: dict[str, Any],
    max_history: int | None,
    dedupe: bool,
) -> ReadResult:
    """:func:`read_pairs` of a file or a saved dataset directory: the reader its format names."""
    common: dict[str, Any] = dict(max_history=max_history, dedupe=dedupe)
    kind = detect_format(path) if format == "auto" else format
    if kind == "hf":
        return read_hf(path, split=split, fields=fields, **common)
    if kind == "dailydialog":
        return read_dailydialog(path, **common)
    if kind == "parlai":
        return read_parlai(path, **common)
    if kind in ("csv", "tsv"):
        if csv_options["delimiter"] is None:
            csv_options = {**csv_options, "delimiter": "\t" if kind == "tsv" else ","}
        return read_csv(path, fields=fields, **csv_options, **common)
    return read_json(path, fields=fields, **common)  # json, jsonl, dailydialog++


def _fields(fields: Fields | None, names: dict[str, str]) -> Fields:
    base = fields or Fields()
    unknown = set(names) - set(Fields.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown option(s) {sorted(unknown)}; field names are {list(Fields.__dataclass_fields__)}")
    return replace(base, **names) if names else base


# ----------------------------------------------------------------------------------------------
# Response lists (generated outputs to score, gold responses to fit clusters on)

RESPONSE_FIELDS = ("response", "generated", "prediction", "text")


def read_responses(source: Any, field: str | None = None, delimiter: str | None = None) -> list[str]:
    """A list of responses: a list of strings, a ``.txt`` file with one response a line (a blank
    line is an empty response), JSON/JSONL (strings, or records whose ``field`` — default the
    first of response/generated/prediction/text present — holds the response), CSV/TSV (column
    ``field``, default ``response``), or any source :func:`read_pairs` reads (its gold responses).

    Args:
        source: a list of strings, a file, or a source :func:`read_pairs` reads.
        field: the record field / column holding the responses.
        delimiter: CSV/TSV delimiter (None = from the extension).

    Returns:
        The responses, in order.

    Raises:
        DataFormatError: a file or record that cannot be read, naming file and line.
    """
    if isinstance(source, (list, tuple)):
        out = []
        for i, item in enumerate(source):
            if isinstance(item, (tuple, list)):  # a (context, response[, references]) pair
                item = as_pair(item, f"responses[{i}]")
            if isinstance(item, DialoguePair):
                item = item.response
            if not isinstance(item, str):
                raise DataFormatError(f"responses[{i}]", f"expected a string, got {type(item).__name__}")
            out.append(check_text(item, f"responses[{i}]", "the response"))
        return out
    if not isinstance(source, (str, os.PathLike)) or str(source).startswith("chitchat"):
        return [p.response for p in read_pairs(source)]
    path = Path(source)
    suffix = path.suffix.lower()
    if path.is_dir():  # a saved dataset is read as pairs; any other folder is named for what it is
        return [p.response for p in read_pairs(source)]
    if suffix in (".txt", ".text", ""):
        lines = _response_lines(path)
        if lines and lines[-1] == "":
            lines.pop()  # the final newline ends the last line; it does not add an empty response
        return [line.rstrip("\r") for line in lines]
    if suffix in (".json", ".jsonl"):
        out = []
        for number, record in _json_records(path, _read_text(path)):
            out.append(check_text(_response_of(record, field, f"{path}:{number}"), f"{path}:{number}", "the response"))
        return out
    if suffix in (".csv", ".tsv"):
        return _csv_column(path, field or "response", delimiter or ("\t" if suffix == ".tsv" else ","))
    return [p.response for p in read_pairs(path)]


def _response_lines(path: Path) -> list[str]:
    """The lines of a response file. A blank line is an empty response, so a file of blank lines is that
    many empty responses (what a model that generated nothing writes), not an empty file: only a file
    without a single byte is one."""
    try:
        return _read_text(path).split("\n")
    except DataFormatError:
        data = path.read_bytes()
        if not data or data.strip():  # empty, or not valid UTF-8: the error stands
            raise
        return data.decode("ascii").replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _csv_column(path: Path, name: str, delimiter: str) -> list[str]:
    """Column ``name`` of every row of a CSV / TSV file (rows checked as :func:`read_csv` checks them)."""
    rows = _csv_rows(path, _read_text(path), delimiter)
    line, header = next(((n, r) for n, r in rows if any(cell.strip() for cell in r)), (1, []))
    header = [h.strip() for h in header]
    if name not in header:
        raise DataFormatError(
            f"{path}:{line}", f"no {name!r} column in the header (columns: {', '.join(header)}); pass field="
        )
    column = header.index(name)
    out = []
    for line, row in rows:
        if len(row) != len(header):
            raise DataFormatError(f"{path}:{line}", f"{len(row)} fields but the header has {len(header)}")
        out.append(row[column])
    return out


def _response_of(record: Any, field: str | None, where: str) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        names = [field] if field else [n for n in RESPONSE_FIELDS if n in record]
        if names and names[0] in record:
            value = record[names[0]]
            if isinstance(value, str):
                return value
            raise DataFormatError(where, f"field {names[0]!r} is {type(value).__name__}, expected a string")
    if isinstance(record, dict) and field:
        raise DataFormatError(where, f"missing field {field!r}")
    wanted = repr(field) if field else " / ".join(RESPONSE_FIELDS)
    raise DataFormatError(where, f"expected a string or a record with a {wanted} field, got {type(record).__name__}")
