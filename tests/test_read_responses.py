import json

import pytest

from lightning_div import DialoguePair
from lightning_div.datamodules.formats import DataFormatError, read_responses


def test_response_sources(tmp_path):
    txt = tmp_path / "gen.txt"
    txt.write_text("hello there\n\nI don't know.\n", encoding="utf-8")
    assert read_responses(txt) == ["hello there", "", "I don't know."]  # blank line = empty response
    jl = tmp_path / "gen.jsonl"
    jl.write_text('{"generated": "a"}\n"b"\n{"response": "c", "generated": "x"}\n', encoding="utf-8")
    assert read_responses(jl) == ["a", "b", "c"]
    assert read_responses(jl, field="generated")[2] == "x"
    csv = tmp_path / "gen.csv"
    csv.write_text("id,response\n1,yes\n2,no\n", encoding="utf-8")
    assert read_responses(csv) == ["yes", "no"]
    assert read_responses(["x", "y"]) == ["x", "y"]
    assert read_responses([(["hi"], "ho")]) == ["ho"]
    assert read_responses([DialoguePair(("a",), "b")]) == ["b"]


def test_response_errors_name_file_and_line(tmp_path):
    jl = tmp_path / "bad.jsonl"
    jl.write_text('{"response": "ok"}\n{"response": 3}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad.jsonl:2: field 'response' is int"):
        read_responses(jl)
    jl.write_text(json.dumps({"other": 1}) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="bad.jsonl:1"):
        read_responses(jl)
    raw = tmp_path / "latin.txt"
    raw.write_bytes(b"fine\ncaf\xe9\n")
    with pytest.raises(DataFormatError, match="latin.txt:2: not valid UTF-8"):
        read_responses(raw)
    csv = tmp_path / "g.csv"
    csv.write_text("text\nx\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no 'response' column"):
        read_responses(csv)
