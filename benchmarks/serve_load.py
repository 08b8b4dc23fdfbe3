"""Helpers of ``bench_serve.py``'s throughput benchmark: a bare FastAPI endpoint (the floor of the same stack) and a
bounded load generator that runs in its own process.

Bare endpoint: ``python benchmarks/serve_load.py bare MODEL PORT`` — uvicorn on 127.0.0.1:PORT with one route,
``POST /v1/score``, that calls ``judge.score`` once per request (no coalescing, no validation beyond reading the
JSON) on the same judge ``brrm.load(MODEL, kind="bt")`` that ``brrm serve`` loads; FastAPI runs the sync handler in
its thread pool.

Refusing floor: ``python benchmarks/serve_load.py refuse PORT`` — uvicorn on 127.0.0.1:PORT with a plain ASGI app
that answers every request 429 with ``Retry-After`` without reading its body: the fastest 429 this stack can give
on this machine, measured beside ``brrm serve``'s.

Load generator: ``python benchmarks/serve_load.py load URL CLIENTS SECONDS MAX_REQUESTS`` — CLIENTS concurrent
keep-alive connections (raw asyncio streams, so the generator costs little CPU per request), each sending
one-item ``/v1/score`` requests back to back until SECONDS have passed or MAX_REQUESTS were sent (whichever
first; it stops by itself), then prints one JSON line: requests, ok, errors, seconds, latencies (s) of ok
answers and of 429 answers (``refused``), how many 429s came without a ``Retry-After`` header
(``refused_without_retry_after``) and the first other error.

httpx clients: ``python benchmarks/serve_load.py httpx URL CLIENTS SECONDS MAX_REQUESTS`` — the same load sent the
way reward workers send it: CLIENTS ``httpx.AsyncClient`` objects in one process, each posting one-item
``/v1/score`` requests back to back (the client library's own CPU cost per request included); the same JSON line.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from typing import Any


def item(k: int) -> dict[str, Any]:
    """The k-th request's one item (the same for both servers)."""
    return {"prompt": f"Question {k % 97}: what is {k % 13} + {k % 7}?", "response": f"It is {k % 13 + k % 7}."}


def bare(model: str, port: int) -> None:
    import uvicorn
    from fastapi import FastAPI

    import brrm

    judge = brrm.load(model, kind="bt")
    judge.score(["warm up"], ["ok"])
    app = FastAPI()

    @app.post("/v1/score")
    def score(body: dict[str, Any]) -> dict[str, Any]:  # sync: FastAPI's thread pool, one score() per request
        items = body["items"]
        rewards = judge.score([it["prompt"] for it in items], [it["response"] for it in items])
        return {"rewards": [{"reward": r.reward, "status": r.status.value} for r in rewards]}

    @app.get("/ready")
    def ready() -> dict[str, bool]:
        return {"ready": True}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def refuse(port: int) -> None:
    import uvicorn

    body = json.dumps({"error": {"type": "queue_full", "message": "the queue is full; retry later"}}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1")]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        ready = scope["type"] == "http" and scope["path"] == "/ready"
        await send({"type": "http.response.start", "status": 200 if ready else 429, "headers": head})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")


async def _load(url: str, clients: int, seconds: float, max_requests: int) -> dict[str, Any]:
    """CLIENTS keep-alive HTTP/1.1 connections on raw asyncio streams (a client library such as httpx costs more
    CPU per request than the servers measured here; the generator must not be the bottleneck)."""
    import json as _json
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    latencies: list[float] = []
    refused: list[float] = []  # 429 answers' latencies (overload runs)
    bare_refusals = 0  # 429 answers without Retry-After
    errors: list[str] = []
    sent = 0
    end = time.perf_counter() + seconds

    def request(k: int) -> bytes:
        body = _json.dumps({"items": [item(k)]}).encode()
        return (b"POST /v1/score HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d"
                b"\r\n\r\n%s" % (host.encode(), len(body), body))

    async def client() -> None:
        nonlocal sent, bare_refusals
        reader = writer = None
        while time.perf_counter() < end and sent < max_requests:
            k = sent
            sent += 1
            started = time.perf_counter()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                assert reader is not None
                writer.write(request(k))
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").lower().split("\r\n")
                length = next(int(line.split(":", 1)[1]) for line in lines if line.startswith("content-length:"))
                body = await reader.readexactly(length)
                if "connection: close" in lines:
                    writer.close()
                    reader = writer = None
                if lines[0].split()[1] == "429":
                    refused.append(time.perf_counter() - started)
                    bare_refusals += not any(line.startswith("retry-after:") for line in lines)
                    continue
                if not lines[0].split()[1] == "200" or b'"status":"ok"' not in body.replace(b" ", b""):
                    errors.append(f"{lines[0]}: {body[:200]!r}")
                    continue
            except (OSError, asyncio.IncompleteReadError, StopIteration, ValueError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                reader = writer = None
                continue
            latencies.append(time.perf_counter() - started)
        if writer is not None:
            writer.close()

    gc.collect()
    gc.freeze()  # no full collections over the interpreter's start-up objects while latencies are measured
    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return {"requests": sent, "ok": len(latencies), "errors": len(errors), "seconds": time.perf_counter() - started,
            "latencies": latencies, "refused": refused, "refused_without_retry_after": bare_refusals,
            "first_error": errors[0] if errors else ""}


async def _load_httpx(url: str, clients: int, seconds: float, max_requests: int) -> dict[str, Any]:
    """CLIENTS ``httpx.AsyncClient`` objects (one connection each), posting back to back."""
    import httpx

    latencies: list[float] = []
    refused: list[float] = []
    bare_refusals = 0
    errors: list[str] = []
    sent = 0
    end = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal sent, bare_refusals
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            while time.perf_counter() < end and sent < max_requests:
                k = sent
                sent += 1
                started = time.perf_counter()
                try:
                    r = await http.post("/v1/score", json={"items": [item(k)]})
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if r.status_code == 429:
                    refused.append(time.perf_counter() - started)
                    bare_refusals += "retry-after" not in r.headers
                    continue
                if r.status_code != 200 or r.json()["rewards"][0]["status"] != "ok":
                    errors.append(f"{r.status_code}: {r.text[:200]}")
                    continue
                latencies.append(time.perf_counter() - started)

    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return {"requests": sent, "ok": len(latencies), "errors": len(errors), "seconds": time.perf_counter() - started,
            "latencies": latencies, "refused": refused, "refused_without_retry_after": bare_refusals,
            "first_error": errors[0] if errors else ""}


def main(argv: list[str]) -> None:
    if argv[0] == "bare":
        bare(argv[1], int(argv[2]))
    elif argv[0] == "refuse":
        refuse(int(argv[1]))
    elif argv[0] in ("load", "httpx"):
        run = _load if argv[0] == "load" else _load_httpx
        out = asyncio.run(run(argv[1], int(argv[2]), float(argv[3]), int(argv[4])))
        print(json.dumps(out))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}; expected bare, refuse, load or httpx")


if __name__ == "__main__":
    main(sys.argv[1:])
