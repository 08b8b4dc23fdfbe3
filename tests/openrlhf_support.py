"""OpenRLHF's own single-turn executor driven as in training, with only the policy's generation stood in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


def openrlhf_execute(endpoint: str, tok: Any, answer: str, question: str = "What is 2+2?",
                     label: str = "4") -> dict[str, Any]:
    """``openrlhf.utils.agent.SingleTurnAgentExecutor(remote_rm_url=endpoint)`` on one sample: the prompt is
    ``question`` in ``tok``'s chat template, the policy answers ``answer`` and ``<|im_end|>``, the label is
    ``label``. Returns the executor's output (``reward``, ``scores``, ``extra_logs``, ...). Skips where OpenRLHF
    is not installed (``pip install --no-deps openrlhf pylatexenc`` and aiohttp, as .ci/run does)."""
    agent = pytest.importorskip("openrlhf.utils.agent")
    prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                     add_generation_prompt=True)

    class Params:
        max_tokens, logprobs = 16, None

    class Policy:  # stands in for OpenRLHF's vLLM engine
        async def generate(self, prompt_ids, params, multi_modal_data=None):
            ids = tok.encode(answer, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
            out = type("Out", (), {"token_ids": ids, "finish_reason": "stop", "logprobs": None})
            return type("RequestOutput", (), {"outputs": [out]})

    executor = agent.SingleTurnAgentExecutor(remote_rm_url=endpoint)
    return asyncio.run(executor.execute(prompt, label, Params(), 64, tok, Policy()))
