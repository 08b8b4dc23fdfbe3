"""Hugging Face ``datasets`` input of ``brrm arena``: a Dataset object, a DatasetDict's split, a ``save_to_disk``
folder (the CLI's ``--input`` and ``--split``), and the errors that name what is wrong."""

from __future__ import annotations

import pytest

from brrm import ConfigError
from brrm.arena import read_table


@pytest.fixture(scope="module")
def datasets():
    """Hugging Face ``datasets``, imported when this module's first test runs, not when every xdist worker collects
    the module (a second of imports each)."""
    return pytest.importorskip("datasets")


def _rows(models: tuple[str, ...] = ("base", "new"), prompts: int = 3) -> list[dict[str, str]]:
    return [{"prompt_id": f"p{k}", "model": m, "prompt": f"Question {k}?", "response": f"{m} answers {k}",
             "category": "math" if k % 2 else "chat"} for k in range(prompts) for m in models]


def test_a_dataset_object_reads_as_the_long_table_with_bad_rows_by_number(datasets):
    rows = _rows()
    rows[3] = {**rows[3], "response": None}  # row 4: no response
    table = read_table(datasets.Dataset.from_list(rows))
    assert table.models == ("base", "new") and len(table.answers) == 5
    assert table.answer("p2", "new").response == "new answers 2" and table.prompts["p1"].category == "math"
    assert [e.line for e in table.errors] == [4] and "response" in table.errors[0].reason


def test_a_dataset_dict_needs_its_split_named_and_reads_it(datasets):
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows()),
                               "test": datasets.Dataset.from_list(_rows(("x", "y"), 2))})
    with pytest.raises(ConfigError, match="several splits; pass split \\(one of: train, test\\)"):
        read_table(dd)
    with pytest.raises(ConfigError, match="split 'dev' is not in the dataset; splits: train, test"):
        read_table(dd, split="dev")
    assert read_table(dd, split="test").models == ("x", "y")


def test_a_save_to_disk_folder_reads_by_path_and_split(datasets, tmp_path):
    folder = tmp_path / "answers"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows()),
                          "other": datasets.Dataset.from_list(_rows(("a", "b", "c"), 1))}).save_to_disk(folder)
    assert len(read_table(str(folder), split="train").answers) == 6
    assert read_table(folder, split="other").models == ("a", "b", "c")
    with pytest.raises(ConfigError, match="pass split"):
        read_table(folder)


def test_a_split_for_a_file_and_a_folder_of_neither_kind_are_named(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    with pytest.raises(ConfigError, match="--split applies to Hugging Face datasets"):
        read_table(tmp_path / "t.jsonl", split="train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="neither an Arena-Hard-Auto folder .* nor a Hugging Face dataset"):
        read_table(tmp_path / "empty")
    with pytest.raises(ConfigError, match="does not exist"):
        read_table("examples/no-such-arena.jsonl")


def test_the_cli_reads_a_dataset_folder_with_split(datasets, tmp_path, capsys):
    """``--split`` reaches the reader; a wrong one is one line naming the splits, before any model loads."""
    from brrm.cli import main

    folder = tmp_path / "answers"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows())}).save_to_disk(folder)
    assert main(["arena", "--input", str(folder), "--split", "dev", "--baseline", "base"]) == 2
    err = capsys.readouterr().err
    assert "split 'dev' is not in" in err and "splits: train" in err and "Traceback" not in err
