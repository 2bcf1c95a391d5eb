#!/usr/bin/env bash
# Build, on a networked machine, the self-contained GPU check for a bare CUDA machine with
# no network: the harness and its schemas, benchmarks/gpu_check.sh, and what the harness
# needs beyond torch for CPython 3.11 and 3.12 (requirements/gpu-bundle.lock and
# gpu-bundle-py312.lock: each wheel's hash checked when fetched and when unpacked here,
# its tags against the lock's CPython), shipped as one unpacked site per CPython with a
# SHA256SUMS that the machine checks before use; files the two sites hold identically are
# hard links, stored once (two wheel sets would not fit 60 MB). hf-xet is left out: the
# check never downloads. The proposal step uses the `tiny` model, made at run time from
# a seed (PROPOSAL_MODEL=<checkpoint dir> for a real one). On the GPU machine:
#
#   tar xzf infkit-gpu-check.tar.gz && infkit-gpu-check/benchmarks/gpu_check.sh
#
# Usage: benchmarks/make_gpu_bundle.sh [OUT.tar.gz]   (PY: the infkit venv's python)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PY:-.venv/bin/python}
OUT=${1:-build/infkit-gpu-check.tar.gz}
MAX_BYTES=$((60 * 1000 * 1000))
NAME=infkit-gpu-check
t0=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/infkit-gpu-bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/$NAME"
mkdir -p "$stage/benchmarks" "$stage/requirements" "$stage/sites" "$(dirname "$OUT")"

# The harness as this checkout has it (tracked and new files, never ignored ones).
git ls-files --cached --others --exclude-standard -z harness schemas | tar --null -T - -cf - | tar -C "$stage" -xf -
cp benchmarks/gpu_check.sh benchmarks/bundle_python.py benchmarks/gpu_probe.py "$stage/benchmarks/"
versions=()
for lock in requirements/gpu-bundle.lock requirements/gpu-bundle-py312.lock; do
  version=$(sed -n 's/^# Target: CPython \([0-9.]*\),.*/\1/p' "$lock")
  cp "$lock" "$stage/requirements/"
  timeout -k 10 1800 "$PY" -m harness images wheels "$(basename "$lock" .lock)" --dest "$work/wheels-$version"
  "$PY" benchmarks/bundle_python.py install "$lock" "$work/wheels-$version" "$stage/sites/py$version" hf-xet
  [ ${#versions[@]} -gt 0 ] && "$PY" benchmarks/bundle_python.py link "$stage/sites/py${versions[0]}" "$stage/sites/py$version"
  versions+=("$version")
done
python_version="${versions[*]}"
{
  echo "infkit GPU check bundle"
  echo "revision: $(git rev-parse HEAD)$(git diff --quiet HEAD -- harness schemas benchmarks requirements || echo -dirty)"
  echo "created_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "packages_for: CPython $python_version (sites/py3.X; torch not included: the machine's own; hf-xet left out)"
  echo "run: benchmarks/gpu_check.sh [OUT]   (DEVICE=cpu rehearses it without a GPU)"
} >"$stage/BUNDLE"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
# Reproducible archive: sorted names, fixed owner and times, no gzip timestamp.
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$NAME" | gzip -n -9 >"$OUT.partial"
size=$(stat -c %s "$OUT.partial")
if [ "$size" -gt "$MAX_BYTES" ]; then
  rm -f "$OUT.partial"
  echo "make_gpu_bundle: the bundle is $size bytes, over the $MAX_BYTES limit" >&2
  exit 1
fi
mv "$OUT.partial" "$OUT"
echo "make_gpu_bundle: $OUT, $((size / 1000)) kB (packages for CPython $python_version) in $((SECONDS - t0)) s"
