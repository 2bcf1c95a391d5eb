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
    monkeypatch.setattr(runner_mod, "ensure_model", lambda name, progress=None: model)
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
    cfg = bench72.Config(**{**SHAPE, "requests": 16, "probe_seconds": 0.0, "dtypes": ("bfloat16",), "kv_cache_values_gib": (1,),
                            "max_num_seqs_values": (4, 1), "max_probes": 9, **overrides})
    return runner_mod.run_bench(bench72.SPEC, cfg, root=root, reporter=Reporter(io.StringIO(), every_s=60))


def test_two_candidates_are_searched_dueled_and_the_four_slot_one_is_adopted(fake_root):
    outcome = run72(fake_root, baseline="none", max_probes=14)
    run_dir = outcome.run_dir
    for doc in [run_dir / "sweep.json", run_dir / "run.json", *run_dir.glob("arms/*/r*/result.json")]:
        assert validate_file(doc) == [], doc
    result = json.loads((run_dir / "sweep.json").read_text())
    details = result["details"]
    # No bench-66 run: the SLOs come from a light-load probe on the first candidate, and say so.
    assert details["baseline_citation"] is None and "light-load probe on bf16-s4-kv1" in details["slo"]["basis"]
    assert {a["label"] for a in details["arm_runs"]} >= {"light load", "duel bf16-s4-kv1", "duel bf16-s1-kv1"}
    caps = {c["name"]: c["capacity"] for c in details["candidates"]}
    fast, slow = caps["bf16-s4-kv1"], caps["bf16-s1-kv1"]
    assert fast["capacity_rps"] > 2 * slow["capacity_rps"]
    for cap in (fast, slow):  # the search repeats the ends of its bracket (the machine's noise may move them)
        assert cap["status"] in ("bracketed", "the probe budget was spent before the bracket was confirmed")
        assert max(r["runs"] for r in cap["rates"].values()) == 3 and cap["probes"] <= 14
        assert cap["rates"][f"{cap['upper_rps']:g}"]["passes"] == 0
    record = details["decision_record"]
    assert record["deploy"] == "bf16-s4-kv1" and record["runner_up"] == "bf16-s1-kv1"
    assert record["intervals_separate"] and record["binding_constraint"] == ["TTFT P99"]
    duel = record["duel"]
    assert duel["rate_rps"] == fast["capacity_rps"] and duel["metric"] == "ttft_ms.p99"
    assert duel["effect"]["n_pairs"] == 3 and duel["effect"]["ci_high"] < 1.0
    concl = result["conclusion"]
    assert (concl["decision"], concl["evidence_level"]) == ("adopt", "paired"), concl
    assert concl["next_step"].startswith("deploy bf16-s4-kv1 at up to")
    # the duel interleaves the two: A B in odd rounds, B A in even ones
    duel_order = [a["label"] for a in details["arm_runs"] if a["label"].startswith("duel")]
    a, b = "duel bf16-s4-kv1", "duel bf16-s1-kv1"
    assert duel_order == [a, b, b, a, a, b]
    # the best so far stayed up while the next was searched: two starts in all, none for the duel
    for name in ("bf16-s4-kv1", "bf16-s1-kv1"):
        assert server_starts(run_dir, name) == 1
    summary = (run_dir / "summary.txt").read_text()
    assert "capacity [interval]" in summary and "decision rule:" in summary
    assert (run_dir / "capacity.png").read_bytes()[:4] == b"\x89PNG"
    (report,) = audit_paths([outcome.finished.manifest], AuditConfig(root=fake_root))
    assert report.valid, report


def test_slos_scale_from_a_cited_bench66_run(fake_root):
    cfg66 = bench66.Config(**SHAPE, requests=8, rates=(2.0, 4.0), repeats=1)
    base = runner_mod.run_bench(bench66.SPEC, cfg66, root=fake_root, reporter=Reporter(io.StringIO(), every_s=60))
    light = json.loads((base.run_dir / "sweep.json").read_text())["details"]["baseline"]["light_load"]["latency_ms"]
    outcome = run72(fake_root, repeats=1, max_num_seqs_values=(4,), max_probes=4)
    details = outcome.result["details"]
    cited = details["baseline_citation"]
    assert cited["manifest"] == str(base.finished.manifest.relative_to(fake_root)) and cited["sha256"].startswith("sha256:")
    assert details["slo"]["ttft_p99_ms"] == pytest.approx(3 * light["ttft_ms.p99"])
    assert details["slo"]["tpot_p99_ms"] == pytest.approx(2 * light["tpot_ms.p99"])
    assert "bench-66 light load" in details["slo"]["basis"]
    assert "light load" not in {a["label"] for a in details["arm_runs"]}  # no probe needed
    # one candidate: nothing to compare, so no duel and no adopt
    assert outcome.result["conclusion"]["decision"] == "inconclusive" and details["duel"] is None


def test_one_server_at_a_time_restarts_the_pair_for_the_duel(fake_root):
    outcome = run72(fake_root, baseline="none", servers_up="one", repeats=2, max_probes=3, start_rps=40.0,
                    slo_ttft_p99_ms=2000.0, slo_tpot_p99_ms=200.0)
    details = outcome.result["details"]
    duel = details["duel"]
    labels = [a["label"] for a in details["arm_runs"]]
    assert labels[-4:] == [f"duel {duel['leader']}", f"duel {duel['runner_up']}"] * 1 + \
        [f"duel {duel['runner_up']}", f"duel {duel['leader']}"]
    starts = {name: server_starts(outcome.run_dir, name) for name in ("bf16-s4-kv1", "bf16-s1-kv1")}
    # one server at a time: a variant starts again whenever the run switches to it
    used = [a["server"] for a in details["arm_runs"]]
    switches = {n: sum(1 for i, s in enumerate(used) if s == n and (i == 0 or used[i - 1] != n)) for n in starts}
    assert starts == switches and sum(starts.values()) >= 4, (starts, used)  # the duel restarted servers
    assert outcome.result["conclusion"]["evidence_level"] == "single"  # 2 pairs < 3: capped


def test_a_baseline_that_does_not_audit_is_refused_before_any_work(fake_root):
    forged = fake_root / "forged.intoto.json"
    forged.write_text("{}")
    with pytest.raises(Exception, match="does not audit VALID"):
        run72(fake_root, baseline=str(forged))
    assert not (fake_root / "runs").exists()
