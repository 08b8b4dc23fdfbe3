"""Tokens by turn on a real vLLM engine (issue 48 item 3): each judgment's per-turn prompt, cached and generated
counts are vLLM's own usage numbers for the request that ran the turn (``RequestOutput.prompt_token_ids``,
``num_cached_tokens`` and the completion's ``token_ids``), read where the backend receives them.

Faithful decoding runs one vLLM request per turn (a free generation up to the end-of-turn token), so every request
the engine finished is exactly one recorded turn. Generated counts leave out the stop id that ended a turn (vLLM keeps
it in ``token_ids``; brrm counts it in turn 2's prompt, where it is fed again).
"""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("vllm")

from brrm.judges.brrm import BRRMConfig  # noqa: E402
from brrm.testing import brrm_judge  # noqa: E402
from brrm.types import SamplingConfig  # noqa: E402
from tests.vllm.conftest import ENGINE, close_engine  # noqa: E402

pytestmark = pytest.mark.vllm

PROMPTS = ["What is 17 * 3?", "Name a primary colour.", "Write a haiku about rain."]
A = ["51.", "Red.", "Rain taps the tin roof / puddles hold the grey sky"]
B = ["57.", "The capital of Peru is Lima.", "Rain is water."]


@pytest.fixture(scope="module")
def vb(tiny_lm_dir):
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(tiny_lm_dir, **ENGINE)  # automatic prefix caching on (its default)
    yield backend
    close_engine(backend)


def _usage(out, stop_ids: tuple[int, ...]) -> tuple[int, int | None, int]:
    """(prompt, cached, generated) of one finished vLLM request, as vLLM reports them (generated without the stop id
    that ended it; cached None where this vLLM does not report it, which brrm records as 'not reported')."""
    c = out.outputs[0]
    ids = list(c.token_ids)
    stopped = c.finish_reason == "stop" and bool(ids) and ids[-1] in stop_ids
    cached = getattr(out, "num_cached_tokens", None)
    return len(out.prompt_token_ids), None if cached is None else int(cached), len(ids) - int(stopped)


def test_turn_tokens_are_vllms_usage_numbers(vb, monkeypatch):
    from brrm.backends.blackbox.phases import TokenInfo

    seen = []
    original = vb._result

    def spy(out):  # what the engine reported, then on to the backend as before
        seen.append(out)
        return original(out)

    monkeypatch.setattr(vb, "_result", spy)
    config = BRRMConfig(decoding="faithful", sampling=SamplingConfig(temperature=0, max_new_tokens=64))
    results = brrm_judge(vb, config).judge_pairs(PROMPTS, A, B, swap=True)
    stop_ids = TokenInfo(vb.tokenizer).stop_ids
    ordered = [j for r in results for j in r.sub_judgments]
    turns = [t for j in ordered for t in j.turns]
    assert len(ordered) == 6 and all(j.turns for j in ordered)
    assert len(seen) == len(turns)  # one request per turn, and every turn recorded
    assert Counter((t.prompt, t.cached, t.generated) for t in turns) == Counter(_usage(o, stop_ids) for o in seen)
    for r in results:  # a pair's turns are its two orders' turns, summed turn by turn
        fwd, rev = r.sub_judgments
        assert r.turns[0].prompt == fwd.turns[0].prompt + rev.turns[0].prompt
    for j in (j for j in ordered if len(j.turns) == 2):  # turn 2's prompt holds turn 1's prompt and text
        assert j.turns[1].prompt > j.turns[0].prompt
