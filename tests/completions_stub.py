"""A local OpenAI-compatible ``POST /v1/completions`` endpoint for tests (and ``GET /v1/models``: one model,
``tiny``): each request body is kept and answered with what a test's ``answer(body)`` returns (a JSON object: 200;
a :class:`Reply`: its status, headers and body). It stands in for a server's answers only; a real vLLM server is
tested in tests/vllm.

It counts what a load test needs: TCP connections accepted, requests in flight (a request stops counting just
before its answer is written, so the client has not yet had it), their peak and the count at each arrival. A
``gate`` holds each request until ``quorum`` are in flight or ``total`` have arrived (at most ``gate_s``), so a
test sees requests together without timing them. The server binds a free port on 127.0.0.1, stops on
``close()`` or at the end of a ``with`` block, and stops by itself after ``lifetime_s``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """A scripted answer: ``status``, ``body`` (JSON) and extra ``headers``."""

    status: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Gate:
    """Hold each request until ``quorum`` are in flight or ``total`` have arrived, at most ``gate_s`` seconds."""

    quorum: int
    total: int
    gate_s: float = 5.0


class CompletionsServer:
    """Serves ``answer(body)`` for every POST on a free local port; ``url`` ends in ``/v1``; ``bodies`` keeps
    every request body in arrival order."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any] | Reply], *, gate: Gate | None = None,
                 lifetime_s: float = 60.0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.connections = self.in_flight = self.peak = 0
        self.arrivals: list[int] = []
        """Requests in flight as each arrived (itself included)."""
        self.cond = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # the headers and the body are two writes: no delayed-ACK wait between

            def setup(self) -> None:  # one handler per TCP connection
                super().setup()
                with server.cond:
                    server.connections += 1

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # GET /v1/models: one model, "tiny", with a 4096-token context
                data = json.dumps({"data": [{"id": "tiny", "max_model_len": 4096}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server._arrive(body, gate)
                try:
                    reply = answer(body)
                finally:
                    with server.cond:
                        server.in_flight -= 1
                reply = reply if isinstance(reply, Reply) else Reply(200, reply)
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._stopped = threading.Event()
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._timer = threading.Timer(lifetime_s, self.close)
        self._timer.daemon = True
        self._timer.start()

    def _arrive(self, body: dict[str, Any], gate: Gate | None) -> None:
        with self.cond:
            self.bodies.append(body)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.arrivals.append(self.in_flight)
            self.cond.notify_all()
            if gate is not None:
                self.cond.wait_for(lambda: self.in_flight >= gate.quorum or len(self.bodies) >= gate.total,
                                   timeout=gate.gate_s)

    def close(self) -> None:
        """Stop serving (once; a second call does nothing)."""
        with self.cond:
            if self._stopped.is_set():
                return
            self._stopped.set()
        self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> CompletionsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
