#!/usr/bin/env bash
# One ablation run of issue 16 at the cpu.sh pretraining settings (depth 4, T 256, 4,096 tokens a step, 200 steps),
# on the corpus and tokenizer already built in $SRC_BASE (default ~/.cache/nanolit), in its own base dir.
# Usage: dev/ablate.sh NAME [extra train flags...]; prints the final line (val bpb, document starts) of the run.
set -euo pipefail
cd "${CODE:-$(dirname "$0")/..}"
NAME=$1; shift
SRC=${SRC_BASE:-$HOME/.cache/nanolit}
OUT=${ABLATE_DIR:-/tmp/ablate}/$NAME
mkdir -p "$OUT"
ln -sfn "$SRC/data" "$OUT/data"
ln -sfn "$SRC/tokenizer" "$OUT/tokenizer"
NANOLIT_BASE_DIR=$OUT OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ${PY:-/work/main/.venv/bin/python} -m nanolit.train --tag "$NAME" \
    --depth "${DEPTH:-4}" --sequence-len 256 --device-batch-size 16 --num-iterations "${STEPS:-200}" --eval-every 50 \
    --eval-tokens 65536 --save-every -1 --resume false --progress false "$@" > "$OUT/train.log" 2>&1
grep -h "exact-once\|done:" "$OUT/train.log" | tail -2
