"""Helpers shared by the audit tests (tests/test_audit*.py): scripted judges, record files, store comparisons.

Scripted judges stand in only where a real model cannot produce the case on demand (a parse failure on item
3, a crash after 12 items) or where the test is about the audit machinery at a scale no model can reach in
a unit test (10,000 records).
"""

from __future__ import annotations

import json
import math
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from brrm.backends.base import Completion
from brrm.types import JudgeInfo, PairwiseJudgment, Status, Verdict

T1 = ("[Quality Assessment Focus]\nInformation Accuracy, Response Completeness\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: misses the point\n"
      "[End of Quality Analysis for Response 2]")

TINY_OPTS = {"kind": "brrm", "temperature": 0.0, "max_new_tokens": 450, "block_token_cap": 8, "thinking": "off"}
"""A tiny random Qwen3 BR-RM judge that always parses, without a thinking block (4x fewer tokens)."""

TINY_FLAGS = ["--kind", "brrm", "--temperature", "0", "--max-new-tokens", "450", "--block-token-cap", "8",
              "--thinking", "off"]
"""The same judge as CLI flags."""


class Crash(Exception):
    """A crash injected into a scripted model (propagates out of the audit like a programming error)."""


def ranking(k: Any) -> str:
    return f"[The Begin of Ranking Score]\n\\boxed{{{k}}}\n[The End of Ranking Score]"


def is_turn2(prompt: str) -> bool:
    return "[The Begin of Analysis on Response 1]" in prompt.rsplit("<|im_start|>user", 1)[-1]


def responses_in(prompt: str) -> tuple[str, str]:
    first = prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n[The End of Response 1]", 1)[0]
    second = prompt.split("[The Begin of Response 2]\n", 1)[1].split("\n[The End of Response 2]", 1)[0]
    return first, second


class ScriptedBRRM:
    """A scripted BR-RM model for FakeBackend: turn 1 writes :data:`T1`, turn 2 the verdict ``verdict(first,
    second)`` (1 or 2, a string, or a Completion). Counts turn-1 calls per first-shown response; raises
    :class:`Crash` on the turn-1 call after ``crash_after`` counted calls (None: never)."""

    def __init__(self, verdict: Callable[[str, str], Any] = lambda first, second: 1) -> None:
        self.verdict = verdict
        self.calls: Counter[str] = Counter()
        self.crash_after: int | None = None

    def __call__(self, prompt: str, request: Any) -> Any:
        first, second = responses_in(prompt)
        if not is_turn2(prompt):
            if self.crash_after is not None and sum(self.calls.values()) >= self.crash_after:
                raise Crash(f"injected crash after {self.crash_after} model calls")
            self.calls[first] += 1
            return T1
        out = self.verdict(first, second)
        return out if isinstance(out, Completion | str) else ranking(out)


def fake_brrm(tok: Any, script: ScriptedBRRM, *, chunk_size: int = 4, **options: Any) -> Any:
    """A BR-RM judge (faithful decoding) over a FakeBackend running ``script``."""
    import brrm
    from brrm.backends.fake import FakeBackend

    return brrm.load(kind="brrm", backend=FakeBackend(tok, script, chunk_size=chunk_size), decoding="faithful",
                     **options)


class ScriptedPairJudge:
    """A :class:`~brrm.RewardJudge` stand-in for scale tests: ``judge_pairs`` answers by a rule on the texts in
    microseconds (judges over FakeBackend spend ~5–10 ms per item in prompt rendering and tokenization, so
    10,000 records would take minutes). The longer response wins with P(A≻B) 0.8 / 0.2; calls count per id."""

    def __init__(self) -> None:
        self.info = JudgeInfo(model="scripted-pair-judge", kind="brrm", recipe="scripted", backend="fake",
                              chat_template_hash="-", template_hash="-", default_strategy="round_robin",
                              record={"seed": 0}, chunk_size=500)
        self.calls: Counter[str] = Counter()

    def judge_pairs(self, conversations: Sequence[Any], responses_a: Sequence[str], responses_b: Sequence[str], /,
                    *, swap: bool | None = None, ids: Sequence[str] | None = None,
                    labels: Sequence[Verdict] | None = None, principles: Any = None,
                    progress: Any = None, on_result: Any = None, on_step: Any = None) -> list[PairwiseJudgment]:
        out = []  # on_result / on_step (RewardJudge's hooks) are never called: results come back with the call
        for i, (a, b) in enumerate(zip(responses_a, responses_b, strict=True)):
            rid = ids[i] if ids else ""
            self.calls[rid] += 1
            win = Verdict.A if len(a) >= len(b) else Verdict.B
            out.append(PairwiseJudgment(win, Status.OK, p_a=0.8 if win is Verdict.A else 0.2, id=rid,
                                        label=labels[i] if labels else Verdict.NONE,
                                        dimensions=("Information Accuracy",)))
        if progress:
            progress(float(len(out)))
        return out

    def close(self) -> None:
        pass


def pair_rows(n: int, *, prefix: str = "q") -> list[dict[str, Any]]:
    """``n`` distinct pair records with labels and a ``source`` column (for slices)."""
    return [{"id": f"{prefix}{k}", "prompt": f"What is {k} plus {k}?", "response_a": f"It is {2 * k}.",
             "response_b": f"Maybe {2 * k + 1}, or so.", "label": "A" if k % 3 else "B",
             "source": f"model_{k % 2}"} for k in range(n)]


def write_jsonl(path: Path, rows: Sequence[Any]) -> Path:
    """Rows as JSON Lines; a ``str`` row is written verbatim (a bad line)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def store_items(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Every ``items`` row of a store, by (item_hash, config_hash): status, result, run id."""
    conn = sqlite3.connect(str(Path(directory) / "audit.sqlite"))
    try:
        rows = conn.execute("SELECT item_hash, config_hash, status, result, run_id, written_at FROM items").fetchall()
    finally:
        conn.close()
    return {(h, c): {"status": s, "result": json.loads(r), "run_id": run, "written_at": w}
            for h, c, s, r, run, w in rows}


def same_result(x: Any, y: Any, *, rel: float = 1e-6) -> bool:
    """Equal JSON results, floats within ``rel`` (CPU float32 kernels differ ~1e-8 between batch shapes)."""
    if isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=rel, abs_tol=1e-9)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same_result(x[k], y[k], rel=rel) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(same_result(a, b, rel=rel) for a, b in zip(x, y, strict=True))
    return x == y


def assert_same_stores(a: Path, b: Path) -> None:
    """Same keys and the same results (statuses, verdicts, texts exactly; floats to 1e-6 relative)."""
    ia, ib = store_items(a), store_items(b)
    assert ia.keys() == ib.keys()
    for key in ia:
        assert ia[key]["status"] == ib[key]["status"], key
        assert same_result(ia[key]["result"], ib[key]["result"]), (key, ia[key]["result"], ib[key]["result"])


def cli_exit(argv: list[str]) -> None:
    """Run the ``brrm`` CLI and exit with its code (a multiprocessing target). One intra-op thread: on a shared
    2-core machine OpenMP spin-waiting slows a tiny model down by an order of magnitude when anything else runs.

    SIGINT gets Python's own handler, as in a terminal: a test runner started in the background (``pytest &``, a CI
    script's job) has SIGINT ignored, as shells do for background jobs, and the fork server and its children inherit
    that, so a test's Ctrl-C would never arrive."""
    import signal

    import torch

    from brrm.cli import main

    signal.signal(signal.SIGINT, signal.default_int_handler)
    torch.set_num_threads(1)
    sys.exit(main(argv))
