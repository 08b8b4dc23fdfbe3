"""A local OpenAI-compatible ``POST /v1/completions`` endpoint for tests: each request body is kept and answered
with what a test's ``answer(body)`` returns (200, JSON). It stands in for a server's answers only; a real vLLM
server is tested in tests/vllm."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CompletionsServer:
    """Serves ``answer(body)`` for every POST on a free local port; ``url`` ends in ``/v1``; ``bodies`` keeps
    every request body in arrival order."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                data = json.dumps(answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
