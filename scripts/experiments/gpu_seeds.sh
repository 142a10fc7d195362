#!/usr/bin/env bash
# Issue 96 on one lent GPU, inside a device lease of two calls (docs/gpu/README.md, "Issue 96"):
#
#   bash scripts/experiments/gpu_seeds.sh first SEEDS   # alone, in turn: the kit's env and `pytest -m gpu`,
#                                                       # `make train` (the default, seed 1, timed), the
#                                                       # bench; then seeds 2..SEEDS start in the background
#   bash scripts/experiments/gpu_seeds.sh wait SECONDS  # the Transformers export on CUDA beside them; wait for
#                                                       # the seeds at most SECONDS; `mt report`; pack
#   bash scripts/experiments/gpu_seeds.sh bit SEEDS     # `make bit`'s seeds 1..SEEDS side by side, each reranked
#                                                       # by its own both-directions parent (`mt tune --rerank`);
#                                                       # then `GROUP=bit-seed ... wait SECONDS` (HF_DEVICE=none
#                                                       # skips the export check)
#
# Seeds run in process sessions of their own, so they outlive the first call, on a machine kept warm by
# calling the second at once. The corpus and the binarized cache are read from gpu_carry/ (copies,
# ignored through .git/info/exclude and carried). Everything that comes back is under $OUT: the kit's
# report, the bench, the Transformers check and the seeds' report with the logs (out.tgz), the runs without
# checkpoints (runs.tgz); BUDGET (seconds, default 450) bounds the first call's bench. SMOKE="train.max_steps=2
# ..." cuts every training short and BENCH="..." replaces the bench's options, to try the plumbing on a
# CPU; PY names the Python that has torch.
set -u
mode=${1:?first, bit or wait}
arg=${2:?seeds or seconds}
export PYTHONPATH=$PWD MT_DATA_DIR=$PWD/gpu_carry/data MT_CACHE_DIR=$PWD/gpu_carry/binarized PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu-seeds-out}
STATE=/tmp/gpu-seeds
RUNS=runs/gpu
read -r -a smoke <<<"${SMOKE:-}"
sets=()
for s in "${smoke[@]}"; do sets+=(--set "$s"); done
mkdir -p "$OUT" "$STATE/logs" "$STATE/out" "$RUNS"

stamp() { echo "[$(date +%T) +${SECONDS}s] $*"; }

fake_venv() {
  # make's install step reads $(VENV)/.installed: this Python already has what mt needs
  mkdir -p "$STATE/bin" "$STATE/venv"
  printf '#!/bin/sh\nexec %s -m mt "$@"\n' "$(command -v "$PY")" >"$STATE/bin/mt"
  chmod +x "$STATE/bin/mt"
  touch "$STATE/venv/.installed"
}

first() {
  fake_venv
  stamp "env"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$STATE/out/nvidia-smi.txt"
  stamp "kit: env, gpu-tests"
  $PY scripts/gpu_report.py --out "$STATE/out/kit" --parts env gpu-tests --minutes 3
  cat "$STATE/out/kit/report.md"
  stamp "make train (seed 1)"
  start=$SECONDS
  if command -v make >/dev/null; then
    make train RUN=$RUNS/multi30k-seed1 VENV="$STATE/venv" BIN="$STATE/bin" SET="${smoke[*]}" \
      >"$STATE/logs/seed1.log" 2>&1
  else # make's two commands, as the Makefile gives them
    { "$STATE/bin/mt" train configs/multi30k.yaml --run-dir $RUNS/multi30k-seed1 "${sets[@]}" &&
      "$STATE/bin/mt" evaluate --run $RUNS/multi30k-seed1 --split test; } >"$STATE/logs/seed1.log" 2>&1
  fi
  echo "make train: rc $? in $((SECONDS - start)) s" | tee "$STATE/out/make-train.txt"
  tr '\r' '\n' <"$STATE/logs/seed1.log" | grep -v '^\s*$' | tail -5
  stamp "bench"
  # what is left of the call's BUDGET seconds, less the seeds' start: the bench is cut, never the seeds
  bench_s=$((${BUDGET:-450} - SECONDS - 20))
  if [ $bench_s -gt 45 ]; then
    # shellcheck disable=SC2086
    timeout $((bench_s + 15)) $PY scripts/bench_train.py ${BENCH:-configs/base.yaml --precisions fp32 tf32 bf16 \
      --models mt reference --repeats 1 --steps 40 --probe} --minutes "$(awk "BEGIN {print $bench_s / 60}")" \
      --out "$STATE/out/bench.json" 2>"$STATE/logs/bench.log" | grep -v '^{' | tee "$STATE/out/bench.md"
  else
    echo "no time left for the bench ($bench_s s)"
  fi
  stamp "seeds 2..$arg"
  seed_pipelines 2 "$arg" | start
}

mps() {
  if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
    # several processes' kernels at once on the GPU; kept only where a client can reach it
    if ! $PY -c "import torch; torch.ones(1).cuda().sum().item()"; then
      echo quit | nvidia-cuda-mps-control
      echo "MPS: a client failed; the pipelines share the GPU by time slices"
    else
      echo "MPS: on"
    fi
  fi
}

seed_pipelines() { # seeds $1..$2 of the default: train, then test2016 at the tuned setting
  for n in $(seq "$1" "$2"); do
    run=$RUNS/multi30k-seed$n
    echo "seed$n $STATE/bin/mt train configs/multi30k.yaml --run-dir $run --set train.seed=$n ${sets[*]}" \
      "&& $STATE/bin/mt evaluate --run $run --split test"
  done
}

bit_pipelines() { # make bit's two stages for seeds 1..$1, its tuned beam scored, then reranked by its parent
  mt=$STATE/bin/mt
  for n in $(seq 1 "$1"); do
    run=$RUNS/multi30k-bit-seed$n
    echo "bit$n $mt train configs/multi30k-bit-both.yaml --run-dir $run-both --set train.seed=$n ${sets[*]}" \
      "&& $mt train configs/multi30k-bit.yaml --run-dir $run --set train.init_from=$run-both" \
      "--set train.seed=$n ${sets[*]} && $mt evaluate --run $run --split test" \
      "&& $mt tune --run $run --rerank $run-both && $mt evaluate --run $run --split test"
  done
}

start() { # each line of stdin, "name command", in a process session of its own (2 CPU threads)
  mps
  : >"$STATE/pids"
  while read -r name command; do
    echo "$name: $command"
    setsid bash -c "OMP_NUM_THREADS=2 $command" >"$STATE/logs/$name.log" 2>&1 </dev/null &
    echo $! >>"$STATE/pids"
  done
  command -v nvidia-smi >/dev/null && setsid nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used \
    --format=csv -l 10 >"$STATE/logs/gpu.csv" 2>&1 </dev/null &
}

running() {
  local n=0
  while read -r pid; do kill -0 "$pid" 2>/dev/null && n=$((n + 1)); done <"$STATE/pids"
  echo $n
}

hf_check() {
  stamp "hf export on CUDA against mt translate"
  timeout 240 $PY scripts/hf_parity.py --run $RUNS/multi30k-seed1 --device "${HF_DEVICE:-cuda}" \
    --out "$STATE/out/hf_parity.json" >"$STATE/logs/hf.log" 2>&1
  echo "hf_parity: rc $?"
  tail -40 "$STATE/logs/hf.log"
}

wait_seeds() {
  [ "${HF_DEVICE:-cuda}" = none ] || hf_check
  end=$((SECONDS + arg))
  while [ "$(running)" -gt 0 ] && [ $SECONDS -lt $end ]; do sleep 5; done
  stamp "$(running) pipelines still running"
  for log in "$STATE"/logs/seed*.log "$STATE"/logs/bit*.log; do
    [ -f "$log" ] || continue
    echo "== $(basename "$log"): $(tr '\r' '\n' <"$log" | grep -v '^\s*$' | tail -1 | cut -c1-300)"
  done
  done_runs=$(for r in "$RUNS"/multi30k-${GROUP:-seed}?; do ls "$r"/eval-test-*.json >/dev/null 2>&1 && echo "$r"; done)
  # shellcheck disable=SC2086
  $PY -m mt report $done_runs --out "$STATE/out/seeds-report.md" && cat "$STATE/out/seeds-report.md"
}

pack() {
  tar czf "$OUT/runs.tgz" --exclude='*.pt' --exclude='hf' --exclude='ct2' "$RUNS"
  tar czf "$OUT/out.tgz" -C "$STATE" logs out
}

case $mode in
first) first ;;
bit) fake_venv && bit_pipelines "$arg" | start ;;
wait) wait_seeds ;;
*) echo "first, bit or wait" >&2 && exit 2 ;;
esac
pack
