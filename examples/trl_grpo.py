"""GRPO with a brrm reward in TRL: BR-RM pairwise rewards within each GRPO group (or a Bradley–Terry reward).

On CPU in about a minute, with a tiny random Qwen3 policy and a tiny random BR-RM judge built on the spot::

    python examples/trl_grpo.py --tiny

The same file with real checkpoints (GPUs; a vLLM judge backend is faster for BR-RM)::

    python examples/trl_grpo.py --policy Qwen/Qwen3-0.6B --judge nvidia/Qwen3-Nemotron-8B-BRRM \
        --judge-backend vllm --strategy circular --swap --num-generations 8 --max-steps 200 \
        --max-completion-length 1024 --prompts prompts.jsonl

``--prompts`` is a JSONL file with a ``prompt`` field per line (a string, or a list of chat messages). Each step
prints the reward statistics TRL logged: the mean and std of the brrm reward, unscored completions, the judge's
verdicts and position inconsistency, and the judge's seconds per step.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

DEMO_PROMPTS = ["What is 2+2?", "Name a colour of the sky.", "Say hello politely.", "Count to three.",
                "What is the capital of France?", "Give one reason to exercise.", "Spell 'cat'.", "What is 10/2?"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny random policy and judge on CPU (a smoke run)")
    p.add_argument("--policy", help="policy checkpoint (hub id or local dir)")
    p.add_argument("--judge", help="judge checkpoint: a BR-RM, Bradley–Terry or principle model")
    p.add_argument("--judge-kind", default="auto", choices=["auto", "brrm", "bt", "principle"])
    p.add_argument("--judge-backend", default="transformers", choices=["transformers", "vllm", "openai"])
    p.add_argument("--mode", default=None, choices=["scalar", "group"], help="default: group for BR-RM, else scalar")
    p.add_argument("--strategy", default="circular",
                   choices=["circular", "round_robin", "knockout", "reference", "scores", "auto"])
    p.add_argument("--swap", action="store_true", help="judge both presentation orders (2x judge runs)")
    p.add_argument("--soft", action="store_true", help="expected wins from P(A>B) instead of hard wins")
    p.add_argument("--async-reward", action="store_true", help="use the async reward variant")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=3)
    p.add_argument("--max-completion-length", type=int, default=8)
    p.add_argument("--max-judgments-per-step", type=int, default=None)
    p.add_argument("--prompts", help="JSONL file with a 'prompt' field per line (default: 8 demo prompts)")
    p.add_argument("--output-dir", default=None)
    args = p.parse_args(argv)
    if not args.tiny and not (args.policy and args.judge):
        p.error("give --tiny, or both --policy and --judge")
    return args


def build_tiny(root: Path) -> tuple[str, str]:
    """A tiny random Qwen3 policy and judge (brrm.testing), saved under ``root``."""
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(root / "policy", seed=1)), str(save_tiny_qwen3(root / "judge"))


def load_prompts(path: str | None) -> list[object]:
    if path is None:
        return [[{"role": "user", "content": q}] for q in DEMO_PROMPTS]
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["prompt"] for r in rows]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import brrm
    from brrm.rlhf import trl_reward

    work = Path(args.output_dir or tempfile.mkdtemp(prefix="brrm_grpo_"))
    policy, judge_path = build_tiny(work) if args.tiny else (args.policy, args.judge)
    options = dict(temperature=0, max_new_tokens=450, block_token_cap=8) if args.tiny else {}
    judge = brrm.load(judge_path, kind="brrm" if args.tiny else args.judge_kind, backend=args.judge_backend,
                      **options)
    mode = args.mode or ("group" if judge.info.kind == "brrm" else "scalar")
    group = mode == "group"
    reward = trl_reward(judge, mode=mode, strategy=args.strategy if group else "auto",
                        num_generations=args.num_generations if group else None, swap=args.swap if group else None,
                        soft=args.soft, max_judgments_per_step=args.max_judgments_per_step,
                        asynchronous=args.async_reward, name="brrm")
    print(f"judge {judge.info.model} ({judge.info.kind}, {judge.info.backend}); mode={mode}; "
          f"{reward.judgments_per_group()} judgments per GRPO group of {args.num_generations}")
    train(args, policy, reward, work)


def train(args: argparse.Namespace, policy: str, reward: object, work: Path) -> None:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class PrintRewards(TrainerCallback):
        def on_log(self, _args, state, _control, logs=None, **_kw):
            if logs and "rewards/brrm/mean" in logs:
                get = logs.get
                print(f"step {state.global_step}: reward mean {get('rewards/brrm/mean'):.4f} "
                      f"std {get('rewards/brrm/std'):.4f} | unscored {get('brrm/failed_items', 0):.0f}/"
                      f"{get('brrm/items', 0):.0f} | judgments {get('brrm/judgments', 0):.0f} "
                      f"(A {get('brrm/verdict/A', 0):.0f}, B {get('brrm/verdict/B', 0):.0f}, "
                      f"tie {get('brrm/verdict/tie', 0):.0f}; position-inconsistent "
                      f"{get('brrm/position_inconsistency') or 0:.2f}) | judge {get('brrm/judge_seconds', 0):.2f}s")

    config = GRPOConfig(output_dir=str(work / "grpo"), use_cpu=args.tiny, report_to=[],
                        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                        max_steps=args.max_steps, per_device_train_batch_size=args.num_generations * 2,
                        logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True)
    data = Dataset.from_list([{"prompt": p} for p in load_prompts(args.prompts)])
    trainer = GRPOTrainer(model=policy, reward_funcs=[reward], args=config, train_dataset=data,
                          callbacks=[PrintRewards()])
    trainer.train()
    print(f"done: {trainer.state.global_step} optimizer steps")


if __name__ == "__main__":
    main()
