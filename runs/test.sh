#!/usr/bin/env bash
# Run every test: each notebook in nbs/ (through nbdev's test runner, one pytest item per notebook, skipping cells
# flagged slow/gpu/dist) and the pytest suite in tests/. Extra arguments go to pytest (e.g. -k tokenizer).
# NANOLIT_TEST_FLAGS="slow dist" also runs cells with those flags.
set -euo pipefail
cd "$(dirname "$0")/.."
bash runs/setup.sh >/dev/null
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
if [ -n "${NANOLIT_TEST_BASE_DIR:-}" ]; then export NANOLIT_BASE_DIR=$NANOLIT_TEST_BASE_DIR
else export NANOLIT_BASE_DIR=$(mktemp -d); trap 'rm -rf "$NANOLIT_BASE_DIR"' EXIT; fi   # a throwaway dir, removed after
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
