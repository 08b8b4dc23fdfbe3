"""OpenRLHF's local ``reward_func`` (``LocalRewards``) on the service scheduler (issue 28): a stalled query costs only
itself with a judge that takes concurrent calls, and with one that does not, the stall is reported on each query
of the call it holds (``backend_error``, a reason, ``brrm_failed`` 1.0) — never a reward as if judged — the queries
outside that call are judged, and the next calls run once the stalled call has left the model (a judge that is not
reentrant never has a second call inside it; meanwhile each query is failed with a reason naming the stall).

The judge is a Bradley–Terry model on the scripted classifier of :mod:`brrm.backends.fake` (a real model cannot
stall on demand): a response ``q<k>`` scores ``k + 0.5``; one holding ``STALL`` blocks its call until released.
OpenRLHF calls ``reward_func`` from worker threads, one query each: so does the test, through ``reward_func``.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest

import brrm
import brrm.serve.reward_func as rf
from brrm.backends.fake import FakeBackend
from brrm.testing import build_tiny_tokenizer

pytestmark = pytest.mark.timeout(120)

CHATML = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
TIMEOUT_S = 3.0
"""Each query's deadline: 60 times what a query's scoring takes (a busy machine's delays fit). A stalled query's
answer is checked to come while its stall still holds (``STALL_LEFT`` unset), an order of events, not a time."""
STALL_LEFT = threading.Event()
"""Set when a stall leaves the judge (released, or past its 60 s)."""


def _judge(release: threading.Event, *, concurrent: bool) -> Any:
    STALL_LEFT.clear()

    def score(prompt: str) -> float:
        if "STALL" in prompt:
            release.wait(60)
            STALL_LEFT.set()
        time.sleep(0.05)
        found = re.findall(r"q(\d+)", prompt)
        return int(found[-1]) + 0.5 if found else 0.0

    return brrm.load(kind="bt", backend=FakeBackend(build_tiny_tokenizer(), score_script=score,
                                                     concurrent=concurrent))


def _round(texts: list[str]) -> list[tuple[dict[str, Any], float]]:
    """Each text as one OpenRLHF query from its own thread: (its reply, seconds)."""
    out: dict[int, tuple[dict[str, Any], float]] = {}

    def call(k: int) -> None:
        start = time.perf_counter()
        reply = rf.reward_func([CHATML + texts[k] + "<|im_end|>"], [CHATML], [""])
        out[k] = (dict(reply), time.perf_counter() - start)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [out[k] for k in range(len(texts))]


@pytest.fixture
def service(monkeypatch):
    made: list[rf.LocalRewards] = []

    def install(judge: Any) -> rf.LocalRewards:
        made.append(rf.LocalRewards(judge, failed_reward=-9.0, mode="scores", max_wait_ms=100, timeout_s=TIMEOUT_S))
        monkeypatch.setattr(rf, "_service", made[-1])
        return made[-1]

    yield install
    for s in made:
        s.close()


def test_a_stalled_query_costs_only_itself_with_a_concurrent_judge_two_rounds(service):
    release = threading.Event()
    try:
        local = service(_judge(release, concurrent=True))
        for r in range(2):
            texts = [f"q{k} round {r}" if k != 3 else f"STALL round {r}" for k in range(8)]
            for k, (reply, _) in enumerate(_round(texts)):
                if k == 3:
                    assert reply["statuses"] == ["backend_error"] and reply["extra_logs"]["brrm_failed"] == [1.0]
                    assert f"timeout_s={TIMEOUT_S:g}" in reply["reasons"][0] and reply["rewards"] == [-9.0]
                    assert not STALL_LEFT.is_set()  # its own deadline ended it, while the stall still held
                else:  # ok: judged within its deadline (a query past it is a backend_error)
                    assert reply["statuses"] == ["ok"] and reply["rewards"] == [k + 0.5], (r, k, reply)
        assert local.scheduler.abandoned <= 2
    finally:
        release.set()


def test_a_stall_in_a_judge_without_concurrent_calls_is_reported_on_each_query_of_its_call(service):
    release = threading.Event()
    try:
        local = service(_judge(release, concurrent=False))
        texts = [f"q{k} shared" if k != 3 else "STALL shared" for k in range(6)]
        first = _round(texts)  # coalesced as they arrive: the stall holds its call and whatever shares it
        held = 0
        for k, (reply, _) in enumerate(first):
            assert not STALL_LEFT.is_set()  # every query answered while the stall still held
            if k != 3 and reply["statuses"] == ["ok"]:  # not in the stalled call: judged
                assert reply["rewards"] == [k + 0.5]
                continue
            held += 1  # in the stalled call: its stall reported, never a reward as if judged
            assert reply["statuses"] == ["backend_error"] and reply["extra_logs"]["brrm_failed"] == [1.0]
            assert f"timeout_s={TIMEOUT_S:g}" in reply["reasons"][0] and reply["rewards"] == [-9.0]
        assert held >= 1 and first[3][0]["statuses"] == ["backend_error"]
        for _ in range(100):  # the stalled call is abandoned once its queries left
            if local.scheduler.abandoned == 1:
                break
            time.sleep(0.05)
        while_stalled = _round(["q7 while stalled"])  # no second call beside the stalled one: refused, named
        assert while_stalled[0][0]["statuses"] == ["backend_error"] and "stalled" in while_stalled[0][0]["reasons"][0]
        release.set()  # the stalled call leaves the model: the next calls run
        for _ in range(200):
            if local.scheduler.abandoned == 0:
                break
            time.sleep(0.05)
        after = _round([f"q{k} after" for k in range(4)])
        assert [reply["rewards"] for reply, _ in after] == [[k + 0.5] for k in range(4)]
        assert all(reply["statuses"] == ["ok"] for reply, _ in after)
    finally:
        release.set()
