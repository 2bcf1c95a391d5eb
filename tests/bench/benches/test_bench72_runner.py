"""bench-72 end to end against stand-in engines whose capacity is known (fast).

The stand-in serves ``max_num_seqs`` requests at once and queues the rest, so a candidate's
capacity is set by its slots: with 4 slots it serves about four times the rate of 1 slot.
Placement, server starts, the searches, the duel, the reading, signing and audit run for real.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from harness.backends.base import BackendConfig
from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.bench.benches import bench66, bench72
from harness.contract.schemas import validate_file
from harness.manifest.audit import AuditConfig, audit_paths
from harness.models import PreparedModel
from harness.progress import Reporter
from harness.runtime.base import ServerSpec
from tests.bench.test_bench_runner import ENGINE, FakeBackend
from tests.tiny_tokenizer import session_tokenizer


class SlotsBackend(FakeBackend):
    """The stand-in engine with ``max_num_seqs`` as its number of slots (unlimited when unset)."""

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        argv = (sys.executable, str(ENGINE), "--port", str(cfg.port), "--ttft-ms", "20", "--gap-ms", "4",
                "--max-running", str(cfg.max_num_seqs or 0))
        return ServerSpec(argv=argv, port=cfg.port, env={})


@pytest.fixture
def fake_root(tmp_path_factory, monkeypatch, tmp_path):
    tokenizer = session_tokenizer(tmp_path_factory)
    model = PreparedModel(key="tiny", name="tiny-bpe", path=tokenizer, gguf_sha256="sha256:" + "0" * 64,
                          checkpoint_sha256="sha256:" + "1" * 64, tokenizer_sha256="sha256:" + "2" * 64)
    monkeypatch.setattr(runner_mod, "resolve_model", lambda name, progress=None: model)
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: SlotsBackend())
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: SlotsBackend())
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a private default key, made on first use
    monkeypatch.chdir(tmp_path)  # where --baseline latest looks for bench-66 manifests
    return tmp_path


SHAPE = dict(backend="fake", runtime="local", warmup_requests=1, resamples=300, input_tokens=24, output_tokens=6,
             length_range=0.0)


def server_starts(run_dir: Path, name: str) -> int:
    """Starts of a server variant: each writes its command line into the (appended) log."""
    log = (run_dir / "servers" / f"server-{name}.log").read_text()
    return sum(line.startswith("$ ") for line in log.splitlines())


def run72(root: Path, **overrides):
    cfg = bench72.Config(
        **{
            **SHAPE,
            "requests": 16,
            "probe_seconds": 0.0,
            "dtypes": ("bfloat16",),
            "kv_cache_values_gib": (1,),
            "max_num_seqs_values": (4, 1),
            "slo_ttft_p99_ms": 150.0,
            "slo_tpot_p99_ms": 100.0,
            **overrides,
        }
    )
    return runner_mod.run_bench(bench72.SPEC, cfg, root=root, reporter=Reporter(io.StringIO(), every_s=60))


def test_two_candidates_get_one_schedule_and_capacities_fitted_between_its_rates(fake_root, monkeypatch):
    from harness.bench.benches.bench72 import capacity as capacity_mod

    # the stand-in's fastest probes send every few milliseconds, so the pooled send lag (5 % of that gap) fails
    # every probe: this test reads the fit and the schedule; the pooled judgement is test_bench72_analysis's
    monkeypatch.setattr(capacity_mod, "too_small", lambda run: False)
    outcome = run72(fake_root, baseline="none")
    run_dir = outcome.run_dir
    for doc in [run_dir / "sweep.json", run_dir / "run.json", *run_dir.glob("arms/*/r*/result.json")]:
        assert validate_file(doc) == [], doc
    details = json.loads((run_dir / "sweep.json").read_text())["details"]
    # not the CPU backend: the server tier, its limits overridden; no bench-66 run: a light probe centres the schedule
    assert details["slo"]["ttft_p99_ms"] == 150.0 and details["slo"]["basis"].startswith("tier server")
    assert details["slo_tier"] == "server" and "light load" in {a["label"] for a in details["arm_runs"]}
    schedule = details["schedule"]["rates_rps"]
    assert len(schedule) == 5 and all(
        b / a == pytest.approx(2.0, rel=0.01) for a, b in zip(schedule, schedule[1:], strict=False)
    )
    probed = {c["name"]: [p["rate_rps"] for p in c["probes"]] for c in details["candidates"]}
    for rates in probed.values():  # the same schedule, low to high, stopping after two broken probes
        assert rates == schedule[: len(rates)]
    caps = {c["name"]: c["capacity"] for c in details["candidates"]}
    fast, slow = caps["bf16-s4-kv1"], caps["bf16-s1-kv1"]
    assert fast["capacity_rps"] > slow["capacity_rps"] and slow["capacity_rps"] not in schedule
    assert slow["low_rps"] <= slow["capacity_rps"] <= slow["high_rps"]
    record = details["decision_record"]
    assert record["deploy"] in caps and record["tied"] and record["reason"]
    # where to deploy is the exceedance lower bound; probes far under 299 requests certify only the looser share
    # their requests can show, and say so
    exceedance = record["exceedance"]
    assert record["deploy_up_to_rps"] == exceedance[record["deploy"]]["lower_rps"] and set(exceedance) == set(caps)
    assert all(e["needed_requests"] == 299 and (e["lower_rps"] is None or e["claim_exceedance"] > 0.01)
               for e in exceedance.values())
    assert "exceedance bf16-s4-kv1: " in outcome.finished.summary
    if len(record["tied"]) == 1:  # the leader stood alone: the duel ran at its certified rate, else inside its fit
        leader = details["duel"]["leader"]
        assert details["duel"]["rate_rps"] in (exceedance[leader]["lower_rps"], 2**-0.5 * caps[leader]["capacity_rps"])
    # the progress bound holds: every step the run took was counted in advance
    steps = len(details["arm_runs"])
    assert steps <= 1 + 2 * 5 + 2 * 3
    (report,) = audit_paths([outcome.finished.manifest], AuditConfig(root=fake_root))
    assert report.valid, report


def test_an_undetermined_bench66_bracket_is_not_used_and_bench72_probes_for_itself(fake_root):
    cfg66 = bench66.Config(**SHAPE, requests=8, rates=(2.0, 4.0), repeats=1, min_level_s=0.5)
    base = runner_mod.run_bench(bench66.SPEC, cfg66, root=fake_root, reporter=Reporter(io.StringIO(), every_s=60))
    assert not json.loads((base.run_dir / "sweep.json").read_text())["details"]["baseline"]["bracket"]["determined"]
    outcome = run72(fake_root, repeats=1, max_num_seqs_values=(4,))  # cites the newest bench-66 run: that one
    details = outcome.result["details"]
    cited = details["baseline_citation"]
    assert cited["run_id"] == base.run_dir.name and cited["used"] is False
    assert cited["fallback"].startswith(f"the cited bench-66 run {cited['run_id']} is not used: its saturation "
                                        "bracket is undetermined")
    assert "light load" in {a["label"] for a in details["arm_runs"]}  # its own probe centred the schedule
    assert cited["fallback"] in details["protocol"]["notes"]  # said in the plan ...
    assert cited["fallback"] in outcome.result["conclusion"]["summary"]  # ... and in the result
    assert outcome.finished.summary.count(cited["fallback"]) >= 1
    assert "is not used: its saturation bracket" in details["schedule"]["centre"]


def test_one_server_at_a_time_restarts_the_variant_whenever_the_run_switches(fake_root):
    outcome = run72(
        fake_root, baseline="none", servers_up="one", repeats=2, start_rps=40.0, schedule_below=1, schedule_above=1
    )
    details = outcome.result["details"]
    starts = {name: server_starts(outcome.run_dir, name) for name in ("bf16-s4-kv1", "bf16-s1-kv1")}
    used = [a["server"] for a in details["arm_runs"]]
    switches = {n: sum(1 for i, s in enumerate(used) if s == n and (i == 0 or used[i - 1] != n)) for n in starts}
    assert starts == switches and sum(starts.values()) >= 2, (starts, used)
    assert details["schedule"]["rates_rps"] == [20.0, 40.0, 80.0]
