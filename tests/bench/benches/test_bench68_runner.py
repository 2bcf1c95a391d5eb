"""bench-68 through the one runner against stand-in engines (fast): the reading, the table, the decision, audit.

The stand-in variant with a ``--speculative-config`` streams faster and exports spec-decode counters;
one asking for EAGLE refuses to start the way an engine does. Everything else (phases with the
baseline kept up, claims, greedy agreement, the result, signing, audit) runs for real.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from harness.backends.base import BackendConfig
from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.bench.benches.bench68 import SPEC, Config
from harness.contract.schemas import validate_file
from harness.manifest.audit import AuditConfig, audit_paths
from harness.models import PreparedModel
from harness.progress import Reporter
from harness.runtime.base import ServerSpec
from tests.bench.benches.test_speculative import SMOLLM2
from tests.bench.test_bench_runner import FakeBackend
from tests.tiny_tokenizer import session_tokenizer


class SpeculativeStandIn(FakeBackend):
    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        spec = super().server_spec(cfg)
        args = list(spec.argv)
        if "--speculative-config" in args:
            method = json.loads(args[args.index("--speculative-config") + 1])["method"]
            args += ["--refuse", f"speculative method {method!r} is not supported on this platform"] \
                if method == "eagle" else ["--gap-ms", "1"]
        else:
            args += ["--gap-ms", "6"]
        return ServerSpec(argv=tuple(args), port=spec.port, env=spec.env)


@pytest.fixture
def bench_env(tmp_path_factory, monkeypatch, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(session_tokenizer(tmp_path_factory), model_dir)
    (model_dir / "config.json").write_text(json.dumps(SMOLLM2))
    model = PreparedModel(key="tiny", name="tiny-bpe", path=model_dir, gguf_sha256="sha256:" + "0" * 64,
                          checkpoint_sha256="sha256:" + "1" * 64, tokenizer_sha256="sha256:" + "2" * 64)
    monkeypatch.setattr(runner_mod, "resolve_model", lambda name, progress=None: model)
    backend = SpeculativeStandIn()
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: backend)
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: backend)
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a private default key, made on first use
    monkeypatch.chdir(tmp_path)
    (tmp_path / "heads" / "eagle").mkdir(parents=True)
    return tmp_path


def test_bench68_reads_acceptance_identity_and_decides_per_workload(bench_env):
    cfg = Config(backend="fake", runtime="local", ngram_tokens=(4,), draft_layers=0, self_draft=False,
                 eagle_model=str(bench_env / "heads" / "eagle"), requests=3, input_tokens=200, output_tokens=12,
                 warmup_requests=1, resamples=300, mc_passes=200, repeats=5)
    out = io.StringIO()
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(out, every_s=60))
    run_dir = outcome.run_dir
    assert validate_file(run_dir / "comparison.json") == []
    result = outcome.result
    # each variant runs on its own start beside the kept-up baseline: a cross-start contrast is repeated evidence,
    # which names the gain but cannot adopt it
    assert result["conclusion"]["decision"] == "inconclusive" and result["conclusion"]["evidence_level"] == "repeated"
    assert "different server starts" in result["conclusion"]["summary"]
    assert result["correctness"]["quality"]["passed"] is True and result["correctness"]["quality"]["value"] == 1.0
    assert "speculative method 'eagle' is not supported" in result["details"]["capability_missing"]["eagle"]
    rows = {(r["workload"], r["arm"]): r for r in result["details"]["speculative"]}
    assert rows[("copy", "eagle")]["decision"] == "capability_missing"
    copy = rows[("copy", "ngram-k4")]
    assert copy["decision"] == "inconclusive" and copy["e2e_effect"]["effect"]["finding"] == "material gain"
    assert copy["role"] == "primary" and copy["e2e_effect"]["design"] == "cross-start"
    # the stand-in counts drafts = gen/4, drafted = gen, accepted = gen/2 over its lifetime; the deltas
    # of one arm run are those of its 3 requests x 12 tokens
    assert copy["acceptance"]["draft_tokens"] == 5 * 3 * 12 and copy["acceptance"]["acceptance_rate"] == 0.5
    assert copy["prediction"]["cost_ratio"] == 0.0
    # the stand-in serves "auto", not float32: identity is judged on the float32 check after the measured arms (its
    # 3 copy requests), the measured arms' 15 outputs described beside it
    assert result["details"]["identity"]["method"] == "float32 check"
    assert copy["greedy_agreement"]["compared"] == 3 and copy["greedy_agreement"]["passed"] is True
    assert copy["greedy_agreement"]["basis"].startswith("the float32 check")
    described = copy["measured_agreement"]
    assert described["compared"] == 15 and "described, not judged" in described["basis"]
    assert copy["served_speedup"]["value"] > 1
    labels = [a["label"] for a in result["details"]["arm_runs"]]
    assert labels[:5] == ["copy/off"] * 5  # the baseline alone first, its co-residence reference
    assert labels[5:9] == ["copy/ngram-k4", "copy/off@ngram-k4", "natural/ngram-k4", "natural/off@ngram-k4"]
    (shift,) = [r for r in result["details"]["co_residence"]["rows"] if r["tpot_ms.p50"] is not None]
    # the shift pairs every repeat whose alone and beside runs are both valid (a busy host can void one run)
    valid = {(a["label"], a["repeat"]) for a in result["details"]["arm_runs"] if a["valid"]}
    paired = [k for k in range(1, 6) if ("copy/off", k) in valid and ("copy/off@ngram-k4", k) in valid]
    assert shift["variant"] == "ngram-k4" and shift["tpot_ms.p50"]["n_repeats"] == len(paired) >= 3
    assert 0.8 < shift["tpot_ms.p50"]["value"] < 1.25  # the stand-in baseline streams at one pace beside or alone
    assert not any("eagle" in x for x in labels)  # refused: neither measured nor checked
    assert labels[-2:] == ["identity/ngram-k4", "identity/off@ngram-k4"]
    # the natural-text control: chat API, EOS allowed; read on per-token figures; its acceptance checked low
    natural_run = json.loads((run_dir / "arms" / "natural.ngram-k4" / "r1" / "result.json").read_text())
    copy_run = json.loads((run_dir / "arms" / "copy.ngram-k4" / "r1" / "result.json").read_text())
    assert natural_run["details"]["client"]["ignore_eos"] is False and natural_run["details"]["client"]["api"] == "chat"
    assert copy_run["details"]["client"]["ignore_eos"] is True
    control_row = rows[("natural", "ngram-k4")]
    assert control_row["role"] == "control" and control_row["decided_on"] == "tpot_ms.p50"
    assert control_row["tokens_per_s_effect"]["metric"] == "output_tokens_per_s"
    control = result["details"]["negative_control"]
    (check,) = control["arms"]
    # the stand-in accepts half of every draft on both workloads: 50 % > half of copy's 50 %, so it fails
    assert not control["passed"] and check["acceptance"] == 0.5 and check["limit"] == 0.25
    assert check["like_for_like"]["baseline"]["requests"] == 5 * 6
    assert check["like_for_like"]["greedy_agreement"]["passed"] is True
    assert "negative control did not hold" in copy["capped"]
    summary = (run_dir / "summary.txt").read_text()
    assert "helps (E2E p50 interval below 1): copy/ngram-k4" in summary and "predicted vs served" in summary
    assert "proposal.json: none cited" in summary
    assert "not run here (capability_missing): eagle" in summary
    assert "baseline beside ngram-k4: TPOT p50 x" in summary
    starts = [line for line in out.getvalue().splitlines() if line.startswith("server off: starting")]
    assert len(starts) == 1  # the baseline stayed up through both phases
    (report,) = audit_paths([outcome.finished.manifest], AuditConfig(root=bench_env))
    assert report.valid, report
    assert Path(result["details"]["arms"][1]["speculative_config"]["model"]) == bench_env / "heads" / "eagle"


class LaggingStandIn(SpeculativeStandIn):
    """The n-gram server answers its 7th request with HTTP 500 (warm-up 1, repeat 1's copy 3 and control 1, then
    the second request of repeat 2's copy run; 12 in all, so only once), the float32 check's server never: one
    invalid paired arm run."""

    def server_spec(self, cfg: BackendConfig) -> ServerSpec:
        spec = super().server_spec(cfg)
        if "--speculative-config" in spec.argv and cfg.dtype != "float32":
            return ServerSpec(argv=(*spec.argv, "--fail-every", "7"), port=spec.port, env=spec.env)
        return spec


@pytest.mark.parametrize("reruns", [3, 0])
def test_bench68_redoes_an_invalid_paired_run_in_its_place_or_stops_naming_the_competing_load(bench_env, monkeypatch,
                                                                                              reruns):
    from harness.bench import invalid
    from harness.bench.hostload import Competitor, HostLoad

    busy = HostLoad(True, 0.5, 2, 1.0, (Competitor("stress", 4121, 0.97),), 3, 0.0)
    monkeypatch.setattr(invalid, "host_load", lambda: busy)
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: LaggingStandIn())
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: LaggingStandIn())
    cfg = Config(backend="fake", runtime="local", requests=3, control_requests=1, input_tokens=200, output_tokens=12,
                 warmup_requests=1, resamples=300, mc_passes=200, repeats=2, baseline_alone=False, reruns=reruns)
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    result = outcome.result
    record = result["details"]["protocol"]["reruns"]
    labels = [(a["label"], a["repeat"], a["valid"]) for a in result["details"]["arm_runs"]]
    if reruns:  # redone at once, same repeat and place; the pair is complete and the check still follows
        assert not outcome.failed and record["used"] == 1 and record["stopped_early"] is None
        (redo,) = record["runs"]
        assert (redo["arm"], redo["repeat"], redo["attempt"]) == ("copy/ngram-k4", 2, 2)
        assert labels[4:6] == [("copy/off@ngram-k4", 2, True), ("copy/ngram-k4", 2, True)]
        assert labels[-1][0] == "identity/off@ngram-k4"
        return
    # the budget spent with a niced job competing: the bench stops at once, naming it, nothing after it runs
    assert outcome.failed and result["conclusion"]["decision"] == "blocked"
    message = result["conclusion"]["failure"]["message"]
    assert message.startswith("copy/ngram-k4 repeat 2 invalid after 1 attempt(s) and the re-run budget (0")
    assert message.endswith("competing for the CPU: stress (pid 4121, 97% of a core)")
    assert labels[-1] == ("copy/ngram-k4", 2, False) and record["stopped_early"] == message
