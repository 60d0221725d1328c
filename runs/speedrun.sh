#!/usr/bin/env bash
# The speedrun: what runs/cpu.sh runs, at node scale (8 GPUs): web-scale shards (downloaded in the background while the
# tokenizer trains) -> tokenizer -> base pretraining -> CORE and bits per byte -> SFT -> RL -> chat eval -> the report.
# It plans before it runs: `nanolit.train --plan` prints parameters, horizon, batch, memory per rank (a traced step)
# and predicted hours, and stops the script if the config does not fit the GPU. Every stage is resumable: running the
# script again keeps the shards and tokenizer, continues each training stage from its newest checkpoint (--resume
# auto; a finished stage returns at once) and re-runs only the evals.
#
#   bash runs/speedrun.sh                       # 8 x H100, depth 20
#   DEPTH=24 bash runs/speedrun.sh              # 74.3 GiB a GPU at 16 rows under zero2 (DEVICE_BATCH=8: 47.5)
#   PLAN_ONLY=1 bash runs/speedrun.sh           # the plan alone: any machine, no GPU, data or tokenizer
#   SMOKE=1 DATA_URL=http://127.0.0.1:8000/ bash runs/speedrun.sh
#                                               # this same script at toy scale on a CPU: 2 gloo ranks through
#                                               # torchrun, the shards from DATA_URL (tests/test_speedrun.py serves
#                                               # them on loopback); a few minutes
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
export NANOLIT_BASE_DIR=${NANOLIT_BASE_DIR:-$HOME/.cache/nanolit}

# ---- every knob, in one place (env overrides) ----
SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then  # toy scale, CPU, 2 ranks
  DEPTH=${DEPTH:-2}; NPROC=${NPROC:-2}; GPU=${GPU:-cpu}; NUM_SHARDS=${NUM_SHARDS:-3}; FIRST=${FIRST:-1}
  VOCAB=${VOCAB:-512}; MAX_CHARS=${MAX_CHARS:-2000000}; HEAD_DIM=${HEAD_DIM:-32}; SEQ=${SEQ:-256}
  DEVICE_BATCH=${DEVICE_BATCH:-2}; TOTAL_BATCH=${TOTAL_BATCH:-1024}; STEPS=${STEPS:-12}; EVAL_EVERY=${EVAL_EVERY:-6}
  EVAL_TOKENS=${EVAL_TOKENS:-4096}; SAVE_EVERY=${SAVE_EVERY:-6}; CORE_ITEMS=${CORE_ITEMS:-4}
  SFT_BATCH=${SFT_BATCH:-2}; SFT_STEPS=${SFT_STEPS:-4}; SFT_SOURCES=${SFT_SOURCES:-identity,gsm8k}; SFT_WEIGHTS=${SFT_WEIGHTS:-1,1}
  RL_STEPS=${RL_STEPS:-2}; RL_PROMPTS=${RL_PROMPTS:-2}; RL_SAMPLES=${RL_SAMPLES:-2}; RL_NEW_TOKENS=${RL_NEW_TOKENS:-16}; RL_EVAL_ITEMS=${RL_EVAL_ITEMS:-8}
  CHAT_ITEMS=${CHAT_ITEMS:-4}; BIGBENCH=${BIGBENCH:-false}
else  # 8 x H100 (80 GB)
  DEPTH=${DEPTH:-20}; NPROC=${NPROC:-8}; GPU=${GPU:-h100}; NUM_SHARDS=${NUM_SHARDS:-240}; FIRST=${FIRST:-8}
  VOCAB=${VOCAB:-65536}; MAX_CHARS=${MAX_CHARS:-2000000000}; HEAD_DIM=${HEAD_DIM:-128}; SEQ=${SEQ:-2048}
  DEVICE_BATCH=${DEVICE_BATCH:-16}; TOTAL_BATCH=${TOTAL_BATCH:-524288}; STEPS=${STEPS:--1}; EVAL_EVERY=${EVAL_EVERY:-250}
  EVAL_TOKENS=${EVAL_TOKENS:-10485760}; SAVE_EVERY=${SAVE_EVERY:-1000}; CORE_ITEMS=${CORE_ITEMS:-500}
  SFT_BATCH=${SFT_BATCH:-16}; SFT_STEPS=${SFT_STEPS:-1000}
  SFT_SOURCES=${SFT_SOURCES:-chitchat,chatterbot,identity,mmlu,gsm8k,spellingbee}; SFT_WEIGHTS=${SFT_WEIGHTS:-1,1,4,1,1,1}
  RL_STEPS=${RL_STEPS:-200}; RL_PROMPTS=${RL_PROMPTS:-16}; RL_SAMPLES=${RL_SAMPLES:-16}; RL_NEW_TOKENS=${RL_NEW_TOKENS:-256}; RL_EVAL_ITEMS=${RL_EVAL_ITEMS:-400}
  CHAT_ITEMS=${CHAT_ITEMS:-500}; BIGBENCH=${BIGBENCH:-true}
fi
TAG=${TAG:-d$DEPTH}
DP_MODE=${DP_MODE:-zero2}  # ZeRO-2 (06b): reduce-scatters overlapped with backward, sharded Muon and state (ddp: torch DDP)
RATIO=${RATIO:-20}  # tokens per scaling parameter when STEPS is -1 (Chinchilla)
SOURCE=${SOURCE:-climbmix}  # NVIDIA's ClimbMix (nanochat's current default) or fineweb-edu; DATA_URL overrides
# The recipe at this size. The training defaults (Muon lr 0.08, 2-token S windows, Canon B, tail share 0.4) were
# measured at depth 4-6 on 0.8 M tokens (11_train, "One default"); nothing measured them at depth 20. So this script
# keeps nanochat's Muon lr tuned at depth 20 with 0.5 M-token steps, S windows of a quarter of the row (0), the tail
# share before Canon, and no Canon layers until dev/gpu_check.sh has measured their GPU step cost.
MATRIX_LR=${MATRIX_LR:-0.02}; SHORT_WINDOW=${SHORT_WINDOW:-0}; CANON=${CANON-}; TAIL_SHARE=${TAIL_SHARE:-0.3}
TRAIN_ARGS=(--tag "$TAG" --depth "$DEPTH" --head-dim "$HEAD_DIM" --sequence-len "$SEQ" --device-batch-size "$DEVICE_BATCH"
  --total-batch-size "$TOTAL_BATCH" --num-iterations "$STEPS" --target-param-data-ratio "$RATIO"
  --matrix-lr "$MATRIX_LR" --short-window "$SHORT_WINDOW" --canon "$CANON" --tail-share "$TAIL_SHARE"
  --eval-every "$EVAL_EVERY" --eval-tokens "$EVAL_TOKENS" --save-every "$SAVE_EVERY" --dp-mode "$DP_MODE" --progress false)
PY=${PY:-.venv/bin/python}
RUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node="$NPROC")  # torchrun

for knob in NPROC DEPTH DEVICE_BATCH; do  # a typo here would otherwise surface as a torchrun or argparse trace
  [[ "${!knob}" =~ ^[1-9][0-9]*$ ]] || { echo "error: $knob must be a positive integer, got '${!knob}'"; exit 2; }
done
echo "== 0/8 plan: depth $DEPTH on $NPROC x $GPU"
[ -x "$PY" ] || bash runs/setup.sh
"$PY" -m nanolit.train "${TRAIN_ARGS[@]}" --plan true --gpu "$GPU" --world-size "$NPROC" --vocab-size "$VOCAB"
[ "${PLAN_ONLY:-0}" = 1 ] && exit 0

bash runs/setup.sh                      # finds nvidia-smi and installs the CUDA build of torch
if [ "$SMOKE" != 1 ]; then
  .venv/bin/pip install -q -e ".[gpu]" || echo "gpu extra (flash kernels) unavailable: attention falls back to SDPA"
fi

if [ -n "${DATA_URL:-}" ]; then FROM=(--url "$DATA_URL"); else FROM=(--source "$SOURCE"); fi
echo "== 1/8 data: the val shard and $FIRST train shards now (${FROM[*]}), the rest in the background"
"$PY" -m nanolit.data "${FROM[@]}" --num-shards "$NUM_SHARDS" --first "$FIRST"
"$PY" -m nanolit.data "${FROM[@]}" --num-shards "$NUM_SHARDS" > "$NANOLIT_BASE_DIR/download.log" 2>&1 &
DOWNLOAD=$!
echo "== 2/8 tokenizer: vocab $VOCAB on up to $MAX_CHARS characters (while the shards download)"
"$PY" -m nanolit.tokenizer --vocab-size "$VOCAB" --max-chars "$MAX_CHARS"
wait "$DOWNLOAD" || { echo "shard download failed: see $NANOLIT_BASE_DIR/download.log"; exit 1; }
"$PY" -m nanolit.evaluate data --bigbench "$BIGBENCH"   # CORE's and the chat evals' items (kept if already built)

echo "== 3/8 pretraining: depth $DEPTH on $NPROC ranks"
"${RUN[@]}" -m nanolit.train "${TRAIN_ARGS[@]}" --resume auto
echo "== 4/8 base eval: bits per byte and CORE (up to $CORE_ITEMS items a task)"
"${RUN[@]}" -m nanolit.evaluate base --tag "$TAG" --max-per-task "$CORE_ITEMS"
echo "== 5/8 SFT ($SFT_STEPS steps on $SFT_SOURCES)"
"${RUN[@]}" -m nanolit.sft --tag "$TAG" --source-tag "$TAG" --device-batch-size "$SFT_BATCH" \
    --num-iterations "$SFT_STEPS" --sources "$SFT_SOURCES" --weights "$SFT_WEIGHTS" --chat-eval-items "$CHAT_ITEMS" \
    --resume auto --progress false
echo "== 6/8 RL on GSM8K ($RL_STEPS steps)"
"${RUN[@]}" -m nanolit.rl --tag "$TAG" --source-tag "$TAG" --num-iterations "$RL_STEPS" \
    --prompts-per-step "$RL_PROMPTS" --num-samples "$RL_SAMPLES" --max-new-tokens "$RL_NEW_TOKENS" \
    --eval-items "$RL_EVAL_ITEMS" --chat-eval-items "$CHAT_ITEMS" --resume auto --progress false
echo "== 7/8 chat eval (up to $CHAT_ITEMS items a task)"
"${RUN[@]}" -m nanolit.evaluate chat --stage rl --tag "$TAG" --tasks mmlu,arc_easy,arc_challenge,gsm8k,spellingbee \
    --max-per-task "$CHAT_ITEMS"
echo "== 8/8 the report, and a one-shot answer"
ANSWER=$(mktemp)
PROMPT="What is your name, and what is 12 times 7?"
{ echo "> $PROMPT"; "$PY" -m nanolit.chat --stage rl --tag "$TAG" --temperature 0 -p "$PROMPT"; } | tee "$ANSWER"
"$PY" -m nanolit.rl report --tag "$TAG" --base-tag "$TAG" --answer "$ANSWER"
rm -f "$ANSWER"
echo "speedrun done: the report is $NANOLIT_BASE_DIR/report/$TAG.md"
