"""Audit inputs beyond files: Hugging Face dataset folders (``save_to_disk`` and repository folders) with splits,
row numbers as line numbers, and bad rows as invalid-input rows."""

from __future__ import annotations

import pytest

from brrm.audit import plan_items
from brrm.errors import ConfigError
from brrm.records import PairRecord, RecordError, read_records
from tests.audit_support import pair_rows


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    import datasets

    rows = [{k: r[k] for k in ("id", "prompt", "response_a", "response_b", "label", "source")} for r in pair_rows(4)]
    rows[2]["response_b"] = None  # a bad row: response_b missing
    path = tmp_path_factory.mktemp("hf") / "pairs"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                          "test": datasets.Dataset.from_list(rows[:2])}).save_to_disk(str(path))
    return path


def test_dataset_folder_split_rows_are_numbered_and_bad_rows_kept(dataset_dir):
    records = read_records(dataset_dir, "pairs", split="train")
    assert [type(r) for r in records] == [PairRecord, PairRecord, RecordError, PairRecord]
    assert [r.line for r in records] == [1, 2, 3, 4] and "response_b" in records[2].reason
    items = plan_items(records, "pairs", slice_by=["source"])
    assert [it.valid for it in items] == [True, True, False, True] and items[2].invalid_reason.startswith("line 3: ")
    assert items[2].slices == {"source": "(invalid row)"} and items[3].slices == {"source": "model_1"}
    assert [r.id for r in read_records(dataset_dir, "pairs", split="test", limit=1)] == ["q0"]


def test_dataset_split_mistakes_name_the_splits(dataset_dir, tmp_path):
    with pytest.raises(ConfigError, match="several splits; pass split \\(one of: train, test\\)"):
        read_records(dataset_dir, "pairs")
    with pytest.raises(ConfigError, match="split 'dev' is not in"):
        read_records(dataset_dir, "pairs", split="dev")
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi", "response_a": "a", "response_b": "b"}\n')
    with pytest.raises(ConfigError, match="split applies to Hugging Face datasets"):
        read_records(tmp_path / "p.jsonl", "pairs", split="train")
    with pytest.raises(ConfigError, match="could not be loaded as a Hugging Face dataset"):
        read_records("nobody/no-such-dataset-xyz", "pairs")
