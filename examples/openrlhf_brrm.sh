#!/usr/bin/env bash
# OpenRLHF PPO/GRPO with brrm as the remote reward model.
# 1) Serve a judge (the `brrm serve` server exposes OpenRLHF's /get_reward route):
#      brrm serve --model nvidia/Qwen3-Nemotron-8B-BRRM --backend vllm --port 8000 &
# 2) Point OpenRLHF at it:
set -euo pipefail
python -m openrlhf.cli.train_ppo_ray \
  --pretrain Qwen/Qwen3-0.6B \
  --remote_rm_url http://127.0.0.1:8000/get_reward \
  --prompt_data your/prompt-dataset --input_key prompt --apply_chat_template \
  --advantage_estimator group_norm --n_samples_per_prompt 8 \
  --micro_train_batch_size 4 --train_batch_size 64 --micro_rollout_batch_size 8 --rollout_batch_size 64 \
  --max_epochs 1 --prompt_max_len 1024 --generate_max_len 1024 --save_path ./checkpoints/brrm-grpo
