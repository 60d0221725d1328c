#!/usr/bin/env bash
# Set up (or reuse) the project's virtual environment in .venv and install nanolit with its dev extras.
# On a machine without an NVIDIA GPU, torch is installed first as the CPU build so pip never pulls the
# multi-GB CUDA wheel. Set NANOLIT_TORCH_INDEX (e.g. https://download.pytorch.org/whl/cpu) to take torch
# from another index. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${NANOLIT_TORCH_VERSION:-2.13.0}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
if ! "$VPY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$VPY" -m pip install -q "torch==$TORCH_VERSION"            # CUDA build from PyPI
  else
    "$VPY" -m pip install -q "torch==$TORCH_VERSION" ${NANOLIT_TORCH_INDEX:+--index-url "$NANOLIT_TORCH_INDEX"} 2>&1 \
      | grep -v "is ignored: it is neither" || true
  fi
fi
"$VPY" -m pip install -q -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
"$VPY" -c "import nanolit, torch, tiktoken, rustbpe, pyarrow; print(f'nanolit {nanolit.__version__}, torch {torch.__version__}: ready')"
