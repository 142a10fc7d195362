#!/usr/bin/env bash
# Issue 103: the recipe's arms, one after another on the CPU (nothing else running), each a full `mt train`
# of configs/multi30k.yaml with its own overrides and its own full decay, tuned on val (train.tune):
#
#   bash scripts/experiments/minutes_arms.sh ARM [ARM ...]   # e.g. base-2750 sched55-2800
#   bash scripts/experiments/minutes_arms.sh table           # every arm's figures from its card
#   bash scripts/experiments/minutes_arms.sh test ARM ...    # test2016 for the finalists, last
#
# An arm is NAME=SETTINGS below; SEED=N trains seed N (folder runs/minutes/NAME-seedN). Each training runs
# under /usr/bin/time -v, whose peak RSS lands in the folder's time.txt.
set -u
declare -A ARMS=(
  [base-2750]="train.max_steps=2750"
  [sched55-2800]="train.max_steps=2800 train.dropout_start=0.55"
  [sched55-ls2-2800]="train.max_steps=2800 train.dropout_start=0.55 train.label_smoothing=0.2"
  [t512-4500]="train.max_steps=4500 train.max_tokens=512 train.warmup_steps=1600"
  [sched55-t512-4600]="train.max_steps=4600 train.max_tokens=512 train.warmup_steps=1600 train.dropout_start=0.55"
  [sched55-4000]="train.dropout_start=0.55"
  [ls2-2750]="train.max_steps=2750 train.label_smoothing=0.2"
)
SEED=${SEED:-1}
MT=${MT:-.venv/bin/mt}
ROOT=runs/minutes
mkdir -p "$ROOT"

train_arm() {
  local run=$ROOT/$1-seed$SEED sets=()
  for s in ${ARMS[$1]:?unknown arm $1} train.seed=$SEED; do sets+=(--set "$s"); done
  [ -f "$run/done" ] && return 0
  mkdir -p "$run"
  /usr/bin/time -v -o "$ROOT/$1-seed$SEED.time.txt" "$MT" train configs/multi30k.yaml --run-dir "$run" \
    "${sets[@]}" && touch "$run/done"
}

case ${1:?ARM, table or test} in
  table) .venv/bin/python - "$ROOT" <<'PY'
import json, re, sys
from pathlib import Path
print("| arm | updates | seconds of updates | tokens/s | val loss | val BLEU (tuned) | beam, lp | peak RSS MB |")
print("|---|---:|---:|---:|---:|---:|---|---:|")
for run in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    card = json.loads((run / "card.json").read_text()) if (run / "card.json").exists() else {}
    t, tune = card.get("training", {}), card.get("tuning") or {}
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").exists() else []
    val = [r for r in rows if "val_loss" in r]
    timing = Path(f"{run}.time.txt")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", timing.read_text()) if timing.exists() else None
    best = tune.get("chosen", {}) if isinstance(tune, dict) else {}
    print(f"| {run.name} | {t.get('steps', '?')} | {t.get('train_s', '?')} | {t.get('tokens_per_s', '?')} | "
          f"{val[-1]['val_loss'] if val else '?'} | {best.get('bleu', '?')} | {best.get('beam', '?')}, "
          f"{best.get('length_penalty', '?')} | {int(rss.group(1)) // 1024 if rss else '?'} |")
PY
  ;;
  test) shift; for arm in "$@"; do "$MT" evaluate --run "$ROOT/$arm" --split test; done ;;
  *) for arm in "$@"; do train_arm "$arm" || exit 1; done ;;
esac
