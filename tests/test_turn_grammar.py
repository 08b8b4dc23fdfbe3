"""The one-grammar form of a constrained turn (:mod:`brrm.backends.blackbox.grammar`): what the grammar says.

The engine runs of the mode are in the vLLM tier (``tests/vllm/test_vllm_grammar.py``)."""

from __future__ import annotations

import re

import pytest

from brrm.backends.blackbox.grammar import _closing, lark_regex, turn_grammar
from brrm.backends.blackbox.phases import TokenInfo
from brrm.constraints import Literal, Pattern, Program, Think
from brrm.judges.brrm_format import DIMENSIONS, turn1_program, turn2_program


@pytest.fixture(scope="module")
def info(tiny):
    return TokenInfo(tiny[1])


def test_turn2_grammar_carries_the_budgets_markers_and_verdict(info):
    grammar = turn_grammar(turn2_program(100, 16), info)
    lines = grammar.splitlines()
    assert lines[0] == "%llguidance {}"
    start = lines[1]
    think_id, eot = info.single("</think>"), info.end_of_turn_id
    head = f'start: think0 <[{think_id}]> "\\n\\n" "[The Begin of Analysis on Response 1]\\n" block2 '
    assert start.startswith(head)
    assert start.endswith(f'("1" | "2") "}}\\n[The End of Ranking Score]" <[{eot}]>')
    assert "think0[max_tokens=100]: /(?s:.*)/" in lines
    assert 'block2[max_tokens=16, suffix="\\n["]: /[^\\[]+/' in lines
    assert 'block4[max_tokens=16, suffix="\\n["]: /[^\\[]+/' in lines


def test_turn1_grammar_keeps_the_dimension_list_as_one_terminal(info):
    grammar = turn_grammar(turn1_program(0, 16, seam="\n"), info)
    start = grammar.splitlines()[1]
    dims = re.search(r" /(\(.*?\\n\\\[)/ ", start)
    assert dims and "\n" not in dims.group(1)  # newlines written \n
    assert all(re.escape(d) in dims.group(1) for d in DIMENSIONS)
    assert "think" not in start  # no Think segment without a budget
    assert start.endswith(f'"End of Quality Analysis for Response 2]\\n" <[{info.end_of_turn_id}]>')


def test_segments_without_a_grammar_form_are_refused(info):
    with pytest.raises(ValueError, match="does not end with its forced close"):
        _closing(Pattern(r"[a-z]+;", cap=4, force="\n["))
    with pytest.raises(ValueError, match="without </think>"):
        turn_grammar(Program((Think(8, close="\nEND\n"), Literal("x"))), info)
    with pytest.raises(ValueError, match="do not take"):
        lark_regex(r"(?=a)b")
    assert lark_regex("a\\\n/b\n") == "a\\n\\/b\\n"
