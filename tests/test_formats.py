"""Readers: every format on small files written here, every malformed case named by file and line."""

import json
import re

import pytest

from lightning_div import DialoguePair
from lightning_div.chitchat import chitchat_conversations
from lightning_div.datamodules.formats import (
    DataFormatError,
    Fields,
    as_pair,
    conversation_to_pairs,
    read_chitchat,
    read_csv,
    read_dailydialog,
    read_hf,
    read_json,
    read_pairs,
    read_parlai,
    read_responses,
)


def write(tmp_path, name, text, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


def error_at(path_or_name, line, call):
    """Run call; it must raise DataFormatError whose message starts with '<file>:<line>:'."""
    with pytest.raises(DataFormatError, match=rf"^{re.escape(f'{path_or_name}:{line}:')}") as e:
        call()
    assert str(e.value).startswith(f"{path_or_name}:{line}:"), str(e.value)
    return str(e.value)


# ---------------------------------------------------------------------------------------------- DailyDialog

DD_TEXT = (
    "Hi , how are you ? __eou__ Fine , thanks . __eou__ Good to hear . __eou__ Bye . __eou__\n"
    "\n"
    "Only one turn . __eou__\n"
    "Where is it ? __eou__ Over there . __eou__\n"
)


def test_dailydialog_text(tmp_path):
    path = write(tmp_path, "dialogues_text.txt", DD_TEXT)
    pairs = read_dailydialog(path)
    stats = pairs.stats
    assert [(p.context, p.response) for p in pairs] == [
        (("Hi , how are you ?",), "Fine , thanks ."),
        (("Hi , how are you ?", "Fine , thanks ."), "Good to hear ."),
        (("Hi , how are you ?", "Fine , thanks .", "Good to hear ."), "Bye ."),
        (("Where is it ?",), "Over there ."),
    ]
    assert pairs[0].source == f"{path}:1" and pairs[3].source == f"{path}:4"
    # 3 dialogue lines (the blank line is no record); the one-turn dialogue is dropped and counted
    assert (stats.records, stats.examples, stats.truncated) == (3, 4, 0)
    assert stats.dropped == {"conversations with fewer than 2 turns": 1}

    pairs = read_dailydialog(path, max_turns=2)

    stats = pairs.stats
    assert pairs[2].context == ("Fine , thanks .", "Good to hear .")
    assert stats.truncated == 1  # only the 3-turn context of "Bye ." loses a turn
    # the same through the dispatcher: a .txt with __eou__ is DailyDialog
    assert read_pairs(path, max_turns=2) == pairs


def test_dailydialog_malformed(tmp_path):
    path = write(tmp_path, "dd.txt", "a __eou__ b __eou__\nno marker on this line\n")
    msg = error_at(path, 2, lambda: read_dailydialog(path))
    assert "__eou__" in msg


# ---------------------------------------------------------------------------------------------- JSON / JSONL


def test_jsonl_pairs_and_field_names(tmp_path):
    lines = [
        {"context": ["Hi", "Hello, who is this?"], "response": "It's Sam.", "references": ["Sam here."]},
        {"context": "Just one turn", "response": "ok"},
        {"context": ["a", "b", "c", "d"], "response": "e", "references": None},
        {"context": ["x"], "response": "   "},
    ]
    path = write(tmp_path, "data.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    pairs = read_json(path, max_turns=3)
    stats = pairs.stats
    assert pairs == [
        DialoguePair(("Hi", "Hello, who is this?"), "It's Sam.", ("Sam here.",)),
        DialoguePair(("Just one turn",), "ok"),
        DialoguePair(("b", "c", "d"), "e"),
    ]
    assert pairs[2].source == f"{path}:3"
    assert (stats.records, stats.examples, stats.truncated, stats.dropped) == (4, 3, 1, {"empty response": 1})

    renamed = write(tmp_path, "renamed.jsonl", json.dumps({"history": ["q"], "reply": "r", "refs": ["s"]}) + "\n")
    expected = [DialoguePair(("q",), "r", ("s",))]
    assert read_json(renamed, fields=Fields(context="history", response="reply", references="refs")) == expected
    assert read_pairs(renamed, context="history", response="reply", references="refs") == expected


def test_dailydialog_plus_plus_jsonl_and_json_list(tmp_path):
    # the DailyDialog++ release: one JSON object a line, five positive responses per context
    record = {
        "id": 0,
        "context": ["Are you looking for an apartment?", "Yes, near the square."],
        "positive_responses": ["Great news.", "Where is it?", "Tell me more.", "Show it to me.", "How much?"],
        "adversarial_negative_responses": ["I like ice cream."] * 5,
        "random_negative_responses": ["Because my friends want to meet you."] * 5,
    }
    path = write(tmp_path, "train.json", json.dumps(record) + "\n")
    (pair,) = read_pairs(path)
    assert pair.context == ("Are you looking for an apartment?", "Yes, near the square.")
    assert pair.response == "Great news."
    assert pair.references == ("Where is it?", "Tell me more.", "Show it to me.", "How much?")
    assert pair.all_references[0] == "Great news." and len(pair.all_references) == 5

    # the same records as a pretty-printed JSON list: the second record starts on line 3
    text = "[\n" + json.dumps(record) + ",\n" + json.dumps(dict(record, context=["only"])) + "\n]\n"
    path = write(tmp_path, "list.json", text)
    pairs = read_json(path)
    stats = pairs.stats
    assert [p.source for p in pairs] == [f"{path}:2", f"{path}:3"]
    assert stats.records == 2
    bad = write(
        tmp_path,
        "bad_list.json",
        "[\n" + json.dumps(record) + ",\n" + json.dumps(dict(record, positive_responses=[])) + "\n]\n",
    )
    assert "positive_responses" in error_at(bad, 3, lambda: read_json(bad))


#: (text, the line named, words of the message) of malformed JSON Lines files
JSON_MALFORMED = [
    ('{"context": ["a"], "response": "b"}\n{"context": ["a"], "response": \n', 2, "invalid JSON"),
    ('{"context": ["a"], "response": "b"}\n\n{"context": ["a"]}\n', 3, "missing field 'response'"),
    ('{"response": "b"}\n', 1, "missing field 'context'"),
    ('{"context": ["a", 7], "response": "b"}\n', 1, "context[1] must be a string"),
    ('{"context": ["a"], "response": 5}\n', 1, "'response' must be a string"),
    ('{"context": ["a"], "response": "b", "references": "c"}\n', 1, "'references' must be a list"),
    ('["a", "b"]\n', 1, "expected an object"),
    ('[{"context": ["a"], "response": "b"} {"x": 1}]', 1, "expected ','"),
    ("[\n]\n", 2, "empty"),
    ("\n  \n", 1, "empty"),
]


def test_non_utf8_is_named_by_line(tmp_path):
    data = (
        b'{"context": ["a"], "response": "b"}\n{"context": ["a"], "response": "b"}\n'
        + b'{"context": ["caf\xe9"], "response": "b"}\n'
    )
    path = write(tmp_path, "latin1.jsonl", data)
    msg = error_at(path, 3, lambda: read_json(path))
    assert "UTF-8" in msg and "0xe9" in msg
    for name, reader in (("x.csv", read_csv), ("x.txt", read_parlai), ("y.txt", read_dailydialog)):
        path = write(tmp_path, name, b"ok\n\xff\xfe\n")
        error_at(path, 2, lambda: reader(path))


@pytest.mark.parametrize("reader", [read_json, read_csv, read_parlai, read_dailydialog, read_pairs])
def test_empty_file_is_named(tmp_path, reader):
    path = write(tmp_path, "empty.jsonl", " \n\n")
    assert "the file is empty" in error_at(path, 1, lambda: reader(path))


# ---------------------------------------------------------------------------------------------- CSV / TSV


def test_csv_and_tsv(tmp_path):
    text = (
        "context,response,references\n"
        '"Hi __eou__ How are you?",Fine.,Good. ||| Not bad.\n'
        '"A cell over\ntwo lines",Sure.,\n'
        'One turn __eou__,"Yes, really.",\n'
    )
    path = write(tmp_path, "data.csv", text)
    pairs = read_csv(path)
    stats = pairs.stats
    assert pairs == [
        DialoguePair(("Hi", "How are you?"), "Fine.", ("Good.", "Not bad.")),
        DialoguePair(("A cell over\ntwo lines",), "Sure."),
        DialoguePair(("One turn",), "Yes, really."),
    ]
    assert [p.source for p in pairs] == [f"{path}:2", f"{path}:3", f"{path}:5"]  # row 3 spans lines 3-4
    assert stats.records == 3

    tsv = write(tmp_path, "data.tsv", "ctx\treply\nHello __eou__ Hi\tHow are you?\n")
    assert read_pairs(tsv, context="ctx", response="reply") == [DialoguePair(("Hello", "Hi"), "How are you?")]
    semi = write(tmp_path, "data.csv", "context;response\na // b;c\n")
    assert read_csv(semi, delimiter=";", context_separator=" // ") == [DialoguePair(("a", "b"), "c")]
    # a whole conversation per row
    conv = write(tmp_path, "conv.csv", "dialog\nq __eou__ a __eou__ q2\n")
    assert [(p.context, p.response) for p in read_csv(conv)] == [(("q",), "a"), (("q", "a"), "q2")]


def test_csv_malformed(tmp_path):
    path = write(tmp_path, "bad.csv", "context,answer\na,b\n")
    assert "no 'response' column" in error_at(path, 1, lambda: read_csv(path))
    path = write(tmp_path, "bad2.csv", "context,response\na,b\nc,d,e\n")
    assert "3 fields but the header has 2" in error_at(path, 3, lambda: read_csv(path))
    path = write(tmp_path, "empty.csv", "")
    assert "empty" in error_at(path, 1, lambda: read_csv(path))


def _rows_with(line_3: str, last: str | None = None) -> str:
    """A 100-row CSV whose data row 3 (file line 4) is ``line_3`` and, when given, whose last row is ``last``."""
    rows = [f"hi {i},answer {i}" for i in range(1, 101)]
    rows[2] = line_3
    if last is not None:
        rows[-1] = last
    return "context,response\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize("reader", ["read_pairs", "read_responses"])
def test_an_unbalanced_quote_is_named_not_swallowing_the_file(tmp_path, reader):
    """Issue 31 C6: one stray quote on row 3 of 100 gave 3 pairs, no error, nothing counted as dropped."""
    from lightning_div.datamodules.formats import read_responses

    read = {"read_pairs": read_pairs, "read_responses": read_responses}[reader]
    path = write(tmp_path, "q.csv", _rows_with('hi 3,"answer 3 with a stray quote'))
    message = error_at(path, 4, lambda: read(path))
    assert "never closed" in message and "lines 4-101" in message
    # two stray quotes close each other: rows 3..50 would silently be one cell
    path = write(tmp_path, "q2.csv", _rows_with('hi 3,"answer 3', last='hi 100,answer 100"'))
    assert "read as rows of their own" in error_at(path, 4, lambda: read(path))
    # a stray quote swallowing rows up to a properly quoted cell: named where the quote opened
    path = write(tmp_path, "q4.csv", _rows_with('hi 3,"answer 3', last='hi 100,"answer, 100"'))
    assert "invalid CSV in the row from this line to line 101" in error_at(path, 4, lambda: read(path))
    # text after a closing quote ('"a"b') is not valid CSV either
    path = write(tmp_path, "q3.csv", _rows_with('hi 3,"answer" 3'))
    assert "invalid CSV" in error_at(path, 4, lambda: read(path))
    # a quoted cell that really spans lines still reads (a response with a line break)
    path = write(tmp_path, "ok.csv", _rows_with('hi 3,"answer 3\nwith, a second line"'))
    got = read(path)
    assert len(got) == 100
    assert (got[2].response if reader == "read_pairs" else got[2]) == "answer 3\nwith, a second line"
    # a row of another width is named by both readers (read_responses used to drop its extra cell)
    path = write(tmp_path, "w.csv", "context,response\na,b,c\n")
    assert "3 fields but the header has 2" in error_at(path, 2, lambda: read(path))


# ---------------------------------------------------------------------------------------------- ParlAI


def test_parlai_episodes(tmp_path):
    text = (
        "text:your persona: I like dogs.\\nhello how are you today?\tlabels:i'm great thanks!\n"
        "text:i've just been biking.\tlabels:oh nice|cool __PIPE__ fun\tepisode_done:True\n"
        "text:new episode\tlabels:yes\tepisode_done:False\n"
        "text:\teval_labels:second\tepisode_done:True\n"
    )
    path = write(tmp_path, "parlai.txt", text)
    pairs = read_pairs(path)  # detected from the 'text:' prefix
    stats = pairs.stats
    assert pairs == [
        DialoguePair(("your persona: I like dogs.", "hello how are you today?"), "i'm great thanks!"),
        DialoguePair(
            ("your persona: I like dogs.", "hello how are you today?", "i'm great thanks!", "i've just been biking."),
            "oh nice",
            ("cool | fun",),
        ),
        DialoguePair(("new episode",), "yes"),
        DialoguePair(("new episode", "yes"), "second"),  # empty text: the history alone is the context
    ]
    assert stats.records == 4
    assert read_parlai(path, max_turns=2)[1].context == ("i'm great thanks!", "i've just been biking.")


#: the same of malformed ParlAI files
PARLAI_MALFORMED = [
    ("text:a\tlabels:b\ntext:c\n", 2, "missing field 'labels'"),
    ("labels:b\n", 1, "missing field 'text'"),
    ("text:a\tlabels:b\tepisode_done:maybe\n", 1, "episode_done must be True or False"),
    ("text:a\tlabels:b\tnonsense\n", 1, "name:value"),
]


@pytest.mark.parametrize(
    "reader, name, text, line, words",
    [(read_json, "bad.jsonl", *case) for case in JSON_MALFORMED]
    + [(read_parlai, "p.txt", *case) for case in PARLAI_MALFORMED],
)
def test_a_malformed_file_is_named_by_line(tmp_path, reader, name, text, line, words):
    path = write(tmp_path, name, text)
    assert words in error_at(path, line, lambda: reader(path))


# ---------------------------------------------------------------------------------------------- HF datasets


def test_hf_dataset_in_memory_and_on_disk(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict(
        {"history": [["Hi", "Hey"], ["Bye"]], "reply": ["What's up?", "See you"], "extra": [[], ["Later!"]]}
    )
    fields = Fields(context="history", response="reply", references="extra")
    pairs = read_hf(ds, fields=fields)
    stats = pairs.stats
    assert pairs == [DialoguePair(("Hi", "Hey"), "What's up?"), DialoguePair(("Bye",), "See you", ("Later!",))]
    assert pairs[1].source == "dataset row 1" and stats.records == 2

    dd = datasets.DatasetDict({"train": ds, "validation": ds.select([1])})
    dd.save_to_disk(str(tmp_path / "saved"))
    got = read_pairs(tmp_path / "saved", split="validation", context="history", response="reply", references="extra")
    assert got == [DialoguePair(("Bye",), "See you", ("Later!",))]
    with pytest.raises(ValueError, match="no split 'test'"):
        read_pairs(tmp_path / "saved", split="test", context="history", response="reply")
    with pytest.raises(DataFormatError, match="no 'response'"):
        read_hf(ds)

    # the Hub's daily_dialog layout: a `dialog` column of whole conversations
    dialogs = datasets.Dataset.from_dict({"dialog": [["a", "b", "c"], ["only"]]})
    pairs = read_pairs(dialogs)
    stats = pairs.stats
    assert [(p.context, p.response) for p in pairs] == [(("a",), "b"), (("a", "b"), "c")]
    assert stats.dropped == {"conversations with fewer than 2 turns": 1}
    bad = datasets.Dataset.from_dict({"context": [["a"], ["b"]], "response": ["x", None]})
    with pytest.raises(DataFormatError, match=r"^dataset row 1: field 'response' must be a string, got NoneType"):
        read_hf(bad)


# ---------------------------------------------------------------------------------------------- in memory, dedupe


def test_pairs_in_memory():
    items = [
        (["Hi", "Hello"], "How are you?"),
        ("Just a string", ["first", "second", "third"]),
        (("a",), "b", ["c"]),
        DialoguePair(("x",), "y", source="mine:7"),
    ]
    pairs = read_pairs(items)
    stats = pairs.stats
    assert pairs == [
        DialoguePair(("Hi", "Hello"), "How are you?"),
        DialoguePair(("Just a string",), "first", ("second", "third")),
        DialoguePair(("a",), "b", ("c",)),
        DialoguePair(("x",), "y"),
    ]
    assert pairs[0].source == "pairs[0]" and pairs[3].source == "mine:7"
    assert stats.records == 4
    with pytest.raises(DataFormatError, match=r"^pairs\[1\]: response must be a string"):
        read_pairs([("a", "b"), ("a", 3, [])])
    with pytest.raises(DataFormatError, match=r"^pairs\[2\]: expected a DialoguePair"):
        read_pairs([("a", "b"), ("a", "b"), "not a pair"])
    with pytest.raises(DataFormatError, match=r"^pairs\[0\]: context\[1\] must be a string"):
        read_pairs([(["a", None], "b")])
    with pytest.raises(DataFormatError, match=r"^pairs: no pairs given"):
        read_pairs([])
    assert as_pair(("q", ["r"])) == DialoguePair(("q",), "r")


def test_dedupe_removes_exact_duplicates_only():
    items = [("a", "b"), ("a", "b"), ("a", "B"), (["z", "a"], "b"), ("a", "b", ["r"])]
    pairs = read_pairs(items, dedupe=True)
    stats = pairs.stats
    assert len(pairs) == 4 and stats.duplicates == 1 and stats.examples == 4
    # truncation happens first: (z, a) -> (a,) makes the fourth item a duplicate too
    pairs = read_pairs(items, dedupe=True, max_turns=1)
    stats = pairs.stats
    assert len(pairs) == 3 and stats.duplicates == 2 and stats.truncated == 1
    assert stats.summary().endswith("duplicates removed: 2")


def test_dispatch_errors(tmp_path):
    with pytest.raises(ValueError, match=r"extension '\.xml'; pass file_format= one of \("):
        read_pairs(write(tmp_path, "a.xml", "<x/>"))
    with pytest.raises(ValueError, match=r"neither ParlAI .*; pass file_format=$"):
        read_pairs(write(tmp_path, "plain.txt", "just text\n"))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_pairs(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="^file_format='yaml' is unknown"):
        read_pairs("x.yaml", file_format="yaml")
    with pytest.raises(TypeError, match="unknown option"):
        read_pairs([("a", "b")], contxt="c")
    with pytest.raises(ValueError, match="split='dev'"):
        read_pairs("chitchat:dev")
    with pytest.raises(ValueError, match=r"^max_turns must be an int >= 1 or None, got 0$"):
        conversation_to_pairs(["a", "b"], max_turns=0)


# ---------------------------------------------------------------------------------------------- embedded corpus


def test_chitchat_split_sizes():
    # the documented size of the embedded corpus (README): 4,017 conversations with >= 2 turns
    sizes = {s: len(chitchat_conversations(s)) for s in ("train", "validation", "test")}
    assert sizes == {"train": 3610, "validation": 190, "test": 217}
    examples = {}
    for split in ("train", "validation", "test"):
        pairs = read_pairs(f"chitchat:{split}", max_turns=3)
        stats = pairs.stats
        assert stats.records == sizes[split] and stats.total_dropped == 0
        examples[split] = len(pairs)
        if split != "train":  # read_chitchat gives the same pairs (the train split is as large; skip for speed)
            assert pairs == read_chitchat(split, max_turns=3)
    assert examples == {"train": 118_529, "validation": 6_025, "test": 7_003}
    # splits are disjoint conversations
    ids = [{c for c, _ in chitchat_conversations(s)} for s in ("train", "validation", "test")]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])


def test_read_responses(tmp_path):
    from lightning_div.datamodules.formats import read_responses

    txt = write(tmp_path, "gen.txt", "i don't know\n\nsure, why not?\r\n")
    assert read_responses(txt) == ["i don't know", "", "sure, why not?"]  # the empty line is an empty response
    jsonl = write(tmp_path, "gen.jsonl", '{"response": "a"}\n"b"\n{"text": "c"}\n{"id": 4}\n')
    # without field=, the first of response / generated / prediction / text that a record has
    assert "a record with a response / generated" in error_at(jsonl, 4, lambda: read_responses(jsonl))
    assert "missing field 'response'" in error_at(jsonl, 3, lambda: read_responses(jsonl, field="response"))
    assert read_responses(write(tmp_path, "g2.jsonl", '{"text": "a"}\n{"text": "c"}\n'), field="text") == ["a", "c"]
    assert read_responses(write(tmp_path, "g.json", '["x", "y"]')) == ["x", "y"]
    csv_path = write(tmp_path, "g.csv", 'context,response\nhi,hello\nq,"a, b"\n')
    assert read_responses(csv_path) == ["hello", "a, b"]
    assert "no 'reply' column" in error_at(csv_path, 1, lambda: read_responses(csv_path, field="reply"))
    assert read_responses(["a", DialoguePair(("q",), "b")]) == ["a", "b"]
    with pytest.raises(DataFormatError, match=r"^responses\[1\]: expected a string, got int"):
        read_responses(["a", 1])
    bad = write(tmp_path, "bad.txt", b"fine\n\xff\n")
    error_at(bad, 2, lambda: read_responses(bad))


SURROGATE_JSONL = '{"context": ["hi"], "response": "fine"}\n{"context": ["yo"], "response": "x \\ud83d y"}\n'


def test_a_lone_surrogate_is_refused_with_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(SURROGATE_JSONL)
    where = r"d\.jsonl:2: the response contains a lone surrogate \(U\+D83D at character 3\)"
    with pytest.raises(DataFormatError, match=where):
        read_pairs(path)
    with pytest.raises(DataFormatError, match=where):
        read_responses(path)
    from lightning_div.datamodules.dialogue import DialogueDataModule

    with pytest.raises(DataFormatError, match=where):
        DialogueDataModule(train=str(path), val=None).train_pairs()
    with pytest.raises(DataFormatError, match=r"responses\[1\]: the response contains a lone surrogate"):
        read_responses(["ok", "bad \ud83d"])
    with pytest.raises(DataFormatError, match=r"pairs\[0\]: context\[1\] contains a lone surrogate"):
        read_pairs([(["a", "\udc00"], "b")])
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"context": ["hi"], "response": "x \\ud83d\\ude00 y"}\n')  # a whole pair is a character
    assert read_pairs(ok)[0].response == "x \U0001f600 y"


def test_cr_only_line_ends_are_lines(tmp_path):
    path = tmp_path / "old-mac.txt"
    path.write_bytes(b"first\rsecond\r\rfourth\r")
    assert read_responses(path) == ["first", "second", "", "fourth"]
    crlf = tmp_path / "win.txt"
    crlf.write_bytes(b"first\r\nsecond\r\n")
    assert read_responses(crlf) == ["first", "second"]
    dd = tmp_path / "dialogues_text.txt"
    dd.write_bytes(b"hi __eou__ hello __eou__\rhow are you __eou__ fine __eou__\r")
    assert [p.response for p in read_pairs(dd, file_format="dailydialog")] == ["hello", "fine"]
