"""A judge that ``brrm serve --factory tests.flight_helpers:counting_bt`` builds for ``tests/test_single_flight.py``:
a real tiny-tokenizer Bradley–Terry judge on the scripted classifier of :mod:`brrm.backends.fake` that counts its
backend calls (a real model cannot be made to take a fixed time or raise on demand).

``BRRM_TEST_FAKE`` (JSON) keys: ``log`` (a JSONL file: one line per ``classify`` call, with the texts it was given),
``classify_s`` (seconds each call sleeps), ``gate`` (a file: while it exists, a call waits, at most 120 s, so a test
holds a call in flight until the requests it sends have joined it: an event, not a guess of a busy machine's
speed). A response ``q<k>`` scores ``k + 0.5``; a call holding ``BOOM`` raises
for the whole call (so the item fails alone after bisection, and its request gets 503).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any

_lock = threading.Lock()


def _score(prompt: str) -> float:
    found = re.findall(r"q(\d+)", prompt)
    return int(found[-1]) + 0.5 if found else 0.0


def counting_bt() -> Any:
    """The counting, optionally slow, BOOM-raising Bradley–Terry judge (see the module docstring)."""
    import brrm
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    cfg = json.loads(os.environ.get("BRRM_TEST_FAKE", "{}"))

    class Counting(FakeBackend):
        def classify(self, sequences: Any, **kw: Any) -> Any:
            texts = [self.tokenizer.decode(list(s), skip_special_tokens=False) for s in sequences]
            if cfg.get("log"):
                with _lock, open(cfg["log"], "a", encoding="utf-8") as f:
                    f.write(json.dumps({"texts": texts}) + "\n")
            time.sleep(float(cfg.get("classify_s", 0.0)))
            end = time.monotonic() + 120
            while cfg.get("gate") and os.path.exists(cfg["gate"]) and time.monotonic() < end:
                time.sleep(0.01)
            if any("BOOM" in t for t in texts):
                raise RuntimeError("scripted batch failure on BOOM")
            return super().classify(sequences, **kw)

    return brrm.load(kind="bt", backend=Counting(build_tiny_tokenizer(), score_script=_score))
