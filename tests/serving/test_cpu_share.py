"""The client CPU-share rule: "client-bound here" when the client and API server took CPU the engine needed."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from fake_openai_server import FakeConfig, FakeOpenAIServer

from harness.contract import validate_file
from harness.serving.cpushare import CpuReading, CpuWindow, cpu_details
from harness.serving.measure import MeasureConfig, measure
from harness.serving.validity import ValidityLimits, cpu_share_limit, cpu_share_reason
from harness.telemetry.cputime import TreeCpu
from harness.workload import Arrival, Common, make_workload, write_workload

HOST = sorted(os.sched_getaffinity(0))


def window(client_s: float, frontend_s: float, engine_s: float | None, wall_s: float = 10.0,
           engine_cores: tuple[int, ...] | None = None) -> CpuWindow:
    w = CpuWindow(lambda: None)
    w.start = CpuReading(100.0, 1.0, TreeCpu(5.0, 50.0, 2, engine_cores))
    w.end = CpuReading(100.0 + wall_s, 1.0 + client_s, TreeCpu(5.0 + frontend_s, None if engine_s is None
                                                                else 50.0 + engine_s, 2, engine_cores))
    return w


def test_the_load_generator_alone_is_charged_and_the_rule_fires_with_one_engine_core():
    assert ValidityLimits().engine_core_fraction == 0.05
    limits = ValidityLimits()
    # 2 cores, the engine bound to core 0: the load generator and the API server share core 1
    cpu = {"measured": True, "cores_left": [1], "engine_cores": [0], "engine_cores_used": 1.0, "wall_s": 10.0,
           "client_cpu_s": 8.0, "frontend_cpu_s": 0.5}
    # the client may use what the API server (0.05 cores) left of 95 % of the core: 0.90
    assert cpu_share_limit(cpu, limits) == 0.9
    assert cpu_share_reason(cpu, limits) is None  # 0.80 cores: under 0.90
    # 0.92 cores fires, although client + API server (0.97) stayed under the one core they had: the old rule
    # (client + API server > 1 core left + 5 % of the engine's = 1.05) could never fire with one engine core
    busy = {**cpu, "client_cpu_s": 9.2}
    reason = cpu_share_reason(busy, limits)
    assert reason is not None and reason.startswith("client-bound here: the load generator used 0.92 cores")
    assert "> 0.90" in reason
    # the engine's scheduler running beside the client counts as the server's, not the client's
    spill = {**busy, "engine_cores_used": 1.3}
    assert cpu_share_limit(spill, limits) == 0.6 and cpu_share_reason(spill, limits) is not None
    # an API server that fills the core itself is never charged to a load generator that used less than it
    hog = {**cpu, "frontend_cpu_s": 9.0, "client_cpu_s": 0.8}
    assert cpu_share_limit(hog, limits) == 0.9 and cpu_share_reason(hog, limits) is None
    reserved = {**cpu, "cores_left": [0], "engine_cores": [1, 2, 3], "engine_cores_used": 3.0, "client_cpu_s": 17.0}
    assert cpu_share_reason(reserved, limits) is not None  # 1.7 cores beside one left core: it ran on the engine's
    # an engine bound to no core (a GPU engine): which cores it needed is not known, so nothing is judged
    unbound = {**cpu, "cores_left": None, "engine_cores": None, "client_cpu_s": 600.0}
    assert cpu_share_limit(unbound, limits) is None and cpu_share_reason(unbound, limits) is None
    assert cpu_share_reason({"measured": False, "why": "no probe"}, limits) is None
    assert cpu_share_reason(None, limits) is None


def test_details_split_the_run_and_judge_it():
    limits = ValidityLimits()
    low = HOST[0]
    cpu = cpu_details(window(client_s=2.0, frontend_s=1.0, engine_s=9.0, engine_cores=(low,)), limits)
    assert cpu["measured"] and cpu["why"] is None and cpu["reason"] is None
    assert (cpu["wall_s"], cpu["client_cpu_s"], cpu["frontend_cpu_s"], cpu["engine_cpu_s"]) == (10.0, 2.0, 1.0, 9.0)
    assert cpu["client_frontend_cores"] == 0.3 and cpu["engine_cores_used"] == 0.9 and cpu["share"] == 0.25
    assert cpu["engine_cores"] == [low] and cpu["cores_left"] == [c for c in HOST if c != low]
    assert cpu["host_cores"] == HOST and cpu["engine_cores_source"] == "engine thread affinity"
    hog = cpu_details(window(client_s=30.0, frontend_s=5.0, engine_s=4.0, engine_cores=(low,)), limits)
    assert hog["client_frontend_cores"] == 3.5 and hog["client_cores"] == 3.0 and hog["server_cores_left"] == 0.5
    assert hog["reason"].startswith("client-bound here")
    free = cpu_details(window(client_s=30.0, frontend_s=5.0, engine_s=4.0), limits)
    assert free["measured"] and free["engine_cores"] is None and free["reason"] is None
    assert "bound to no core" in free["why"]


def test_what_was_not_measured_is_said_and_never_judged():
    limits = ValidityLimits()
    no_probe = CpuWindow(None)
    no_probe.open()
    no_probe.close()
    cpu = cpu_details(no_probe, limits)
    assert not cpu["measured"] and "no server CPU probe" in cpu["why"] and cpu["reason"] is None
    assert cpu["client_cpu_s"] is not None and cpu["wall_s"] >= 0
    gone = CpuWindow(lambda: None)
    gone.open()
    gone.close()
    assert "returned nothing" in cpu_details(gone, limits)["why"]
    unsplit = cpu_details(window(client_s=1.0, frontend_s=1.0, engine_s=None), limits)
    assert "no engine process" in unsplit["why"] and unsplit["frontend_cpu_s"] == 1.0 and unsplit["reason"] is None
    never = CpuWindow(lambda: None)
    never.close()  # interrupted before the first reading
    assert "before the CPU time was first read" in cpu_details(never, limits)["why"]


@pytest.fixture(scope="module")
def workload(tokenizer_dir, tmp_path_factory) -> Path:
    # enough requests that the client's CPU time is more than a few of /proc's 10 ms ticks
    common = Common(arrival=Arrival("closed", concurrency=2), requests=48, input_tokens=8, output_tokens=4)
    return write_workload(tmp_path_factory.mktemp("w") / "w.jsonl", make_workload("random", common, {},
                                                                                    tokenizer_dir))


def test_a_run_whose_api_server_hogs_the_cpu_is_not_charged_to_the_client_and_stays_schema_valid(workload, tmp_path):
    # the probe says the API server burned 1000 s of CPU during the run: the server's own work, not the client's
    seconds = itertools.count(0.0, 1000.0)
    probe = lambda: TreeCpu(frontend_s=next(seconds), engine_s=1.0, engine_processes=1,  # noqa: E731
                            engine_cores=(HOST[-1],))
    with FakeOpenAIServer(FakeConfig(ttft_s=0.01, gap_s=0.002)) as srv:
        hog = measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=workload, out_dir=tmp_path / "a",
                                    cpu_probe=probe))
        plain = measure(MeasureConfig(endpoint=srv.url, model="fake", workload_path=workload, out_dir=tmp_path / "b"))
    cpu = hog.result["details"]["cpu"]
    assert cpu["frontend_cpu_s"] == 1000.0 and cpu["engine_cpu_s"] == 0.0 and cpu["client_cpu_s"] > 0
    assert cpu["measured"] and cpu["limit_cores"] is not None and cpu["reason"] is None
    assert hog.result["details"]["client"]["client_reasons"] == []
    assert plain.result["details"]["client"]["client_reasons"] == []
    assert validate_file(hog.result_path) == [] and "cpu_probe" not in hog.result["details"]["requested"]
    assert plain.valid and "no server CPU probe" in plain.result["details"]["cpu"]["why"]
    assert "CPU: client + API server" in (tmp_path / "a" / "summary.txt").read_text()


def test_an_engine_bound_to_every_core_leaves_the_rule_nothing_to_share_out():
    from harness.serving.validity import ValidityLimits, cpu_share_limit, cpu_share_reason
    every = {"measured": True, "engine_cores": [0, 1], "cores_left": [], "client_cpu_s": 0.1, "wall_s": 3.1,
             "frontend_cpu_s": 0.1, "engine_cores_used": 2.0}
    assert cpu_share_limit(every, ValidityLimits()) is None
    assert cpu_share_reason(every, ValidityLimits()) is None
