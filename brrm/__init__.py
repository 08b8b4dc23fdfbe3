"""brrm: judge LLM responses with reward models (BR-RM two-turn judge, Bradley–Terry, RLBFF).

``import brrm`` is cheap: torch, transformers, outlines and vllm are imported only by the modules that
need them.
"""

from brrm.errors import BackendUnavailable, BrrmError, ConfigError, JudgeOutputError, TemplateError
from brrm.types import (
    Conversation,
    GroupResult,
    Message,
    PairwiseJudge,
    PairwiseJudgment,
    Provenance,
    SamplingConfig,
    ScalarReward,
    ScalarRewardModel,
    Status,
    Verdict,
    summarize,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "BrrmError",
    "ConfigError",
    "Conversation",
    "GroupResult",
    "JudgeOutputError",
    "Message",
    "PairwiseJudge",
    "PairwiseJudgment",
    "Provenance",
    "SamplingConfig",
    "ScalarReward",
    "ScalarRewardModel",
    "Status",
    "TemplateError",
    "Verdict",
    "summarize",
    "__version__",
]
