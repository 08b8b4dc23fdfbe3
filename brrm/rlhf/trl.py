"""brrm judges as TRL reward functions (``GRPOTrainer``, ``RLOOTrainer`` and the other ``reward_funcs`` trainers).

TRL calls each reward function as ``f(prompts=..., completions=..., completion_ids=..., trainer_state=...,
log_extra=..., log_metric=..., **dataset_columns)`` and expects one ``float`` or ``None`` per completion
(``trl/trainer/grpo_trainer.py`` ``_calculate_rewards``, TRL 1.16). ``None`` becomes NaN: TRL keeps it out of
the group mean and std (NaN-aware ``nanmean``/``nanstd``) and masks a row that every function left ``None``.
It awaits a function for which ``trl.trainer.utils.is_async_callable`` holds, concurrently with other async
rewards, and calls the rest inline.

:func:`trl_reward` builds one from a judge (or a :class:`~brrm.JudgeSpec`):

* ``mode="scalar"``: each completion's own reward (Bradley–Terry, principle models; a pairwise judge scores
  P(completion ≻ reference) against a dataset column).
* ``mode="group"``: pairwise judgments within each GRPO group, through ``judge.rank_groups`` so every group of
  a step runs in one batched call (see :mod:`brrm.rlhf.groups` for the grouping check, the cost and how a
  failed completion is kept out of its siblings' rewards).

Both the standard (strings) and the conversational (message lists) formats are accepted. In the
conversational format the judged response is the completion's final assistant message; earlier completion
messages (tool calls and tool results) join the conversation as context, never the judged text. A completion
that closes a ``</think>`` it never opened (the chat template prefilled ``<think>``) gets the opening tag back
first (``completion_prefix="auto"``), so the judge strips the whole reasoning block.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from brrm.errors import ConfigError
from brrm.rlhf.fallback import check_failed_reward, fill_failed
from brrm.rlhf.groups import GROUP_STRATEGIES, check_groups, judgments_per_step, prompt_key, rank_in_groups
from brrm.rlhf.metrics import judgment_stats, reward_stats
from brrm.rlhf.recipe import JudgeSource
from brrm.service.items import ScoreItem
from brrm.service.run import run
from brrm.types import (
    ConversationLike,
    GroupResult,
    JudgeSpec,
    RewardJudge,
    ScalarReward,
    check_bool,
    check_choice,
    check_int,
)

logger = logging.getLogger(__name__)

MODES = ("scalar", "group")
SOFT_STRATEGIES = ("round_robin", "circular")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
Prompt = str | Sequence[Mapping[str, object]]
"""A TRL prompt or completion: a string (standard) or a list of message dicts (conversational)."""


@dataclass(frozen=True)
class TRLRewardConfig:
    """How a brrm judge becomes a TRL reward function (validated on construction, before any model loads).

    Attributes:
        name: the function's ``__name__``: TRL's metric prefix (``rewards/<name>/mean``).
        mode: ``scalar`` or ``group``.
        strategy: group strategy (``auto``, ``scores``, ``round_robin``, ``circular``, ``reference``, ``knockout``).
        num_generations: the trainer's completions per prompt (group mode), >= 1; 1 only with ``reference``.
        swap: judge both presentation orders (None: the judge's own setting).
        soft: group rewards are expected win rates from P(A ≻ B) (``round_robin``, ``circular``).
        principle: one principle for every completion (principle models).
        principle_column: dataset column holding each prompt's principle.
        reference_column: dataset column holding each prompt's reference response.
        max_judgments_per_step: refuse (ConfigError, before any model call) a step needing more judgments.
        completion_prefix: ``auto`` (restore a prefilled ``<think>``), or text put before every completion.
        failed_reward: what TRL gets for a completion brrm could not score (:mod:`brrm.rlhf.fallback`):
            ``none`` (``None``: right when brrm is the only reward function), ``group_mean`` (the mean of the ok
            rewards of the completion's GRPO group, ``None`` when the group has none: neutral next to other
            reward functions under TRL's default ``sum_then_normalize``), or a constant.
    """

    name: str = "brrm_reward"
    mode: str = "scalar"
    strategy: str = "auto"
    num_generations: int | None = None
    swap: bool | None = None
    soft: bool = False
    principle: str | None = None
    principle_column: str | None = None
    reference_column: str | None = None
    max_judgments_per_step: int | None = None
    completion_prefix: str = "auto"
    failed_reward: str | float = "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "failed_reward", check_failed_reward("failed_reward", self.failed_reward))
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ConfigError(f"name must be a Python identifier (TRL's metric prefix), got {self.name!r}")
        check_choice("mode", self.mode, MODES)
        check_choice("strategy", self.strategy, GROUP_STRATEGIES)
        if self.swap is not None:
            check_bool("swap", self.swap)
        check_bool("soft", self.soft)
        if self.max_judgments_per_step is not None:
            check_int("max_judgments_per_step", self.max_judgments_per_step, low=1)
        if self.principle is not None and self.principle_column is not None:
            raise ConfigError("give principle (one for all) or principle_column (one per prompt), not both")
        if not isinstance(self.completion_prefix, str):
            raise ConfigError(f"completion_prefix must be 'auto' or a string, got {self.completion_prefix!r}")
        if self.mode == "group":
            self._check_group()
        elif self.strategy != "auto" or self.soft or self.num_generations is not None:
            raise ConfigError("strategy, soft and num_generations belong to mode='group'; mode='scalar' scores "
                              "each completion on its own")

    def _check_group(self) -> None:
        if self.num_generations is None:
            raise ConfigError("mode='group' needs num_generations (the trainer's num_generations): the grouping "
                              "of a batch is checked against it, never guessed")
        check_int("num_generations", self.num_generations, low=1)
        if self.num_generations == 1 and self.strategy != "reference":
            raise ConfigError("num_generations=1 leaves nothing to compare within a group; use strategy='reference' "
                              "with reference_column, or mode='scalar'")
        if (self.strategy == "reference") != (self.reference_column is not None):
            raise ConfigError("strategy='reference' needs reference_column, and only it takes one in group mode")
        if self.soft and self.strategy not in SOFT_STRATEGIES:
            raise ConfigError(f"soft=True needs strategy 'round_robin' or 'circular', got {self.strategy!r}")


def restore_prefill(completion: str, prefix: str = "auto") -> str:
    """The full assistant text of a completion: with ``auto``, ``<think>`` is put back before a completion that
    closes ``</think>`` without opening it (the generation prompt ended in ``<think>``); otherwise ``prefix``
    is prepended."""
    if prefix != "auto":
        return prefix + completion
    close = completion.find(THINK_CLOSE)
    if close >= 0 and THINK_OPEN not in completion[:close]:
        return THINK_OPEN + completion
    return completion


def split_completion(prompt: Prompt, completion: Prompt, prefix: str = "auto") -> tuple[ConversationLike, str]:
    """(conversation, judged response text) of one TRL row, standard or conversational.

    Raises:
        ConfigError: when a conversational completion has no final assistant message with string content.
    """
    if isinstance(completion, str):
        return prompt, restore_prefill(completion, prefix)
    messages: list[object] = list(completion) if isinstance(completion, Sequence) else []
    last = messages[-1] if messages else None
    if not (isinstance(last, Mapping) and last.get("role") == "assistant" and isinstance(last.get("content"), str)):
        raise ConfigError(f"a conversational completion must end with an assistant message with text content, "
                          f"got {str(completion)[:200]!r}")
    context = cast(ConversationLike, [*prompt, *messages[:-1]]) if isinstance(prompt, list) else prompt  # TRL's rows:
    return context, restore_prefill(str(last["content"]), prefix)  # the judge validates them (Conversation.coerce)


class BrrmReward:
    """A synchronous TRL reward function over a brrm judge (build it with :func:`trl_reward`).

    Picklable: it pickles its configuration and its judge's :class:`~brrm.JudgeSpec` (a live judge only if
    the judge itself pickles); the judge is loaded on first call in the unpickling process.

    Attributes:
        __name__: ``config.name``.
        config: the :class:`TRLRewardConfig`.
        last_stats: the statistics of the last call (what went to ``log_metric``).
    """

    def __init__(self, source: JudgeSource, config: TRLRewardConfig) -> None:
        self.source, self.config = source, config
        self.__name__ = config.name
        self.last_stats: dict[str, float] = {}

    @property
    def judge(self) -> RewardJudge:
        """The judge (loaded from its recipe on first use)."""
        return self.source.get()

    def judgments_per_group(self) -> int:
        """Model judgments each GRPO group costs (0 in scalar mode or for scalar models), before repairs."""
        strategy, swap = self._resolved()
        if self.config.mode == "scalar" or strategy == "scores":
            return 0
        assert self.config.num_generations is not None
        return judgments_per_step(self.judge, strategy, self.config.num_generations, 1, swap=swap)

    def _resolved(self) -> tuple[str, bool]:
        info = self.judge.info
        strategy = info.default_strategy if self.config.strategy == "auto" else self.config.strategy
        swap = self.config.swap if self.config.swap is not None else bool(info.composition.swap)
        return strategy, swap and bool(info.pairwise)

    def __call__(self, prompts: Sequence[Prompt], completions: Sequence[Prompt],
                 **kwargs: object) -> list[float | None]:
        """One reward per completion, ``None`` where the judge could not score it.

        Args:
            prompts: B prompts (strings, or lists of message dicts).
            completions: B completions (strings, or lists of message dicts).
            **kwargs: TRL's ``completion_ids``, ``trainer_state``, ``log_extra``, ``log_metric`` and the
                dataset's columns (each a list of B values).

        Returns:
            B floats or ``None``.

        Raises:
            ConfigError: on a grouping that does not match ``num_generations``, a missing dataset column, a step
                over ``max_judgments_per_step`` (before any model call), or a judge that returns the wrong number
                of results.
        """
        return self._compute(prompts, completions, kwargs)

    def _compute(self, prompts: Sequence[Prompt], completions: Sequence[Prompt],
                 kwargs: Mapping[str, object]) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ConfigError(f"prompts ({len(prompts)}) and completions ({len(completions)}) differ in length")
        pairs = [split_completion(p, c, self.config.completion_prefix) for p, c in zip(prompts, completions,
                                                                                     strict=True)]
        convs, texts = [c for c, _ in pairs], [t for _, t in pairs]
        start = time.perf_counter()
        with self.source.lock:
            rewards, results, extra = self._judge(convs, texts, prompts, kwargs)
        stats = {**reward_stats(rewards), **(judgment_stats(results) if results else {}), **extra,
                 "judge_seconds": time.perf_counter() - start}
        self._log(rewards, stats, kwargs)
        return fill_failed(rewards, [prompt_key(p) for p in prompts], self.config.failed_reward, constant=None)

    def _judge(self, convs: list[ConversationLike], texts: list[str], prompts: Sequence[Prompt],
               kwargs: Mapping[str, object]) -> tuple[list[ScalarReward], list[GroupResult], dict[str, float]]:
        judge, cfg = self.judge, self.config
        references = _column(kwargs, cfg.reference_column, len(texts))
        principles = _column(kwargs, cfg.principle_column, len(texts)) or cfg.principle
        if cfg.mode == "scalar":
            per = [principles] * len(texts) if isinstance(principles, str) else principles
            rewards = run(judge, [ScoreItem(c, t, per[k] if per is not None else None,
                                            references[k] if references is not None else None)
                                  for k, (c, t) in enumerate(zip(convs, texts, strict=True))])
            _check_count(rewards, len(texts))
            return rewards, [], {}
        assert cfg.num_generations is not None
        check_groups([prompt_key(p) for p in prompts], cfg.num_generations)
        if references is not None:
            check_groups(list(map(str, references)), cfg.num_generations, what=f"{cfg.reference_column} values")
        strategy, swap = self._resolved()
        if principles is not None and strategy != "scores":
            raise ConfigError("principles apply to scalar principle models; a pairwise judge's groups take none")
        outcome = rank_in_groups(judge, convs, texts, num_generations=cfg.num_generations, strategy=strategy,
                                 swap=swap, soft=cfg.soft, references=references,
                                 max_judgments=cfg.max_judgments_per_step)
        _check_count(outcome.rewards, len(texts))
        extra = {"groups_repaired": float(outcome.repaired), "repairs_skipped": float(outcome.repair_skipped),
                 "judgments_planned": float(outcome.planned)}
        return outcome.rewards, outcome.results, extra

    def _log(self, rewards: list[ScalarReward], stats: dict[str, float], kwargs: Mapping[str, object]) -> None:
        self.last_stats = stats
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")  # TRL's callbacks, when given
        if callable(log_metric):
            for key, value in stats.items():
                log_metric(f"{self.__name__}/{key}", value)
        if callable(log_extra):
            log_extra(f"{self.__name__}_status", [r.status.value for r in rewards])
        if stats.get("constant_batch"):
            warnings.warn(f"{self.__name__}: every completion of the batch got the same reward "
                          f"({stats['reward_mean']:.4g}); the reward carries no signal this step", stacklevel=3)
        if stats["failed_items"]:
            logger.info("%s: %d of %d completions unscored (None)", self.__name__, int(stats["failed_items"]),
                        len(rewards))

    def close(self) -> None:
        """Close a judge loaded from a recipe."""
        self.source.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.__name__!r}, mode={self.config.mode!r})"


async def _signature(prompts: object, completions: object, **kwargs: object) -> list[float | None]:
    """The call signature :class:`AsyncBrrmReward` presents to ``inspect`` (never called)."""
    raise NotImplementedError


class AsyncBrrmReward(BrrmReward):
    """The ``async`` variant: ``inspect.iscoroutinefunction(reward)`` is True, and awaiting a call runs the judge
    in a worker thread, so the trainer's event loop runs other async rewards meanwhile.

    ``inspect`` (and so TRL's dispatch check) treats an object as a coroutine function when it carries a
    function's attributes (``__name__``, ``__code__`` of an ``async def``, ``__defaults__``, ``__kwdefaults__``:
    CPython's ``inspect._signature_is_functionlike``, the duck typing Cython functions use). An instance with only
    an ``async __call__`` would read as synchronous there, and a caller would get an un-awaited coroutine (the
    failure of TRL PR #7213). The attributes live on the class, so pickling still carries only the state.
    """

    __code__ = _signature.__code__
    __defaults__ = None
    __kwdefaults__ = None

    async def __call__(self, prompts: Sequence[Prompt], completions: Sequence[Prompt],  # type: ignore[override]
                       **kwargs: object) -> list[float | None]:
        return await asyncio.to_thread(self._compute, prompts, completions, kwargs)


def _column(kwargs: Mapping[str, object], name: str | None, n: int) -> list[str] | None:
    if name is None:
        return None
    if name not in kwargs:
        cols = sorted(k for k in kwargs if k not in ("completion_ids", "trainer_state", "log_extra", "log_metric"))
        raise ConfigError(f"dataset column {name!r} was not passed to the reward; columns present: "
                          f"{', '.join(cols) or '(none)'}")
    raw = kwargs[name]
    values = [v for v in raw if isinstance(v, str)] if isinstance(raw, Sequence) and not isinstance(raw, str) else []
    if len(values) != n or len(values) != len(raw if isinstance(raw, Sequence) else ()):
        raise ConfigError(f"dataset column {name!r} must hold one string per completion ({n})")
    return values


def _check_count(results: Sequence[object], expected: int) -> None:
    if len(results) != expected:
        raise ConfigError(f"the judge returned {len(results)} rewards for {expected} completions; refusing to align "
                          "rewards to the wrong completions")


def trl_reward(judge: RewardJudge | JudgeSpec, *, mode: str = "scalar", strategy: str = "auto",
               num_generations: int | None = None, swap: bool | None = None, soft: bool = False,
               principle: str | None = None, principle_column: str | None = None,
               reference_column: str | None = None, max_judgments_per_step: int | None = None,
               completion_prefix: str = "auto", failed_reward: str | float = "none", asynchronous: bool = False,
               name: str | None = None) -> BrrmReward:
    """A TRL reward function (``reward_funcs=[...]``) over a brrm judge.

    Args:
        judge: a judge from :func:`brrm.load`, or a :class:`~brrm.JudgeSpec` (pickles as the recipe and
            loads the judge on first call in each process — what TRL's async GRPO worker needs).
        mode: ``scalar`` (each completion's own reward) or ``group`` (pairwise within each GRPO group).
        strategy: group strategy: ``circular`` (G judgments per group of G, 2G with swap), ``round_robin``
            (G(G−1)), ``reference`` (G, against ``reference_column``), ``knockout`` (G−1), ``scores`` (scalar
            models), ``auto`` (the judge's default).
        num_generations: the trainer's ``num_generations`` (group mode; the batch's grouping is checked).
        swap: both presentation orders per judgment (None: the judge's setting); doubles judge runs.
        soft: expected wins from P(A ≻ B) instead of hard wins (round_robin, circular).
        principle: a fixed principle (principle models).
        principle_column: a dataset column of principles (principle models).
        reference_column: dataset column with a reference response (``reference`` strategy; or scalar mode
            with a pairwise judge: P(completion ≻ reference)).
        max_judgments_per_step: a budget; a step that needs more raises ConfigError before any model call.
        completion_prefix: ``auto`` restores a prefilled ``<think>``; any other string is prepended.
        failed_reward: ``none`` (default), ``group_mean`` or a constant: the value of an unscored completion
            (see :class:`TRLRewardConfig`; use ``group_mean`` beside other reward functions).
        asynchronous: return the ``async`` variant (``inspect.iscoroutinefunction`` is True).
        name: ``__name__`` (TRL's metric prefix); default ``brrm_<mode>``.

    Returns:
        A :class:`BrrmReward` (or :class:`AsyncBrrmReward`): callable with TRL's keyword contract, returning
        ``list[float | None]``, with a ``__name__``, picklable.

    Raises:
        ConfigError: on an invalid option combination, or a budget one group alone exceeds.
    """
    config = TRLRewardConfig(name=name or f"brrm_{mode}", mode=mode, strategy=strategy,
                             num_generations=num_generations, swap=swap, soft=soft, principle=principle,
                             principle_column=principle_column, reference_column=reference_column,
                             max_judgments_per_step=max_judgments_per_step, completion_prefix=completion_prefix,
                             failed_reward=failed_reward)
    cls = AsyncBrrmReward if check_bool("asynchronous", asynchronous) else BrrmReward
    reward = cls(JudgeSource(judge), config)
    if reward.source.loaded:
        per = reward.judgments_per_group()
        logger.info("%s: %d judgments per GRPO group", reward.__name__, per)
        cap = config.max_judgments_per_step
        if cap is not None and per > cap:
            raise ConfigError(f"one group needs {per} judgments, over max_judgments_per_step={cap}")
    return reward
