#!/usr/bin/env bash
# Run every CUDA mechanism experiment at a size that fits in about 8 minutes on
# one H200, and save the results plus the GPU fingerprint under
# benchmarks/results/gpu-check-<UTC stamp>/ (or the directory given as $1).
#
#   make setup-torch            # a CUDA build of torch must be in .venv on the GPU box
#   benchmarks/gpu_check.sh     # exits 3 when torch sees no CUDA device
#
# Each experiment has its own time limit (seconds) so one slow compile cannot
# eat the others' time; a timed-out experiment is listed in status.txt and the
# rest still run. PROPOSAL_MODEL names the target checkpoint for the proposal
# experiment (a directory, or a name harness.models can prepare).
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
OUT=${1:-benchmarks/results/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
PROPOSAL_MODEL=${PROPOSAL_MODEL:-smollm2-135m}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: torch in $PY sees no CUDA device; nothing to measure" >&2
  exit 3
fi
mkdir -p "$OUT"
"$PY" -m harness fingerprint --json > "$OUT/fingerprint.json"
nvidia-smi -q > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi unavailable" > "$OUT/nvidia-smi.txt"
: > "$OUT/status.txt"

run() {  # run LIMIT_S LABEL NAME ARGS...
  local limit=$1 label=$2 name=$3
  shift 3
  local start=$SECONDS rc
  timeout --signal=INT "$limit" "$PY" -m harness cuda "$name" --device cuda --out "$OUT/runs" "$@" \
    > "$OUT/$label.txt" 2>&1
  rc=$?
  echo "$label rc=$rc seconds=$((SECONDS - start)) limit=$limit" | tee -a "$OUT/status.txt"
  tail -n 25 "$OUT/$label.txt"
}

run 50 attention attention --batch 4 --heads 16 --seq-len 4096 --head-dim 128 --iters 50 --warmup 10
run 90 dispatch dispatch --batch 8 --seq-len 1024 --iters 50 --warmup 10 --modes eager,default,reduce-overhead
# max-autotune compiles for minutes: on its own, so a timeout cannot take the other modes with it.
run 120 dispatch-autotune dispatch --batch 8 --seq-len 1024 --iters 50 --warmup 10 --modes eager,max-autotune
# The largest cells run out of memory on purpose: the boundary is part of the result.
run 80 budget budget --batches 1,8,32,128,512 --contexts 512,2048,8192 --iters 20 --warmup 5
run 30 budget-capped budget --batches 1,8,32,128 --contexts 512,2048 --iters 10 --warmup 3 --memory-cap-bytes 8000000000
run 80 proposal proposal --model "$PROPOSAL_MODEL" --prompts 4 --max-new-tokens 64 --iters 3 --warmup 1
run 30 overlap overlap --chunks 16 --rows 8192 --hidden 8192 --dtype bfloat16 --iters 20 --warmup 5

echo "gpu_check: results under $OUT"
! grep -qv ' rc=0 ' "$OUT/status.txt"
