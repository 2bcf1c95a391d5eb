"""bench-68's spec without a server: the plan as data, the GPU arms' launch commands, bad input, the cited proposal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.backends.base import BackendConfig
from harness.backends.vllm import VllmBackend
from harness.bench.benches.bench68 import SPEC, Config
from harness.bench.benches.bench68.arms import cited_proposal
from harness.bench.spec import History
from harness.errors import InvalidInput
from harness.manifest.sign import default_manifest_path
from harness.models.stamp import PreparedModel
from harness.rundir.directory import RunDirectory
from harness.runtime.docker import mounts_for
from tests.bench.benches.test_speculative import SMOLLM2
from tests.bench_runs import assert_bench_refuses


@pytest.fixture
def model(tmp_path, monkeypatch) -> PreparedModel:
    monkeypatch.chdir(tmp_path)  # the default proposal citation looks under ./manifests
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "models" / "target"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(SMOLLM2))
    return PreparedModel(key="t", name="T", path=path, gguf_sha256="sha256:" + "0" * 64,
                         checkpoint_sha256="sha256:" + "1" * 64, tokenizer_sha256="sha256:" + "2" * 64)


def speculative_config(variant) -> dict:
    args = variant.settings["extra_args"]
    return json.loads(args[args.index("--speculative-config") + 1])


def test_plan_pairs_every_variant_with_a_baseline_kept_up(model):
    cfg = Config(ngram_tokens=(2, 4), self_draft=True, dtype="float32", repeats=3)
    plan = SPEC.plan(cfg, model).with_warmup(cfg.warmup_requests, cfg.seed)
    plan.check()
    assert [s.name for s in plan.servers] == ["off", "ngram-k2", "ngram-k4", "self-draft"]  # float32: no check
    assert all(s.optional for s in plan.servers[1:]) and not plan.servers[0].optional
    assert speculative_config(plan.server("ngram-k4")) == {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert speculative_config(plan.server("self-draft")) == {"method": "draft_model", "model": str(model.path),
                                                            "num_speculative_tokens": 3}
    assert all(s.settings["kv_cache_space_gib"] == 2 for s in plan.servers)  # bench-00's, so its start variance fits
    # the baseline alone first (its co-residence reference), then kept up beside each variant in turn
    assert [(p.servers, p.keep) for p in plan.phases] == [(("off",), ())] + [(("off", v), ("off",)) for v in
                                                                             ("ngram-k2", "ngram-k4", "self-draft")]
    history = History(cfg=cfg, model=model)
    assert list(plan.phases[0].steps(history)) == [(r, plan.arms[0]) for r in (1, 2, 3)]
    assert plan.arms[0].label == "copy/off"
    # the paired phases are made while running (a refused variant's partner is skipped) and redo invalid runs; the
    # alone runs feed a shift that decides nothing, so they spend none of the re-run budget
    assert all(p.rerun for p in plan.phases[1:]) and not plan.phases[0].rerun
    # copy on every variant; the natural-text control on the n-gram variant proposing most only
    assert [p.planned_steps for p in plan.phases[1:]] == [6, 12, 6]
    assert [w.kind for w in plan.workloads] == ["copy", "natural", "random"] and not plan.workloads[2].measured
    assert plan.workloads[2].common.input_tokens == plan.workloads[0].common.input_tokens == 192  # warm-up: copy
    assert plan.workloads[0].common.output_tokens == plan.workloads[1].common.output_tokens == 32
    assert plan.notes[0].startswith("request lengths: 32 output tokens: 32 (SIZE=reference: the reference host's "
                                    "default)")
    assert len(plan.claims) == 3 * 2 + 2  # copy (E2E, TPOT) per variant, control (TPOT, tokens/s) on ngram-k4
    assert plan.claims[0].baseline == "copy/off@ngram-k2" and plan.claims[0].treatment == "copy/ngram-k2"
    assert plan.read is not None


def test_the_defaults_are_one_n_gram_variant_six_repeats_and_a_float32_identity_check(model):
    cfg = Config(dtype="bfloat16")
    assert (cfg.repeats, cfg.requests, cfg.control_requests, cfg.ngram_tokens, cfg.draft_layers, cfg.self_draft) == (
        6, 4, 6, (4,), 0, False)
    plan = SPEC.plan(cfg, model).with_warmup(cfg.warmup_requests, cfg.seed)
    plan.check()
    # bf16 measured arms: greedy identity is judged on a float32 check after them, speculation off the reference
    assert [s.name for s in plan.servers] == ["off", "ngram-k4", "off-fp32", "ngram-k4-fp32"]
    for name in ("off-fp32", "ngram-k4-fp32"):
        assert plan.server(name).settings["dtype"] == "float32" and plan.server(name).settings["enforce_eager"]
    assert speculative_config(plan.server("ngram-k4-fp32")) == speculative_config(plan.server("ngram-k4"))
    assert plan.server("off").settings["dtype"] == "bfloat16" and plan.server("ngram-k4-fp32").optional
    check = plan.phases[-1]
    assert (check.servers, check.keep, check.rerun) == (("off-fp32", "ngram-k4-fp32"), ("off-fp32",), False)
    history = History(cfg=cfg, model=model)
    assert [(r, a.label, a.workload) for r, a in check.steps(history)] == [
        (1, "identity/ngram-k4", "copy"), (1, "identity/off@ngram-k4", "copy")]
    history.refused["ngram-k4-fp32"] = "refused"
    assert list(check.steps(history)) == []  # no baseline run is spent on a check that cannot compare
    assert "checked in float32" in plan.schedule.protocol
    assert [p.name for p in SPEC.plan(Config(dtype="float32"), model).phases] == ["off", "off+ngram-k4"]


def test_the_negative_control_is_natural_text_served_with_eos_allowed(model):
    cfg = Config(ngram_tokens=(2, 4), self_draft=True, dtype="float32")
    plan = SPEC.plan(cfg, model)
    control = next(w for w in plan.workloads if w.name == "natural")
    assert control.kind == "natural" and control.common.requests == 6 and control.common.output_tokens <= 64
    natural = [a for a in plan.arms if a.workload == "natural"]
    assert [a.label for a in natural] == ["natural/off@ngram-k4", "natural/ngram-k4"]  # the K proposing most
    # EOS allowed (max_tokens is a cap), through the chat template that ends an answer; copy keeps ignore_eos
    assert all(a.client == {"api": "chat", "ignore_eos": False} for a in natural)
    assert all(a.client == {} for a in plan.arms if a.workload == "copy") and plan.ignore_eos
    control_claims = [c for c in plan.claims if c.treatment.startswith("natural/")]
    assert {c.metric.name for c in control_claims} == {"tpot_ms.p50", "output_tokens_per_s"}  # per token, not E2E
    assert (cfg.control_max_acceptance, cfg.control_max_copy_share) == (0.5, 0.5)
    no_ngram = SPEC.plan(Config(ngram_tokens=(), self_draft=True, baseline_alone=False, dtype="float32"), model)
    assert [w.name for w in no_ngram.workloads] == ["copy"]  # the control is prompt lookup's
    assert [p.name for p in no_ngram.phases] == ["off+self-draft"]


def test_natural_prompts_are_distinct_and_drawn_without_replacement(tokenizer_dir):
    from harness.workload import Arrival, Common, make_workload
    from harness.workload.natural import PROMPTS

    assert len(set(PROMPTS)) == len(PROMPTS) >= 24
    common = Common(arrival=Arrival("closed", concurrency=1), seed=3, requests=8, output_tokens=48)
    made = make_workload("natural", common, {}, tokenizer_dir)
    prompts = [r.prompt for r in made.requests]
    assert len(set(prompts)) == 8 and set(prompts) <= set(PROMPTS)
    assert all(r.output_tokens == 48 and r.input_tokens > 5 for r in made.requests)
    assert make_workload("natural", common, {}, tokenizer_dir).workload_id == made.workload_id
    with pytest.raises(InvalidInput, match="distinct prompts"):
        make_workload("natural", replace(common, requests=len(PROMPTS) + 1), {}, tokenizer_dir)


def test_gpu_arms_launch_commands_name_their_heads_and_mount_them(model, tmp_path):
    eagle, eagle3 = tmp_path / "heads" / "eagle", tmp_path / "heads" / "eagle3"
    eagle.mkdir(parents=True)
    eagle3.mkdir(parents=True)
    cfg = Config(ngram_tokens=(), draft_layers=0, self_draft=False, eagle_model=str(eagle),
                 eagle3_model=str(eagle3), mtp=True, draft_tokens=2, backend="vllm", runtime="docker", dtype="auto")
    plan = SPEC.plan(cfg, model)
    assert [s.name for s in plan.servers][:4] == ["off", "eagle", "eagle3", "mtp"]
    assert [s.name for s in plan.servers][4:] == ["off-fp32", "eagle-fp32", "eagle3-fp32", "mtp-fp32"]
    base = BackendConfig(model_dir=str(model.path), served_model_name="m", port=8000, gpus=(0,))
    expected = {"eagle": {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 2},
                "eagle3": {"method": "eagle3", "model": str(eagle3), "num_speculative_tokens": 2},
                "mtp": {"method": "mtp", "num_speculative_tokens": 2}}
    for name, want in expected.items():
        argv = VllmBackend().server_spec(replace(base, **plan.server(name).settings)).argv
        assert argv[:3] == ("python3", "-m", "vllm.entrypoints.openai.api_server")
        assert json.loads(argv[argv.index("--speculative-config") + 1]) == want
        assert "--gpu-memory-utilization" in argv
        volumes = mounts_for(argv, tmp_path / "run", tmp_path / "repo")
        if "model" in want:  # the head directory is mounted read-only into the container
            assert volumes[want["model"]] == {"bind": want["model"], "mode": "ro"}


def test_no_speculative_arm_is_an_input_error(model):
    with pytest.raises(InvalidInput, match="no speculative arm to run"):
        SPEC.plan(Config(ngram_tokens=(), draft_layers=0, self_draft=False), model)


@pytest.mark.parametrize("args, expected", [
    (["--prompt-lookup-min", "5"], "--prompt-lookup-min must not exceed --prompt-lookup-max"),
    (["--ngram-tokens", "0"], "--ngram-tokens must be at least 1, got 0"),
    (["--draft-tokens", "17"], "--draft-tokens must be at most 16"),
    (["--input-tokens", "80", "--output-tokens", "64"], "must exceed --output-tokens by 32"),
    (["--eagle-model", "/no/such/head"], "--eagle-model /no/such/head: no such directory"),
    (["--control-requests", "20", "--scale", "2"], "--control-requests x --scale = 40"),
    (["--control-output-tokens", "65"], "--control-output-tokens must be at most 64"),
    (["--proposal-manifest", "missing.intoto.json"], "cited manifest missing.intoto.json: no such file"),
])
def test_cli_bad_input_is_one_line_and_leaves_nothing(tmp_path, args, expected):
    assert_bench_refuses(tmp_path, "68", args, expected)


PROPOSAL = {
    "schema": "infkit/proposal/v1", "semantic_id": "INF-PROPOSAL", "run_id": "r", "device": "cpu", "torch": "2.13.0",
    "model": {"name": "m", "version": "sha256:1"}, "tokenizer": {"name": "m", "version": "sha256:2"},
    "draft": {"kind": "truncated_target", "layers": 10},
    "decoding": {"greedy": True, "max_new_tokens": 64, "dtype": "float32"}, "baseline_arm": "target",
    "arms": [{"arm": arm, "settings": {}, "calls": 4, "latency_ms": {"n": 4, "mean": 1.0, "p50": 1.0, "p95": 1.0,
                                                                         "p99": 1.0},
              "new_tokens": 64, "target_forward_passes": passes, "tokens_per_target_pass": 64 / passes,
              "accepted_tokens_per_pass": 64 / passes - 1, "identical_to_target": True, "speedup_vs_target": s,
              "net_benefit_ms": 0.0} for arm, passes, s in (("target", 64, 1.0), ("prompt_lookup", 32, 1.4),
                                                            ("constant", 40, 0.8))]}


FINGERPRINT = json.loads((Path(__file__).parents[2] / "examples" / "valid" / "fingerprint-no-gpu.json").read_text())


def signed_run(root: Path, files: dict[str, object]) -> Path:
    rd = RunDirectory.create(root / "runs" / "cuda" / "proposal", semantic_id="INF-PROPOSAL", run_label="t",
                             requested={}, root=root, fingerprint=FINGERPRINT)
    for name, doc in files.items():
        rd.write_json(name, doc)
    # no result document: a precheck (evidence above it needs a verified result behind it)
    return rd.finish(summary="t", result=None, evidence_level="precheck", decision="inconclusive").manifest


def test_the_newest_proposal_run_is_cited_after_its_audit(model, tmp_path, monkeypatch):
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a private default key, made on first use
    assert cited_proposal(None, tmp_path)[0] is None
    assert "none cited" in cited_proposal(None, tmp_path)[1]
    with_doc = signed_run(tmp_path, {"proposal.json": {**PROPOSAL, "run_id": "a"}})
    signed_run(tmp_path, {"other.json": {}})  # a newer INF-PROPOSAL run without proposal.json (mech specdec)
    citation, why = cited_proposal(None, tmp_path)
    assert citation.manifest == with_doc and why == f"cited {with_doc}"
    assert citation.sha256.startswith("sha256:") and citation.run_dir == with_doc.parent.parent.parent / \
        "runs" / "cuda" / "proposal" / citation.run.run_id
    assert cited_proposal("none", tmp_path) == (None, "not cited (--proposal-manifest none)")
    doc = citation.file("proposal.json")
    doc.write_text(json.dumps({**json.loads(doc.read_text()), "device": "cuda"}))
    with pytest.raises(InvalidInput, match="does not audit VALID"):  # an edited proposal never feeds a prediction
        cited_proposal(str(with_doc), tmp_path)
    assert default_manifest_path(tmp_path, "INF-PROPOSAL", citation.run.run_id) == with_doc


def test_a_proposal_made_on_random_weights_is_never_cited(model, tmp_path, monkeypatch):
    """The GPU bundle's proposal step runs on a seeded random tiny Llama: its acceptance predicts nothing about a served
    model, so the newest such run is passed over with the reason, and naming it is a one-line input error."""
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    random_doc = {**PROPOSAL, "model": {"name": "tiny-llama-random", "version": "config:tiny;init-seed=0"},
                  "citable": False, "not_citable_reason": "made on the seeded random tiny Llama (random weights)"}
    manifest = signed_run(tmp_path, {"proposal.json": random_doc})
    citation, why = cited_proposal(None, tmp_path)
    assert citation is None and "is not citable: made on the seeded random tiny Llama" in why
    with pytest.raises(InvalidInput, match="not citable") as info:
        cited_proposal(str(manifest), tmp_path)
    assert "\n" not in str(info.value)
    unmarked = {**PROPOSAL, "model": random_doc["model"]}  # a document from before the mark: judged by its target
    later = signed_run(tmp_path, {"proposal.json": {**unmarked, "run_id": "b"}})
    with pytest.raises(InvalidInput, match="random weights"):
        cited_proposal(str(later), tmp_path)
