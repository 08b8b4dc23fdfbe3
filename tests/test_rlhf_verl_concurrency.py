"""verl's local mode calls the judge concurrently exactly when the judge declares it (``info.concurrent``, from its
backend's ``capabilities.concurrent``), whatever the backend is named; and the scripted backend's declaration is
true (its bookkeeping stays exact under concurrent calls).

The scripted backend stands in here for what a real model cannot show on demand: how many calls are in flight."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import brrm
from brrm.backends.base import BackendInfo
from brrm.backends.fake import FakeBackend
from brrm.rlhf.verl import VerlRewardConfig, VerlScorer
from brrm.testing import build_tiny_tokenizer, save_tiny_qwen3

pytestmark = pytest.mark.timeout(90)
SAMPLES = 4


class InFlight:
    """A score script that counts the calls in flight (the most at once in :attr:`peak`); each call holds for
    ``hold_s``, or until ``barrier`` lets all :data:`SAMPLES` through together."""

    def __init__(self, hold_s: float = 0.0, barrier: threading.Barrier | None = None) -> None:
        self.hold_s, self.barrier = hold_s, barrier
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, prompt: str) -> float:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            if self.barrier is not None:
                self.barrier.wait()  # raises BrokenBarrierError unless SAMPLES calls are in flight at once
            time.sleep(self.hold_s)
            return float(len(prompt) % 7)
        finally:
            with self.lock:
                self.now -= 1


def _score_all(backend: FakeBackend) -> list[dict[str, object]]:
    judge = brrm.load(kind="bt", backend=backend)
    scorer = VerlScorer(VerlRewardConfig(timeout_s=20.0, max_workers=SAMPLES), judge=judge)

    async def batch() -> list[dict[str, object]]:
        return await asyncio.gather(*[scorer.score(f"answer {k}", None, {"prompt": f"Question {k}?"})
                                      for k in range(SAMPLES)])

    try:
        return asyncio.run(batch())
    finally:
        scorer.close()


def test_a_backend_declaring_no_concurrency_is_called_one_at_a_time():
    script = InFlight(hold_s=0.1)
    backend = FakeBackend(build_tiny_tokenizer(), score_script=script, concurrent=False)
    assert brrm.load(kind="bt", backend=backend).info.concurrent is False
    out = _score_all(backend)
    assert [r["status"] for r in out] == ["ok"] * SAMPLES, out
    assert 1 <= backend.calls <= SAMPLES and script.peak == 1  # samples arriving together share a call


def test_a_backend_declaring_concurrency_is_called_concurrently():
    script = InFlight(barrier=threading.Barrier(SAMPLES, timeout=10))
    backend = FakeBackend(build_tiny_tokenizer(), score_script=script, concurrent=True)
    assert brrm.load(kind="bt", backend=backend).info.concurrent is True
    out = _score_all(backend)
    assert [r["status"] for r in out] == ["ok"] * SAMPLES, out  # a serialized call would break the barrier
    assert backend.calls == SAMPLES and script.peak == SAMPLES


def test_the_declaration_not_the_backend_name_decides():
    """A backend named like a serial engine but declaring concurrency runs concurrently, and one with a name verl
    never listed that declares none runs serially."""
    for name, concurrent in (("transformers", True), ("some-engine", False)):
        script = InFlight(barrier=threading.Barrier(SAMPLES, timeout=10)) if concurrent else InFlight(hold_s=0.1)
        backend = FakeBackend(build_tiny_tokenizer(), score_script=script, concurrent=concurrent)
        backend.info = BackendInfo(name, "scripted")
        assert brrm.load(kind="bt", backend=backend).info.backend == name
        out = _score_all(backend)
        assert [r["status"] for r in out] == ["ok"] * SAMPLES, (name, out)
        assert script.peak == (SAMPLES if concurrent else 1), name


def test_a_real_transformers_judge_declares_its_concurrency(tmp_path):
    """The in-process engine declares what verl reads: static batching takes one call at a time."""
    judge = brrm.load(str(save_tiny_qwen3(tmp_path / "rm", sequence_classification=True)), kind="bt")
    try:
        assert judge.info.backend == "transformers" and judge.info.concurrent is False
    finally:
        judge.close()


def test_concurrent_calls_keep_the_fake_backends_bookkeeping_exact():
    backend = FakeBackend(build_tiny_tokenizer(), lambda prompt, request: "ok", score_script=lambda p: 1.0,
                          concurrent=True)
    judge = brrm.load(kind="bt", backend=backend)
    threads = [threading.Thread(target=lambda k=k: [judge.score([f"q{k}-{j}"], [f"r{k}-{j}"])
                                                    for j in range(25)]) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend.calls == 200 and backend.stats["classified"] == 200 and len(backend.prompts) == 200
    assert len(set(backend.prompts)) == 200


@pytest.mark.parametrize(("kind", "pairwise"), [("auto", True), ("brrm", True), ("bt", False), ("principle", False)])
def test_url_mode_reads_the_kinds_trait_before_asking_the_server(kind, pairwise):
    """Before the server is asked, ``ground_truth`` is a reference exactly when the kind's trait is pairwise."""
    scorer = VerlScorer(VerlRewardConfig(url="http://127.0.0.1:9", kind=kind))  # nothing listens: never asked
    item = scorer._item("answer", "the reference", {"prompt": "Question?"})
    assert item.reference == ("the reference" if pairwise else None)
    scorer.close()
