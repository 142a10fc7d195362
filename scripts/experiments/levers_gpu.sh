#!/usr/bin/env bash
# Issue 67's pipelines side by side on one lent GPU, inside a device lease of two calls
# (docs/multi30k-levers/README.md, "On a GPU"): each pipeline runs in a process session of its own, so
# it outlives the call that started it, and the next call (on the machine still warm) waits for it.
#
#   bash scripts/experiments/levers_gpu.sh start SECONDS   # start every pipeline; pack after SECONDS
#   bash scripts/experiments/levers_gpu.sh wait SECONDS    # wait for them, at most SECONDS; pack again
#
# The corpus is read from gpu-data/ (a copy of $MT_DATA_DIR, ignored through .git/info/exclude and
# carried). Every run goes to runs/gpu/; packing writes them without checkpoints to $OUT/runs.tgz, the
# logs to $OUT/logs.tgz, and prints levers.py --report. SMOKE="train.max_steps=2 ..." cuts every run
# short, to try the plumbing on a CPU; PY names the Python that has torch.
set -u
mode=${1:?start or wait}
seconds=${2:?seconds}
export MT_DATA_DIR=$PWD/gpu-data MT_CACHE_DIR=$PWD/gpu-data/binarized PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=2 # five trainings share the host's cores
PY=${PY:-python3}
OUT=${OUT:-/tmp/levers-gpu-out}
STATE=/tmp/levers-gpu
RUNS=runs/gpu
read -r -a smoke <<<"${SMOKE:-}"
sets=()
for s in "${smoke[@]}"; do sets+=(--set "$s"); done
scale=()
[ -n "${SMOKE:-}" ] && scale=(--scale 0.0005)

pipelines() {
  # the present recipe, for the paired test the issue asks for
  echo "recipe" "$PY -m mt train configs/multi30k-best.yaml --run-dir $RUNS/r67-recipe ${sets[*]}" \
    "&& $PY -m mt evaluate --run $RUNS/r67-recipe --split test"
  # the recipe as shipped (make bit), seed 3; mt on the PATH is this Python's
  echo "bit-s3" "make bit VENV=$STATE/venv BIN=$STATE/bin BIT=$RUNS/r67-bit-s3" \
    "SET='train.seed=3 ${smoke[*]}'"
  for lever_seed in target:3 vocab8k:1 vocab6k:1; do
    lever=${lever_seed%:*} seed=${lever_seed#*:}
    echo "$lever-s$seed" "$PY scripts/experiments/levers.py $lever --seed $seed --runs $RUNS --test" \
      "${scale[*]} ${sets[*]}"
  done
}

start() {
  mkdir -p "$STATE/bin" "$STATE/venv" "$STATE/logs" "$RUNS"
  printf '#!/bin/sh\nexec %s -m mt "$@"\n' "$(command -v "$PY")" >"$STATE/bin/mt"
  chmod +x "$STATE/bin/mt"
  touch "$STATE/venv/.installed" # make's install step: this Python already has what mt needs
  : >"$STATE/pids"
  while read -r name command; do
    echo "$name: $command"
    setsid bash -c "$command" >"$STATE/logs/$name.log" 2>&1 </dev/null &
    echo $! >>"$STATE/pids"
  done < <(pipelines)
  if command -v nvidia-smi >/dev/null; then
    setsid nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 20 \
      >"$STATE/logs/gpu.csv" 2>&1 </dev/null &
  fi
}

running() {
  local n=0
  while read -r pid; do kill -0 "$pid" 2>/dev/null && n=$((n + 1)); done <"$STATE/pids"
  echo $n
}

pack() {
  mkdir -p "$OUT"
  tar czf "$OUT/runs.tgz" --exclude='*.pt' "$RUNS"
  tar czf "$OUT/logs.tgz" -C "$STATE" logs
  for log in "$STATE"/logs/*.log; do
    echo "== $(basename "$log"): $(tr '\r' '\n' <"$log" | grep -v '^\s*$' | tail -1)"
  done
  $PY scripts/experiments/levers.py --report --runs $RUNS
}

[ "$mode" = start ] && start
end=$((SECONDS + seconds))
while [ "$(running)" -gt 0 ] && [ $SECONDS -lt $end ]; do sleep 5; done
echo "after ${SECONDS}s: $(running) pipelines still running"
pack
