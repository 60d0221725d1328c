#!/usr/bin/env bash
# The 8xH100 speedrun (scripts only until it has run on real GPUs): web-scale shards -> tokenizer ->
# d20-class pretraining with data parallelism on 8 GPUs -> val bits per byte and samples.
# Later stages (CORE eval, SFT, RL, report) join as their issues land.
# Knobs (env): DEPTH (20), NPROC (8 GPUs), NUM_SHARDS (240), SOURCE (climbmix | fineweb-edu), DATA_URL (instead of
# SOURCE), TAG, RESUME (auto).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
export NANOLIT_BASE_DIR=${NANOLIT_BASE_DIR:-$HOME/.cache/nanolit}
DEPTH=${DEPTH:-20}
NPROC=${NPROC:-8}
NUM_SHARDS=${NUM_SHARDS:-240}
TAG=${TAG:-d$DEPTH}
# NVIDIA's ClimbMix (reshuffled parquet shards with a `text` column; nanochat's current default), or FineWeb-Edu
SOURCE=${SOURCE:-climbmix}
if [ -n "${DATA_URL:-}" ]; then FROM=(--url "$DATA_URL"); else FROM=(--source "$SOURCE"); fi

bash runs/setup.sh                      # finds nvidia-smi and installs the CUDA build of torch
.venv/bin/pip install -q -e ".[gpu]" || echo "gpu extra (flash kernels) unavailable: attention falls back to SDPA"
PY=.venv/bin/python

echo "== data: the val shard and 8 train shards now (${FROM[*]}), the other $((NUM_SHARDS - 9)) in the background"
$PY -m nanolit.data "${FROM[@]}" --num-shards "$NUM_SHARDS" --first 8
$PY -m nanolit.data "${FROM[@]}" --num-shards "$NUM_SHARDS" > "$NANOLIT_BASE_DIR/download.log" 2>&1 &
DOWNLOAD=$!
echo "== tokenizer: vocab 65536 on up to 2B characters (while the shards download)"
$PY -m nanolit.tokenizer --vocab-size 65536 --max-chars 2000000000
wait "$DOWNLOAD" || { echo "shard download failed: see $NANOLIT_BASE_DIR/download.log"; exit 1; }
echo "== pretraining: depth $DEPTH on $NPROC GPUs, Chinchilla horizon (20 tokens/param)"
# device batch 16 (2 micro-steps of 8 x 16 x 2048 = the same 524,288-token step): the measured estimate of
# nanolit.train.train_memory_bytes (11_train) is ~53 GiB per GPU at 16 and ~85 GiB at 32, over an 80 GB H100
.venv/bin/torchrun --standalone --nproc_per_node="$NPROC" -m nanolit.train --tag "$TAG" --depth "$DEPTH" \
    --head-dim 128 --sequence-len 2048 --device-batch-size 16 --total-batch-size 524288 \
    --target-param-data-ratio 20 --eval-every 250 --eval-tokens 10485760 --save-every 1000 \
    --resume "${RESUME:-auto}" --progress false
