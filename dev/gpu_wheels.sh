#!/usr/bin/env bash
# The wheels dev/gpu_check.sh needs on a GPU box that cannot reach a registry (one with its own PyTorch, Python 3.12):
# nanolit's pure-Python and small compiled dependencies plus torchao, into .gpu_wheels/ (git-ignored). Then carry
# .gpu_wheels with the check, e.g. the device tool: run(command="bash dev/gpu_check.sh", carry=[".gpu_wheels"]).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform any -d .gpu_wheels \
    fastcore rustbpe torchao 2>&1 | grep -v "is ignored" || true
ls .gpu_wheels
