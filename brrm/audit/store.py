"""The audit store: one SQLite file per audit folder that survives SIGKILL, Ctrl-C and concurrent readers.

Design (why it cannot lose, duplicate or half-write a result):

* **One row per item and configuration.** ``items`` is keyed by ``(item_hash, config_hash)``
  (:mod:`brrm.audit.keys`). A result is written with an idempotent upsert: a finished row is never
  overwritten, so a rerun, a resumed Ray job or two processes racing on the same item leave exactly one row.
  The only rows a later write replaces are failures the run retries (:mod:`brrm.types.retry`): always a
  ``backend_error`` (a server down or a deadline is not the model's answer: a rerun retries it), and a
  ``parse_failure`` / ``truncated`` one when the judge samples (a new seed can differ) or ``--retry-failed``.
* **Atomic batches.** Each batch of results is one ``BEGIN IMMEDIATE … COMMIT`` transaction together with the
  run's heartbeat. SQLite's write-ahead log makes a commit all-or-nothing: a process killed mid-batch leaves
  the store exactly as it was before that batch. ``synchronous=NORMAL`` (SQLite's recommended setting for
  WAL) keeps every commit through a process crash and the file consistent through a power loss, which can
  only roll back the last batches — they are then simply pending again.
* **Single writer by design, safe with more.** The audit driver (the local runner, or the Ray driver that
  receives the actors' results) is the only process that writes during a run; judges never touch the file.
  WAL lets any number of readers (``brrm audit --status``, a report) read while it writes, without blocking
  it. Should several processes write anyway (two runs on one folder), ``BEGIN IMMEDIATE`` takes the write lock
  up front and waits up to ``busy_timeout``; a write that still finds the file locked is retried with back-off,
  and the upsert keeps one row per key.
* **Resume needs no progress file.** The rows *are* the progress: what is pending is every planned item
  without a finished row under the run's configuration — there is no separate checkpoint to fall out of step.

Tables: ``items`` (results), ``configs`` (each configuration's ``JudgeInfo``), ``requests`` (which
configuration a request produced last), ``runs`` (one per invocation: state, heartbeat, provenance) and
``run_items`` (each run's plan in input order: line, id, slices, and the reason of an invalid row).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar, cast

from brrm.audit.plan import AuditItem
from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONDict
from brrm.types.retry import TRANSIENT, result_statuses

_T = TypeVar("_T")

SQLValue = str | int | float | None
"""A value SQLite stores in a column."""


class RunRecord(TypedDict):
    """One run of the store (:meth:`AuditStore.runs`): the ``runs`` table's columns, ``argv`` and ``provenance``
    decoded. Times are Unix seconds; ``finished_at`` is None until the run ends, ``config_hash`` until the judge is
    known, ``pending`` until the plan is counted."""

    run_id: int
    state: str
    started_at: float
    updated_at: float
    finished_at: float | None
    pid: int
    host: str
    input: str
    shape: str
    config_hash: str | None
    total: int
    pending: int | None
    argv: list[str]
    provenance: JSONDict
    message: str


class RunProgress(TypedDict):
    """Counts of a run (:meth:`AuditStore.progress`)."""

    total: int
    done: int
    by_status: dict[str, int]
    judged_this_run: int

STORE_FILE = "audit.sqlite"
"""The store's file name inside the audit folder."""

SCHEMA_VERSION = "1"
"""Bumped when the tables change; a store of another version is refused with a clear message."""

BUSY_TIMEOUT_S = 60.0
"""How long a write waits for another writer's lock before a retry (seconds)."""

RETRIES = 8
"""Write attempts on a locked store (with exponential back-off from 0.05 s) before the error is raised."""

RUN_STATES = ("running", "finished", "interrupted", "failed", "killed")
"""``running`` (or its process died: shown as ``killed`` once noticed), ``finished``, ``interrupted``
(Ctrl-C / SIGTERM), ``failed`` (an exception; ``message`` says which)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS configs (config_hash TEXT PRIMARY KEY, info TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS requests (request_hash TEXT PRIMARY KEY, config_hash TEXT NOT NULL,
    updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    item_hash TEXT NOT NULL, config_hash TEXT NOT NULL, shape TEXT NOT NULL, record_id TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT NOT NULL, winner TEXT, p_a REAL, reward REAL,
    record TEXT NOT NULL, result TEXT NOT NULL, run_id INTEGER, written_at REAL NOT NULL,
    PRIMARY KEY (item_hash, config_hash));
CREATE INDEX IF NOT EXISTS items_run ON items (run_id);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL, started_at REAL NOT NULL,
    updated_at REAL NOT NULL, finished_at REAL, pid INTEGER NOT NULL, host TEXT NOT NULL, input TEXT NOT NULL,
    shape TEXT NOT NULL, config_hash TEXT, total INTEGER NOT NULL, pending INTEGER, argv TEXT NOT NULL,
    provenance TEXT NOT NULL, message TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS run_items (
    run_id INTEGER NOT NULL, position INTEGER NOT NULL, item_hash TEXT NOT NULL, line INTEGER NOT NULL,
    record_id TEXT NOT NULL, slices TEXT NOT NULL, invalid_reason TEXT NOT NULL,
    PRIMARY KEY (run_id, position));
"""

_UPSERT = """
INSERT INTO items (item_hash, config_hash, shape, record_id, status, reason, winner, p_a, reward, record, result,
                   run_id, written_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (item_hash, config_hash) DO UPDATE SET
    status = excluded.status, reason = excluded.reason, winner = excluded.winner, p_a = excluded.p_a,
    reward = excluded.reward, result = excluded.result, run_id = excluded.run_id, written_at = excluded.written_at
WHERE items.status IN ({replaceable}) OR EXISTS (SELECT 1 FROM json_each(items.result, '$.rewards')
    WHERE json_extract(value, '$.status') IN ({replaceable}))
"""

_REPLACEABLE = frozenset({"backend_error", "timeout", "parse_failure", "truncated"})
"""Status values a later write may replace (:mod:`brrm.types.retry`); which of them a write does replace is the
run's choice (``put_results(replace=…)``)."""


@dataclass(frozen=True)
class StoredResult:
    """One stored result: the columns the report and status read, and the full result JSON."""

    item_hash: str
    config_hash: str
    status: str
    reason: str
    result: JSONDict
    record: JSONDict
    run_id: int | None


@dataclass(frozen=True)
class RunRow:
    """One planned row of a run (input order) and its stored result, if any (None: not judged yet)."""

    position: int
    line: int
    record_id: str
    item_hash: str
    slices: dict[str, str]
    invalid_reason: str
    stored: StoredResult | None


def row_columns(shape: str, result: Mapping[str, Any]) -> tuple[str, str, str | None, float | None, float | None]:
    """(status, reason, winner, p_a, reward) of a result dict, for the store's query columns."""
    if shape == "pairs":
        return result["status"], result["reason"], result["winner"], result["p_a"], None
    if shape == "single":
        return result["status"], result["reason"], None, None, result["reward"]
    first_bad = next((r for r in result["rewards"] if r["status"] != "ok"), None)
    reason = "" if result["status"] == "ok" else (first_bad or {}).get("reason", "")
    return result["status"], reason, None, None, None


class AuditStore:
    """The SQLite store of one audit folder (see the module docstring for the design).

    Args:
        directory: the audit folder (created if missing, unless ``create`` is False).
        create: create the folder and tables; False opens an existing store only (``--status``).
        timeout_s: SQLite busy timeout (seconds) of each write before a retry.

    Raises:
        ConfigError: when the folder cannot be created, holds no store (``create=False``), or holds a store
            of another schema version.
    """

    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True,
                 timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / STORE_FILE
        if not create and not self.path.is_file():
            raise ConfigError(f"{str(self.directory)!r} holds no audit store ({STORE_FILE}); run brrm audit INPUT "
                              f"--output {self.directory} first")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--output {str(self.directory)!r} cannot be created: {exc.strerror}") from None
        self.conn = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        if create:  # WAL is a property of the file: set once by the writer, read by every later connection
            self._retry(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
            self._write(self._create)
        self._check_version()

    # ------------------------------------------------------------------------------------------ plumbing
    def _create(self, cur: sqlite3.Cursor) -> None:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                cur.execute(statement)
        cur.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))

    def _check_version(self) -> None:
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            self.conn.close()
            raise ConfigError(f"{str(self.directory)!r} holds no audit store yet ({STORE_FILE} is being created, or "
                              "is not a brrm audit store)") from None
        if row is None or row[0] != SCHEMA_VERSION:
            raise ConfigError(f"{self.path} was written by another brrm version (schema {row and row[0]!r}, this "
                              f"brrm reads {SCHEMA_VERSION!r}); use a new --output folder")

    def _retry(self, fn: Callable[[], _T]) -> _T:
        delay = 0.05
        for attempt in range(RETRIES):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if attempt == RETRIES - 1 or not ("locked" in str(exc) or "busy" in str(exc)):
                    raise
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _write(self, fn: Callable[[sqlite3.Cursor], _T]) -> _T:
        """Run ``fn(cursor)`` in one ``BEGIN IMMEDIATE`` transaction (all or nothing), retried when locked."""

        def attempt() -> _T:
            cur = self.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                out = fn(cur)
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
            return out

        return self._retry(attempt)

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite when the last one closes)."""
        self.conn.close()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ configs
    def remember_config(self, config_hash: str, info: Mapping[str, object], request_hash: str | None = None) -> None:
        """Record a configuration's JudgeInfo (and that ``request_hash`` produced it)."""
        now = time.time()

        def write(cur: sqlite3.Cursor) -> None:
            cur.execute("INSERT OR IGNORE INTO configs VALUES (?, ?, ?)", (config_hash, json.dumps(dict(info)), now))
            if request_hash is not None:
                cur.execute("INSERT INTO requests VALUES (?, ?, ?) ON CONFLICT (request_hash) DO UPDATE SET "
                            "config_hash = excluded.config_hash, updated_at = excluded.updated_at",
                            (request_hash, config_hash, now))

        self._write(write)

    def config_for_request(self, request_hash: str) -> str | None:
        """The configuration this request produced last time, or None."""
        row = self.conn.execute("SELECT config_hash FROM requests WHERE request_hash = ?", (request_hash,)).fetchone()
        return row[0] if row else None

    def config_info(self, config_hash: str | None) -> JSONDict | None:
        """The JudgeInfo dict of a configuration, or None."""
        row = self.conn.execute("SELECT info FROM configs WHERE config_hash = ?", (config_hash,)).fetchone()
        if not row:
            return None
        info = json.loads(row[0])
        assert isinstance(info, dict), info  # remember_config writes a JSON object
        return info

    # ------------------------------------------------------------------------------------------ runs
    def start_run(self, items: Sequence[AuditItem], *, shape: str, source: str, argv: Sequence[str],
                  provenance: Mapping[str, object], config_hash: str | None) -> int:
        """Record a new run and its plan (one transaction); returns its id. Runs of this host whose process is
        gone are marked ``killed`` first."""
        now = time.time()
        host = socket.gethostname()

        def write(cur: sqlite3.Cursor) -> int:
            for run_id, pid in cur.execute("SELECT run_id, pid FROM runs WHERE state = 'running' AND host = ?",
                                           (host,)).fetchall():
                if not pid_alive(pid):
                    cur.execute("UPDATE runs SET state = 'killed' WHERE run_id = ?", (run_id,))
            cur.execute("INSERT INTO runs (state, started_at, updated_at, pid, host, input, shape, config_hash, "
                        "total, argv, provenance) VALUES ('running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (now, now, os.getpid(), host, source, shape, config_hash, len(items), json.dumps(list(argv)),
                         json.dumps(dict(provenance))))
            run_id = int(cur.lastrowid or 0)
            cur.executemany("INSERT INTO run_items VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [(run_id, it.position, it.item_hash, it.line, it.record_id, json.dumps(dict(it.slices)),
                              it.invalid_reason) for it in items])
            return run_id

        return int(self._write(write))

    def update_run(self, run_id: int, **fields: SQLValue) -> None:
        """Set ``state``, ``config_hash``, ``pending``, ``message`` or ``finished_at`` of a run (and its
        heartbeat)."""
        allowed = {"state", "config_hash", "pending", "message", "finished_at"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"unknown run fields {sorted(bad)}")
        if fields.get("state") not in (None, *RUN_STATES):
            raise ValueError(f"unknown run state {fields['state']!r}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        values = [*fields.values(), time.time(), run_id]
        self._write(lambda cur: cur.execute(f"UPDATE runs SET {sets}{', ' if sets else ''}updated_at = ? "
                                            "WHERE run_id = ?", values))

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first, as dicts (``argv`` and ``provenance`` decoded)."""
        cur = self.conn.execute("SELECT * FROM runs ORDER BY run_id")
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            r = dict(zip(names, row, strict=True))  # the columns are RunRecord's keys, in its order
            out.append(cast(RunRecord, {**r, "argv": json.loads(r["argv"]), "provenance": json.loads(r["provenance"])}))
        return out

    def run(self, run_id: int | None = None) -> RunRecord | None:
        """One run (default: the latest), or None when there is none."""
        runs = self.runs()
        if run_id is None:
            return runs[-1] if runs else None
        return next((r for r in runs if r["run_id"] == run_id), None)

    # ------------------------------------------------------------------------------------------ items
    def pending(self, items: Iterable[AuditItem], config_hash: str | None,
                retry: frozenset[str] = TRANSIENT) -> list[AuditItem]:
        """Valid items without a finished result under ``config_hash`` (each item hash once, input order);
        a row whose status (or a group member's) is in ``retry`` counts as not finished (default: the transient
        failures, :data:`brrm.types.retry.TRANSIENT`). All valid items when ``config_hash`` is None."""
        done: set[str] = set()
        if config_hash is not None:
            done = {h for h, status, result in self.conn.execute(
                "SELECT item_hash, status, CASE WHEN shape = 'groups' THEN result END FROM items WHERE config_hash = ?",
                (config_hash,)) if not ({status} | _member_statuses(result)) & retry}
        out, seen = [], set()
        for it in items:
            if it.valid and it.item_hash not in done and it.item_hash not in seen:
                seen.add(it.item_hash)
                out.append(it)
        return out

    def put_results(self, run_id: int | None, config_hash: str, shape: str,
                    results: Sequence[tuple[AuditItem, Mapping[str, object]]],
                    replace: frozenset[str] = TRANSIENT) -> int:
        """Write a batch of results in one transaction (idempotent upserts) and the run's heartbeat; returns
        the rows written or replaced (a finished row is never overwritten; a row whose status is in ``replace`` —
        the failures this run retries, :func:`brrm.types.retry.retry_statuses` — is).

        Raises:
            ValueError: for a ``replace`` status outside the failures a retry may replace.
        """
        if not replace <= _REPLACEABLE:
            raise ValueError(f"replace: {sorted(replace - _REPLACEABLE)} may not be replaced")
        upsert = _UPSERT.format(replaceable=", ".join(f"'{x}'" for x in sorted(replace)))
        now = time.time()
        rows = []
        for item, result in results:
            status, reason, winner, p_a, reward = row_columns(shape, result)
            rows.append((item.item_hash, config_hash, shape, item.record_id, status, reason, winner, p_a, reward,
                         json.dumps(dict(item.record or {}), ensure_ascii=False),
                         json.dumps(dict(result), ensure_ascii=False), run_id, now))

        def write(cur: sqlite3.Cursor) -> int:
            before = self.conn.total_changes
            cur.executemany(upsert, rows)
            changed = self.conn.total_changes - before
            if run_id is not None:
                cur.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", (now, run_id))
            return changed

        return int(self._write(write))

    def results(self, config_hash: str, item_hashes: Iterable[str] | None = None) -> dict[str, StoredResult]:
        """Stored results under a configuration (optionally only these item hashes), by item hash."""
        wanted = None if item_hashes is None else set(item_hashes)
        rows = self.conn.execute("SELECT item_hash, config_hash, status, reason, result, record, run_id FROM items "
                                 "WHERE config_hash = ?", (config_hash,))
        return {h: StoredResult(h, config, status, reason, json.loads(result), json.loads(record), run_id)
                for h, config, status, reason, result, record, run_id in rows if wanted is None or h in wanted}

    def run_rows(self, run_id: int) -> list[RunRow]:
        """A run's plan in input order, each row with its stored result under the run's configuration."""
        run = self.run(run_id)
        if run is None:
            raise ConfigError(f"{self.path} has no run {run_id}")
        plan = self.conn.execute("SELECT position, line, record_id, item_hash, slices, invalid_reason FROM run_items "
                                 "WHERE run_id = ? ORDER BY position", (run_id,)).fetchall()
        stored = self.results(run["config_hash"], (r[3] for r in plan)) if run["config_hash"] else {}
        return [RunRow(pos, line, rid, h, json.loads(slices), invalid, None if invalid else stored.get(h))
                for pos, line, rid, h, slices, invalid in plan]

    def progress(self, run_id: int) -> RunProgress:
        """Counts of a run: ``total`` planned rows, ``done`` (with a finished result or invalid), ``by_status``
        (invalid rows as ``invalid_input``), and ``judged_this_run`` (rows this run wrote)."""
        run = self.run(run_id)
        if run is None:
            raise ConfigError(f"{self.path} has no run {run_id}")
        by_status: dict[str, int] = {}
        invalid = self.conn.execute("SELECT COUNT(*) FROM run_items WHERE run_id = ? AND invalid_reason != ''",
                                    (run_id,)).fetchone()[0]
        if invalid:
            by_status["invalid_input"] = invalid
        if run["config_hash"]:
            for status, n in self.conn.execute(
                    "SELECT i.status, COUNT(*) FROM run_items r JOIN items i ON i.item_hash = r.item_hash AND "
                    "i.config_hash = ? WHERE r.run_id = ? AND r.invalid_reason = '' GROUP BY i.status",
                    (run["config_hash"], run_id)):
                by_status[status] = n
        judged = self.conn.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", (run_id,)).fetchone()[0]
        done = sum(n for s, n in by_status.items() if s != "backend_error")
        return {"total": run["total"], "done": done, "by_status": by_status, "judged_this_run": judged}

    def count_items(self) -> int:
        """Rows in ``items`` (every configuration)."""
        return int(self.conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` (``ok`` when the file is sound)."""
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])


def _member_statuses(result: str | None) -> set[str]:
    """The statuses of a stored group result's rewards (empty for other shapes: ``result`` is None)."""
    if result is None:
        return set()
    return result_statuses(json.loads(result))


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
