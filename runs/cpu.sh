#!/usr/bin/env bash
# nanolit's main job, on any machine (no GPU needed): build a real English corpus from offline sources,
# train a BPE tokenizer, pretrain a small GPT for about 10 minutes on a 2-core CPU, and report validation
# bits per byte next to a unigram-byte baseline on the same val split, with a few samples.
# Artifacts go to $NANOLIT_BASE_DIR (default ~/.cache/nanolit). Knobs: DEPTH, STEPS, VOCAB, CORPUS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash runs/setup.sh
PY=.venv/bin/python
DEPTH=${DEPTH:-4}
STEPS=${STEPS:-200}
VOCAB=${VOCAB:-8192}
CORPUS=${CORPUS:-small}
RUN=${RUN:-cpu_d$DEPTH}
echo "== 1/3 corpus ($CORPUS)"
$PY -m nanolit.data --size "$CORPUS"
echo "== 2/3 tokenizer (vocab $VOCAB)"
$PY -m nanolit.tokenizer --vocab-size "$VOCAB"
echo "== 3/3 pretraining (depth $DEPTH, $STEPS steps)"
$PY -m nanolit.train --tag "$RUN" --depth "$DEPTH" --sequence-len 256 --device-batch-size 16 \
    --num-iterations "$STEPS" --eval-every 50 --eval-tokens 65536 --save-every 50 --resume "${RESUME:-false}"
