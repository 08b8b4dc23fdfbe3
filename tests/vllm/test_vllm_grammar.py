"""One-grammar turns on a real vLLM engine (``turn_requests="grammar"``, :mod:`brrm.backends.blackbox.grammar`):
one engine request per constrained turn under llguidance, the options' raw logits read at the choice's step, the
BR-RM judge end to end; and the option checks that run before an engine starts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from brrm.backends.base import GenerationRequest  # noqa: E402
from brrm.constraints import Choice, Program  # noqa: E402
from brrm.errors import ConfigError  # noqa: E402
from brrm.judges.brrm import BRRMConfig  # noqa: E402
from brrm.testing import brrm_judge  # noqa: E402
from brrm.types import SamplingConfig, Status  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.vllm.conftest import ENGINE, close_engine  # noqa: E402

pytestmark = pytest.mark.vllm
LOGIT_TOL = 1e-4


@pytest.fixture(scope="module")
def gb(tiny_lm_dir):
    from brrm.backends.vllm import VLLMBackend

    backend = VLLMBackend.from_pretrained(tiny_lm_dir, **ENGINE, structured_outputs_backend="guidance",
                                          turn_requests="grammar")
    yield backend
    close_engine(backend)


def test_grammar_turns_need_llguidance_and_a_known_mode(tiny_lm_dir):
    from brrm.backends.vllm import VLLMBackend

    with pytest.raises(ConfigError, match="needs structured_outputs_backend='guidance'"):
        VLLMBackend.from_pretrained(tiny_lm_dir, **ENGINE, turn_requests="grammar")
    with pytest.raises(ConfigError, match="turn_requests must be one of phases, grammar"):
        VLLMBackend.from_pretrained(tiny_lm_dir, **ENGINE, turn_requests="one")


def test_a_choice_in_one_request_reads_the_models_raw_logits(gb, tiny_lm_dir):
    import torch
    from transformers import AutoModelForCausalLM

    tok = gb.tokenizer
    prompts = [tuple(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False)) for p in ("hello", "which one?")]
    before = gb.stats["phases"]
    out = gb.generate([GenerationRequest(p, 4, program=Program((Choice(("1", "2")),))) for p in prompts],
                      temperature=0)
    assert gb.stats["phases"] - before == 2  # one engine request per turn
    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float32)
    one, two = tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids("2")
    for prompt, c in zip(prompts, out, strict=True):
        with torch.no_grad():
            ref = model(torch.tensor([prompt])).logits[0, -1, [one, two]].tolist()
        assert c.finish_reason == "stop" and len(c.choice_logits) == 1
        assert max(abs(a - b) for a, b in zip(c.choice_logits[0], ref, strict=True)) <= LOGIT_TOL
        assert c.text == ("1" if ref[0] >= ref[1] else "2")  # greedy: the engine's pick is the options' argmax


def test_the_judge_runs_each_turn_as_one_request(gb):
    rows = [json.loads(line) for line in (REPO / "examples/pairs.jsonl").read_text().splitlines()][:2]
    cfg = BRRMConfig(decoding="constrained", thinking="on", block_token_cap=8,
                     sampling=SamplingConfig(temperature=0, max_new_tokens=480))
    before = gb.stats["phases"]
    got = brrm_judge(gb, cfg).judge_pairs([r["prompt"] for r in rows], [r["response_a"] for r in rows],
                                          [r["response_b"] for r in rows])
    assert gb.stats["phases"] - before == 2 * len(rows)  # turn 1 and turn 2, one request each
    for g in got:
        assert g.status is Status.OK and g.winner.value in ("A", "B")
        assert "[The Begin of Ranking Score]\n\\boxed{" in g.turn2_text
        assert (g.p_a >= 0.5) == (g.winner.value == "A")
