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
    one, two = info.label("1", "\\boxed{"), info.label("2", "\\boxed{")
    assert start.endswith(f'(<[{one}]> | <[{two}]>) "}}\\n[The End of Ranking Score]" <[{eot}]>')
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
    assert lark_regex("a\\/b") == "a\\/b"  # an escaped slash stays as it is


def _fed(info, program, prompt_text, generated_text, eot=True):
    """A GrammarRun of ``program`` fed an engine result whose tokens are ``generated_text``'s, with every step's
    logits of the choice options reported (step i: option k gets i + k / 10)."""
    from brrm.backends.base import GenerationRequest
    from brrm.backends.blackbox.grammar import GrammarRun
    from brrm.backends.blackbox.phases import PhaseResult

    run = GrammarRun(GenerationRequest(info.encode(prompt_text), 200, program=program), info)
    phase = run.next_phase()
    assert phase is not None and phase.kind == "grammar" and run.next_phase() is None
    ids = list(info.encode(generated_text)) + ([info.end_of_turn_id] if eot else [])
    steps = tuple({o: i + k / 10 for k, o in enumerate(phase.logprob_ids)} for i in range(len(ids)))
    run.feed(PhaseResult(tuple(ids), "stop" if eot else "length", step_logprobs=steps))
    return run.completion(), ids


def test_a_choice_is_read_at_its_own_step(info):
    from brrm.constraints import Choice

    program = Program((Think(40), Literal("Final: "), Choice(("1", "2"), after="Final: ")))
    text = "pick 1 or 2, then 1</think>\n\nFinal: 2"
    got, ids = _fed(info, program, "Which?", text)
    step = len(ids) - 2  # the choice's token, just before the end of turn
    assert got.finish_reason == "stop" and got.choice_logits == ((step, step + 0.1),)  # not the "1" in the thinking
    prompt_side = Program((Choice(("1", "2"), after="Answer: "),))
    got, _ = _fed(info, prompt_side, "Answer: ", "1")  # ``after`` is the prompt's tail
    assert got.choice_logits == ((0.0, 0.1),)
    missing, _ = _fed(info, program, "Which?", "no choice here</think>\n\nFinal: ")
    assert missing.finish_reason == "error" and "0 of its 1 choices" in missing.error
