"""The audit store: idempotent upserts, configuration keys, concurrent writers and readers (N16), and results that
round-trip through their stored JSON."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from brrm.audit.codec import result_from_dict
from brrm.audit.keys import config_hash, item_hash
from brrm.audit.plan import AuditItem
from brrm.audit.store import AuditStore
from brrm.errors import ConfigError
from brrm.types import PairwiseJudgment, Status, Verdict
from tests.audit_support import ScriptedBRRM, fake_brrm
from tests.conftest import REPO

C = "c" * 64


def item(k: int) -> AuditItem:
    return AuditItem(k, k + 1, f"i{k}", f"{k:064x}", {"id": f"i{k}"})


def result(winner: Verdict = Verdict.A, status: Status = Status.OK, reason: str = "") -> dict:
    return PairwiseJudgment(winner, status, reason).to_dict()


def test_upserts_keep_one_row_per_key_and_never_overwrite_a_finished_result(tmp_path):
    with AuditStore(tmp_path) as store:
        items = [item(k) for k in range(3)]
        run = store.start_run(items, shape="pairs", source="x", argv=[], provenance={}, config_hash=C)
        assert store.put_results(run, C, "pairs", [(items[0], result()),
                                                   (items[1], result(Verdict.NONE, Status.BACKEND_ERROR, "503"))]) == 2
        assert [it.record_id for it in store.pending(items, C)] == ["i1", "i2"]  # a backend error is retried
        written = store.put_results(run, C, "pairs", [(items[0], result(Verdict.B)), (items[1], result(Verdict.B))])
        assert written == 1  # the finished row stays; the backend error is replaced
        got = store.results(C)
        assert got[items[0].item_hash].result["winner"] == "A" and got[items[1].item_hash].result["winner"] == "B"
        assert store.count_items() == 2 and store.pending(items, "d" * 64) == [it for it in items]
        p = store.progress(run)
        assert p == {"total": 3, "done": 2, "by_status": {"ok": 2}, "judged_this_run": 2}
        assert store.integrity_check() == "ok"


def test_keys_change_with_the_record_and_the_configuration_only():
    rec = {"shape": "pairs", "id": "q1", "conversation": [{"role": "user", "content": "hi"}], "response_a": "a",
           "response_b": "b", "label": "A"}
    assert item_hash(rec) == item_hash(dict(reversed(list(rec.items()))))  # key order does not matter
    assert len({item_hash(rec), item_hash({**rec, "label": "B"}), item_hash({**rec, "id": "q2"})}) == 3
    info = {"model": "m", "kind": "brrm", "options": {"sampling": {"seed": 0}}, "chunk_size": 8}
    assert config_hash(info, shape="pairs") == config_hash({**info, "chunk_size": 64}, shape="pairs")
    assert config_hash(info, shape="pairs") != config_hash({**info, "options": {"sampling": {"seed": 1}}},
                                                           shape="pairs")
    assert config_hash(info, shape="groups", strategy="circular") != config_hash(info, shape="groups",
                                                                                strategy="knockout")


def test_status_of_a_folder_without_a_store_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="holds no audit store"):
        AuditStore(tmp_path / "nothing", create=False)


WRITER = """
import sys
from brrm.audit.plan import AuditItem
from brrm.audit.store import AuditStore
from brrm.types import PairwiseJudgment, Status, Verdict
folder, shard = sys.argv[1], int(sys.argv[2])
done = PairwiseJudgment(Verdict.A, Status.OK).to_dict()
items = [AuditItem(k, k + 1, f"i{k}", f"{k:064x}", {"id": f"i{k}"}) for k in range(shard * 100, shard * 100 + 100)]
with AuditStore(folder) as store:
    run = store.start_run(items, shape="pairs", source=f"shard {shard}", argv=[], provenance={}, config_hash="c" * 64)
    for k in range(0, 100, 2):
        store.put_results(run, "c" * 64, "pairs", [(it, done) for it in items[k:k + 2]])
    store.update_run(run, state="finished")
"""

READER = """
import sys, time
from brrm.audit.status import status_text
from brrm.audit.store import AuditStore
reads = 0
deadline = time.time() + 60
while time.time() < deadline:
    try:
        with AuditStore(sys.argv[1], create=False) as store:
            n = store.count_items()
            if store.run() is not None:
                status_text(sys.argv[1])
    except Exception as exc:
        if "holds no audit store" not in str(exc):
            raise
        n = -1
    reads += 1
    if n == 400:
        break
print(reads)
"""


@pytest.mark.timeout(120)
def test_four_writers_and_a_reader_share_one_store_without_lock_errors(tmp_path):
    """N16: 4 processes write disjoint shards of 100 items in small transactions while another reads in a loop."""
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    folder = str(tmp_path / "audit")
    reader = subprocess.Popen([sys.executable, "-c", READER, folder], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    time.sleep(0.2)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, folder, str(k)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env) for k in range(4)]
    outs = [w.communicate(timeout=90) for w in writers]
    r_out, r_err = reader.communicate(timeout=90)
    for w, (_, err) in zip(writers, outs, strict=True):
        assert w.returncode == 0 and "OperationalError" not in err, err
    assert reader.returncode == 0 and "OperationalError" not in r_err, r_err
    assert int(r_out) >= 1
    with AuditStore(folder, create=False) as store:
        assert store.count_items() == 400 and store.integrity_check() == "ok"
        assert len(store.results(C)) == 400 and [r["state"] for r in store.runs()] == ["finished"] * 4


def test_results_round_trip_through_their_stored_json():
    import brrm
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    judge = fake_brrm(tok, ScriptedBRRM(lambda first, second: 1 if first == "4" else "no verdict"), swap=True)
    pairs = judge.judge_pairs(["2+2?", "3+3?"], ["4", "7"], ["5", "6"], ids=["a", "b"],
                              labels=[Verdict.A, Verdict.NONE])
    groups = judge.rank_groups(["2+2?"], [["4", "5", "22"]], strategy="circular")
    bt = brrm.load(kind="bt", backend=FakeBackend(tok, score_script=lambda p: ValueError("nan") if "5" in p else 1.5))
    rewards = bt.score(["2+2?", "2+2?"], ["4", "5"], ids=["x", "y"])
    assert math.isnan(rewards[1].reward) and rewards[1].status is Status.BACKEND_ERROR
    for shape, values in (("pairs", pairs), ("groups", groups), ("single", rewards)):
        for value in values:
            again = result_from_dict(shape, value.to_dict())
            assert again.to_dict() == value.to_dict() and type(again) is type(value)
