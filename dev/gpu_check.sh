#!/usr/bin/env bash
# Issue 17's GPU check on one CUDA GPU, in a few minutes: attention fast paths against SDPA, 20 compiled bf16 steps at
# depth 12 and 20 (tok/s, MFU, peak memory against the plan), one FP8 step, and (issue 16) the depth-12 step with
# Canon B against the plain one; one markdown table (also $OUT/gpu_check.md, written row by row).
# Runs with the machine's own PyTorch (PY, default python3) on this checkout (no install: PYTHONPATH), so it works on
# a GPU box that cannot reach a package registry; `bash runs/setup.sh` first where one is reachable.
# Usage: bash dev/gpu_check.sh [--steps 20] [--depths 12,20] [--rows 16] [--canon B]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
[ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && PY=.venv/bin/python
if [ -d .gpu_wheels ]; then  # carried wheels (dev/gpu_wheels.sh) for what the machine's Python lacks
  "$PY" -m pip install -q --no-index --no-deps --find-links .gpu_wheels --target .gpu_site fastcore rustbpe torchao \
    || echo "could not install the carried wheels: the check runs without them"
  export PYTHONPATH=$PWD/.gpu_site${PYTHONPATH:+:$PYTHONPATH}
fi
"$PY" -c "import torch" 2>/dev/null || { echo "error: $PY has no PyTorch: set PY to a Python with a CUDA build of it"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 timeout "${GPU_CHECK_TIMEOUT:-540}" "$PY" dev/gpu_check.py "$@"
