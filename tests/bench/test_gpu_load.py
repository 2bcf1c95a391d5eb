"""On a GPU a bench's unset load comes from a measured capacity, never from the CPU reference host's constants.

Dry runs on a GPU placement with no GPU present (``planned`` from test_dry_run): a cited bench-66 run of the same
backend sizes bench-70's rate, list and B and bench-81's in-flight per device; with none cited the plan opens with a
capacity probe on its first server and sizes the rest from it; CPU plans keep their named sizes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench.lib import gpuload
from harness.bench.lib.citations import Citation
from tests.bench.test_dry_run import planned  # noqa: F401 (the fixture)
from tests.typed_results import result_with, run_record

SATURATION = {"offered_rps": 40.0, "scheduled_rps": 40.0, "achieved_rps": 39.0,
              "latency_ms": {"e2e_ms.p50": 800.0, "ttft_ms.p50": 60.0}}


def bench66(backend: str = "vllm", shape: tuple[float, float] = (128.0, 24.0)) -> Citation:
    """A cited bench-66 GPU run: saturation at 40 req/s with 39 req/s served at an E2E P50 of 0.8 s (31 in flight),
    light-load TTFT 20 ms and TPOT 5 ms."""
    baseline = {"bracket": {"determined": True}, "saturation": SATURATION,
                "light_load": {"latency_ms": {"ttft_ms.p50": 20.0, "tpot_ms.p50": 5.0}}}
    return Citation(manifest=Path("manifests/INF-FLOAT-BASELINE/66.json"), sha256="ab" * 32, run_dir=Path("runs/66"),
                    run=run_record(run_id="20261207T000000Z-gpu", effective={"backend": backend}),
                    result=result_with(details={"baseline": baseline}, shape=shape))


@pytest.fixture
def cited(monkeypatch):
    """Which bench-66 run ``latest`` finds (None: none)."""
    found: dict[str, Citation | None] = {"run": None}
    monkeypatch.setattr(gpuload, "cite_choice", lambda choice, root, semantic_id: found["run"])
    return found


def test_bench70_on_a_gpu_takes_its_rate_list_and_b_from_a_cited_bench66_run(planned, cited):  # noqa: F811
    cited["run"] = bench66()
    doc = planned("70", gpu="0")
    notes = doc["notes"]
    assert notes[0].startswith("load from bench-66 run 20261207T000000Z-gpu (manifests/INF-FLOAT-BASELINE/66.json")
    assert "31.2 requests in flight" in notes[0]
    # the same request shape: 0.6 x 40 req/s, a list spanning the reference list's 15 s, B = 31 capped at seqs_high
    assert notes[1].startswith("bursty arrival rate: 24 req/s = 0.6 x the saturation rate 40 req/s")
    assert notes[2] == "requests per arm: 361: its rate 24 req/s for the reference list's 15 s"
    assert "closed loop of B = 16" in notes[3]
    assert not any(s.get("chosen_while_running") for s in doc["arms"])  # sized before it runs


def test_bench70_on_a_gpu_carries_a_cited_rate_of_another_shape_by_its_own_rates(planned, cited):  # noqa: F811
    cited["run"] = bench66(shape=(256.0, 32.0))
    notes = planned("70", gpu="0")["notes"]
    # prefill 256 / 0.02 s = 12800 tokens/s, decode 200: (0.02 + 0.155) / (0.01 + 0.115) = 1.4 -> 56 req/s
    assert "x 1.4, a 256+32-token request's idle cost over a 128+24-token one's at the cited run's own" in notes[0]
    assert notes[1].startswith("bursty arrival rate: 33.6 req/s = 0.6 x the saturation rate 56 req/s")


def test_bench70_on_a_gpu_with_no_bench66_run_probes_its_capacity_first(planned, cited):  # noqa: F811
    doc = planned("70", gpu="0")
    assert doc["notes"][-1].startswith("load from a closed-loop capacity probe on the first server before any arm "
                                       "(no bench-66 run of this backend, model and device is cited)")
    first = doc["arms"][0]
    assert first["chosen_while_running"] and "probe" in first["arms"] and first["servers"] == ["base"]
    assert all(p["chosen_while_running"] for p in doc["arms"])


def test_bench70_set_knobs_and_cpu_plans_keep_their_loads(planned, cited):  # noqa: F811
    cited["run"] = bench66()
    cpu = planned("70")["notes"]
    assert cpu[0].startswith("bursty arrival rate: 1 req/s (SIZE=reference") and "B = 8" in cpu[2]
    assert not any("load from" in n for n in cpu)
    cited["run"] = None
    set_ = planned("70", gpu="0", rate_rps=5.0, requests=40, concurrency=4)["notes"]
    assert set_[0].startswith("bursty arrival rate: 5 req/s, set by --rate-rps") and "B = 4" in set_[2]


def test_a_cited_bench66_of_another_backend_is_passed_over_and_the_bench_probes(planned, cited):  # noqa: F811
    cited["run"] = bench66(backend="sglang")
    notes = planned("70", gpu="0")["notes"]
    assert "is not cited: it served backend sglang, this run serves vllm" in notes[0]
    assert notes[-1].startswith("load from a closed-loop capacity probe")


def test_the_probe_runs_first_and_the_arms_then_carry_the_load_it_measured(planned, cited, monkeypatch):  # noqa: F811
    """The probed plan's first phase: bench-66's closed-loop probe on the base server, then bench-70's arms at 0.6 x
    the probed rate, their workloads made under their own names; a probe that reads nothing runs no arm."""
    from types import SimpleNamespace

    from harness.bench import get_bench
    from harness.bench.benches import bench70
    from harness.bench.placement import Placement
    from harness.bench.spec import History

    monkeypatch.setattr(bench70, "resolve_placement", lambda *a: Placement("vllm", "docker", (0,)))
    spec = get_bench("70")
    plan = spec.plan(spec.config(gpu="0", comparisons=("static", "limits")), None)
    history = History(cfg=None, model=None)
    steps = plan.phases[0].steps(history)
    repeat, probe = next(steps)
    assert probe.label == "probe" and probe.server == "base" and probe.workload.common.arrival.concurrency == 64
    rate = 50.0  # completions/s, 64 in flight: 1.28 s each
    records = [SimpleNamespace(sent_s=i / rate, end_s=i / rate + 64 / rate) for i in range(1500)]
    history.runs.append(SimpleNamespace(label="probe", failure=None, records=records))
    arms = list(steps)
    assert history.notes["load"]["rate_rps"] == pytest.approx(rate, rel=0.01)
    bursty = next(a for _, a in arms if a.label == "base").workload
    assert bursty.name == "bursty" and bursty.common.arrival.rate_rps == pytest.approx(0.6 * rate, rel=0.05)  # nominal
    closed = next(a for _, a in arms if a.label == "continuous").workload
    assert closed.common.arrival.concurrency == 16  # 64 in flight, at most --seqs-high
    empty = History(cfg=None, model=None)
    steps = plan.phases[0].steps(empty)
    next(steps)
    empty.runs.append(SimpleNamespace(label="probe", failure=None, records=[]))
    assert list(steps) == []


def test_bench81_on_a_gpu_keeps_the_cited_capacitys_requests_in_flight_per_device(planned, cited):  # noqa: F811
    cited["run"] = bench66(shape=(256.0, 32.0))
    gpu = planned("81", gpu="0,1", layouts=("dp2-replicas",))
    assert gpu["notes"][0].startswith("load from bench-66 run 20261207T000000Z-gpu")
    # 39 req/s x 0.8 s = 31.2 in flight: 32 per device, three waves
    assert "closed loop at saturation: 32 requests in flight per device, refilling, 96 requests per device" in \
        gpu["notes"][2]
    cited["run"] = None
    probing = planned("81", gpu="0,1", layouts=("dp2-replicas",))
    assert probing["notes"][-1].startswith("load from a closed-loop capacity probe on the first server")
    assert probing["arms"][0]["servers"] == ["single"] and "probe" in probing["arms"][0]["arms"]
    cited["run"] = bench66()
    cpu = planned("81", layouts=("dp2-replicas",))["notes"]
    assert "8 requests in flight per device, refilling, 24 requests per device" in cpu[1]
    assert not any("load from" in n for n in cpu)


def test_bench69_on_a_gpu_loads_its_session_pair_and_keeps_the_synthetic_pair_unqueued(planned, cited):  # noqa: F811
    """Where concurrency matters (the session and trace pairs, closed loops of real traffic), a GPU run takes half
    the cited capacity's requests in flight; the synthetic pair stays at one request at a time (its strata need each
    group's first request to miss), and so does every pair on the CPU default."""
    cited["run"] = bench66()
    doc = planned("69", gpu="0", sessions=2)
    assert doc["notes"][0].startswith("load from bench-66 run 20261207T000000Z-gpu")
    assert doc["notes"][1].startswith("trace and session pairs at concurrency 16 = 0.5 x 31.2 in flight")
    alone = planned("69", gpu="0")["notes"]  # the synthetic pair alone: no capacity needed
    assert not any("load from" in n for n in alone)
    cpu = planned("69", sessions=2)["notes"]
    assert not any("load from" in n or "in flight" in n for n in cpu)
    cited["run"] = None
    probing = planned("69", gpu="0", sessions=2)
    assert probing["notes"][-1].startswith("load from a closed-loop capacity probe on the first server")
    assert "probe" in probing["arms"][0]["arms"]
