"""OpenRLHF's custom reward function: ``reward_func(queries, prompts, labels, **kwargs)`` for
``--remote_rm_url path/to/this_file.py`` (OpenRLHF loads the file and calls ``reward_func``; see
``examples/openrlhf_reward_func.py``).

Configured from the environment (or a JSON file), in one of two ways:

* **remote** — ``BRRM_URL=http://HOST:PORT`` (a ``brrm serve``; ``/get_reward`` is appended unless given) and
  optionally ``BRRM_API_KEY`` and ``BRRM_TIMEOUT_S`` (default 600): the queries go to the server's
  ``/get_reward`` through :class:`~brrm.service.RemoteJudge` (the one HTTP client of ``brrm serve``: one per
  URL and key per process, 429/503 retried after ``Retry-After``) and the server's reply is returned as is;
* **local** — ``BRRM_MODEL`` (hub id or folder; unset: the embedded demo), ``BRRM_KIND``, ``BRRM_BACKEND``,
  ``BRRM_OPTIONS`` (a JSON object of :func:`brrm.load` options), ``BRRM_FAILED_REWARD`` (a number or ``null``,
  default 0.0), ``BRRM_GET_REWARD_MODE`` (``auto``/``scores``/``reference``), ``BRRM_MAX_BATCH`` (default 32) and
  ``BRRM_MAX_WAIT_MS`` (default 10), ``BRRM_TIMEOUT_S`` (each query's deadline, default 600): the judge is built
  once per process, and concurrent calls (OpenRLHF calls ``reward_func`` from worker threads, one query at a time)
  are coalesced into batched judge calls by the same scheduler as ``brrm serve``, each query its own job
  (:class:`LocalRewards`: a stalled query costs only itself with a judge that takes concurrent calls).

``BRRM_CONFIG=path.json`` gives the same settings as a JSON object with lower-case keys (``url``, ``api_key``,
``timeout_s``, ``model``, ``kind``, ``backend``, ``options``, ``failed_reward``, ``get_reward_mode``,
``max_batch``, ``max_wait_ms``); environment variables win over the file.

Either way the reply is OpenRLHF's: ``rewards``, ``scores``, numeric ``extra_logs`` (``brrm_failed``: 1.0 for an
item that could not be judged, whose reward is the failed-reward value) plus ``statuses`` and ``reasons``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from brrm.errors import ConfigError
from brrm.service.items import ScoreItem
from brrm.types import ScalarReward, Status
from brrm.types.jsonvalue import JSONDict, JSONValue
from brrm.types.protocols import RewardJudge

if TYPE_CHECKING:
    from brrm.service import RemoteJudge

_KEYS = ("url", "api_key", "timeout_s", "model", "kind", "backend", "options", "failed_reward", "get_reward_mode",
         "max_batch", "max_wait_ms")


def settings() -> JSONDict:
    """The configuration: ``BRRM_CONFIG``'s JSON object, overridden by ``BRRM_<KEY>`` variables.

    Raises:
        ConfigError: on an unreadable file, an unknown key, or a value that is not valid JSON where JSON is needed.
    """
    out: JSONDict = {}
    path = os.environ.get("BRRM_CONFIG")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data: JSONValue = json.load(f)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"BRRM_CONFIG {path!r}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"BRRM_CONFIG {path!r}: must hold a JSON object of settings, got {type(data).__name__}")
        out = data
        unknown = sorted(set(out) - set(_KEYS))
        if unknown:
            raise ConfigError(f"BRRM_CONFIG {path!r}: unknown key {unknown[0]!r}; valid keys: {', '.join(_KEYS)}")
    for key in _KEYS:
        value = os.environ.get(f"BRRM_{key.upper()}")
        if value is None:
            continue
        if key in ("options", "failed_reward", "max_batch", "max_wait_ms", "timeout_s"):
            try:
                out[key] = json.loads(value)
            except ValueError:
                raise ConfigError(f"BRRM_{key.upper()} must be JSON (e.g. a number or an object), got {value!r}") \
                    from None
        else:
            out[key] = value
    return out


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[JSONValue],
                **kwargs: object) -> Mapping[str, object]:
    """OpenRLHF's reward function over a brrm judge (remote or local, see the module docstring).

    Args:
        queries: templated prompt + response (+ end-of-turn / padding text) per sample.
        prompts: the templated prompts.
        labels: the dataset labels (``--data.label_key``); a pairwise judge's reference answers.
        **kwargs: ignored (OpenRLHF may pass more).

    Returns:
        ``{"rewards", "scores", "extra_logs", "statuses", "reasons", "counts"}``, one entry per query in order.

    Raises:
        ConfigError: on bad settings or a request the server refuses (4xx). RuntimeError: the server failed (5xx)
            or could not be reached.
    """
    cfg = settings()
    if cfg.get("url"):
        return _remote(cfg, list(queries), list(prompts), list(labels))
    return _local(cfg).rewards(list(queries), list(prompts), list(labels))


def _remote(cfg: Mapping[str, JSONValue], queries: list[str], prompts: list[str],
            labels: list[JSONValue]) -> JSONDict:
    """``/get_reward`` of the ``brrm serve`` at ``cfg["url"]`` through its :class:`~brrm.service.RemoteJudge`."""
    url = str(cfg["url"]).rstrip("/")
    url = url.removesuffix("/get_reward")
    timeout = cfg.get("timeout_s", 600)
    key = (url, str(cfg.get("api_key") or ""), str(timeout))
    with _lock:
        if key not in _clients:
            from brrm.service import RemoteJudge
            from brrm.types import check_float

            try:
                _clients[key] = RemoteJudge(url, api_key=key[1] or None,
                                            timeout_s=check_float("timeout_s", timeout, low=0, low_open=True))
            except ConfigError as exc:  # unreachable is the server's failure; a refusal (401, not brrm) is ours
                if "cannot be reached" not in str(exc):
                    raise
                raise RuntimeError(str(exc)) from None
        client = _clients[key]
    return client.get_reward(queries, prompts, labels)


class LocalRewards:
    """A judge in this process behind :mod:`brrm.service`'s hosted scheduler, answering like ``/get_reward``.

    Every query is its own job under its own deadline (``timeout_s``): concurrent calls are coalesced into shared
    judge calls, and with a judge that takes concurrent calls (``info.concurrent``: continuous batching, vLLM) each
    job runs as its own call under its own cancellation token, so a stalled query costs only itself — it is
    ``backend_error`` with the reason at its deadline, and the queries beside it and after it are judged. A judge that
    does not declare concurrent calls runs one coalesced call at a time and cannot split a running call: a stalled
    query holds the call it shares, so each query of that call is failed at its deadline with that reason (never
    given a reward as if judged), and once the call is abandoned the next calls run.

    Args:
        judge: the judge (``brrm.load(...)``).
        failed_reward: reward of an item that could not be judged (a number, or None).
        mode: ``auto``, ``scores`` or ``reference`` (see :func:`brrm.serve.openrlhf.resolve_mode`).
        max_batch: items per judge call, >= 1.
        max_wait_ms: how long a call waits for others to join, >= 0.
        timeout_s: each query's deadline in seconds, > 0.
        max_workers: judge calls at once for a concurrent judge, and the stalled calls tolerated before new queries
            are refused (``backend_error``), >= 1.

    Raises:
        ConfigError: on an invalid mode for the judge or an invalid batch setting.
    """

    def __init__(self, judge: RewardJudge, *, failed_reward: float | None = 0.0, mode: str = "auto",
                 max_batch: int = 32, max_wait_ms: float = 10.0, timeout_s: float = 600.0,
                 max_workers: int = 4) -> None:
        from brrm.serve.openrlhf import resolve_mode
        from brrm.service.hosted import HostedScheduler
        from brrm.types import check_float, check_int

        self.judge, self.failed_reward = judge, failed_reward
        self.mode = resolve_mode(mode, bool(judge.info.pairwise))
        self.timeout_s = check_float("timeout_s", timeout_s, low=0, low_open=True)
        workers = check_int("max_workers", max_workers, low=1)
        self.service = HostedScheduler(judge, concurrency=workers if judge.info.concurrent else 1, max_batch=max_batch,
                                       max_wait_s=max_wait_ms / 1000, max_abandoned=workers,
                                       stall_timeout_s=max(0.1, min(5.0, self.timeout_s / 2)))
        self.scheduler = self.service.scheduler

    def rewards(self, queries: list[str], prompts: list[str] | None,
                labels: list[JSONValue] | None) -> Mapping[str, object]:
        """OpenRLHF's reply for these queries (blocking; safe to call from many threads).

        Raises:
            ConfigError: the judge refused a query's input (a setup mistake).
        """
        from brrm.serve import openrlhf

        todo = openrlhf.plan(queries, prompts, labels, mode=self.mode)
        scored: list[ScalarReward] = []
        if todo.items:
            outcomes = asyncio.run_coroutine_threadsafe(self._each(todo.items), self.service.loop).result()
            scored = [self._reward(o) for o in outcomes]
        return openrlhf.reply(todo.fill(scored), self.failed_reward)

    async def _each(self, items: list[ScoreItem]) -> list[object]:
        """Each item's results (its own job), or the exception its job raised."""
        from brrm.service.items import ScoreCall

        key = ScoreCall(self.mode == "reference", False)
        return list(await asyncio.gather(*(self.service.submit(key, [item], timeout_s=self.timeout_s)
                                           for item in items), return_exceptions=True))

    def _reward(self, outcome: object) -> ScalarReward:
        """One query's reward from its job's outcome (a deadline or a scheduler refusal: ``backend_error``)."""
        from brrm.service.scheduler import DeadlineExceeded, SchedulerError

        if isinstance(outcome, ConfigError):
            raise outcome
        if isinstance(outcome, DeadlineExceeded):
            return ScalarReward.failed(Status.BACKEND_ERROR, f"timeout: no reward within timeout_s={self.timeout_s:g} "
                                       "(the judge call holding this query stalled or ran long)")
        if isinstance(outcome, SchedulerError):
            return ScalarReward.failed(Status.BACKEND_ERROR, outcome.message[:500])
        if isinstance(outcome, BaseException):
            return ScalarReward.failed(Status.BACKEND_ERROR, f"{type(outcome).__name__}: {outcome}"[:500])
        result = outcome[0] if isinstance(outcome, list) and len(outcome) == 1 else None
        if not isinstance(result, ScalarReward):
            return ScalarReward.failed(Status.BACKEND_ERROR, f"the judge returned {outcome!r:.200} for one query")
        return result

    def close(self) -> None:
        """Stop the scheduler (letting running calls finish, up to 5 s) and free the judge."""
        self.service.close()
        self.judge.close()


_lock = threading.Lock()
_service: LocalRewards | None = None
_clients: dict[tuple[str, str, str], RemoteJudge] = {}


def _local(cfg: Mapping[str, JSONValue]) -> LocalRewards:
    """The process-wide local judge service, built on first use.

    Raises:
        ConfigError: on a setting of the wrong type (naming its variable), and what :func:`brrm.load` raises.
    """
    global _service
    with _lock:
        if _service is None:
            from brrm.types import JudgeSpec, check_float, check_int

            options = cfg.get("options") or {}
            if not isinstance(options, dict):
                raise ConfigError(f"BRRM_OPTIONS must be a JSON object of brrm.load options, got {options!r}")
            model, kind, backend, mode = (_text(cfg, k) for k in ("model", "kind", "backend", "get_reward_mode"))
            failed = cfg.get("failed_reward", 0.0)
            if failed is not None and (isinstance(failed, bool) or not isinstance(failed, int | float)):
                raise ConfigError(f"BRRM_FAILED_REWARD must be a number or null, got {failed!r}")
            judge = JudgeSpec(model, kind=kind or "auto", backend=backend or "transformers", options=options).load()
            _service = LocalRewards(judge, failed_reward=None if failed is None else float(failed),
                                    mode=mode or "auto", max_batch=check_int("max_batch", cfg.get("max_batch", 32)),
                                    max_wait_ms=check_float("max_wait_ms", cfg.get("max_wait_ms", 10.0)),
                                    timeout_s=check_float("timeout_s", cfg.get("timeout_s", 600.0), low=0,
                                                          low_open=True))
        return _service


def _text(cfg: Mapping[str, JSONValue], key: str) -> str | None:
    """Setting ``key`` as a string, or None when unset.

    Raises:
        ConfigError: when it is another type (naming its variable).
    """
    value = cfg.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"BRRM_{key.upper()} must be a string, got {value!r}")
    return value
