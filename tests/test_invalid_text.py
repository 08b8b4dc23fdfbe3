"""Text that is not valid Unicode (a lone surrogate, e.g. from a JSON ``\\udc00`` escape) is refused by name before
any model call — in the library (``responses_b[1]``, ``groups[0][1]``, a message's content) and per line in
records files — instead of a tokenizer's TypeError that takes the whole batch down."""

from __future__ import annotations

import pytest

import brrm
from brrm.errors import ConfigError
from brrm.records import RecordError, read_records


@pytest.fixture(scope="module")
def bt(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    path = save_tiny_qwen3(tmp_path_factory.mktemp("bt") / "rm", sequence_classification=True)
    judge = brrm.load(str(path), kind="bt")
    yield judge
    judge.close()


def test_library_calls_name_the_item_that_is_not_valid_text(bt):
    with pytest.raises(ConfigError, match=r"responses\[1\] is not valid Unicode text: character 1 is the lone "
                                          r"surrogate U\+DC00"):
        bt.score(["q", "q"], ["fine", "x\udc00"])
    with pytest.raises(ConfigError, match=r"responses_b\[0\] is not valid Unicode text"):
        bt.judge_pairs(["q"], ["a"], ["\ud800b"])
    with pytest.raises(ConfigError, match=r"groups\[0\]\[1\] is not valid Unicode text"):
        bt.rank_groups(["q"], [["a", "b\udc00"]])
    with pytest.raises(ConfigError, match=r"message content \(role 'user'\) is not valid Unicode text"):
        bt.score([[{"role": "user", "content": "a\ud800"}]], ["ok"])
    ok = bt.score(["q", "q"], ["fine", "x\U0001f600"])  # a full surrogate pair (an astral character) is text
    assert [r.status.value for r in ok] == ["ok", "ok"]


def test_a_records_file_reports_the_bad_line_and_keeps_the_rest(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"prompt": "hi", "response_a": "ok", "response_b": "bad \\udc00"}\n'
                    '{"prompt": "hi", "response_a": "ok", "response_b": "fine"}\n'
                    '{"prompt": "hi", "responses": ["a", "\\ud800"]}\n', encoding="utf-8")
    rows = read_records(path, "pairs")
    assert isinstance(rows[0], RecordError) and rows[0].line == 1
    assert "field 'response_b' is not valid Unicode text: character 4" in rows[0].reason
    assert not isinstance(rows[1], RecordError) and rows[1].response_b == "fine"
    groups = read_records(path, "groups")
    assert isinstance(groups[2], RecordError) and "field 'responses'[1] is not valid Unicode text" in groups[2].reason
