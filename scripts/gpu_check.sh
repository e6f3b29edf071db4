#!/usr/bin/env bash
# One GPU check in one call (stopped at 8 minutes): the SDPA kernel at the paper's mask shapes,
# the paper-shape credit and training peaks at 25k tokens against the memory planner, and two
# steps of every method on the configs' path (float32 masters under bf16 autocast, gradient
# checkpointing, a real-size vocabulary, a SIGTERM checkpoint and the resume), as one table.
# scripts/gpu_check.py does the work; docs/cluster_and_gpu/gpu_check.md says what each row checks.
#
#   bash scripts/gpu_check.sh                        # CUDA; extra arguments go to gpu_check.py
#   bash scripts/gpu_check.sh --table $OUT/table.md  # also write the table
#   python scripts/gpu_check.py --device cpu --tiny  # the same code on the CPU (GPU rows skipped)
#
# Packages: it runs on whatever Python environment it finds (the pinned GPU env, or a GPU image's
# own packages, e.g. an older transformers: the checkpointing keyword is picked to match, and the
# packages row names what is missing). The lent GPU machine's image has CUDA torch, accelerate,
# peft, transformers (5.17.0) and the scientific stack, but not trl, datasets or polars; wheels
# put in .whl/ (ignored by git) are installed into /tmp/site first, e.g. here, from the
# repository root:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
#     multiprocess==0.70.19 polars==2.1.0 polars-runtime-32==2.1.0
# (54 MiB, almost all polars-runtime-32.) vLLM is not there: the training rows sample with HF
# generate (use_vllm false).
set -euo pipefail
cd "$(dirname "$0")/.."

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# Unbuffered, without progress bars (TQDM_DISABLE is read when tqdm is imported), offline; the
# allocator the train_policy step sets on GPUs (rredcot.steps.train_policy).
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"

exec timeout 480 python3 scripts/gpu_check.py --device cuda --budget-s 420 "$@"
