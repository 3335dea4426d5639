"""Collecting pairs with statistics: what every reader turns its records into, and the field names it reads.

:class:`ReadResult` is the list of pairs a reader returns, with its :class:`ReadStats`;
``_Collector`` checks and counts each pair as a reader adds it; :class:`Fields` and
:class:`ReaderOptions` say where a record holds its context, response and references.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lightning_div._internal.deprecation import renamed_value, take_deprecated
from lightning_div.pairs import DataFormatError, DialoguePair, _str_list

CONTEXT_SEPARATOR = " __eou__ "


REFERENCES_SEPARATOR = " ||| "


@dataclass
class ReadStats:
    """What a reader did: records read, examples kept, and why others were not kept."""

    source: str = ""
    records: int = 0  # lines / rows / conversations / episodes read
    examples: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    truncated: int = 0  # examples whose context lost turns to max_turns
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


def conversation_to_pairs(
    turns: Sequence[str], max_turns: int | None = None, source: str = "", **deprecated: Any
) -> list[DialoguePair]:
    """One pair per response turn; the first turn only ever serves as context.

    Args:
        turns: the conversation's turns, in order.
        max_turns: context turns kept per example (None = all).
        source: where the conversation comes from, kept in each pair's ``source``.
        **deprecated: 0.2's ``max_history=`` (``max_turns=``), with a ``DeprecationWarning``.
    """
    max_turns = _max_turns("conversation_to_pairs", max_turns, deprecated)
    _check_max_turns(max_turns)
    pairs = []
    for i in range(1, len(turns)):
        start = 0 if max_turns is None else max(0, i - max_turns)
        pairs.append(DialoguePair(tuple(turns[start:i]), turns[i], source=source))
    return pairs


def _check_max_turns(max_turns: int | None) -> None:
    if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
        raise ValueError(f"max_turns must be an int >= 1 or None, got {max_turns!r}")


def _max_turns(owner: str, max_turns: int | None, deprecated: dict[str, Any], default: int | None = None) -> int | None:
    """A reader's ``max_turns``, or 0.2's ``max_history=`` left in its ``**deprecated`` (warned once).

    The warning points at the line that called the reader (``stacklevel`` 5: ``warn_deprecated``,
    ``take_deprecated``, this function, the reader, its caller), where Python shows it by default.

    Raises:
        TypeError: any other keyword in ``deprecated`` (named).
        ValueError: ``max_turns`` given by both names.
    """
    old, _ = take_deprecated(owner, deprecated, {"max_history": "max_turns"}, stacklevel=5)
    value: int | None = renamed_value(owner, "max_history", "max_turns", max_turns, default, old)
    return value


def iter_texts(pairs: Iterable[DialoguePair]) -> Iterable[str]:
    """Every context turn and response of some pairs (e.g. to train a tokenizer)."""
    for p in pairs:
        yield from p.context
        yield p.response


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

    def __init__(self, source: str, max_turns: int | None) -> None:
        _check_max_turns(max_turns)
        self.max_turns = max_turns
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
        # pairs whose contexts hold its earlier turns, and checking every context again would be O(n^2)
        # (most of the time reading Chit-Chat takes)
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
        if self.max_turns is not None and len(context) > self.max_turns:
            context = context[-self.max_turns :]
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


def _fields(fields: Fields | None, names: dict[str, str]) -> Fields:
    base = fields or Fields()
    unknown = set(names) - set(Fields.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown option(s) {sorted(unknown)}; field names are {list(Fields.__dataclass_fields__)}")
    return replace(base, **names) if names else base
