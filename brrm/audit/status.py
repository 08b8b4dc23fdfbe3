"""``brrm audit --status DIR``: where an audit stands, read from its store while another process writes it.

The store is SQLite in WAL mode, so this reader sees the last committed batch and never blocks the writer.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from brrm.audit.runner import format_seconds, progress_line
from brrm.audit.store import AuditStore, RunRecord, pid_alive


def status_text(directory: str | Path) -> str:
    """A few lines: the latest run's state, input, judge, progress (counts by status, rate, ETA) and outputs.

    Raises:
        ConfigError: when the folder holds no audit store.
    """
    with AuditStore(directory, create=False) as store:
        run = store.run()
        if run is None:
            return f"{store.path}: no run yet"
        info = store.config_info(run["config_hash"]) or {}
        p = store.progress(run["run_id"])
        now = time.time()
        state = _state(run)
        lines = [f"audit store {store.path}",
                 f"run {run['run_id']} of {len(store.runs())}: {state}; started {_ago(now - run['started_at'])}, "
                 f"last write {_ago(now - run['updated_at'])}",
                 f"input {run['input']} ({run['shape']}); judge "
                 + (f"{info.get('model')} (kind {info.get('kind')}, backend {info.get('backend')})" if info
                    else "not known yet (waiting for the first results)")]
        running = run["state"] == "running"
        seconds = (now if running else run["finished_at"] or run["updated_at"]) - run["started_at"]
        line = progress_line(p, seconds, final=not running).split(": ", 1)[1]
        if running:  # results reach the store a batch at a time: say so rather than a bare "judged 0"
            line += (f"; results are stored a batch at a time: the batch being judged is not counted yet (last "
                     f"stored {_ago(now - run['updated_at'])})")
        lines.append(line)
        if run["message"]:
            lines.append(f"message: {run['message']}")
        report = store.directory / "report.html"
        if run["state"] == "finished" and report.is_file():
            lines.append(f"report {report}")
        return "\n".join(lines)


def _state(run: RunRecord) -> str:
    if run["state"] != "running":
        return run["state"]
    if run["host"] == socket.gethostname() and not pid_alive(run["pid"]):
        return f"stopped (process {run['pid']} is gone: killed?); rerun the same command to resume"
    return f"running (pid {run['pid']} on {run['host']})"


def _ago(seconds: float) -> str:
    return f"{format_seconds(seconds)} ago"
