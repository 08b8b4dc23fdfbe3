"""Judges that ``brrm serve --factory tests.service_helpers:NAME`` builds for the service-layer tests: a real
tiny-tokenizer Bradley–Terry judge on a scripted classifier that fails *as a batch* on demand (a real model cannot
raise on one item of a batch on demand). Each scores a response ``q<k>`` as ``k + 0.5``.

* :func:`raising_bt` — ``classify`` raises for the whole call when any sequence contains ``BOOM``;
* :func:`flaky_bt` — ``classify`` raises on its first two calls (a warm-up that fails, then recovers);
* :func:`slow_bt` — sleeps 60 s before building (a model that takes long to load); first it appends a line to
  the file ``BRRM_TEST_FAKE``'s ``log`` names, if any (so a test sees whether the build began at all).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any


def _score(prompt: str) -> float:
    found = re.findall(r"q(\d+)", prompt)
    return int(found[-1]) + 0.5 if found else 0.0


def _bt(fail: Any) -> Any:
    import brrm
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    class Failing(FakeBackend):
        def classify(self, sequences: Any, **kw: Any) -> Any:
            texts = [self.tokenizer.decode(list(s), skip_special_tokens=False) for s in sequences]
            error = fail(texts)
            if error is not None:
                raise error
            return super().classify(sequences, **kw)

    return brrm.load(kind="bt", backend=Failing(build_tiny_tokenizer(), score_script=_score))


def raising_bt() -> Any:
    """Raises ``RuntimeError`` for the whole call when any sequence in it contains ``BOOM``."""
    return _bt(lambda texts: RuntimeError("scripted batch failure on BOOM") if any("BOOM" in t for t in texts)
               else None)


def flaky_bt() -> Any:
    """Raises ``RuntimeError`` on its first two ``classify`` calls, then works."""
    calls = [0]
    lock = threading.Lock()

    def fail(_texts: list[str]) -> Exception | None:
        with lock:
            calls[0] += 1
            return RuntimeError(f"scripted cold-start failure {calls[0]}") if calls[0] <= 2 else None

    return _bt(fail)


def slow_bt() -> Any:
    """A judge that takes 60 s to build (noting in ``BRRM_TEST_FAKE``'s ``log`` that its build began)."""
    log = json.loads(os.environ.get("BRRM_TEST_FAKE", "{}")).get("log")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"building": "slow_bt"}) + "\n")
    time.sleep(60)
    return raising_bt()
