"""brrm: judge LLM responses with reward models (BR-RM two-turn judge, Bradley–Terry, RLBFF principle models).

The one entry point is :func:`brrm.load`, which returns a :class:`brrm.RewardJudge` for any model kind and
backend::

    import brrm
    judge = brrm.load()                       # the embedded demo model, offline
    print(judge.judge("What is 2+2?", "4", "5"))

``import brrm`` is cheap: torch, transformers, outlines and vllm are imported only by the modules that
need them (``brrm.load`` imports them when it builds a model).
"""

# first: brrm's OpenMP settings go into the environment before anything can import torch (brrm/threads.py)
from brrm.threads import CHOICE as _THREADS  # noqa: F401

# isort: split
from brrm.errors import BackendUnavailable, BrrmError, ConfigError, TemplateError
from brrm.load import load
from brrm.types import (
    KINDS,
    Conversation,
    GroupResult,
    JudgeInfo,
    JudgeSpec,
    Message,
    PairwiseJudgment,
    Provenance,
    RewardJudge,
    SamplingConfig,
    ScalarReward,
    Status,
    Verdict,
    summarize,
    summarize_rewards,
)

__version__ = "0.2.0"

__all__ = [
    "KINDS",
    "BackendUnavailable",
    "BrrmError",
    "ConfigError",
    "Conversation",
    "GroupResult",
    "JudgeInfo",
    "JudgeSpec",
    "Message",
    "PairwiseJudgment",
    "Provenance",
    "RewardJudge",
    "SamplingConfig",
    "ScalarReward",
    "Status",
    "TemplateError",
    "Verdict",
    "load",
    "summarize",
    "summarize_rewards",
    "__version__",
]
