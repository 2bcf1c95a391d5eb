# Sourced by .ci/run: the GPU engines' transformers (4.57.1, pure Python, no torch) in a cached venv of its own
# ($INFKIT_CACHE or ~/.cache/infkit: venvs/transformers4-<hash>). tests/serving/test_checkpoint_readers.py reads
# every checkpoint the kit serves with it and with the serving venv's 5.x and requires the same model from both.
echo "[ci] transformers 4.57.1 venv (cached after the first build)"
make setup
INFKIT_TRANSFORMERS4_PYTHON="$(.venv/bin/python -c 'import sys
from harness.models.readers import engine_reader_python
print(engine_reader_python(progress=lambda line: print(line, file=sys.stderr)))')"
export INFKIT_TRANSFORMERS4_PYTHON
