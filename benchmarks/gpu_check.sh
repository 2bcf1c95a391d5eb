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
# or else from the bundle's packages for its CPython (sites/py3.X/, built from the wheels of
# the lock requirements/gpu-bundle*.lock whose target is that Python: 3.11 and 3.12 ship),
# checked against the lock's CPython and the site's SHA256SUMS first and put at the END of
# sys.path (the machine's own packages win; benchmarks/bundle_python.py, standard library
# only), then imported for real.
# Every step runs under `timeout -k`, so one slow compile cannot eat the others' time; a
# step that times out is listed in status.txt and the rest still run. On a GPU the step
# limits sum to at most 7 minutes (GPU_LIMITS below, checked by tests/test_gpu_bundle.py).
# Outputs: OUT/status.txt (one line per step) and OUT/gpu-check.tar.gz (every step's log,
# probe.json, fingerprint.json, nvidia-smi -q and the runs), nothing else.
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
KILL_AFTER_S=10
# Each check's and step's limit (s). On a GPU they sum to 30 + 2*35 + 10 + 30 + 20 + 15 + 10 + 230 = 415 <= 420.
L_FIND=30 L_IMPORTS=35 L_LOCK=10 L_INSTALL=30 L_PROBE=20 L_FINGERPRINT=15 L_SMI=10
if [ -f "$ROOT/BUNDLE" ]; then PROPOSAL_MODEL=${PROPOSAL_MODEL:-tiny}; else PROPOSAL_MODEL=${PROPOSAL_MODEL:-smollm2-135m}; fi
DRAFT_ARGS=()
[ "$PROPOSAL_MODEL" = tiny ] && DRAFT_ARGS=(--draft-layers 2)  # tiny has 4 layers; SmolLM2's default draft is 10 of 30
say() { echo "gpu_check: $*" >&2; }

find_python() {
  local tried=() candidate
  for candidate in ${PY:-} .venv/bin/python python3 python; do
    if ! command -v "$candidate" >/dev/null 2>&1; then tried+=("$candidate (not found)"); continue; fi
    if TORCH_INFO=$(timeout -k "$KILL_AFTER_S" "$L_FIND" "$candidate" -c \
        'import sys, torch; print(sys.version.split()[0], torch.__version__, int(torch.cuda.is_available()))' 2>/dev/null); then
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
failing_modules() {  # each module imported for real: find_spec succeeds on a folder whose extension cannot load
  timeout -k "$KILL_AFTER_S" "$L_IMPORTS" "$PY" benchmarks/bundle_python.py imports "$SITE" $MODULES
}
lock_for_python() {  # the bundle lock whose wheels are for $PY's CPython, or nothing
  local version lock
  version=$(timeout -k "$KILL_AFTER_S" "$L_LOCK" "$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  for lock in requirements/gpu-bundle*.lock; do
    [ -f "$lock" ] && grep -q "^# Target: CPython $version," "$lock" && { echo "$lock $version"; return 0; }
  done
  echo " $version"
}

find_python
read -r PY_VERSION TORCH_VERSION CUDA_SEEN <<<"$TORCH_INFO"
say "python: $PY ($PY_VERSION, torch $TORCH_VERSION)"
failing=$(failing_modules)
if [ -n "$failing" ] && [ -d "$ROOT/sites" ]; then
  read -r LOCK PYVER <<<"$(lock_for_python)"
  if [ -z "$LOCK" ] || [ ! -d "$ROOT/sites/py$PYVER" ]; then
    say "the bundle has packages for CPython $(ls "$ROOT/sites" | sed 's/^py//' | tr '\n' ' ')but $PY is $PYVER: set PY to one of those"
    exit 5
  fi
  say "using the bundle's CPython $PYVER packages (sites/py$PYVER) for: $failing"
  timeout -k "$KILL_AFTER_S" "$L_INSTALL" "$PY" benchmarks/bundle_python.py verify "$LOCK" "sites/py$PYVER" || exit 5
  SITE="$ROOT/sites/py$PYVER"
  failing=$(failing_modules)
fi
if [ -n "$failing" ]; then
  say "$PY cannot import: $failing"
  say "run the bundle made by \`make gpu-bundle\` (offline), or \`make setup-torch\` in a checkout"
  exit 5
fi

if [ "$CUDA_SEEN" != 1 ]; then
  if [ "$DEVICE" = cuda ]; then
    say "torch in $PY sees no CUDA device; nothing to measure (DEVICE=cpu rehearses every step on CPU)"
    exit 3
  fi
  DEVICE=cpu
fi
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/infkit-gpu-check.XXXXXX")
: >"$OUT/status.txt"
pack() {  # the one archive: every step's output, written however the check ends
  tar -C "$WORK" -czf "$OUT/gpu-check.tar.gz.partial" . && mv "$OUT/gpu-check.tar.gz.partial" "$OUT/gpu-check.tar.gz"
  rm -rf "$WORK"
}
trap pack EXIT

run() {  # run LIMIT_S LABEL COMMAND...
  local limit=$1 label=$2 start=$SECONDS rc
  shift 2
  timeout -k "$KILL_AFTER_S" --signal=INT "$limit" "$@" >"$WORK/$label.txt" 2>&1
  rc=$?
  echo "$label rc=$rc seconds=$((SECONDS - start)) limit=$limit device=$DEVICE" | tee -a "$OUT/status.txt"
  tail -n 25 "$WORK/$label.txt"
}
cuda() {  # cuda LIMIT_S LABEL NAME ARGS...
  local limit=$1 label=$2 name=$3
  shift 3
  run "$limit" "$label" "$PY" benchmarks/bundle_python.py run "$SITE" cuda "$name" --device "$DEVICE" --out "$WORK/runs" --no-sign "$@"
}

run "$L_PROBE" probe "$PY" benchmarks/gpu_probe.py "$DEVICE" "$SITE" "$WORK/probe.json"
run "$L_FINGERPRINT" fingerprint "$PY" benchmarks/bundle_python.py run "$SITE" fingerprint --out "$WORK/fingerprint.json"
if command -v nvidia-smi >/dev/null; then
  timeout -k "$KILL_AFTER_S" "$L_SMI" nvidia-smi -q >"$WORK/nvidia-smi.txt" 2>&1
else
  echo "nvidia-smi unavailable" >"$WORK/nvidia-smi.txt"
fi

if [ "$DEVICE" = cuda ]; then
  # 230 s in all (the L_* checks above take the rest of the 7 minutes)
  cuda 30 attention attention --batch 4 --heads 16 --seq-len 4096 --head-dim 128 --iters 50 --warmup 10
  cuda 60 dispatch dispatch --batch 8 --seq-len 1024 --iters 30 --warmup 5 --modes eager,default,reduce-overhead
  # The largest cells run out of memory on purpose: the boundary is part of the result.
  cuda 50 budget budget --batches 1,8,32,128,512 --contexts 512,2048,8192 --iters 20 --warmup 5
  cuda 20 budget-capped budget --batches 1,8,32,128 --contexts 512,2048 --iters 10 --warmup 3 --memory-cap-bytes 8000000000
  cuda 50 proposal proposal --model "$PROPOSAL_MODEL" "${DRAFT_ARGS[@]}" --prompts 4 --max-new-tokens 64 --iters 3 --warmup 1
  cuda 20 overlap overlap --chunks 16 --rows 8192 --hidden 8192 --dtype bfloat16 --iters 20 --warmup 5
else
  # The same steps, each CPU fallback at a size 2 idle cores run in seconds to a minute; the
  # limits leave room for a busy shared machine (they stop hangs, they are not speed claims).
  cuda 120 attention attention --batch 1 --heads 4 --seq-len 256 --head-dim 64 --iters 5 --warmup 1
  cuda 360 dispatch dispatch --arch tiny --batch 2 --seq-len 64 --iters 5 --warmup 2 --modes eager,default
  cuda 240 budget budget --arch tiny --batches 1,2 --contexts 64,128 --iters 3 --warmup 1
  cuda 180 budget-capped budget --arch tiny --batches 1,4 --contexts 64 --iters 3 --warmup 1 --memory-cap-bytes 200000000
  cuda 480 proposal proposal --model "$PROPOSAL_MODEL" "${DRAFT_ARGS[@]}" --iters 3 --warmup 1
  cuda 120 overlap overlap --chunks 4 --rows 256 --hidden 256 --dtype float32 --iters 3 --warmup 1
fi

say "results: $OUT/status.txt and $OUT/gpu-check.tar.gz"
! grep -qv ' rc=0 ' "$OUT/status.txt"
