"""Typed values that flow through brrm: conversations and options in; judgments, rewards and rankings out.

One module per concept: :mod:`~brrm.types.conversation` (messages), :mod:`~brrm.types.config` (validated
options, sampling), :mod:`~brrm.types.results` (results with explicit statuses), :mod:`~brrm.types.summary`
(aggregates over ok results only) and :mod:`~brrm.types.protocols` (the :class:`RewardJudge` interface).
"""

from brrm.types.config import (
    SAMPLING_KEYS,
    SamplingConfig,
    check_bool,
    check_bool_or_auto,
    check_choice,
    check_enum,
    check_float,
    check_int,
    override_config,
)
from brrm.types.conversation import ROLES, Conversation, ConversationLike, Message
from brrm.types.protocols import (
    BACKENDS,
    KIND_TRAITS,
    KINDS,
    SHAPES,
    JudgeInfo,
    JudgeSpec,
    OrderedPairJudge,
    Progress,
    RewardJudge,
    ScalarRewardModel,
    Variable,
    set_loader,
)
from brrm.types.results import (
    GroupResult,
    PairwiseJudgment,
    Provenance,
    ScalarReward,
    Status,
    Verdict,
    check_same_length,
    parse_label,
)
from brrm.types.summary import JudgmentSummary, summarize, summarize_rewards

__all__ = [
    "BACKENDS",
    "KINDS",
    "KIND_TRAITS",
    "SAMPLING_KEYS",
    "SHAPES",
    "ROLES",
    "Conversation",
    "ConversationLike",
    "GroupResult",
    "JudgeInfo",
    "JudgeSpec",
    "JudgmentSummary",
    "Message",
    "OrderedPairJudge",
    "Progress",
    "PairwiseJudgment",
    "Provenance",
    "RewardJudge",
    "SamplingConfig",
    "ScalarReward",
    "ScalarRewardModel",
    "Status",
    "Variable",
    "Verdict",
    "check_bool",
    "check_bool_or_auto",
    "check_choice",
    "check_enum",
    "check_float",
    "check_int",
    "check_same_length",
    "override_config",
    "parse_label",
    "set_loader",
    "summarize",
    "summarize_rewards",
]
