"""A group-aware verl reward manager: pairwise BR-RM judgments within each GRPO group (needs verl >= 0.9).

verl's reward loop calls ``run_single`` once per sample, concurrently (``RewardLoopWorker.compute_score_batch``).
:class:`BrrmGroupRewardManager` gathers the samples of each group (verl's ``uid``; ``actor_rollout_ref.rollout.n``
per group) with a :class:`~brrm.rlhf.cohorts.CohortBuffer`, which sends each complete group as its own job
through :mod:`brrm.service` (a hosted scheduler: coalesced calls, the group's ``timeout_s`` deadline, stall
detection; with a judge that takes concurrent calls each group its own call, so a stalled group costs only its own
samples, in this round and the next, locally and with ``url``).
Configure it with ``reward.reward_manager.source=importlib``, ``reward.reward_manager.module.path=<this file>``,
``reward.reward_manager.name=BrrmGroupRewardManager`` and the brrm settings in
``reward.reward_kwargs.brrm_config`` (a :class:`~brrm.rlhf.verl.VerlRewardConfig` file or mapping, plus the group
keys ``strategy``, ``swap``, ``soft``, ``cohort_timeout_s``, ``judge_partial_groups`` and ``failed_reward``);
see ``examples/verl_group_manager.yaml``.

verl needs a number for every sample. A sample without a reward (a failed judgment, or a group that never
arrived whole: status ``incomplete_group``) gets, by default, the mean of its group's ok rewards — neutral for
its GRPO advantage (see :mod:`brrm.rlhf.fallback`); ``failed_reward: none`` is refused (verl cannot take a
missing value) and a number gives that constant. Either way ``reward_extra_info`` marks it ``ok: False`` with
its status and reason (``timeout`` for a group not judged within ``timeout_s``, ``backend_error`` when the
scheduler refused it because stalled calls fill ``max_workers``): mask such samples by ``ok``. A group still
incomplete at ``cohort_timeout_s`` is not judged unless ``judge_partial_groups: true``.

The batch is split into ``reward.num_workers`` contiguous chunks, one per worker; a group split between two
workers would never complete in either, so the manager refuses (ConfigError) a layout whose chunks are not
whole groups. An empty response gets no reward position (C19): its ``rm_scores`` row stays all zero instead of
writing at index −1.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

import torch
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from brrm.errors import ConfigError
from brrm.rlhf.cohorts import CohortBuffer
from brrm.rlhf.fallback import check_failed_reward, fill_failed
from brrm.rlhf.recipe import JudgeSource
from brrm.rlhf.verl import TIMEOUT, resolve_config
from brrm.service.scheduler import DeadlineExceeded, SchedulerError
from brrm.types import ConversationLike, check_bool, check_choice, check_float, check_int

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from transformers import AutoTokenizer, PreTrainedTokenizerBase
    from verl.protocol import DataProtoItem

GROUP_KEYS = ("strategy", "swap", "soft", "cohort_timeout_s", "max_judgments_per_step", "judge_partial_groups",
              "failed_reward")


def _cfg_get(config: object, path: str, default: object = None) -> object:
    """``config``'s value at a dotted ``path`` (verl's OmegaConf config, a dict, or attributes), else ``default``."""
    node = config
    for part in path.split("."):
        if node is None:
            return default
        get = node.get if isinstance(node, Mapping) else getattr(node, "get", None)  # OmegaConf has .get
        node = get(part) if callable(get) else getattr(node, part, None)
    return default if node is None else node


def _cfg_int(config: object, path: str, default: int) -> int:
    """``_cfg_get`` as an int.

    Raises:
        ConfigError: when the value is not a number (naming the path).
    """
    value = _cfg_get(config, path, default)
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return int(value)
    raise ConfigError(f"{path} must be an integer, got {value!r}")


class BrrmGroupRewardManager(RewardManagerBase):
    """verl reward manager: GRPO-group pairwise rewards from a brrm judge.

    Args:
        config: verl's config (reads ``actor_rollout_ref.rollout.n``, ``reward.num_workers``,
            ``data.train_batch_size`` and ``reward.reward_kwargs.brrm_config``).
        tokenizer: the policy tokenizer (decodes responses).
        compute_score: ignored (the judge is brrm's).

    Raises:
        ConfigError: on invalid brrm settings, a group size < 2, or a worker layout that splits groups.
    """

    def __init__(self, config: DictConfig, tokenizer: PreTrainedTokenizerBase,
                 compute_score: Callable[..., object] | None = None, reward_router_address: object = None,
                 reward_model_tokenizer: object = None, **kwargs: object) -> None:
        super().__init__(config, cast("AutoTokenizer", tokenizer), compute_score)  # verl's annotation: a factory
        self.policy_tokenizer = tokenizer
        raw = _cfg_get(config, "reward.reward_kwargs.brrm_config")
        items = getattr(raw, "items", None)  # a mapping or an OmegaConf node: a plain dict of it
        raw = dict(cast(Mapping[str, object], raw)) if callable(items) else raw
        group = {k: raw.pop(k) for k in GROUP_KEYS if isinstance(raw, dict) and k in raw}
        self.brrm = resolve_config(raw)
        self.group_size = _cfg_int(config, "actor_rollout_ref.rollout.n", 1)
        if self.group_size < 2:
            raise ConfigError(f"a group reward needs actor_rollout_ref.rollout.n >= 2, got {self.group_size}")
        self._check_layout(config)
        strategy = check_choice("strategy", group.get("strategy", "circular"), ("circular", "round_robin", "knockout"))
        self.source = JudgeSource(self.brrm.spec())  # a brrm serve at url: its RemoteJudge
        timeout = check_float("cohort_timeout_s", group.get("cohort_timeout_s", 600.0), low=0, low_open=True)
        budget = group.get("max_judgments_per_step")
        self.failed_reward = check_failed_reward("failed_reward", group.get("failed_reward", "group_mean"))
        if self.failed_reward == "none":
            raise ConfigError("failed_reward='none' cannot be used with verl (reward_score must be a number); use "
                              "'group_mean' (neutral for the group's advantage) or a constant")
        self.buffer = CohortBuffer(self.source.get, group_size=self.group_size, strategy=strategy,
                                   swap=check_bool("swap", group.get("swap", False)),
                                   soft=check_bool("soft", group.get("soft", False)),
                                   max_judgments=None if budget is None else check_int("max_judgments_per_step",
                                                                                       budget, low=1),
                                   cohort_timeout_s=timeout, timeout_s=self.brrm.timeout_s,
                                   concurrency=self.brrm.max_workers,
                                   judge_partial=check_bool("judge_partial_groups",
                                                            group.get("judge_partial_groups", False)))

    def _check_layout(self, config: object) -> None:
        workers = _cfg_int(config, "reward.num_workers", 1)
        if _cfg_get(config, "data.train_batch_size") is None or workers <= 1:
            return
        batch = _cfg_int(config, "data.train_batch_size", 0)
        rows = batch * self.group_size
        if rows % workers or (rows // workers) % self.group_size:
            raise ConfigError(f"reward.num_workers={workers} splits {rows} samples (data.train_batch_size={batch} × "
                              f"rollout.n={self.group_size}) into chunks that cut GRPO groups; choose num_workers so "
                              f"that train_batch_size is a multiple of it")

    def _conversation(self, item: DataProtoItem) -> ConversationLike:
        extra = item.non_tensor_batch.get("extra_info") or {}
        raw = item.non_tensor_batch.get("raw_prompt")
        if raw is not None:
            return [dict(m) for m in raw]
        if self.brrm.prompt_key in extra:
            return cast(ConversationLike, extra[self.brrm.prompt_key])  # the row's prompt: the judge validates it
        prompt_ids = item.batch["prompts"]
        mask = item.batch["attention_mask"][: prompt_ids.shape[-1]].bool()
        return str(self.policy_tokenizer.decode(prompt_ids[mask], skip_special_tokens=True))

    async def run_single(self, data: DataProto) -> dict[str, object]:
        """One sample's reward, once its group is complete (or its cohort deadline passed)."""
        item = data[-1:][0]
        response_ids = item.batch["responses"]
        length = int(item.batch["attention_mask"][-response_ids.shape[-1]:].sum())
        response = await asyncio.get_running_loop().run_in_executor(
            None, lambda: str(self.policy_tokenizer.decode(response_ids[:length], skip_special_tokens=True)))
        uid = str(item.non_tensor_batch.get("uid", ""))
        if not uid:
            raise ConfigError("the batch has no 'uid' per sample; the group reward needs verl's GRPO grouping")
        try:
            reward, members = await self.buffer.submit_group(uid, self._conversation(item), response)
        except DeadlineExceeded:
            return self._failed(TIMEOUT, f"the group was not judged within timeout_s={self.brrm.timeout_s:g} "
                                         "(its judge call stalled or ran long; other groups are not held by it)")
        except SchedulerError as exc:  # the backend is stuck (stalled calls fill max_workers) or failing
            return self._failed("backend_error", exc.message[:500])
        score = reward.reward if reward.ok else fill_failed(
            [reward, *members], [0] * (1 + len(members)), self.failed_reward, constant=self.brrm.fallback_score)[0]
        assert score is not None  # 'none' is refused at construction
        return {"reward_score": score,
                "reward_extra_info": {"score": score, "ok": reward.ok, "status": reward.status.value,
                                      "reason": reward.reason}}

    def _failed(self, status: str, reason: str) -> dict[str, object]:
        """A sample whose group got no judgment: a placeholder score (the group has no ok reward to take the mean
        of), marked ``ok: False`` with ``status`` and ``reason``."""
        score = self.brrm.fallback_score if isinstance(self.failed_reward, str) else self.failed_reward
        return {"reward_score": score,
                "reward_extra_info": {"score": score, "ok": False, "status": status, "reason": reason}}

    @classmethod
    def assemble_rm_scores(cls, data: DataProto, scores: list[float]) -> torch.Tensor:
        """``rm_scores`` with each score at its response's last token; an empty response's row stays zero (C19)."""
        prompt_length = data.batch["prompts"].size(1)
        lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=1)
        rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        rows = torch.nonzero(lengths > 0, as_tuple=True)[0]
        values = torch.tensor(scores, dtype=torch.float32)[rows]
        rm_scores[rows, lengths[rows] - 1] = values
        return rm_scores


__all__ = ["BrrmGroupRewardManager"]
