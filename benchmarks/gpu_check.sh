#!/usr/bin/env bash
# Run every CUDA mechanism experiment at a size that fits in about 8 minutes on one
# H200, plus the NVML fingerprint, and save them under
# benchmarks/results/gpu-check-<UTC stamp>/ (or the directory given as $1).
#
#   benchmarks/gpu_check.sh [OUT]      # in a checkout, or in the bundle `make gpu-bundle` makes
#   DEVICE=cpu benchmarks/gpu_check.sh # rehearsal: every experiment's CPU fallback, CPU-sized
#
# It needs a Python whose torch works (a CUDA build on the GPU machine) and nothing from
# the network. The interpreter is, in order: $PY, .venv/bin/python, python3, python — the
# first that imports torch. Packages the harness needs beyond torch come from that Python,
# or else from the bundle's hash-checked wheels (wheels/, requirements/gpu-bundle.lock),
# unpacked into .site/ and put at the END of sys.path (the machine's own packages win;
# benchmarks/bundle_python.py, standard library only).
# Every step runs under `timeout -k`, so one slow compile cannot eat the others' time; a
# step that times out is listed in status.txt and the rest still run.
# PROPOSAL_MODEL: the proposal experiment's target (a checkpoint directory, a name
# harness.models can prepare, or `tiny`, a seeded random Llama: the bundle's default).
# Exit codes: 0 all steps passed, 1 a step failed, 3 no CUDA device (and DEVICE=cuda),
# 4 no Python with torch, 5 dependencies missing and no bundle wheels to supply them.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEVICE=${DEVICE:-cuda}
OUT=${1:-benchmarks/results/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
SITE="$ROOT/.site"
LOCK=requirements/gpu-bundle.lock
KILL_AFTER_S=10
if [ -f "$ROOT/BUNDLE" ]; then PROPOSAL_MODEL=${PROPOSAL_MODEL:-tiny}; else PROPOSAL_MODEL=${PROPOSAL_MODEL:-smollm2-135m}; fi
DRAFT_ARGS=()
[ "$PROPOSAL_MODEL" = tiny ] && DRAFT_ARGS=(--draft-layers 2)  # tiny has 4 layers; SmolLM2's default draft is 10 of 30
say() { echo "gpu_check: $*" >&2; }

find_python() {
  local tried=() candidate
  for candidate in ${PY:-} .venv/bin/python python3 python; do
    if ! command -v "$candidate" >/dev/null 2>&1; then tried+=("$candidate (not found)"); continue; fi
    if timeout -k "$KILL_AFTER_S" 120 "$candidate" -c 'import torch' >/dev/null 2>&1; then
      PY=$candidate
      return 0
    fi
    tried+=("$candidate (no torch)")
  done
  say "no Python with torch found; tried: ${tried[*]}. Install a CUDA build of torch, or set PY=/path/to/python"
  exit 4
}

# The modules `python -m harness cuda …` and `fingerprint` import, by import name.
MODULES="jsonschema tabulate numpy pynvml rich prometheus_client cryptography securesystemslib tokenizers psutil transformers accelerate safetensors yaml"
missing_modules() {
  timeout -k "$KILL_AFTER_S" 120 "$PY" - "$SITE" $MODULES <<'PYEOF'
import importlib.util, sys
sys.path.append(sys.argv[1])
print(" ".join(m for m in sys.argv[2:] if importlib.util.find_spec(m) is None))
PYEOF
}

find_python
say "python: $PY ($(timeout -k "$KILL_AFTER_S" 120 "$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'))"
missing=$(missing_modules)
if [ -n "$missing" ] && [ -d "$ROOT/wheels" ] && [ -f "$LOCK" ]; then
  say "installing the bundle's wheels into .site/ for: $missing"
  timeout -k "$KILL_AFTER_S" 300 "$PY" benchmarks/bundle_python.py install "$LOCK" wheels "$SITE" || exit 5
  missing=$(missing_modules)
fi
if [ -n "$missing" ]; then
  say "$PY lacks these modules: $missing"
  say "run the bundle made by \`make gpu-bundle\` (offline), or \`make setup-torch\` in a checkout"
  exit 5
fi

if ! timeout -k "$KILL_AFTER_S" 180 "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  if [ "$DEVICE" = cuda ]; then
    say "torch in $PY sees no CUDA device; nothing to measure (DEVICE=cpu rehearses every step on CPU)"
    exit 3
  fi
  DEVICE=cpu
fi
mkdir -p "$OUT"
: >"$OUT/status.txt"

run() {  # run LIMIT_S LABEL COMMAND...
  local limit=$1 label=$2 start=$SECONDS rc
  shift 2
  timeout -k "$KILL_AFTER_S" --signal=INT "$limit" "$@" >"$OUT/$label.txt" 2>&1
  rc=$?
  echo "$label rc=$rc seconds=$((SECONDS - start)) limit=$limit device=$DEVICE" | tee -a "$OUT/status.txt"
  tail -n 25 "$OUT/$label.txt"
}
cuda() {  # cuda LIMIT_S LABEL NAME ARGS...
  local limit=$1 label=$2 name=$3
  shift 3
  run "$limit" "$label" "$PY" benchmarks/bundle_python.py run "$SITE" cuda "$name" --device "$DEVICE" --out "$OUT/runs" "$@"
}

run 60 fingerprint "$PY" benchmarks/bundle_python.py run "$SITE" fingerprint --out "$OUT/fingerprint.json"
if command -v nvidia-smi >/dev/null; then
  timeout -k "$KILL_AFTER_S" 30 nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1
else
  echo "nvidia-smi unavailable" >"$OUT/nvidia-smi.txt"
fi

if [ "$DEVICE" = cuda ]; then
  cuda 50 attention attention --batch 4 --heads 16 --seq-len 4096 --head-dim 128 --iters 50 --warmup 10
  cuda 90 dispatch dispatch --batch 8 --seq-len 1024 --iters 50 --warmup 10 --modes eager,default,reduce-overhead
  # max-autotune compiles for minutes: on its own, so a timeout cannot take the other modes with it.
  cuda 120 dispatch-autotune dispatch --batch 8 --seq-len 1024 --iters 50 --warmup 10 --modes eager,max-autotune
  # The largest cells run out of memory on purpose: the boundary is part of the result.
  cuda 80 budget budget --batches 1,8,32,128,512 --contexts 512,2048,8192 --iters 20 --warmup 5
  cuda 30 budget-capped budget --batches 1,8,32,128 --contexts 512,2048 --iters 10 --warmup 3 --memory-cap-bytes 8000000000
  cuda 80 proposal proposal --model "$PROPOSAL_MODEL" "${DRAFT_ARGS[@]}" --prompts 4 --max-new-tokens 64 --iters 3 --warmup 1
  cuda 30 overlap overlap --chunks 16 --rows 8192 --hidden 8192 --dtype bfloat16 --iters 20 --warmup 5
else
  # The same steps, each CPU fallback at a size 2 idle cores run in seconds to a minute; the
  # limits leave room for a busy shared machine (they stop hangs, they are not speed claims).
  cuda 120 attention attention --batch 1 --heads 4 --seq-len 256 --head-dim 64 --iters 5 --warmup 1
  cuda 360 dispatch dispatch --model tiny --batch 2 --seq-len 64 --iters 5 --warmup 2 --modes eager,default
  cuda 240 budget budget --model tiny --batches 1,2 --contexts 64,128 --iters 3 --warmup 1
  cuda 180 budget-capped budget --model tiny --batches 1,4 --contexts 64 --iters 3 --warmup 1 --memory-cap-bytes 200000000
  cuda 480 proposal proposal --model "$PROPOSAL_MODEL" "${DRAFT_ARGS[@]}" --iters 3 --warmup 1
  cuda 120 overlap overlap --chunks 4 --rows 256 --hidden 256 --dtype float32 --iters 3 --warmup 1
fi

say "results under $OUT"
! grep -qv ' rc=0 ' "$OUT/status.txt"
