"""Calls arriving while a continuous batch decodes join it (issue 19, item 2: ``capabilities.concurrent``), on a
tiny real Qwen3: two threads judging with the same judge get exactly the results each gets alone, and the second
call's rows decode in the first call's batch."""

from __future__ import annotations

import json
import threading

import pytest

import brrm
from brrm.testing import save_tiny_qwen3

CONVS = ["What is 2+2?", "Name a colour.", "Capital of France?", "Say hi.", "2*3?", "Write a line about the sea."]
A = ["4", "Red.", "Paris.", "Hi!", "6", "The sea rolled grey under a low wind."]
B = ["5", "Seven.", "Lyon.", "Go away.", "five", "Sea."]


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    path = str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))
    return brrm.load(path, kind="brrm", batch_size=8, temperature=1.0, max_new_tokens=420, block_token_cap=8,
                     thinking="off", seed=5)


def _dicts(judgments):
    return [json.dumps(j.to_dict(), sort_keys=True) for j in judgments]


def test_the_backend_declares_concurrent_calls(judge):
    caps = judge.model.backend.capabilities
    assert caps.continuous and caps.concurrent


def test_a_second_threads_call_joins_the_running_batch_with_the_results_it_gets_alone(judge):
    first, second = slice(0, 2), slice(2, 4)  # two pairs a call
    alone = {name: _dicts(judge.judge_pairs(CONVS[s], A[s], B[s])) for name, s in (("a", first), ("b", second))}
    out: dict[str, list[str]] = {}
    threads: list[threading.Thread] = []
    rows_seen: list[int] = []
    callers: set[str] = set()

    def call_b() -> None:
        out["b"] = _dicts(judge.judge_pairs(CONVS[second], A[second], B[second],
                                            on_result=lambda i, j: callers.add(threading.current_thread().name)))

    def on_step(rows: int, tokens: int) -> None:
        rows_seen.append(rows)
        if not threads:  # the second call arrives while the first one's batch decodes
            threads.append(threading.Thread(target=call_b, name="caller-b"))
            threads[0].start()

    out["a"] = _dicts(judge.judge_pairs(CONVS[first], A[first], B[first], on_step=on_step))
    threads[0].join(timeout=600)
    assert not threads[0].is_alive()
    assert out == alone
    assert max(rows_seen) > 2  # the second call's rows ran in the first call's batch (2 pairs of its own)
    assert callers == {"caller-b"}  # its callbacks ran in its own thread


def test_a_joined_call_that_raises_leaves_the_running_call_its_results(judge):
    """A joined call's callback raising fails that call only; the call running the batch finishes as alone."""
    first, second = slice(0, 2), slice(2, 4)  # two pairs a call
    alone = _dicts(judge.judge_pairs(CONVS[first], A[first], B[first]))
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def boom(i, j):
        raise KeyError("from the joined call's on_result")

    def call_b() -> None:
        try:
            judge.judge_pairs(CONVS[second], A[second], B[second], on_result=boom)
        except KeyError as exc:
            errors.append(exc)

    def on_step(rows: int, tokens: int) -> None:
        if not threads:
            threads.append(threading.Thread(target=call_b))
            threads[0].start()

    out = _dicts(judge.judge_pairs(CONVS[first], A[first], B[first], on_step=on_step))
    threads[0].join(timeout=600)
    assert out == alone
    assert len(errors) == 1 and "joined call" in str(errors[0])


def test_calls_with_other_sampling_settings_wait_and_run_alone(judge):
    """A call at another temperature does not join (rows share one sampler setting): it runs after, alone."""
    backend = judge.model.backend
    reqs = [r for r in _requests(judge)]
    solo_hot = backend.generate(reqs, temperature=1.0)
    solo_cold = backend.generate(reqs, temperature=0.0)
    got: dict[str, list] = {}

    def hot() -> None:
        got["hot"] = backend.generate(reqs, temperature=1.0)

    thread = threading.Thread(target=hot)
    thread.start()
    got["cold"] = backend.generate(reqs, temperature=0.0)
    thread.join(timeout=600)
    assert [c.token_ids for c in got["hot"]] == [c.token_ids for c in solo_hot]
    assert [c.token_ids for c in got["cold"]] == [c.token_ids for c in solo_cold]
    assert [c.token_ids for c in solo_hot] != [c.token_ids for c in solo_cold]


def _requests(judge):
    from brrm.backends.base import GenerationRequest

    tok = judge.model.backend.tokenizer
    return [GenerationRequest(prompt_ids=tuple(tok.encode(text)), max_new_tokens=12 + 5 * k, seed=k)
            for k, text in enumerate(CONVS)]
