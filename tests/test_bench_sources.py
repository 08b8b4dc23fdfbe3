"""Benchmark data where the user is: each benchmark's pinned official source, the download cache filled from it
(here from a local HTTP server in raw.githubusercontent.com's layout), the offline error naming source and
layout, and the hub path (``huggingface_hub.snapshot_download`` + ``datasets.load_dataset``) reading a snapshot
built in a local Hugging Face cache. No test reaches the internet.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from brrm.bench import get_benchmark
from brrm.bench.data import data_revision, files_sha256, run_revision
from brrm.bench.sources import Source, SourceFile, fetch, git_blob_id, sources
from brrm.cli import main
from brrm.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures"
NATURAL = "LLMBar/LLMBar/Natural/dataset.json"
PAIRS = [{"input": "Name a prime number.", "output_1": "7", "output_2": "8", "label": 1},
         {"input": "Say hello.", "output_1": "Goodbye.", "output_2": "Hello!", "label": 2}]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        """No access log on stderr."""


@pytest.fixture()
def raw_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(folder, url): a local HTTP server over ``folder``, laid out as raw.githubusercontent.com
    (``<owner>/<repo>/<commit>/<path>``)."""
    root = tmp_path / "raw"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user without ``../shared``: no BRRM_DATA_DIR, an empty brrm cache; returns the download cache."""
    monkeypatch.delenv("BRRM_DATA_DIR", raising=False)
    monkeypatch.setenv("BRRM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return tmp_path / "cache" / "benchmarks"


def _publish(raw: Path, source: Source, file: SourceFile, data: bytes) -> None:
    owner_repo = source.repository.removeprefix("https://github.com/")
    target = raw / owner_repo / source.commit / file.upstream
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _online(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("BRRM_GITHUB_RAW_URL", url)


def test_every_pinned_file_is_the_shared_copy_at_the_commit_its_source_md_names(shared):
    data = shared / "data"
    for folder, source in sources().items():
        notes = (data / folder / "SOURCE.md").read_text(encoding="utf-8")
        assert source.repository in notes and f"`{source.commit}`" in notes, folder
        for f in source.files:
            assert re.fullmatch(r"[0-9a-f]{40}", f.git_blob), f
            if f.sha256 is None:  # absent from the shared copy (>= 4 MiB upstream): pinned by blob id only
                assert not (data / folder / f.path).exists(), f
                continue
            body = (data / folder / f.path).read_bytes()
            assert (len(body), hashlib.sha256(body).hexdigest()) == (f.size, f.sha256), f
            if not f.derived:
                assert git_blob_id(body) == f.git_blob and f"`{f.git_blob[:12]}`" in notes, f
    counts = {k: len(s.files) for k, s in sources().items()}
    assert counts == {"LLMBar": 13, "JudgeBench": 2, "RM-Bench": 5, "RMB": 98, "AutoJ-EvalP": 2, "PandaLM": 1,
                      "EvalBiasBench": 1}


def test_a_fresh_cache_is_filled_from_the_pinned_repository_checked_and_then_read_offline(
        shared, fresh, raw_server, monkeypatch, capsys):
    raw, url = raw_server
    llmbar = sources()["LLMBar"]
    for f in llmbar.under("LLMBar"):
        _publish(raw, llmbar, f, (shared / "data" / "LLMBar" / f.path).read_bytes())
    _online(monkeypatch, url)
    bench = get_benchmark("llmbar")
    items = bench.load(bench.subsets, limit=3)
    notes = capsys.readouterr().err.splitlines()  # one line per file fetched, each subset's as it is read
    assert notes == [f"brrm: downloading 1 file of LLMBar from {llmbar.short()} to {fresh / 'LLMBar'}"] * 5
    assert items == bench.load(bench.subsets, root=shared / "data", limit=3) and len(items) == 15
    assert sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*.json")) == sorted(
        f"LLMBar/{f.path}" for f in llmbar.under("LLMBar"))
    rev = data_revision("LLMBar")  # the cache's note names what was downloaded
    assert (rev["repository"], rev["commit"]) == (llmbar.repository, llmbar.commit)
    assert rev["sha256"] == files_sha256(fresh / "LLMBar")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline now: the cache is all it reads
    (raw / "princeton-nlp").rename(raw / "gone")
    assert bench.load(("Natural",), limit=3) == items[:3]
    assert capsys.readouterr().err == ""


def test_a_download_that_does_not_match_its_pin_is_not_kept(fresh, raw_server, monkeypatch):
    raw, url = raw_server
    source, body = sources()["PandaLM"], b'[{"idx": "0"}]'
    (file,) = source.files
    _publish(raw, source, file, body)
    _online(monkeypatch, url)
    bench = get_benchmark("pandalm")
    with pytest.raises(ConfigError) as caught:
        bench.load(bench.subsets)
    assert str(caught.value) == (f"PandaLM/testset-v1.json from github.com/WeOpenML/PandaLM @ {source.commit} "
                                 f"(data/testset-v1.json) does not match its pinned git blob: expected "
                                 f"{file.git_blob}, got {git_blob_id(body)}; nothing was kept")
    assert not any(fresh.rglob("*.json"))


def test_a_derived_file_is_computed_from_its_pinned_upstream_file(tmp_path, raw_server, monkeypatch):
    raw, url = raw_server
    upstream = b'import json\nscenario_group = {"Code": ["code_generation"], "Rewriting": ["paraphrasing"]}\n'
    derived = json.dumps({"Code": ["code_generation"], "Rewriting": ["paraphrasing"]}, indent=1).encode()
    file = SourceFile("scenario_group.json", "codes/utils_constants.py", git_blob_id(upstream),
                      hashlib.sha256(derived).hexdigest(), len(derived), "scenario_group")
    source = Source("AutoJ-EvalP", "https://github.com/someone/somewhere", "f" * 40, (file,))
    _publish(raw, source, file, upstream)
    _online(monkeypatch, url)
    (written,) = fetch(source, "", tmp_path)
    assert written.read_bytes() == derived and written == tmp_path / "AutoJ-EvalP" / "scenario_group.json"
    assert "- **Commit:** `" + "f" * 40 + "`" in (tmp_path / "AutoJ-EvalP" / "SOURCE.md").read_text()


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_offline_without_data_names_the_source_and_the_layout_before_any_model_loads(fresh, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = _cli(capsys, "bench", "llmbar", "--subset", "Natural", "--model", "/nonexistent-model")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert (f"LLMBar Natural not found at {fresh / NATURAL}: offline (HF_HUB_OFFLINE=1) and no --data-dir; it comes "
            "from github.com/princeton-nlp/LLMBar @ 900616bff90b6c6c8e1681f7d079250637c55992 "
            f"(Dataset/LLMBar/Natural/dataset.json), layout <data-dir>/{NATURAL}; pass --data-dir or set "
            f"BRRM_DATA_DIR, or go online to download it to {fresh}") in err


def test_a_data_dir_without_the_file_names_the_layout_it_needs(fresh, tmp_path, capsys):
    code, _, err = _cli(capsys, "bench", "rmb", "--subset", "bon-harmlessness", "--data-dir", str(tmp_path),
                        "--model", "/nonexistent-model")
    assert code == 2 and err.count("\n") == 1
    assert (f"RMB bon-harmlessness not found at {tmp_path}/RMB/BoN_set/Harmlessness (--data-dir / BRRM_DATA_DIR): "
            "it comes from github.com/Zhou-Zoey/RMB-Reward-Model-Benchmark @ 2be3180857f2190b7ffa929d43190835627f1f4d, "
            "layout <data-dir>/RMB/BoN_set/Harmlessness; pass --data-dir or set BRRM_DATA_DIR to a folder in that "
            f"layout, or unset both to download it to {fresh}") in err
    assert not fresh.exists()  # a named data root is never filled


def test_a_local_folder_in_the_documented_layout_is_read_offline_and_named_by_its_content(fresh, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "bench-data"
    (data / NATURAL).parent.mkdir(parents=True)
    (data / NATURAL).write_text(json.dumps(PAIRS))
    monkeypatch.setenv("BRRM_DATA_DIR", str(data))  # the environment variable stands for --data-dir
    bench = get_benchmark("llmbar")
    items = bench.load(("Natural",))
    assert [(it.id, it.responses, it.pairs[0].gold.value) for it in items] == [
        ("Natural/1", ("7", "8"), "A"), ("Natural/2", ("Goodbye.", "Hello!"), "B")]
    rev = run_revision(bench, items)
    assert (rev["source"], rev["commit"], rev["sha256"]) == (str(data / "LLMBar"), None, files_sha256(data / "LLMBar"))
    assert not fresh.exists()


@pytest.fixture()
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty local Hugging Face hub cache (``huggingface_hub.constants.HF_HUB_CACHE``)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_the_hub_path_reads_a_snapshot_in_the_local_hugging_face_cache(hub_cache):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / "datasets--allenai--reward-bench"
    shutil.copytree(FIXTURES / "reward-bench", repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    bench = get_benchmark("rewardbench")
    items = bench.load(bench.subsets)  # the hub id, as a user without --data runs it
    assert items == bench.load(bench.subsets, source=str(FIXTURES / "reward-bench")) and len(items) == 46
    rev = run_revision(bench, items)
    assert (rev["source"], rev["commit"], rev["from"]) == ("allenai/reward-bench", commit, "local Hugging Face cache")


def test_a_hub_id_not_in_the_cache_offline_is_one_line_naming_it(hub_cache, capsys):
    code, _, err = _cli(capsys, "bench", "mt-bench", "--subset", "human", "--model", "/nonexistent-model")
    assert code == 2 and err.count("\n") == 1
    assert (f"cannot load hub id 'lmsys/mt_bench_human_judgments' @ main: offline (HF_HUB_OFFLINE=1) and not in the "
            f"Hugging Face cache {hub_cache}; it comes from huggingface.co/datasets/lmsys/mt_bench_human_judgments; "
            "pass --data with a local copy") in err


def test_judgebench_reads_its_hub_copy_as_it_reads_the_github_files(shared, tmp_path):
    data = shared / "data" / "JudgeBench"
    for split, name in (("gpt", "gpt-4o-2024-05-13"), ("claude", "claude-3-5-sonnet-20240620")):
        lines = (data / f"dataset=judgebench,response_model={name}.jsonl").read_text().splitlines()[:3]
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / f"{split}-00000-of-00001.jsonl").write_text("\n".join(lines) + "\n")
    bench = get_benchmark("judgebench")
    from_hub = bench.load(bench.subsets, source=str(tmp_path), limit=2)  # a folder in the hub copy's layout
    assert from_hub == bench.load(bench.subsets, root=shared / "data", limit=2)
    assert [it.subset for it in from_hub] == ["gpt-4o", "gpt-4o", "claude", "claude"]
    assert run_revision(bench, from_hub, source=str(tmp_path))["sha256"] == files_sha256(tmp_path)
