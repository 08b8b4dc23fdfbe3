"""OpenRLHF's custom reward function: ``reward_func(queries, prompts, labels, **kwargs)`` for
``--remote_rm_url path/to/this_file.py`` (OpenRLHF loads the file and calls ``reward_func``; see
``examples/openrlhf_reward_func.py``).

Configured from the environment (or a JSON file), in one of two ways:

* **remote** — ``BRRM_URL=http://HOST:PORT`` (a ``brrm serve``; ``/get_reward`` is appended unless given) and
  optionally ``BRRM_API_KEY`` and ``BRRM_TIMEOUT_S`` (default 600): the queries go to the server's
  ``/get_reward`` and its reply is returned as is;
* **local** — ``BRRM_MODEL`` (hub id or folder; unset: the embedded demo), ``BRRM_KIND``, ``BRRM_BACKEND``,
  ``BRRM_OPTIONS`` (a JSON object of :func:`brrm.load` options), ``BRRM_FAILED_REWARD`` (a number or ``null``,
  default 0.0), ``BRRM_GET_REWARD_MODE`` (``auto``/``scores``/``reference``), ``BRRM_MAX_BATCH`` (default 32) and
  ``BRRM_MAX_WAIT_MS`` (default 10): the judge is built once per process, and concurrent calls (OpenRLHF calls
  ``reward_func`` from worker threads, one query at a time) are coalesced into batched judge calls by the same
  scheduler as ``brrm serve``.

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
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence

from brrm.errors import ConfigError
from brrm.types.jsonvalue import JSONValue
from brrm.types.protocols import RewardJudge
from brrm.types.results import ScalarReward

_KEYS = ("url", "api_key", "timeout_s", "model", "kind", "backend", "options", "failed_reward", "get_reward_mode",
         "max_batch", "max_wait_ms")


def settings() -> dict[str, JSONValue]:
    """The configuration: ``BRRM_CONFIG``'s JSON object, overridden by ``BRRM_<KEY>`` variables.

    Raises:
        ConfigError: on an unreadable file, an unknown key, or a value that is not valid JSON where JSON is needed.
    """
    out: dict[str, JSONValue] = {}
    path = os.environ.get("BRRM_CONFIG")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                out = json.load(f)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"BRRM_CONFIG {path!r}: {exc}") from None
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
                **kwargs: object) -> dict[str, object]:
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
            labels: list[JSONValue]) -> dict[str, object]:
    url = str(cfg["url"]).rstrip("/")
    url = url if url.endswith("/get_reward") else f"{url}/get_reward"
    headers = {"Content-Type": "application/json"}
    if cfg.get("api_key"):
        headers["Authorization"] = f"Bearer {cfg['api_key']}"
    data = json.dumps({"query": queries, "prompts": prompts, "labels": labels}).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=_number(cfg, "timeout_s", 600.0)) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        kind = ConfigError if 400 <= exc.code < 500 and exc.code not in (408, 429) else RuntimeError
        raise kind(f"brrm serve at {url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError) as exc:
        raise RuntimeError(f"brrm serve at {url} could not be reached: {exc}") from None


class LocalRewards:
    """A judge in this process behind the serve scheduler (coalescing concurrent calls), answering like
    ``/get_reward``.

    Args:
        judge: the judge (``brrm.load(...)``).
        failed_reward: reward of an item that could not be judged (a number, or None).
        mode: ``auto``, ``scores`` or ``reference`` (see :func:`brrm.serve.openrlhf.resolve_mode`).
        max_batch: items per judge call, >= 1.
        max_wait_ms: how long a call waits for others to join, >= 0.

    Raises:
        ConfigError: on an invalid mode for the judge or an invalid batch setting.
    """

    def __init__(self, judge: RewardJudge, *, failed_reward: float | None = 0.0, mode: str = "auto",
                 max_batch: int = 32, max_wait_ms: float = 10.0) -> None:
        from brrm.serve.calls import failed_result, make_runner
        from brrm.serve.openrlhf import resolve_mode
        from brrm.service.scheduler import Scheduler

        self.judge, self.failed_reward = judge, failed_reward
        self.mode = resolve_mode(mode, bool(judge.info.pairwise))
        self.scheduler = Scheduler(make_runner(judge), max_batch=max_batch, max_wait_s=max_wait_ms / 1000,
                                   max_queue=1 << 30, failed=failed_result)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="brrm-reward-func", daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.scheduler.start(), self.loop).result()

    def rewards(self, queries: list[str], prompts: list[str] | None,
                labels: list[JSONValue] | None) -> dict[str, object]:
        """OpenRLHF's reply for these queries (blocking; safe to call from many threads)."""
        from brrm.serve import openrlhf
        from brrm.serve.calls import score_key

        todo = openrlhf.plan(queries, prompts, labels, mode=self.mode)
        scored: list[ScalarReward] = []
        if todo.items:
            job = self.scheduler.submit(score_key(self.mode == "reference", False), todo.items, timeout_s=1e9)
            scored = asyncio.run_coroutine_threadsafe(job, self.loop).result()
        return openrlhf.reply(todo.fill(scored), self.failed_reward)

    def close(self) -> None:
        """Stop the scheduler and free the judge."""
        asyncio.run_coroutine_threadsafe(self.scheduler.drain(5.0), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.judge.close()


_lock = threading.Lock()
_service: LocalRewards | None = None


def _local(cfg: Mapping[str, JSONValue]) -> LocalRewards:
    """The process-wide local judge service, built on first use."""
    global _service
    with _lock:
        if _service is None:
            import brrm

            options = cfg.get("options") or {}
            if not isinstance(options, dict):
                raise ConfigError(f"BRRM_OPTIONS must be a JSON object of brrm.load options, got {options!r}")
            load: Callable[..., RewardJudge] = brrm.load  # options: JSON from the environment; load validates them
            model = cfg.get("model")
            judge = load(model if isinstance(model, str) else None, kind=_text(cfg, "kind", "auto"),
                         backend=_text(cfg, "backend", "transformers"), **options)
            failed = cfg.get("failed_reward", 0.0)
            _service = LocalRewards(judge, failed_reward=None if failed is None else _number(cfg, "failed_reward", 0.0),
                                    mode=_text(cfg, "get_reward_mode", "auto"),
                                    max_batch=int(_number(cfg, "max_batch", 32)),
                                    max_wait_ms=_number(cfg, "max_wait_ms", 10.0))
        return _service


def _text(cfg: Mapping[str, JSONValue], key: str, default: str) -> str:
    """``cfg[key]`` as a string (``default`` when absent).

    Raises:
        ConfigError: naming the setting when it is not a string.
    """
    value = cfg.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"BRRM_{key.upper()} must be a string, got {value!r}")
    return value


def _number(cfg: Mapping[str, JSONValue], key: str, default: float) -> float:
    """``cfg[key]`` as a number (``default`` when absent).

    Raises:
        ConfigError: naming the setting when it is not a number.
    """
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"BRRM_{key.upper()} must be a number, got {value!r}")
    return float(value)
