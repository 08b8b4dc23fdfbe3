#!/usr/bin/env bash
# OpenRLHF GRPO/PPO with brrm as the reward, two ways. Needs OpenRLHF on GPUs (not part of brrm's CI).
set -euo pipefail

# 1) A brrm server (any kind: BR-RM, Bradley-Terry, principle). --host 0.0.0.0 and an API key only when the
#    trainer runs on another machine; with BR-RM, the dataset's label column is the reference answer.
#   brrm serve --model nvidia/Qwen-3-Nemotron-32B-Reward --backend vllm --port 8000 &
#   REWARD="--reward.remote_url http://127.0.0.1:8000/get_reward"

# 2) Or the judge inside OpenRLHF's reward workers, through brrm's reward_func file:
#   export BRRM_MODEL=nvidia/Qwen-3-Nemotron-32B-Reward BRRM_OPTIONS='{"dtype": "bfloat16"}'
#   (or BRRM_URL=http://HOST:8000 to call a brrm server from the reward function)
REWARD=${REWARD:-"--reward.remote_url $(dirname "$0")/openrlhf_reward_func.py"}

python3 -m openrlhf.cli.train_ppo_ray \
  --actor.model_name_or_path Qwen/Qwen3-1.7B \
  --data.prompt_dataset your/prompt_dataset --data.input_key prompt --data.label_key reference \
  --data.apply_chat_template \
  --algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 8 \
  $REWARD
