"""Continuous batching (brrm.backends.transformers.continuous) and results streamed to their sinks, on a tiny real
Qwen3.

Rows join the running batch as others finish and a BR-RM turn 2 enters as soon as its turn 1 ends; with the
batch-invariant forward the results are the same bytes as static chunks. The CLI prints each verdict and
writes each JSONL line (flushed) when its record is done, so a killed run keeps its finished lines and
``--resume`` completes the file to the bytes of an unbroken run."""

from __future__ import annotations

import json
import os
import select
import signal
import time

import pytest

import brrm
from brrm.backends.base import GenerationRequest
from brrm.backends.transformers import TransformersBackend
from brrm.cli import main
from brrm.testing import save_tiny_qwen3
from tests.conftest import REPO

PAIRS = str(REPO / "examples/pairs.jsonl")
TINY_ARGS = ("--kind", "brrm", "--max-new-tokens", "420", "--block-token-cap", "8", "--thinking", "off")
CONVS = ["What is 2+2?", "Name a colour.", "Say hi to my friend who lives far away and misses home.",
         "Capital of France?", "2*3?", "Write one long sentence about the sea, the wind and the old harbour."]
A = ["4", "Red.", "Hi!", "Paris.", "6", "The sea rolled grey under a low wind while the harbour slept."]
B = ["5", "Seven.", "Go away.", "Lyon.", "five", "Sea."]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def _dicts(judgments):
    return [json.dumps(j.to_dict(), sort_keys=True) for j in judgments]


def test_continuous_gives_the_same_bytes_as_static_chunks(tiny_dir):
    """Every field (texts, P(A>B), digit logits, provenance) equal, with swap, for each pair alone (batch size 1),
    in static chunks of 3 and in continuous batches of 3 and 8: three pairs of different prompt and answer lengths,
    six orders, so the chunks of 3 are padded unevenly and the continuous batch of 3 refills as rows finish."""
    keep = [0, 2, 5]  # short and long prompts and answers
    convs, a, b = ([seq[k] for k in keep] for seq in (CONVS, A, B))
    ids = [f"r{k}" for k in keep]
    runs = {}
    for scheduling, bs in (("continuous", 1), ("static", 3), ("continuous", 3), ("continuous", 8)):
        judge = brrm.load(tiny_dir, kind="brrm", batch_size=bs, scheduling=scheduling, temperature=1.0,
                          max_new_tokens=420, block_token_cap=8, thinking="off", seed=5)
        assert judge.model.backend.capabilities.continuous is (scheduling == "continuous")
        runs[scheduling, bs] = _dicts(judge.judge_pairs(convs, a, b, ids=ids, swap=True))
    ref = runs["continuous", 1]
    assert all(r == ref for r in runs.values())
    assert len({json.loads(r)["turn1_text"] for r in ref}) == len(convs)  # real, distinct generations


def test_rows_join_as_others_finish(tiny):
    """Mixed budgets: the continuous batch refills, so it needs fewer forward passes than static chunks, and
    every row's tokens and finish reasons are those of static decoding."""
    model, tok = tiny
    reqs = [GenerationRequest(tuple(range(10, 10 + n)), budget, seed=k)
            for k, (n, budget) in enumerate([(5, 40), (30, 3), (12, 25), (7, 2), (20, 30), (9, 4), (16, 18)])]
    out, calls = {}, {}
    for scheduling in ("static", "continuous"):
        backend = TransformersBackend(model, tok, batch_size=3, scheduling=scheduling)
        done: list[int] = []
        comps = backend.generate(reqs, temperature=1.0, top_p=1.0, on_complete=done.append)
        out[scheduling] = [(c.token_ids, c.finish_reason) for c in comps]
        calls[scheduling] = backend.stats["forward_calls"]
        assert sorted(done) == list(range(len(reqs)))
    assert out["static"] == out["continuous"]
    assert any(f == "length" for _, f in out["static"])
    assert calls["continuous"] < calls["static"]


def test_on_result_reports_each_pair_once_as_it_finishes(tiny_dir):
    """Four pairs, both orders: eight judgments through a batch of 4, so rows join as others finish."""
    judge = brrm.load(tiny_dir, kind="brrm", batch_size=4, max_new_tokens=420, block_token_cap=8, thinking="off")
    seen = []
    out = judge.judge_pairs(CONVS[:4], A[:4], B[:4], swap=True, labels=["A"] * 4,
                            on_result=lambda i, j: seen.append((i, j)))
    assert sorted(i for i, _ in seen) == list(range(4))
    assert all(j == out[i] and j.label.value == "A" and len(j.sub_judgments) == 2 for i, j in seen)


def _verdict_snapshots(monkeypatch, capsys, tiny_dir, scheduling, src):
    """Run the CLI on ``src`` (examples/pairs.jsonl's first 4 pairs) at batch size 4; for each verdict line read
    from the terminal stream, the tokens the backend had generated when it was written."""
    import brrm.cli.common as common

    judges = []
    load = common.load_judge

    def keep(args, **kw):
        judges.append(load(args, **kw))
        return judges[-1]

    monkeypatch.setattr(common, "load_judge", keep)

    class Terminal:
        def __init__(self):
            self.snapshots = []

        def write(self, text):
            if "winner=" in text:
                self.snapshots.append(judges[0].model.backend.stats["generated_tokens"])
            return len(text)

        def flush(self):
            pass

    term = Terminal()
    monkeypatch.setattr(common, "terminal", lambda output: term)
    assert main(["judge", "--input", str(src), "--output", "-", "--model", tiny_dir, *TINY_ARGS, "--batch-size", "4",
                 "--no-progress", "--scheduling", scheduling]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    return term.snapshots, judges[0].model.backend.stats["generated_tokens"]


def test_first_verdict_is_printed_after_one_pairs_work(monkeypatch, capsys, tiny_dir, tmp_path):
    """4 pairs decoded together: the first verdict line is written while the other pairs still decode (the
    backend has generated fewer tokens than the run's total); with static chunks (the control) every line
    waits for the whole chunk."""
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join((REPO / "examples/pairs.jsonl").read_text().splitlines()[:4]) + "\n")
    snaps, total = _verdict_snapshots(monkeypatch, capsys, tiny_dir, "continuous", src)
    assert len(snaps) == 4 and snaps[0] < total and snaps == sorted(snaps) and len(set(snaps)) > 1
    assert snaps[0] < snaps[1]  # the first verdict line is out before the second pair has finished
    static, total_static = _verdict_snapshots(monkeypatch, capsys, tiny_dir, "static", src)
    assert total_static == total and set(static) == {total}


def _pause_at(out, after):
    """A :class:`~tests.forked_cli.ForkedCLI` child's hook: the run stops itself (SIGSTOP) at the first model forward
    after its ``--output`` file ``out`` holds ``after`` lines: the test sees it frozen mid-decode at a point that does
    not depend on the machine's speed, acts, and lets it go on (SIGCONT)."""
    from transformers.models.qwen3 import modeling_qwen3

    real, paused = modeling_qwen3.Qwen3ForCausalLM.forward, []

    def forward(self, *args, **kwargs):
        if not paused and out.is_file() and out.read_bytes().count(b"\n") >= after:
            paused.append(True)
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen inside the decode, before this forward runs
        return real(self, *args, **kwargs)

    modeling_qwen3.Qwen3ForCausalLM.forward = forward


def Paused(argv, out, after, *, stdout=False, stderr=False):  # noqa: N802 (used as a class)
    """``brrm ARGV`` forked from this process (:class:`~tests.forked_cli.ForkedCLI`: the imports are done, and a real
    process still gets the signals, exits with its own status and writes through a real pipe) that pauses after
    ``after`` lines of ``out``; its stdout and stderr are byte pipes the test reads (``stdout``/``stderr`` True)."""
    from tests.forked_cli import ForkedCLI

    return ForkedCLI(argv, stdout=stdout, stderr=stderr, binary=True, before=lambda: _pause_at(out, after))


def _wait_paused(proc, timeout=300.0):
    """Block until ``proc`` has stopped itself (or fail if it ended first); the timeout only guards a hang."""
    deadline = time.monotonic() + timeout
    while (info := os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT | os.WNOHANG)) is None:
        assert time.monotonic() < deadline, "the run neither paused nor ended"
        time.sleep(0.02)
    assert info.si_code == os.CLD_STOPPED, "the run ended before it reached its pause point"


def test_verdict_lines_reach_a_pipe_as_each_pair_finishes(tmp_path, tiny_dir):
    """stdout a pipe (``| tee``, a job's log), PYTHONUNBUFFERED unset: each verdict line arrives while later pairs
    still decode, not in one block when the run ends (Python block-buffers a pipe unless told otherwise). The run
    is frozen mid-decode after its 2nd JSONL line (each line is written before its verdict is printed, so the
    first verdict line has been printed by then): the pipe already holds it, while pairs are still to come."""
    lines = (REPO / "examples/pairs.jsonl").read_text().splitlines()[:3]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n")
    proc = Paused(_cli(tiny_dir, src, out, quiet=False), out, 2, stdout=True)
    assert proc.stdout is not None
    try:
        _wait_paused(proc)
        written = len(out.read_bytes().splitlines())
        fd, arrived = proc.stdout.fileno(), b""
        while select.select([fd], [], [], 0)[0] and (chunk := os.read(fd, 1 << 16)):  # what the pipe holds now
            arrived += chunk
    finally:
        proc.send_signal(signal.SIGCONT)
    rest = proc.stdout.read()
    assert proc.wait(timeout=600) == 0
    assert 2 <= written < 3 and arrived.count(b"winner=") >= 1  # a verdict line came while pairs still decode
    assert (arrived + rest).count(b"winner=") == 3 and len(out.read_bytes().splitlines()) == 3


def _cli(tiny_dir, src, out, *extra, quiet=True):
    """``brrm judge`` arguments on the tiny model at batch size 1."""
    return ["judge", "--input", str(src), "--output", str(out), "--model", tiny_dir, *TINY_ARGS, "--batch-size", "1",
            "--no-progress", *(["-q"] if quiet else []), *extra]


N_RESUME = 6
"""Records of the resume tests: a valid one, an invalid one, then four valid, the last two repeating the first two
valid records (the same content at another position is judged again, not taken from the kept lines)."""


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, tiny_dir):
    """(input file, the bytes an unbroken run writes for it): :data:`N_RESUME` records, the second one invalid.
    Run in-process (``main(argv)``): the bytes are the CLI's, whichever process runs it."""
    lines = (REPO / "examples/pairs.jsonl").read_text().splitlines()
    tmp = tmp_path_factory.mktemp("unbroken")
    src, full = tmp / "in.jsonl", tmp / "full.jsonl"
    src.write_text("\n".join([lines[0], '{"id": "bad", "prompt": "x"}', *lines[1:3], lines[0], lines[1]]) + "\n")
    assert main(_cli(tiny_dir, src, full)) == 0
    return src, full.read_bytes()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_run_keeps_its_finished_lines_and_resumes(tmp_path, tiny_dir, unbroken, sig, capsys):
    """SIGKILL or SIGTERM mid-run (a real process, frozen mid-decode after its 3rd line, then signalled): the file
    holds the finished records' lines (the invalid record's included), each a complete JSON object; after SIGTERM
    brrm says how to resume (exit 143); --resume appends the rest, and the file equals an unbroken run's byte for
    byte (the resume runs as ``main(argv)``: what is the process's own, its signal and exit status, is the killed
    run's). A --limit smaller than the file is refused, naming --resume."""
    n = N_RESUME
    src, expected = unbroken
    part = tmp_path / "part.jsonl"
    assert len(expected.splitlines()) == n

    proc = Paused(_cli(tiny_dir, src, part), part, 3, stderr=True)
    assert proc.stderr is not None
    try:
        _wait_paused(proc)
        at_pause = len(part.read_bytes().splitlines())
        proc.send_signal(sig)
    finally:
        proc.send_signal(signal.SIGCONT)
    err = proc.stderr.read().decode()
    returncode = proc.wait(timeout=300)
    kept = part.read_bytes()
    rows = [json.loads(x) for x in kept.splitlines()]
    if sig == signal.SIGTERM:
        assert returncode == 143 and "Traceback" not in err, err
        assert err.strip().splitlines()[-1] == (f"brrm: interrupted: {len(rows)} lines, in input order, are in {part}; "
                                                "rerun the same command with --resume to continue (an unbroken run's "
                                                "bytes)")
    else:
        assert returncode == -signal.SIGKILL
    assert 3 <= at_pause <= len(rows) < n, "the run was not stopped mid-way"
    assert rows[1]["status"] == "invalid_input" and expected.startswith(kept)

    capsys.readouterr()
    assert main(_cli(tiny_dir, src, part, "--resume")) == 0
    printed = capsys.readouterr().out
    assert f"resuming: {len(rows)} of {n} lines already in {part}; {n - len(rows)} to run" in printed
    assert f"summary of this run (the {len(rows)} lines kept from before are not counted):" in printed
    assert part.read_bytes() == expected
    if sig == signal.SIGKILL:
        return  # the refusal below is the same after either signal: checked once
    capsys.readouterr()
    assert main(_cli(tiny_dir, src, part, "--resume", "--limit", "3")) == 2
    assert capsys.readouterr().err.strip() == (
        f"brrm: error: --resume: {part} holds {n} lines but this run writes 3: another --input, --limit or "
        "--principle made it (rerun that command with --resume, or write a new --output)")


def test_resume_refuses_stdout(capsys, tiny_dir):
    assert main(["judge", "--input", PAIRS, "--model", tiny_dir, *TINY_ARGS, "--resume"]) == 2
    assert "--resume needs --output" in capsys.readouterr().err


def test_audit_commits_each_finished_item(tmp_path, tiny_dir, monkeypatch):
    """The writer dies right after its 3rd commit, inside a 6-item judge call: 3 items are in the store (the
    resume unit is the item, not the call), and a rerun judges only the other 3."""
    from brrm.audit import AuditOptions, AuditStore, plan_items, run_audit
    from brrm.records import read_records
    from tests.audit_support import pair_rows, store_items, write_jsonl

    items = plan_items(read_records(write_jsonl(tmp_path / "in.jsonl", pair_rows(6)), "pairs"), "pairs")
    judge = brrm.load(tiny_dir, kind="brrm", batch_size=4, max_new_tokens=420, block_token_cap=8, thinking="off")
    opts = AuditOptions(shape="pairs", chunk_size=6, progress=False)
    real_put, writes = AuditStore.put_results, []

    class Crash(Exception):
        pass

    def put_then_crash(self, *args, **kwargs):
        out = real_put(self, *args, **kwargs)
        writes.append(len(args[3]))
        if len(writes) == 3:
            raise Crash("writer died after its 3rd commit")
        return out

    monkeypatch.setattr(AuditStore, "put_results", put_then_crash)
    with pytest.raises(Crash):
        run_audit(items, tmp_path / "audit", opts, judge=judge)
    assert writes == [1, 1, 1] and len(store_items(tmp_path / "audit")) == 3
    monkeypatch.setattr(AuditStore, "put_results", real_put)
    calls = []
    original = judge.judge_pairs
    monkeypatch.setattr(judge, "judge_pairs", lambda *a, **k: calls.append(len(a[0])) or original(*a, **k))
    run_audit(items, tmp_path / "audit", opts, judge=judge)
    assert calls == [3] and len(store_items(tmp_path / "audit")) == 6


def test_results_have_short_reprs_and_loading_prints_no_bars(tiny_dir, capfd):
    judge = brrm.load(tiny_dir, kind="brrm", max_new_tokens=420, block_token_cap=8, thinking="off")
    assert "Loading weights" not in capfd.readouterr().err
    j = judge.judge("What is 2+2?", "4", "5")
    text = repr(j)
    assert text.startswith(f"PairwiseJudgment(winner={j.winner.value}, status=ok, p_a={j.p_a:.3f}, dimensions=[")
    assert j.turn1_text[:20] not in text and "provenance" not in text and len(text) < 200
    tie = repr(judge.judge("Hi", "Same.", "Same."))
    assert tie == "PairwiseJudgment(winner=tie, status=ok, p_a=nan, reason='identical responses: tie without a " \
                  "model call')"
    from brrm.types import ScalarReward, Status

    assert repr(ScalarReward(1.23456, Status.OK, id="r1")) == "ScalarReward(reward=1.235, status=ok, id='r1')"
    brrm.load(tiny_dir, kind="brrm", progress_bars=True)
    assert "Loading weights" in capfd.readouterr().err  # asked for: shown


def test_a_failed_forward_fails_only_its_rows(tiny, monkeypatch):
    """A RuntimeError from the model (e.g. out of memory) in one forward pass ends the rows of that pass with an
    error completion; rows that joined later decode normally, to static scheduling's tokens."""
    model, tok = tiny
    reqs = [GenerationRequest(tuple(range(10, 10 + n)), 6, seed=k) for k, n in enumerate([4, 9, 6, 12, 5])]
    ref = TransformersBackend(model, tok, batch_size=2, scheduling="static").generate(reqs, temperature=1.0)
    backend = TransformersBackend(model, tok, batch_size=2)
    real, calls = model.forward, []  # the instance's forward (the batch-invariant wrapper, when it is on)

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("CPU out of memory (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", flaky)
    out = backend.generate(reqs, temperature=1.0)
    failed = [k for k, c in enumerate(out) if c.finish_reason == "error"]
    assert failed and all("out of memory" in out[k].error for k in failed) and len(failed) < len(reqs)
    assert all(out[k].token_ids == ref[k].token_ids for k in range(len(reqs)) if k not in failed)


def test_on_step_reports_rows_and_tokens_while_rows_decode(tiny_dir):
    judge = brrm.load(tiny_dir, kind="brrm", batch_size=4, max_new_tokens=420, block_token_cap=8, thinking="off")
    stats = judge.model.backend.stats
    before, steps, done_at = stats["generated_tokens"], [], []
    out = judge.judge_pairs(CONVS, A, B, on_step=lambda rows, tokens: steps.append((rows, tokens)),
                            on_result=lambda i, j: done_at.append(len(steps)))
    assert all(j.ok for j in out)
    assert sum(t for _, t in steps) == stats["generated_tokens"] - before
    assert max(r for r, _ in steps) == 4 and all(1 <= r <= 4 for r, _ in steps)
    assert done_at[0] < len(steps)  # the first pair finished while others were still decoding
    static = brrm.load(tiny_dir, kind="brrm", batch_size=4, max_new_tokens=420, block_token_cap=8, thinking="off",
                       scheduling="static")
    calls = []
    static.judge_pairs(CONVS[:2], A[:2], B[:2], on_step=lambda rows, tokens: calls.append(rows))
    assert calls == []  # static chunks report no steps (documented: only continuous backends do)


@pytest.mark.parametrize("scheduling", ["static", "continuous"])
def test_progress_moves_per_finished_turn_and_sums_to_the_items(tiny_dir, scheduling):
    judge = brrm.load(tiny_dir, kind="brrm", batch_size=4, max_new_tokens=420, block_token_cap=8, thinking="off",
                      scheduling=scheduling)
    steps: list[float] = []
    judge.judge_pairs(CONVS[:4], A[:4], B[:4], progress=steps.append)
    assert steps.count(0.5) == 8 and sum(steps) == 4.0  # half a pair per finished turn, in both schedulings
