"""brrm as verl's custom reward: an async ``compute_score`` with a per-sample timeout.

verl's reward loop (verl 0.9, ``verl/experimental/reward_loop/reward_manager/naive.py``) awaits
``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)`` for
every sample concurrently when the function is a coroutine function, and reads ``result["score"]`` plus every
other key as reward extra info (the keys must be the same for every sample: verl builds one array per key from
the first sample's keys). Configure it in verl's YAML::

    reward:
      custom_reward_function:
        path: /path/to/brrm/rlhf/verl.py
        name: compute_score
        reward_kwargs:
          brrm_config: /path/to/brrm_verl.json

The brrm configuration (:class:`VerlRewardConfig`) comes from ``reward_kwargs["brrm_config"]`` (a JSON/YAML file
path or a mapping), else the file named by ``$BRRM_VERL_CONFIG``, else ``$BRRM_VERL_MODEL`` / ``$BRRM_VERL_URL``
(and ``$BRRM_VERL_KIND``, ``$BRRM_VERL_TIMEOUT_S``). The judge is local (:func:`brrm.load` in the reward worker) or
remote (a ``brrm serve`` URL, judged through :class:`~brrm.service.RemoteJudge`: ``POST /v1/score``).

Every call returns within ``timeout_s`` (plus scheduling slack) with the same keys: ``score`` (the reward, or
``fallback_score`` when there is none), ``ok``, ``status`` (a :class:`brrm.Status` value, or ``timeout``),
``reason``, ``judge_seconds``. A failure never raises into the training loop. A sample that could not be judged is
``ok: False`` with its status and reason; its ``score`` is only a placeholder verl needs (mask such samples by
``ok``: see the README's RLHF section). Samples are submitted through :mod:`brrm.service` (one
:class:`~brrm.service.hosted.HostedScheduler` per scorer): samples arriving together share judge calls, each
sample's deadline is the scheduler's, and with a judge that takes concurrent calls (``info.concurrent``:
continuous batching, vLLM, a ``brrm serve`` at ``url``) every sample is its own call in the shared running batch,
so a stalled sample is abandoned alone and its batch-mates are judged within their deadlines, this round and the
next. At ``max_workers`` stalled calls still running, a new sample is ``backend_error`` at once (the backend is
stuck). A judge that does not declare concurrent calls runs one call at a time (a stalled call holds the model
itself); for concurrency at scale, point ``url`` at ``brrm serve``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import cast

from brrm.errors import ConfigError
from brrm.rlhf.recipe import JudgeSource
from brrm.service.hosted import HostedScheduler
from brrm.service.items import ScoreCall, ScoreItem
from brrm.service.scheduler import DeadlineExceeded, SchedulerError
from brrm.types import ConversationLike, JudgeSpec, RewardJudge, ScalarReward, Status, check_float, check_int
from brrm.types.protocols import kind_trait

TIMEOUT = "timeout"
"""The ``status`` of a sample whose judge did not answer within ``timeout_s``."""


@dataclass(frozen=True)
class VerlRewardConfig:
    """How verl's ``compute_score`` reaches a brrm judge (validated on construction, before any model loads).

    Attributes:
        model, kind, backend, options: :func:`brrm.load` arguments of a local judge (``model=None`` with no
            ``url``: the embedded demo model).
        url: base URL of a ``brrm serve`` instance (e.g. ``http://127.0.0.1:8000``); when set, no local judge.
        prompt_key: ``extra_info`` key holding the prompt (a string or a list of ``{"role", "content"}``).
        reference_key: ``extra_info`` key holding a reference response; None: ``ground_truth`` is the reference
            of a pairwise judge (P(response ≻ reference)), and scalar judges take no reference.
        principle: a fixed principle (principle models); ``principle_key``: an ``extra_info`` key with one.
        timeout_s: per-sample deadline in seconds, > 0.
        fallback_score: the ``score`` of a sample without a reward (finite; ``ok`` is False and ``status``
            says why, so the sample can be masked).
        max_workers: judge calls at once for a judge that takes concurrent calls, and the stalled calls
            tolerated before new samples are refused, >= 1.
    """

    model: str | None = None
    kind: str = "auto"
    backend: str = "transformers"
    options: Mapping[str, object] = field(default_factory=dict)
    url: str | None = None
    prompt_key: str = "prompt"
    reference_key: str | None = None
    principle: str | None = None
    principle_key: str | None = None
    timeout_s: float = 300.0
    fallback_score: float = 0.0
    max_workers: int = 4

    def __post_init__(self) -> None:
        check_float("timeout_s", self.timeout_s, low=0, low_open=True)
        check_float("fallback_score", self.fallback_score)
        check_int("max_workers", self.max_workers, low=1)
        if self.url is not None and not (isinstance(self.url, str) and self.url.startswith(("http://", "https://"))):
            raise ConfigError(f"url must be an http(s) URL of brrm serve, got {self.url!r}")
        if self.url is not None and self.model is not None:
            raise ConfigError("give url (a brrm serve instance) or model (a local judge), not both")
        object.__setattr__(self, "options", dict(self.options))

    def spec(self) -> JudgeSpec:
        """The judge's recipe: the ``brrm serve`` at ``url`` (its RemoteJudge), else the local judge."""
        if self.url is not None:
            return JudgeSpec(self.url, kind=self.kind, backend="serve", options={"timeout_s": self.timeout_s})
        return JudgeSpec(self.model, kind=self.kind, backend=self.backend, options=self.options)

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> VerlRewardConfig:
        """From a dict (e.g. a parsed file).

        Raises:
            ConfigError: on an unknown key (naming the valid ones) or an invalid value.
        """
        valid = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - valid)
        if unknown:
            raise ConfigError(f"unknown brrm verl config key {unknown[0]!r}; valid keys: {', '.join(sorted(valid))}")
        defaults = {f.name: f.default for f in fields(cls)}
        values: dict[str, object] = {}
        for name, value in data.items():
            if name == "options":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"brrm verl config options must be a mapping of brrm.load options, got {value!r}")
                value = {str(k): v for k, v in value.items()}
            elif name in ("timeout_s", "fallback_score"):
                value = check_float(name, value)
            elif name == "max_workers":
                value = check_int(name, value, low=1)
            elif value is not None and not isinstance(value, str):
                raise ConfigError(f"brrm verl config {name} must be a string, got {value!r}")
            values[name] = str(value) if isinstance(defaults[name], str) else value  # kind, backend, prompt_key
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> VerlRewardConfig:
        """From a JSON file, or YAML (``.yaml``/``.yml``).

        Raises:
            ConfigError: when the file is missing or unreadable, or its content is invalid.
        """
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
            if p.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read brrm verl config {str(p)!r}: {exc}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"brrm verl config {str(p)!r} must hold a mapping of settings")
        return cls.from_mapping(data)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> VerlRewardConfig:
        """From ``$BRRM_VERL_CONFIG`` (a file), else ``$BRRM_VERL_MODEL`` / ``$BRRM_VERL_URL`` /
        ``$BRRM_VERL_KIND`` / ``$BRRM_VERL_TIMEOUT_S``.

        Raises:
            ConfigError: on an unreadable file or invalid values.
        """
        env = os.environ if environ is None else environ
        if env.get("BRRM_VERL_CONFIG"):
            return cls.from_file(env["BRRM_VERL_CONFIG"])
        data: dict[str, object] = {"model": env.get("BRRM_VERL_MODEL") or None, "url": env.get("BRRM_VERL_URL") or None,
                                "kind": env.get("BRRM_VERL_KIND", "auto")}
        if env.get("BRRM_VERL_TIMEOUT_S"):
            try:
                data["timeout_s"] = float(env["BRRM_VERL_TIMEOUT_S"])
            except ValueError:
                raise ConfigError(f"BRRM_VERL_TIMEOUT_S must be a number, got {env['BRRM_VERL_TIMEOUT_S']!r}") from None
        return cls.from_mapping(data)


class VerlScorer:
    """Scores one verl sample at a time against a local or remote brrm judge, each within its deadline.

    Args:
        config: the :class:`VerlRewardConfig`.
        judge: an already built judge to use instead of loading ``config``'s (tests, notebooks).
    """

    def __init__(self, config: VerlRewardConfig, judge: RewardJudge | None = None) -> None:
        self.config = config
        self.source = JudgeSource(judge if judge is not None else config.spec())
        self._service: HostedScheduler | None = None
        self._service_lock = threading.Lock()

    async def score(self, solution_str: str, ground_truth: object,
                    extra_info: Mapping[str, object] | None) -> dict[str, object]:
        """One sample's result dict (see the module docstring); never raises for a judge failure or a timeout.

        A sample without ``extra_info`` (None) is that sample's ``invalid_input``.

        Raises:
            ConfigError: when ``extra_info`` is a mapping without the prompt (a setup mistake: every sample of the
                dataset would fail the same way), or a local judge refuses the sample's input.
        """
        start = time.perf_counter()
        if extra_info is None:
            return self._result(None, Status.INVALID_INPUT.value, f"no extra_info for this sample (the judge needs "
                                f"the prompt under extra_info[{self.config.prompt_key!r}])", start)
        item = self._item(solution_str, ground_truth, dict(extra_info))
        try:
            service = self._service
            if service is None:  # the judge loads off the event loop
                service = await asyncio.get_running_loop().run_in_executor(None, self.service)
            left = self.config.timeout_s - (time.perf_counter() - start)
            if left <= 0:
                raise DeadlineExceeded("the judge loaded after the sample's deadline")
            results = await service.submit(ScoreCall(item.reference is not None, item.principle is not None),
                                           [item], timeout_s=left)
        except DeadlineExceeded:
            return self._result(None, TIMEOUT, f"no reward within timeout_s={self.config.timeout_s:g}", start)
        except SchedulerError as exc:  # the backend is stuck or failing (Unavailable, BatchFailed)
            return self._result(None, Status.BACKEND_ERROR.value, exc.message[:500], start)
        except Exception as exc:  # noqa: BLE001 - any transport or judge error is this sample's failure
            if isinstance(exc, ConfigError) and self.config.url is None:
                raise
            return self._result(None, Status.BACKEND_ERROR.value, f"{type(exc).__name__}: {exc}"[:500], start)
        result = results[0]
        if not isinstance(result, ScalarReward) or len(results) != 1:
            raise ConfigError(f"the judge returned {len(results)} results of type {type(result).__name__} "
                              "for 1 sample")
        return self._result(result.reward if result.ok else None, result.status.value, result.reason, start)

    def service(self) -> HostedScheduler:
        """The scorer's scheduler over its judge (the judge is loaded on first use)."""
        with self._service_lock:
            if self._service is None:
                cfg, judge = self.config, self.source.get()
                self._service = HostedScheduler(judge, concurrency=cfg.max_workers if judge.info.concurrent else 1,
                                                stall_timeout_s=max(0.1, min(5.0, cfg.timeout_s / 2)),
                                                max_abandoned=cfg.max_workers)
            return self._service

    def _item(self, response: str, ground_truth: object, extra: Mapping[str, object]) -> ScoreItem:
        cfg = self.config
        if cfg.prompt_key not in extra:
            raise ConfigError(f"extra_info has no {cfg.prompt_key!r} (the prompt the judge needs); keys present: "
                              f"{', '.join(sorted(map(str, extra))) or '(none)'}; set prompt_key or add the prompt "
                              "to each row's extra_info")
        conversation = cast(ConversationLike, extra[cfg.prompt_key])  # verl's row data: the judge validates it
        reference = extra.get(cfg.reference_key) if cfg.reference_key else ground_truth
        keep = reference is not None and bool(cfg.reference_key or self._pairwise())
        principle = extra.get(cfg.principle_key) if cfg.principle_key else cfg.principle
        return ScoreItem(conversation, str(response), None if principle is None else str(principle),
                         str(reference) if keep else None)

    def _pairwise(self) -> bool:
        if self.config.url is not None:  # asked before the server is: a pairwise judge unless kind's trait says not
            return kind_trait(self.config.kind, "pairwise") is not False  # auto: pairwise unless told
        return bool(self.source.get().info.pairwise)

    def _result(self, reward: float | None, status: str, reason: str, start: float) -> dict[str, object]:
        ok = reward is not None
        return {"score": float(reward) if ok else self.config.fallback_score, "ok": ok, "status": status,  # type: ignore[arg-type]
                "reason": reason, "judge_seconds": time.perf_counter() - start}

    def close(self) -> None:
        """Stop the scheduler (letting running calls finish, up to 5 s) and close a judge loaded from the config."""
        with self._service_lock:
            service, self._service = self._service, None
        if service is not None:
            service.close()
        if self.source is not None:
            self.source.close()


_SCORERS: dict[str, VerlScorer] = {}
_SCORERS_LOCK = threading.Lock()


def scorer_for(config: VerlRewardConfig) -> VerlScorer:
    """The process's scorer for ``config`` (one judge per distinct configuration)."""
    key = json.dumps(asdict(config), sort_keys=True, default=str)
    with _SCORERS_LOCK:
        if key not in _SCORERS:
            _SCORERS[key] = VerlScorer(config)
        return _SCORERS[key]


def resolve_config(brrm_config: object = None) -> VerlRewardConfig:
    """The configuration from ``reward_kwargs["brrm_config"]`` (path, mapping or config), else the environment."""
    if isinstance(brrm_config, VerlRewardConfig):
        return brrm_config
    if isinstance(brrm_config, Mapping):
        return VerlRewardConfig.from_mapping(brrm_config)
    if isinstance(brrm_config, str | os.PathLike):
        return VerlRewardConfig.from_file(brrm_config)
    if brrm_config is not None:
        raise ConfigError(f"brrm_config must be a file path or a mapping, got {type(brrm_config).__name__}")
    return VerlRewardConfig.from_env()


async def compute_score(data_source: object = None, solution_str: str = "", ground_truth: object = None,
                        extra_info: Mapping[str, object] | None = None, **kwargs: object) -> dict[str, object]:
    """verl's custom reward: one sample's brrm reward, within the configured deadline.

    Args:
        data_source: the dataset name (recorded by verl; unused).
        solution_str: the decoded response.
        ground_truth: the row's ``reward_model.ground_truth``: the reference of a pairwise judge unless
            ``reference_key`` names another ``extra_info`` field.
        extra_info: the row's ``extra_info``; must hold the prompt under ``prompt_key`` (default ``prompt``).
        **kwargs: ``brrm_config`` (a file path or mapping; default: the environment), and whatever else verl
            passes (ignored).

    Returns:
        ``{"score": float, "ok": bool, "status": str, "reason": str, "judge_seconds": float}``, the same keys for
        every sample; ``status`` is a :class:`brrm.Status` value or ``"timeout"``.

    Raises:
        ConfigError: on an invalid configuration or a missing prompt (setup mistakes, not per-sample failures).
    """
    scorer = scorer_for(resolve_config(kwargs.get("brrm_config")))
    return await scorer.score(solution_str, ground_truth, extra_info)


RESULT_KEYS = ("score", "ok", "status", "reason", "judge_seconds")
"""The keys of every :func:`compute_score` result (verl builds one reward-extra-info array per key of the first
sample, so every sample of a run must return the same keys)."""


def with_brrm_keys(fn: Callable[..., object]) -> Callable[..., Awaitable[dict[str, object]]]:
    """An async verl reward with brrm's result keys around a float-returning (sync or async) verl reward.

    verl (0.9, ``NaiveRewardManager.run_single``) takes a dict's keys as reward extra info and a plain float as
    ``{"acc": score}``, then builds one array per key of the *first* sample; a run whose samples mix brrm's
    dict with another function's float therefore fails in verl's own assembly. Wrap the other function with
    this (or route with :func:`route_by_data_source`) so every sample returns :data:`RESULT_KEYS`.

    Args:
        fn: ``fn(data_source, solution_str, ground_truth, extra_info, **kwargs) -> float`` (or a dict with a
            ``score``), sync or async.

    Returns:
        An async function with verl's ``compute_score`` signature returning ``{"score", "ok": True,
        "status": "ok", "reason": "", "judge_seconds"}``; a result that is not a finite number is
        ``ok: False`` with status ``backend_error`` and the result's ``score`` replaced by 0.0.
    """
    async def wrapped(data_source: object = None, solution_str: str = "", ground_truth: object = None,
                      extra_info: Mapping[str, object] | None = None, **kwargs: object) -> dict[str, object]:
        start = time.perf_counter()
        out = fn(data_source, solution_str, ground_truth, extra_info, **kwargs)
        if inspect.isawaitable(out):
            out = await out
        value = out.get("score") if isinstance(out, Mapping) else out
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        score = float(value) if isinstance(value, int | float) and ok else 0.0
        return {"score": score, "ok": ok, "status": "ok" if ok else "backend_error",
                "reason": "" if ok else f"{getattr(fn, '__name__', 'reward')} returned {value!r}",
                "judge_seconds": time.perf_counter() - start}

    wrapped.__name__ = f"with_brrm_keys_{getattr(fn, '__name__', 'reward')}"
    return wrapped


def route_by_data_source(routes: Mapping[str, Callable[..., object]], default: Callable[..., object] | None = None,
                         ) -> Callable[..., Awaitable[dict[str, object]]]:
    """One verl ``compute_score`` that sends each sample to brrm or to another reward by its ``data_source``.

    Args:
        routes: data source -> reward function; the value :func:`compute_score` (brrm) is used as is, any other
            function is wrapped with :func:`with_brrm_keys`.
        default: the function for data sources not in ``routes`` (None: such a sample is refused with a
            ConfigError naming the known sources — a setup mistake).

    Returns:
        An async ``compute_score`` whose every result has :data:`RESULT_KEYS`.
    """
    wrapped = {k: (v if v is compute_score else with_brrm_keys(v)) for k, v in routes.items()}
    fallback = None if default is None else (default if default is compute_score else with_brrm_keys(default))

    async def routed(data_source: object = None, solution_str: str = "", ground_truth: object = None,
                     extra_info: Mapping[str, object] | None = None, **kwargs: object) -> dict[str, object]:
        fn = wrapped.get(str(data_source), fallback)
        if fn is None:
            raise ConfigError(f"no reward for data_source {data_source!r}; routes: {', '.join(sorted(wrapped))}")
        result: dict[str, object] = await fn(data_source, solution_str, ground_truth, extra_info, **kwargs)
        return result

    return routed


def close_all() -> None:
    """Close every scorer of this process (worker threads end; judges loaded here are freed)."""
    with _SCORERS_LOCK:
        scorers = list(_SCORERS.values())
        _SCORERS.clear()
    for scorer in scorers:
        scorer.close()
