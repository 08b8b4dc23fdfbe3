#!/usr/bin/env bash
# OpenRLHF GRPO with brrm as the reward, two ways (flags of OpenRLHF 0.11; older releases: --remote_rm_url,
# --pretrain, --label_key, --apply_chat_template). Needs OpenRLHF on GPUs; not part of brrm's CI.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

# 1) A brrm server answering OpenRLHF's /get_reward (any kind: Bradley-Terry, principle, BR-RM):
#      brrm serve --model nvidia/Qwen-3-Nemotron-32B-Reward --backend vllm --port 8000 &
#    then REWARD_URL=http://127.0.0.1:8000/get_reward (add --host/--api-key only for another machine).
#    A BR-RM server scores P(response beats the label): give --data.label_key a reference-answer column.
# 2) Or the judge inside OpenRLHF's reward workers, through brrm's reward_func file (default below):
#      export BRRM_MODEL=nvidia/Qwen-3-Nemotron-32B-Reward BRRM_OPTIONS='{"dtype": "bfloat16"}'
#    (or BRRM_URL=http://HOST:8000 to have the reward function call a brrm server).
REWARD_URL=${REWARD_URL:-"$HERE/openrlhf_reward_func.py"}

python3 -m openrlhf.cli.train_ppo_ray \
  --actor.model_name_or_path Qwen/Qwen3-0.6B \
  --reward.remote_url "$REWARD_URL" \
  --data.prompt_dataset your/prompt-dataset --data.input_key prompt --data.apply_chat_template \
  --algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 8
