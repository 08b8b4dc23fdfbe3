"""Helpers for the ``brrm serve`` tests: real uvicorn server processes on 127.0.0.1, and scripted judges that
``brrm serve --factory tests.serve_helpers:NAME`` builds inside the server process.

The scripted judges stand in only for what a real model cannot do on demand (a stall, a backend error on one
item, a wrong number of scores, exact timings); they are configured by the JSON in ``BRRM_TEST_FAKE`` and log
every prompt they see to the JSONL file it names, so a test can check what reached the model.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

T1 = ("[Quality Assessment Focus]\nInformation Accuracy, Computational Precision\n[End of Quality Assessment Focus]\n\n"
      "[Quality Analysis for Response 1]\n- Critical Issues: None identified\n[End of Quality Analysis for Response 1]"
      "\n\n[Quality Analysis for Response 2]\n- Critical Issues: wrong total\n[End of Quality Analysis for Response 2]")


def ranking(k: int) -> str:
    return f"[The Begin of Ranking Score]\n\\boxed{{{k}}}\n[The End of Ranking Score]"


def responses_in(prompt: str) -> tuple[str, str]:
    """(response 1, response 2) as shown in a BR-RM prompt."""
    first = prompt.split("[The Begin of Response 1]\n", 1)[1].split("\n[The End of Response 1]", 1)[0]
    second = prompt.split("[The Begin of Response 2]\n", 1)[1].split("\n[The End of Response 2]", 1)[0]
    return first, second


def is_turn2(prompt: str) -> bool:
    return "[The Begin of Analysis on Response 1]" in prompt.rsplit("<|im_start|>user", 1)[-1]


_http: Any = None


def http() -> Any:
    """One ``httpx.Client`` for a test process's plain calls, keeping no connection alive: each request opens its own
    connection, as ``httpx.get`` does, without the ~60 ms of CPU each new client spends loading an SSL context."""
    global _http
    import httpx

    if _http is None:
        _http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
    return _http


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------------ server processes
READY_HANG_S = 300.0
"""How long a server may take to become ready before a test fails: a bound on a hang, not a speed test (a server
process's start is seconds idle, and minutes on a machine at a load of 30)."""


def wait_ready(server: Any, timeout_s: float, ended: Any) -> None:
    """Poll ``server``'s ``/ready`` until 200; ``ended()`` names why the server can no longer become ready (else
    None). ``timeout_s`` bounds a hang only: readiness is the event waited for, however busy the machine."""
    import httpx

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if (why := ended()) is not None:
            raise RuntimeError(f"{why}:\n{server.output()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if http().get(f"{server.url}/ready", headers=server.headers, timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"server not ready after {timeout_s} s:\n{server.output()[-4000:]}")


class Server:
    """A ``brrm serve`` process on 127.0.0.1 (started by :func:`running_server`)."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path, api_key: str | None) -> None:
        self.proc, self.port, self.log_path, self.api_key = proc, port, log_path, api_key
        self.url = f"http://127.0.0.1:{port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def wait_ready(self, timeout_s: float) -> None:
        def exited() -> str | None:
            return None if self.proc.poll() is None else f"server exited with {self.proc.returncode}"

        wait_ready(self, timeout_s, exited)

    def stop(self, timeout_s: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)


@contextlib.contextmanager
def running_server(args: Sequence[str], tmp: Path, *, env: dict[str, str] | None = None,
                   api_key: str | None = None, ready_timeout_s: float = READY_HANG_S,
                   port: int | None = None) -> Iterator[Server]:
    """Start ``python -m brrm serve ARGS --port PORT`` (a free one by default) and stop it (SIGTERM, then SIGKILL)
    afterwards."""
    port = port or free_port()
    log_path = tmp / f"server-{port}.log"
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    if api_key:
        full_env["BRRM_API_KEY"] = api_key
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "brrm", "serve", *args, "--port", str(port), "--log-level",
                                 "warning", "--no-access-log"], cwd=REPO, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT)
    server = Server(proc, port, log_path, api_key)
    try:
        server.wait_ready(ready_timeout_s)
        yield server
    finally:
        server.stop()


class InProcessServer(Server):
    """``brrm serve`` in this process: the CLI's own parser and checks, the app :func:`brrm.cli.serve._build_app`
    makes behind a :class:`~brrm.serve.loading.LoadingApp`, and the uvicorn server ``brrm serve`` runs, in a daemon
    thread on a real socket (started by :func:`serving_in_process`). Spares a test the ~6 s a ``brrm serve`` process
    spends importing torch and transformers where the process boundary is not what it checks."""

    def __init__(self, uvicorn_server: Any, thread: threading.Thread, app: Any, port: int, log_path: Path,
                 api_key: str | None) -> None:
        self.server, self.thread, self.app = uvicorn_server, thread, app
        self.port, self.log_path, self.api_key = port, log_path, api_key
        self.url = f"http://127.0.0.1:{port}"

    def rss_kib(self) -> int:
        raise NotImplementedError("an in-process server has no process of its own: use running_server")

    def wait_ready(self, timeout_s: float) -> None:
        def stopped() -> str | None:
            return None if self.thread.is_alive() else f"server stopped: {self.app.error!r}"

        wait_ready(self, timeout_s, stopped)

    def stop(self, timeout_s: float = 15) -> int:
        """Stop as SIGTERM does (drain, then the app's lifespan frees the judge); 0, or 1 when the load failed or the
        server thread did not end within ``timeout_s``."""
        if self.thread.is_alive():
            self.server.handle_exit(signal.SIGTERM, None)
            self.thread.join(timeout_s)
        return 1 if self.thread.is_alive() or self.app.error is not None else 0


_environ_lock = threading.RLock()


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated by ``env`` while the block runs (one block at a time in this process)."""
    from unittest import mock

    with _environ_lock, mock.patch.dict(os.environ, env):
        yield


@contextlib.contextmanager
def serving_in_process(args: Sequence[str], tmp: Path, *, env: dict[str, str] | None = None,
                       api_key: str | None = None, ready_timeout_s: float | None = READY_HANG_S,
                       port: int | None = None) -> Iterator[InProcessServer]:
    """:func:`running_server`'s server, in this process (:class:`InProcessServer`): the same ``ARGS`` parsed and
    checked by ``brrm serve``'s own parser and checks (a bad flag raises ``SystemExit`` / ``ConfigError`` here), the
    same app and uvicorn server. ``env`` (and ``BRRM_API_KEY`` from ``api_key``) is in ``os.environ`` only while the
    flags are checked and the judge is built, so servers with different settings live side by side; a scripted judge
    must read its settings when it is built. A stalled judge call stays in a daemon thread of this process: end the
    stall with the test (:func:`released`) where the judge can. Not for a test that signals or kills the server, or
    checks what is the process's own (exit codes, ``gc.freeze``, memory): use :func:`running_server`.
    ``ready_timeout_s=None``: yield as soon as it listens, without waiting for ``/ready``."""
    from brrm.cli import build_parser
    from brrm.cli import serve as cli_serve
    from brrm.serve.loading import LoadingApp

    port = port or free_port()
    log_path = tmp / f"server-{port}.log"
    full_env = {"BRRM_API_KEY": api_key} if api_key else {}
    full_env.update(env or {})
    parsed = build_parser().parse_args(["serve", *args, "--port", str(port), "--log-level", "warning",
                                        "--no-access-log"])
    with _environ(full_env):
        limits, factory = cli_serve.check(parsed)
    sock = cli_serve.bind(parsed.host, parsed.port)
    log = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed below

    def build() -> Any:
        with _environ(full_env):
            return cli_serve._build_app(parsed, limits, factory, out=log, freeze=False)

    print(f"brrm serve (in process): listening on {parsed.host}:{port}", file=log)
    app = LoadingApp(build, api_key=limits.api_key)
    uvicorn_server = cli_serve.uvicorn_server(app, host=parsed.host, port=port, drain_timeout_s=limits.drain_timeout_s,
                                              log_level=parsed.log_level, access_log=not parsed.no_access_log,
                                              log_config=None)  # this process's logging is pytest's
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, name=f"brrm-serve-{port}",
                              daemon=True)
    server = InProcessServer(uvicorn_server, thread, app, port, log_path, api_key)
    thread.start()
    try:
        if ready_timeout_s is not None:
            server.wait_ready(ready_timeout_s)
        yield server
    finally:
        server.stop()
        sock.close()
        log.close()


@contextlib.contextmanager
def released(release_file: Path) -> Iterator[None]:
    """Create ``release_file`` when the block ends, however it ends: a scripted stall (``fake_brrm``'s
    ``release_file``) in this process's judge threads ends with the test instead of polling on for 600 s."""
    try:
        yield
    finally:
        release_file.write_text("")


def compare_body(texts: Sequence[str], prompt: str = "Name a prime number above 10.") -> dict[str, Any]:
    """A NeMo Gym ``/compare`` request over ``texts``."""
    return {"conversation_history": [{"role": "user", "content": prompt}],
            "response_objs": [{"output": [{"type": "message", "role": "assistant",
                                           "content": [{"type": "output_text", "text": t}]}]} for t in texts],
            "principle": None}


# ------------------------------------------------------------------------------------------ scripted judges
def _config() -> dict[str, Any]:
    return json.loads(os.environ.get("BRRM_TEST_FAKE", "{}"))


_log_lock = threading.Lock()


def _log(path: str | None, record: dict[str, Any]) -> None:
    if path:
        with _log_lock, open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fake_brrm() -> Any:
    """A BR-RM judge on a scripted backend (faithful decoding).

    Turn 2 prefers the response containing ``good`` (else response 1). A response containing ``<<STALL>>`` blocks
    its call for 600 s; ``<<ERROR>>`` makes that item a backend error. ``BRRM_TEST_FAKE`` keys: ``turn1_s`` /
    ``turn2_s`` (sleep once per backend call of that turn), ``gate`` (a file: while it exists, each call waits, at most
    120 s), ``log`` (JSONL of every prompt's responses),
    ``mode_file`` (a file holding ``drop_last`` / ``extra`` / nothing: return one completion too few / too many),
    ``concurrent`` (the backend declares concurrent calls: a reentrant engine; default false), ``release_file`` (a
    stall ends as soon as this file exists).
    """
    import brrm
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    cfg = _config()  # read once, when built: servers in one process (serving_in_process) each keep their own
    log = cfg.get("log")

    def script(prompt: str, _request: Any) -> Any:
        first, second = responses_in(prompt)
        turn = 2 if is_turn2(prompt) else 1
        _log(log, {"turn": turn, "responses": [first, second]})
        if "<<STALL>>" in first or "<<STALL>>" in second:
            end = time.monotonic() + 600
            while time.monotonic() < end and not (cfg.get("release_file") and Path(cfg["release_file"]).exists()):
                time.sleep(0.02)
        if "<<ERROR>>" in first or "<<ERROR>>" in second:
            return RuntimeError("scripted backend failure")
        if turn == 1:
            return T1
        return ranking(2 if "good" in second and "good" not in first else 1)

    class Timed(FakeBackend):
        def generate(self, requests: Any, **kw: Any) -> Any:
            texts = [self.tokenizer.decode(list(r.prompt_ids), skip_special_tokens=False) for r in requests]
            delay = cfg.get("turn2_s", 0.0) if texts and is_turn2(texts[0]) else cfg.get("turn1_s", 0.0)
            time.sleep(delay)
            end = time.monotonic() + 120  # held while the test's gate file exists (an event, not a delay)
            while cfg.get("gate") and Path(cfg["gate"]).exists() and time.monotonic() < end:
                time.sleep(0.01)
            out = super().generate(requests, **kw)
            mode = Path(cfg["mode_file"]).read_text().strip() if cfg.get("mode_file") else ""
            return out[:-1] if mode == "drop_last" else [*out, out[-1]] if mode == "extra" else out

    return brrm.load(kind="brrm", backend=Timed(build_tiny_tokenizer(), script, concurrent=bool(cfg.get("concurrent"))),
                     decoding="faithful")


def fake_bt() -> Any:
    """A Bradley–Terry judge on a scripted classifier: a response ``q<k>`` scores ``k + 0.5`` (so a misplaced
    score is visible). ``BRRM_TEST_FAKE`` key ``mode``: ``drop_last`` (n-1 scores for n) or ``extra`` (n+1)."""
    import re

    import brrm
    from brrm.backends.fake import FakeBackend
    from brrm.testing import build_tiny_tokenizer

    cfg = _config()  # read once, when built (as fake_brrm)
    mode, log = cfg.get("mode", ""), cfg.get("log")

    def score(prompt: str) -> float:
        _log(log, {"prompt": prompt})
        found = re.findall(r"q(\d+)", prompt)
        return int(found[-1]) + 0.5 if found else 0.0

    class Miscounting(FakeBackend):
        def classify(self, sequences: Any, **kw: Any) -> Any:
            out = super().classify(sequences, **kw)
            return out[:-1] if mode == "drop_last" else [*out, out[-1]] if mode == "extra" else out

    return brrm.load(kind="bt", backend=Miscounting(build_tiny_tokenizer(), score_script=score))
