"""Every value is checked before any work starts: bounded integer knobs, non-empty lists, GPU indexes,
the whole bench plan (its citations audited) before the model is prepared, mechanism flags before a
run folder exists, the workload's request lengths before the first request, and audit's paths."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, assert_nothing_left, infkit

from harness.bench import bench_specs
from harness.cuda.registry import experiments
from harness.errors import InvalidInput
from harness.knobs import _field_types, _unwrap, add_config_arguments, config_from_args
from harness.mech import mechanisms
from tests.bench_runs import assert_bench_refuses
from tests.fake_openai_server import FakeConfig, FakeOpenAIServer

HUGE = "1" + "0" * 60


def config_classes() -> list[type]:
    return [*(s.config for s in bench_specs().values()), *(m.config for m in mechanisms().values()),
            *(e.config for e in experiments().values())]


@pytest.mark.parametrize("cls", config_classes(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_integer_knob_has_an_upper_bound_a_result_can_hold(cls):
    from harness.knobs import SEED_MAX, int_bound

    for f, hint in _field_types(cls):
        kind, _, _ = _unwrap(hint)
        if kind is int:
            bound = int_bound(f, kind)
            assert bound is not None and bound <= SEED_MAX, f"{cls.__name__}.{f.name} is unbounded"
            default = f.default if isinstance(f.default, tuple) else (f.default,)
            assert all(d is None or d <= bound for d in default), f"{cls.__name__}.{f.name}: default above its bound"


@pytest.mark.parametrize("args, expected", [
    (["--requests", HUGE], "--requests must be at most"),
    (["--repeats", HUGE], "--repeats must be at most"),
    (["--scale", HUGE], "--scale must be at most"),
    (["--resamples", HUGE], "--resamples must be at most"),
    (["--max-model-len", HUGE], "--max-model-len must be at most"),
    (["--seed", str(2**64)], "--seed must be at most"),
    (["--gpu", "abc"], "is not a GPU index"),
    (["--gpu", "-1"], "is not a GPU index"),
    (["--rate-fractions", ""], "--rate-fractions: needs at least one value"),
])
def test_bench66_refuses_before_any_work(tmp_path, args, expected):
    assert_bench_refuses(tmp_path, "66", args, expected)


@pytest.mark.parametrize("number, args, expected", [
    ("69", ["--dtype", ""], "--dtype: an empty value is not one of bfloat16"),
    ("72", ["--dtypes", ""], "--dtypes: needs at least one value (leave the flag out for the default"),
    ("69", ["--server", ""], "--server: needs at least one value"),
    ("69", ["--server", "cache-on"], "--server 'cache-on': expected VARIANT=http://HOST:PORT"),
])
def test_an_empty_or_malformed_value_is_refused_not_taken_for_the_default(tmp_path, number, args, expected):
    assert_bench_refuses(tmp_path, number, args, expected)


def test_an_empty_list_is_refused_where_the_default_is_not_empty(tmp_path):
    assert_bench_refuses(tmp_path, "72", ["--max-num-seqs-values", ""],
                         "--max-num-seqs-values: needs at least one value")


def refused_before_setup(tmp_path: Path, monkeypatch, number: str, argv: list[str], match: str) -> None:
    """``run_bench`` with ``argv`` raises ``InvalidInput`` matching ``match`` and never reaches ``ensure_model``."""
    from harness.bench import runner
    from harness.models import find_model

    if find_model("smollm2-135m") is None:
        pytest.skip("no prepared model in the cache: the plan is then checked after the model is prepared")
    monkeypatch.chdir(tmp_path)

    def no_setup(*_a, **_k):
        raise AssertionError("setup started before the plan was checked")

    monkeypatch.setattr(runner, "resolve_model", no_setup)
    spec = bench_specs()[number]
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, spec.config)
    with pytest.raises(InvalidInput, match=match):
        runner.run_bench(spec, config_from_args(spec.config, parser.parse_args(argv)), root=tmp_path)
    assert_nothing_left(tmp_path / "runs", tmp_path / "manifests")


@pytest.mark.parametrize("number, flag", [("68", "--proposal-manifest"),
                                          ("70", "--cost-model-manifest"), ("72", "--baseline")])
@pytest.mark.parametrize("content", [None, "garbage", json.dumps({"payloadType": "text/plain", "payload": ""})])
def test_a_bad_citation_is_refused_before_the_model_is_prepared(tmp_path, monkeypatch, number, flag, content):
    """The plan (and the cited manifest's audit) comes before ``ensure_model``: it must never be reached."""
    cited = tmp_path / "cited.intoto.json"
    if content is not None:
        cited.write_text(content)
    refused_before_setup(tmp_path, monkeypatch, number, [flag, str(cited)], "manifest")


def test_draft_layers_beyond_the_model_are_refused_before_the_model_is_prepared(tmp_path, monkeypatch):
    refused_before_setup(tmp_path, monkeypatch, "68", ["--draft-layers", "999"], "draft layers must be between 1")


@pytest.mark.parametrize("args, expected", [
    (["68", "--draft-layers", "1000"], "draft layers must be between 1 and 29 (smollm2-135m has 30)"),
    (["68", "--no-self-draft", "--draft-layers", "0", "--ngram-tokens", ""], "no speculative arm to run"),
    (["68", "--proposal-manifest", "missing.intoto.json"], "cited manifest missing.intoto.json: no such file"),
    (["68", "--proposal-manifest", "garbage.json"], "--proposal-manifest: cited manifest garbage.json"),
    (["70", "--cost-model-manifest", "garbage.json"], "--cost-model-manifest: cited manifest garbage.json"),
    (["72", "--baseline", "garbage.json"], "--baseline: cited manifest garbage.json does not audit VALID"),
    (["72", "--baseline", "missing.intoto.json"], "--baseline: cited manifest missing.intoto.json: no such file"),
])
def test_a_new_user_s_bad_value_is_refused_before_the_model_or_any_venv(tmp_path, args, expected):
    """With nothing in the cache (a new user), a value the model or a cited file decides is refused before the model
    is prepared: no venv is built, nothing is left behind."""
    (tmp_path / "garbage.json").write_text("garbage")
    cache = tmp_path / "cache"
    proc = infkit("bench", *args, cwd=tmp_path, env={"INFKIT_CACHE": str(cache)})
    assert_clean_error(proc, expected)
    assert_nothing_left(cache, tmp_path / "runs", tmp_path / "manifests")


def test_keys_trust_refuses_an_empty_value(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert_clean_error(infkit("keys", "trust", "", cwd=tmp_path, env=env), "keys trust: FILE is empty")
    assert_nothing_left(tmp_path / "config")


def test_a_run_that_measured_nothing_leaves_no_folder_it_made(tmp_path):
    from harness.rundir.directory import RunDirectory

    (tmp_path / "runs").mkdir()
    rd = RunDirectory.create(tmp_path / "runs" / "cuda" / "budget", semantic_id="INF-ITERATION-BUDGET",
                             run_label="budget", requested={}, root=tmp_path, sign=False, fingerprint={})
    rd.abandon(has_data=False, error=InvalidInput("--layers 1000: the model has 30"))
    assert list((tmp_path / "runs").iterdir()) == []  # runs/ was there before; runs/cuda/budget was made for it


@pytest.mark.parametrize("args, expected", [
    (["budget", "--contexts", HUGE], "--contexts must be at most"),
    (["budget", "--activation-bytes", HUGE], "--activation-bytes must be at most"),
    (["specdec", "--passes", HUGE], "--passes must be at most"),
    (["kvcache", "--num-blocks", HUGE], "--num-blocks must be at most"),
    (["batching", "--seed", str(2**63)], "--seed must be at most"),
])
def test_mechanism_flags_with_huge_values_are_refused_before_a_run_folder(tmp_path, args, expected):
    proc = infkit("mech", *args, "--out", str(tmp_path / "out"), "--no-sign", cwd=tmp_path)
    assert_clean_error(proc, expected)
    assert_nothing_left(tmp_path / "out", tmp_path / "manifests")


def test_run_refuses_request_lengths_workload_make_never_writes(tokenizer_dir, tmp_path):
    from harness.workload import make_workload, write_workload
    from harness.workload.arrival import Arrival
    from harness.workload.generators import MAX_TOKENS, Common
    from harness.workload.model import Request, finish_workload

    made = make_workload("random", Common(arrival=Arrival("closed", concurrency=2), requests=4, input_tokens=20,
                                          output_tokens=6), {}, tokenizer_dir)
    absurd = [dataclasses.replace(r, output_tokens=10**12) if r.index == 2 else r for r in made.requests]
    assert all(isinstance(r, Request) for r in absurd)
    path = write_workload(tmp_path / "absurd.jsonl", finish_workload(dict(made.header), absurd))
    with FakeOpenAIServer(FakeConfig()) as srv:
        proc = infkit("run", "--endpoint", srv.url, "--model", "fake", "--workload", str(path),
                      "--out", str(tmp_path / "run"))
        sent = srv.state.requests
    assert_clean_error(proc, "workload request 2: output_tokens", f"[1, {MAX_TOKENS}]")
    assert sent == 0
    assert_nothing_left(tmp_path / "run")


@pytest.mark.parametrize("path", ["a" * 300 + ".intoto.json", "/".join(["b" * 200] * 30)])
def test_audit_of_a_name_over_the_file_system_limit_is_one_line(tmp_path, path):
    assert_clean_error(infkit("audit", path, cwd=tmp_path), "File name too long")
    assert_clean_error(infkit("audit", "--root", "r" * 300, "x", cwd=tmp_path), "--root", "File name too long")


