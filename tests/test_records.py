"""Reading pairwise records: formats, per-row errors with line numbers, field maps, LLMBar."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TORCH_COMPILE_DISABLE"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

from brrm.bench.llmbar import LLMBAR_SUBSETS, llmbar_path, load_llmbar  # noqa: E402
from brrm.errors import ConfigError  # noqa: E402
from brrm.records import (  # noqa: E402
    FieldMap,
    PairRecord,
    RecordError,
    parse_pair_record,
    read_pair_records,
)
from brrm.types import Conversation, Message, Verdict  # noqa: E402
from tests.conftest import shared_path  # noqa: E402

ROWS = [
    {
        "id": "cap",
        "prompt": "Capital of France?",
        "response_a": "Paris.",
        "response_b": "Lyon.",
        "label": "A",
    },
    {"id": "add", "prompt": "2+3?", "response_a": "6", "response_b": "5", "label": "B"},
    {"prompt": "Say hi.", "response_a": "hi", "response_b": "hello"},
]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def check_rows(items: list[PairRecord | RecordError]) -> None:
    """The three ROWS, read back from any format."""
    assert all(isinstance(r, PairRecord) for r in items), items
    assert [r.id for r in items] == ["cap", "add", "3"]  # no id -> the 1-based row number
    assert [r.line for r in items] == [1, 2, 3]
    assert [r.label for r in items] == [Verdict.A, Verdict.B, Verdict.NONE]
    assert items[0].conversation == Conversation((Message("user", "Capital of France?"),))
    assert (items[1].response_a, items[1].response_b) == ("6", "5")


def test_jsonl(tmp_path: Path) -> None:
    check_rows(read_pair_records(write_jsonl(tmp_path / "p.jsonl", [json.dumps(r) for r in ROWS])))


def test_json_list(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(ROWS, indent=2), encoding="utf-8")
    check_rows(read_pair_records(path))


def test_json_file_holding_json_lines(tmp_path: Path) -> None:
    check_rows(read_pair_records(write_jsonl(tmp_path / "p.json", [json.dumps(r) for r in ROWS])))


def test_parquet(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    path = tmp_path / "p.parquet"
    pd.DataFrame(ROWS).to_parquet(path)
    check_rows(read_pair_records(path))


def test_csv_keeps_cells_as_written(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(
        "id,prompt,response_a,response_b,label\n"
        "cap,Capital of France?,Paris.,Lyon.,A\nadd,2+3?,6,5,2\n,Say hi.,hi,hello,\n"
        '4,"Quote ""x"", then\nnewline",NA,,1\n',
        encoding="utf-8",
    )
    items = read_pair_records(path)
    check_rows(items[:3])
    last = items[3]
    assert isinstance(last, PairRecord)
    assert last.conversation.messages[0].content == 'Quote "x", then\nnewline'
    assert (last.response_a, last.response_b, last.label) == (
        "NA",
        "",
        Verdict.A,
    )  # "NA" is text, not missing


def test_csv_conversation_as_json_text(tmp_path: Path) -> None:
    conv = json.dumps(
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hey"},
            {"role": "user", "content": "Name a color."},
        ]
    )
    path = tmp_path / "p.tsv"
    path.write_text(f"conversation\tresponse_a\tresponse_b\n{conv}\tBlue.\tSeven.\n", encoding="utf-8")
    [rec] = read_pair_records(path)
    assert isinstance(rec, PairRecord)
    assert [m.role for m in rec.conversation.messages] == ["user", "assistant", "user"]


def test_jsonl_bad_rows_become_errors_in_place(tmp_path: Path) -> None:
    good = [json.dumps(r) for r in ROWS]
    bad_role = json.dumps(
        {
            "id": "r",
            "conversation": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}],
            "response_a": "x",
            "response_b": "y",
        }
    )
    missing = json.dumps({"id": "m", "prompt": "p", "response_a": "x"})
    lines = [good[0], '{"id": "broken", "prompt": ', bad_role, "", good[1], missing, good[2]]
    items = read_pair_records(write_jsonl(tmp_path / "p.jsonl", lines))
    assert len(items) == 6  # the blank line 4 is not a row
    assert [type(i).__name__ for i in items] == [
        "PairRecord",
        "RecordError",
        "RecordError",
        "PairRecord",
        "RecordError",
        "PairRecord",
    ]
    assert [i.line for i in items] == [1, 2, 3, 5, 6, 7]  # file line numbers
    broken, role, miss = items[1], items[2], items[4]
    assert (
        isinstance(broken, RecordError)
        and broken.id == "2"  # the default id: the line number
        and broken.reason == "line 2: not valid JSON (Expecting value at column 28; the line ends early: cut short?)"
    )  # the column on the record's own line (the newline once made it 'column 1' of a line 2)
    assert role == RecordError(
        3,
        "r",
        "line 3: conversation[1]: message role 'bot' is not valid; "
        "expected one of system, user, assistant, tool",
    )
    assert miss == RecordError(6, "m", "line 6: missing field 'response_b'")
    assert [i.id for i in items if isinstance(i, PairRecord)] == ["cap", "add", "7"]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"response_a": "x", "response_b": "y"}, "missing field 'prompt' (or 'conversation')"),
        ({"prompt": 5, "response_a": "x", "response_b": "y"}, "field 'prompt' must be a string, got int"),
        ({"prompt": "p", "response_a": None, "response_b": "y"}, "field 'response_a' is null"),
        (
            {"prompt": "p", "response_a": ["x"], "response_b": "y"},
            "field 'response_a' must be a string, got list",
        ),
        (
            {"prompt": "p", "response_a": "x", "response_b": "y", "label": "C"},
            "field 'label': 'C' is not valid; expected one of 'A', 'B', 'tie' (or 1, 2)",
        ),
        (
            {
                "prompt": "p",
                "conversation": [{"role": "user", "content": "q"}],
                "response_a": "x",
                "response_b": "y",
            },
            "has both 'conversation' and 'prompt'; give only one of them",
        ),
        (
            {"conversation": "q", "response_a": "x", "response_b": "y"},
            "field 'conversation' must be a list of {role, content} messages, got str "
            "(use 'prompt' for a single prompt string)",
        ),
        (
            {
                "conversation": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                "response_a": "x",
                "response_b": "y",
            },
            "conversation: conversation must end with a user or tool turn (the judged responses are passed "
            "separately), but it ends with role 'assistant'",
        ),
        (
            {"conversation": [{"role": "user"}], "response_a": "x", "response_b": "y"},
            "conversation[0] is missing field 'content'",
        ),
        (
            {"id": [1], "prompt": "p", "response_a": "x", "response_b": "y"},
            "field 'id' must be a string or an integer, got list",
        ),
    ],
)
def test_row_errors_name_field_and_options(row: dict, reason: str) -> None:
    err = parse_pair_record(row, line=9)
    assert isinstance(err, RecordError)
    assert err.reason == f"line 9: {reason}"


def test_non_object_row_and_labels() -> None:
    assert parse_pair_record(["a"], line=1) == RecordError(
        1, "1", "line 1: expected an object with fields, got list"
    )
    base = {"prompt": "p", "response_a": "x", "response_b": "y"}
    labels = [
        parse_pair_record({**base, "label": v}, line=1).label for v in ("a", "B", "tie", 1, 2, "2", None, "")
    ]
    assert labels == [
        Verdict.A,
        Verdict.B,
        Verdict.TIE,
        Verdict.A,
        Verdict.B,
        Verdict.B,
        Verdict.NONE,
        Verdict.NONE,
    ]
    bad = parse_pair_record({**base, "label": True}, line=4)
    assert isinstance(bad, RecordError) and "'label'" in bad.reason


def test_field_remapping(tmp_path: Path) -> None:
    rows = [
        {"qid": 7, "question": "Best sorting?", "chosen": "mergesort", "rejected": "bogosort", "gold": "a"}
    ]
    path = write_jsonl(tmp_path / "p.jsonl", [json.dumps(r) for r in rows])
    fields = FieldMap.from_overrides(
        ["id=qid", "prompt=question", "response_a=chosen", "response_b=rejected", "label=gold"]
    )
    assert fields == FieldMap(
        id="qid", prompt="question", response_a="chosen", response_b="rejected", label="gold"
    )
    [rec] = read_pair_records(path, fields=fields)
    assert rec == PairRecord(
        "7", 1, Conversation.from_prompt("Best sorting?"), "mergesort", "bogosort", Verdict.A
    )
    [err] = read_pair_records(path)  # default names: the row lacks them
    assert isinstance(err, RecordError) and err.reason == "line 1: missing field 'prompt' (or 'conversation')"


def test_field_map_validation() -> None:
    assert FieldMap.from_overrides({"prompt": "input"}).prompt == "input"
    assert FieldMap.from_overrides(None) == FieldMap()
    with pytest.raises(
        ConfigError, match="--field: unknown field 'answer'; expected one of id, conversation, prompt, response"
    ):
        FieldMap.from_overrides(["answer=x"])
    with pytest.raises(ConfigError, match="is not field=column"):
        FieldMap.from_overrides(["prompt"])
    with pytest.raises(ConfigError, match="'prompt' and 'response_a' both read column 'text'"):
        FieldMap(prompt="text", response_a="text")
    with pytest.raises(ConfigError, match="non-empty column name"):
        FieldMap(label="")


def test_llmbar_schema_is_detected(tmp_path: Path) -> None:
    rows = [
        {"input": "Add 1+1.", "output_1": "2", "output_2": "3", "label": 1},
        {"input": "Spell cat.", "output_1": "kat", "output_2": "cat", "label": 2},
    ]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    items = read_pair_records(path)
    assert [(r.conversation.messages[0].content, r.response_a, r.label) for r in items] == [
        ("Add 1+1.", "2", Verdict.A),
        ("Spell cat.", "kat", Verdict.B),
    ]
    remapped = read_pair_records(path, fields=FieldMap(prompt="input"))  # user remapped: no auto-detection
    assert all(isinstance(r, RecordError) and "'response_a'" in r.reason for r in remapped)


def test_limit(tmp_path: Path) -> None:
    lines = ["not json", *[json.dumps(r) for r in ROWS]]
    path = write_jsonl(tmp_path / "p.jsonl", lines)
    items = read_pair_records(path, limit=2)
    assert [type(i).__name__ for i in items] == ["RecordError", "PairRecord"]
    assert len(read_pair_records(path, limit=100)) == 4
    csv = tmp_path / "p.csv"
    csv.write_text(
        "prompt,response_a,response_b\n" + "".join(f"q{i},a,b\n" for i in range(5)), encoding="utf-8"
    )
    assert [r.id for r in read_pair_records(csv, limit=3)] == ["1", "2", "3"]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="limit must be an int >= 1"):
            read_pair_records(path, limit=bad)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_pair_records(tmp_path / "missing.jsonl")
    odd = tmp_path / "p.txt"
    odd.write_text("{}")
    with pytest.raises(ConfigError, match="cannot tell the format of 'p.txt'.*expected one of .jsonl"):
        read_pair_records(odd)
    assert (
        read_pair_records(odd, format="jsonl")[0].reason
        == "line 1: missing field 'prompt' (or 'conversation')"
    )
    with pytest.raises(ConfigError, match="format 'xml' is not valid; expected one of jsonl, json"):
        read_pair_records(odd, format="xml")
    obj = tmp_path / "p.json"
    obj.write_text('{"data": []}')
    with pytest.raises(ConfigError, match="expected a JSON list of records, got a dict"):
        read_pair_records(obj)


def test_example_pairs_are_valid() -> None:
    path = Path(__file__).resolve().parents[1] / "examples" / "pairs.jsonl"
    items = read_pair_records(path)
    assert 6 <= len(items) <= 8 and all(isinstance(r, PairRecord) for r in items)
    labels = Counter(r.label for r in items)
    assert set(labels) == {Verdict.A, Verdict.B} and abs(labels[Verdict.A] - labels[Verdict.B]) <= 1
    assert len({r.id for r in items}) == len(items)
    assert any(len(r.conversation.messages) >= 3 for r in items)


DATA = shared_path() / "data"  # the offline path (--data-dir): the default is a download cache
needs_llmbar = pytest.mark.skipif(
    not (DATA / "LLMBar").is_dir(), reason=f"LLMBar data not found under {DATA}: ../shared is on developer and CI"
    " machines"
)


@needs_llmbar
def test_llmbar_natural_real_file() -> None:
    records = load_llmbar("Natural", root=DATA)
    assert len(records) == 100
    assert Counter(r.label for r in records) == {Verdict.A: 42, Verdict.B: 58}  # SOURCE.md: 42 x 1 / 58 x 2
    assert [r.id for r in records[:2]] == ["Natural/1", "Natural/2"]
    raw = json.loads(llmbar_path("Natural", root=DATA).read_text(encoding="utf-8"))
    assert records[0].conversation == Conversation.from_prompt(raw[0]["input"])
    assert (records[0].response_a, records[0].response_b) == (raw[0]["output_1"], raw[0]["output_2"])
    plain = read_pair_records(llmbar_path("natural", root=DATA))  # auto-detected schema, ids = row numbers
    assert [r.id for r in plain[:3]] == ["1", "2", "3"] and len(plain) == 100


@needs_llmbar
def test_llmbar_all_subsets_have_documented_sizes() -> None:
    sizes = {s: len(load_llmbar(s, root=DATA)) for s in LLMBAR_SUBSETS}
    assert sizes == {
        "Natural": 100,
        "Adversarial/Neighbor": 134,
        "Adversarial/GPTInst": 92,
        "Adversarial/GPTOut": 47,
        "Adversarial/Manual": 46,
    }
    assert len(load_llmbar("neighbor", root=DATA)) == 134


def test_llmbar_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="subset 'Hard' is not valid; expected one of Natural, Adversarial/Neighbor"
    ):
        llmbar_path("Hard")
    with pytest.raises(ConfigError, match="LLMBar Natural not found at .*set BRRM_DATA_DIR"):
        llmbar_path("Natural", root=tmp_path)
