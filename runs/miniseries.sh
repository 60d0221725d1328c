#!/usr/bin/env bash
# Scaling laws (11a_scaling): a sweep of depths at fixed compute budgets (isoFLOP curves) and at tokens-per-parameter
# horizons (the compute-optimal series), one training run at a time, every run's final val bpb, train loss, N, D, C
# and wall time appended to one results file (CSV); then the fit: the isoFLOP minima, N_opt(C), D_opt(C), the optimal
# tokens per parameter and loss vs compute, printed and saved beside the results (.fit.json, .fit.png).
# Resumable: a rerun skips the runs already in the results file (a killed run starts again from its last checkpoint).
# The arithmetic (steps = C / (FLOPs per token x tokens a step), from the model's own `estimate_flops`) is
# `python -m nanolit.scaling plan`; runs shorter than MIN_STEPS or longer than MAX_STEPS are skipped with a line.
#
#   bash runs/miniseries.sh                   # CPU: depths 1-6 at 2e11..6e12 FLOPs, small corpus, 8,192-token BPE
#                                             # (~50 min on 2 cores; one thread, one run at a time)
#   MODE=gpu bash runs/miniseries.sh          # GPUs: depths 8-20 at 1e18..1e19 FLOPs on the speedrun's shards, torchrun
#   DEPTHS="1 2 3" BUDGETS="1e12" RATIOS="" bash runs/miniseries.sh    # any subset; knobs below (env)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export NANOLIT_BASE_DIR=${NANOLIT_BASE_DIR:-$HOME/.cache/nanolit}

# ---- every knob, in one place (env overrides) ----
MODE=${MODE:-cpu}
if [ "$MODE" = cpu ]; then  # one process; the small offline corpus
  DEPTHS=${DEPTHS:-1 2 3 4 5 6}; BUDGETS=${BUDGETS-2e11 6e11 2e12 6e12}; RATIOS=${RATIOS-20}
  VOCAB=${VOCAB:-8192}; CORPUS=${CORPUS:-small}; SEQ=${SEQ:-256}; HEAD_DIM=${HEAD_DIM:-64}
  DEVICE_BATCH=${DEVICE_BATCH:-4}; TOKENS_PER_STEP=${TOKENS_PER_STEP:-1024}; NPROC=${NPROC:-1}
  MIN_STEPS=${MIN_STEPS:-10}; MAX_STEPS=${MAX_STEPS:-2000}; EVAL_TOKENS=${EVAL_TOKENS:-32768}
  FINAL_EVAL=${FINAL_EVAL:-rows}; SAVE_EVERY=${SAVE_EVERY:--1}; EXTRA=(--dp-mode naive)
elif [ "$MODE" = gpu ]; then  # one node of NPROC GPUs; the speedrun's data (runs/speedrun.sh)
  DEPTHS=${DEPTHS:-8 10 12 14 16 18 20}; BUDGETS=${BUDGETS-1e18 3e18 1e19}; RATIOS=${RATIOS-20}
  VOCAB=${VOCAB:-65536}; SOURCE=${SOURCE:-climbmix}; NUM_SHARDS=${NUM_SHARDS:-240}; MAX_CHARS=${MAX_CHARS:-2000000000}
  SEQ=${SEQ:-2048}; HEAD_DIM=${HEAD_DIM:-128}; DEVICE_BATCH=${DEVICE_BATCH:-16}; TOKENS_PER_STEP=${TOKENS_PER_STEP:-524288}
  NPROC=${NPROC:-8}; MIN_STEPS=${MIN_STEPS:-200}; MAX_STEPS=${MAX_STEPS:-30000}; EVAL_TOKENS=${EVAL_TOKENS:-10485760}
  FINAL_EVAL=${FINAL_EVAL:-exact}; SAVE_EVERY=${SAVE_EVERY:-1000}; EXTRA=(--dp-mode "${DP_MODE:-zero2}")
else
  echo "error: MODE must be cpu or gpu, got '$MODE'"; exit 2
fi
# Every depth trains on the training defaults, whose recipe values (Muon lr 0.08, 2-token S windows, Canon B, tail
# share 0.4) were measured at depth 4-6 (11_train, "One default"): the CPU series is that size; a GPU series is one
# recipe across depths 8-20, and each run's log says so in a `note:` line. The planner's FLOPs assume these windows.
# A results file is one recipe's: after a change of the defaults, start a new RESULTS file.
SEEDS=${SEEDS:-42}
RESULTS=${RESULTS:-$NANOLIT_BASE_DIR/miniseries/$MODE.csv}
BUILD=${BUILD:-1}   # 1: build the corpus and tokenizer first (kept if already built); 0: use what is there
KEEP=${KEEP:-0}     # 1: keep each run's checkpoint; 0: keep only its result, log and curves
PY=${PY:-.venv/bin/python}
if [ "$NPROC" = 1 ]; then TRAIN=("$PY" -m nanolit.train); else
  TRAIN=("$PY" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" -m nanolit.train); fi
WORK="$(dirname "$RESULTS")/$(basename "$RESULTS" .csv)"   # the plan and one log per run
mkdir -p "$WORK/logs"
[ -x "$PY" ] || bash runs/setup.sh

if [ "$BUILD" = 1 ]; then
  if [ "$MODE" = cpu ]; then
    echo "== data: the $CORPUS corpus and a $VOCAB-token tokenizer (kept if already built)"
    "$PY" -m nanolit.data --size "$CORPUS"
    "$PY" -m nanolit.tokenizer --vocab-size "$VOCAB"
  else
    echo "== data: $NUM_SHARDS $SOURCE shards and a $VOCAB-token tokenizer (kept if already built)"
    "$PY" -m nanolit.data --source "$SOURCE" --num-shards "$NUM_SHARDS"
    "$PY" -m nanolit.tokenizer --vocab-size "$VOCAB" --max-chars "$MAX_CHARS"
  fi
fi

echo "== plan: depths $DEPTHS | budgets ${BUDGETS:-none} | ratios ${RATIOS:-none} | seeds $SEEDS | $TOKENS_PER_STEP tokens a step"
"$PY" -m nanolit.scaling plan --depths "$DEPTHS" --budgets "$BUDGETS" --ratios "$RATIOS" --seeds "$SEEDS" \
  --vocab-size "$VOCAB" --sequence-len "$SEQ" --head-dim "$HEAD_DIM" --tokens-per-step "$TOKENS_PER_STEP" \
  --min-steps "$MIN_STEPS" --max-steps "$MAX_STEPS" --results "$RESULTS" --plan-file "$WORK/plan.jsonl" > "$WORK/plan.txt"
mapfile -t LINES < "$WORK/plan.txt"
n=0
for line in "${LINES[@]}"; do
  read -r action tag depth steps seed _ <<< "$line"
  if [ "$action" != run ]; then echo "$line"; continue; fi
  n=$((n + 1))
  echo "== run $n: ${line#run }"
  started=$(date +%s.%N)
  if ! "${TRAIN[@]}" --tag "$tag" --depth "$depth" --seed "$seed" --num-iterations "$steps" \
      --total-batch-size "$TOKENS_PER_STEP" --device-batch-size "$DEVICE_BATCH" --sequence-len "$SEQ" --head-dim "$HEAD_DIM" \
      --eval-every -1 --eval-tokens "$EVAL_TOKENS" --final-eval "$FINAL_EVAL" --save-every "$SAVE_EVERY" \
      --resume auto --progress false "${EXTRA[@]}" > "$WORK/logs/$tag.log" 2>&1; then
    tail -20 "$WORK/logs/$tag.log"; echo "error: run $tag failed (log: $WORK/logs/$tag.log)"; exit 1
  fi
  "$PY" -m nanolit.scaling record --tag "$tag" --plan-file "$WORK/plan.jsonl" --results "$RESULTS" --started "$started"
  if [ "$KEEP" != 1 ]; then rm -rf "$NANOLIT_BASE_DIR/checkpoints/base/$tag"/step_*; fi
done
echo "== fit: $RESULTS"
"$PY" -m nanolit.scaling fit --results "$RESULTS" --out "$WORK.fit.json" \
  || echo "no fit yet: an isoFLOP curve needs 3 depths or more, the power laws 2 curves or more"
