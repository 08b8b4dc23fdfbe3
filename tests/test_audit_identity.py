"""Issue 18 (identity): an audit store keys results on the weights' fingerprint, so a resumed audit whose model
folder now holds other weights — overwritten in place, or a ``latest`` symlink switched — judges everything again
instead of reporting the old model's results as the new model's."""

from __future__ import annotations

import os
import shutil

import pytest

from brrm.cli import main
from tests.audit_support import TINY_FLAGS, pair_rows, write_jsonl

pytestmark = pytest.mark.timeout(300)


def _audit(capsys, records, out, model):
    code = main(["audit", str(records), "--output", str(out), "--model", str(model), *TINY_FLAGS, "--no-progress",
                 "--summary-every", "3600"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out + captured.err


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """Two tiny model folders of the same names and sizes, other weights (seeds 1 and 2), built once: each test
    copies or links them and never writes into them."""
    from brrm.testing import save_tiny_qwen3

    tmp = tmp_path_factory.mktemp("weights")
    return save_tiny_qwen3(tmp / "w1", seed=1), save_tiny_qwen3(tmp / "w2", seed=2)


@pytest.mark.parametrize("how", ["overwritten", "symlink"])
def test_changed_weights_are_judged_again(tmp_path, capsys, how, weights):
    records = write_jsonl(tmp_path / "pairs.jsonl", pair_rows(2))
    first, second = weights
    model = tmp_path / "latest"
    if how == "symlink":
        os.symlink(first, model)
    else:
        shutil.copytree(first, model)
    out = tmp_path / "audit"
    assert "2 to judge" in _audit(capsys, records, out, model)
    assert "2 already in the store under this configuration; 0 to judge" in _audit(capsys, records, out, model)
    if how == "symlink":
        model.unlink()
        os.symlink(second, model)
    else:  # overwritten in place with the same names and sizes, and the old mtimes put back: only content differs
        for name in os.listdir(second):
            old = (model / name).stat()
            shutil.copyfile(second / name, model / name)
            assert (model / name).stat().st_size == old.st_size or name.endswith((".json", ".txt"))
            os.utime(model / name, ns=(old.st_atime_ns, old.st_mtime_ns))
    again = _audit(capsys, records, out, model)
    assert "0 already in the store under this configuration; 2 to judge" in again, again
