"""The server's limits and settings: one frozen, validated value shared by the app, scheduler and middleware.

Every limit protects the process from a request body (size, item count, field length) or from overload
(queue, deadlines). Defaults suit one GPU judge; the CLI (``brrm serve --help``) sets each one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from brrm.errors import ConfigError
from brrm.service.breaker import BreakerOptions
from brrm.types import check_bool, check_choice, check_float, check_int
from brrm.types.jsonvalue import JSONValue

MIB = 1 << 20

COMPARE_STRATEGIES = ("circular", "all_pairs")
"""``/compare`` strategies, with NeMo Gym ``genrm_compare``'s names: ``circular`` (i vs i+1 mod N, N pairs) and
``all_pairs`` (every unordered pair once, N(N-1)/2)."""

GET_REWARD_MODES = ("auto", "scores", "reference")
"""How ``/get_reward`` turns a query into a reward: ``scores`` (a scalar model's reward), ``reference`` (a
pairwise judge's P(response ≻ label), the OpenRLHF label being the reference answer), ``auto`` (``scores`` for
scalar models, ``reference`` for pairwise judges)."""


NULL_FAILED_REWARD = ("a null failed reward cannot be sent: OpenRLHF's remote reward client (0.11) turns the "
                      "rewards into a tensor (torch.tensor([[None]]) fails) and NeMo Gym's GenRMCompareResponse "
                      "declares rewards List[float]; give a number, and mask failed items by extra_logs.brrm_failed "
                      "/ statuses")
"""Why ``failed_reward`` must be a number."""


@dataclass(frozen=True)
class ServerLimits:
    """Limits and settings of a ``brrm serve`` app.

    Attributes:
        max_body_bytes: largest request body in bytes, enforced while the body streams in (a declared
            ``Content-Length`` above it, or a chunked body growing past it, answers 413 at once), >= 1024.
        max_items: most items in one request (pairs, scored items, responses of a group, queries), >= 1.
            The effective limit is ``min(max_items, max_queue)`` so that a valid request can always queue.
        max_field_chars: longest text field (a prompt, a response, a message, a query) in characters; longer
            answers 413 naming the field, >= 1.
        max_judgments_per_request: most judgments one request may cost (the judge's :meth:`~brrm.RewardJudge.cost`:
            pairs × presentation orders, a group strategy's judgments, or scalar items), >= 1. The effective
            limit is ``min(max_judgments_per_request, max_queue)`` so that a valid request can always queue; a
            request over it answers 413 naming its cost and the limit, before anything is queued.
        max_batch: most items coalesced into one judge call (``judge_pairs`` / ``score`` / ``rank_groups``),
            >= 1; 1 turns coalescing off.
        max_wait_ms: how long the first queued request waits for others to join its batch, in ms, >= 0.
        max_queue: most judgments waiting (not yet running; by cost, as ``max_judgments_per_request``); a
            request that does not fit answers 429 with ``Retry-After`` at once, >= 1.
        deadline_s: per-request deadline in seconds (queueing + judging); past it the request answers 504 and
            its queued work is dropped, > 0. A request may ask for a shorter one (``timeout_s``), never longer.
        concurrency: judge calls run at once (1 for one in-process model; more only for thread-safe backends
            such as ``openai``, whose servers batch by themselves), >= 1.
        stall_timeout_s: how long a judge call whose requests have all gone (deadline, disconnect) may keep
            running after it was asked to stop before the scheduler abandons its thread and serves others,
            > 0. The abandoned thread keeps the model busy until it returns.
        max_abandoned: abandoned calls still running at which the server stops taking work (503, ``/ready``
            false) instead of piling threads onto a stuck backend, >= 1. A backend that takes one call at a time
            (not ``info.concurrent``) never runs a call beside an abandoned one (:mod:`brrm.service.stalls`).
        breaker_failures: consecutive failed judge calls (bisection's sub-calls included) that open the backend's
            circuit breaker, >= 1 (default 10; :class:`~brrm.service.breaker.BreakerOptions`).
        breaker_cooldown_s: seconds the breaker stays open (requests answered 503 ``backend_failing`` with
            ``Retry-After`` at once, no call made) before one probe call, > 0 (default 10).
        drain_timeout_s: on SIGTERM, how long in-flight requests may take to finish before they are cut, > 0.
        api_key: bearer token required on every endpoint but ``/health`` (compared in constant time); None:
            no authentication (the server binds 127.0.0.1 by default).
        cors_origins: origins allowed by CORS; empty: CORS off (no CORS headers at all).
        failed_reward: the reward ``/get_reward`` and ``/compare`` put in place of an item that could not be
            judged, a finite number (None is refused: see :data:`NULL_FAILED_REWARD`). Each failed item is
            also named by its status and reason (``statuses`` / ``reasons`` and ``extra_logs["brrm_failed"]``).
        get_reward_mode: see :data:`GET_REWARD_MODES`.
        strip_texts: policy end-of-turn / padding texts stripped from the ends of an OpenRLHF query, beyond
            the built-in list (:data:`brrm.serve.openrlhf.POLICY_SPECIAL_TEXTS`).
        compare_strategy: default strategy of ``/compare`` (``circular`` or ``all_pairs``, NeMo Gym's names).
        warmup: judge one tiny pair at start-up before ``/ready`` answers 200.
    """

    max_body_bytes: int = 8 * MIB
    max_items: int = 512
    max_field_chars: int = 200_000
    max_judgments_per_request: int = 2048
    max_batch: int = 32
    max_wait_ms: float = 10.0
    max_queue: int = 2048
    deadline_s: float = 600.0
    concurrency: int = 1
    stall_timeout_s: float = 30.0
    max_abandoned: int = 4
    breaker_failures: int = 10
    breaker_cooldown_s: float = 10.0
    drain_timeout_s: float = 660.0
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    failed_reward: float = 0.0
    get_reward_mode: str = "auto"
    strip_texts: tuple[str, ...] = ()
    compare_strategy: str = "circular"
    warmup: bool = True

    def __post_init__(self) -> None:
        check_int("max_body_bytes", self.max_body_bytes, low=1024)
        check_int("max_items", self.max_items, low=1)
        check_int("max_field_chars", self.max_field_chars, low=1)
        check_int("max_judgments_per_request", self.max_judgments_per_request, low=1)
        check_int("max_batch", self.max_batch, low=1)
        check_float("max_wait_ms", self.max_wait_ms, low=0)
        check_int("max_queue", self.max_queue, low=1)
        check_float("deadline_s", self.deadline_s, low=0, low_open=True)
        check_int("concurrency", self.concurrency, low=1)
        check_float("stall_timeout_s", self.stall_timeout_s, low=0, low_open=True)
        check_int("max_abandoned", self.max_abandoned, low=1)
        check_int("breaker_failures", self.breaker_failures, low=1)
        check_float("breaker_cooldown_s", self.breaker_cooldown_s, low=0, low_open=True)
        check_float("drain_timeout_s", self.drain_timeout_s, low=0, low_open=True)
        check_bool("warmup", self.warmup)
        if self.api_key is not None and (not isinstance(self.api_key, str) or len(self.api_key) < 8):
            raise ConfigError("api_key must be a string of at least 8 characters (--api-key / BRRM_API_KEY)")
        if self.failed_reward is None:
            raise ConfigError(f"failed_reward=None: {NULL_FAILED_REWARD}")
        if not (isinstance(self.failed_reward, int | float) and math.isfinite(self.failed_reward)):
            raise ConfigError(f"failed_reward must be a finite number, got {self.failed_reward!r}")
        check_choice("get_reward_mode", self.get_reward_mode, GET_REWARD_MODES)
        check_choice("compare_strategy", self.compare_strategy, COMPARE_STRATEGIES)
        for name in ("cors_origins", "strip_texts"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(f"{name} must be a list of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))

    @property
    def breaker(self) -> BreakerOptions:
        """The circuit breaker's options."""
        return BreakerOptions(self.breaker_failures, self.breaker_cooldown_s)

    @property
    def item_limit(self) -> int:
        """Items one request may carry: ``min(max_items, max_queue)``."""
        return min(self.max_items, self.max_queue)

    @property
    def judgment_limit(self) -> int:
        """Judgments one request may cost: ``min(max_judgments_per_request, max_queue)``."""
        return min(self.max_judgments_per_request, self.max_queue)

    def to_args(self) -> dict[str, JSONValue]:
        """Every limit but the API key (a secret is never written) as JSON values (tuples as lists): a Serve config's
        ``args`` (:func:`brrm.serve.ray.app.from_args` reads ``BRRM_API_KEY`` where the application is built)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if k != "api_key"}

    def public(self) -> dict[str, JSONValue]:
        """The limits a client may see (``/v1/models``): :meth:`to_args`, whether a key is required and the
        effective item and judgment limits; never the API key."""
        return {**self.to_args(), "auth": self.api_key is not None, "item_limit": self.item_limit,
                "judgment_limit": self.judgment_limit}
