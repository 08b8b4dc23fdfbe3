"""brrm as OpenRLHF's reward: pass this file as ``--reward.remote_url`` (older releases: ``--remote_rm_url``).

OpenRLHF imports this file and calls ``reward_func(queries, prompts, labels)`` for each rollout (see
``examples/openrlhf_brrm.sh``). The judge is configured by environment variables (or ``BRRM_CONFIG=file.json``):

* remote — ``BRRM_URL=http://127.0.0.1:8000`` (a running ``brrm serve``) [``BRRM_API_KEY``, ``BRRM_TIMEOUT_S``];
* local — ``BRRM_MODEL=nvidia/Qwen-3-Nemotron-32B-Reward`` [``BRRM_KIND``, ``BRRM_BACKEND``,
  ``BRRM_OPTIONS='{"dtype": "bfloat16"}'``, ``BRRM_FAILED_REWARD``, ``BRRM_GET_REWARD_MODE``, ``BRRM_MAX_BATCH``].

A pairwise judge (BR-RM) scores each response as P(response beats the label), so point ``--data.label_key`` at a
reference-answer column; a Bradley–Terry or principle model needs no label. An item that could not be judged gets
the failed-reward value (default 0.0) and ``extra_logs["brrm_failed"] == 1.0``; ``statuses``/``reasons`` say why.
Details: ``brrm/serve/reward_func.py``.
"""

from brrm.serve.reward_func import reward_func

__all__ = ["reward_func"]
