#!/usr/bin/env bash
# GPU smoke check on one CUDA GPU (stopped at 8 minutes): a quick SFT base, every training method
# for a few steps on the GPU, RREDCoT and SRPO again with LoRA adapters (merged final/ checked),
# an evaluation of every policy on the GPU, with throughput.
# scripts/gpu_smoke.py does the work; its docstring lists the steps.
#
# vLLM is not installed on the lent GPU machine, so this is the vLLM-less path: TRL samples with
# HF generate (use_vllm false, MC's rollouts too) and the evaluation uses the hf backend.
#
#   bash scripts/gpu_smoke.sh                 # any extra arguments go to gpu_smoke.py
#
# Packages: the lent machine's image has CUDA torch, accelerate, transformers (5.17.0) and the
# scientific stack, but not trl, datasets or polars. Wheels put in .whl/ (ignored by git) are
# installed into /tmp/site first, e.g. here, from the repository root:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
#     multiprocess==0.70.19 polars==2.1.0 polars-runtime-32==2.1.0
# (54 MiB, almost all polars-runtime-32; transformers==5.23.0 adds 13 MiB, over what one device
# call may carry, so the image's transformers is used unless a second call brings it.)
set -euo pipefail
cd "$(dirname "$0")/.."

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# Unbuffered, without progress bars (TQDM_DISABLE is read when tqdm is imported), offline.
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

python3 - <<'EOF'
"""The versions this run uses (pyproject.toml pins the tested ones)."""
from importlib.metadata import PackageNotFoundError, version

for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "polars", "vllm"):
    try:
        print(f"{name} {version(name)}")
    except PackageNotFoundError:
        print(f"{name} not installed")
EOF

timeout 480 python3 scripts/gpu_smoke.py --device cuda --bf16 "$@"
