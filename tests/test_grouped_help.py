"""--help shows the knobs that change a bench's (a mechanism's, a CUDA experiment's) answer; --help-all adds the
protocol; every flag parses either way."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from harness.bench import bench_specs
from harness.bench.spec import BenchConfig
from harness.knobs import KnobConfig, add_config_arguments, cli_name, config_from_args, flag, knob

QUESTION = {"size", "model", "server", "repeats", "margin"}
PROTOCOL = {"resamples", "warmup_requests", "start_timeout_s", "request_timeout_s", "out_root", "sign", "aa_control",
            "kv_cache_space_gib", "enforce_eager", "runtime", "backend", "gpu"}


def _flags(text: str) -> set[str]:
    return set(re.findall(r"^  (--[a-z0-9-]+)", text, re.M))


def _shown(spec, option: str, capsys) -> set[str]:
    parser = argparse.ArgumentParser(prog=f"infkit bench {spec.name}")
    add_config_arguments(parser, spec.config)
    with pytest.raises(SystemExit):
        parser.parse_args([option])
    return _flags(capsys.readouterr().out)


@pytest.mark.parametrize("name", sorted(bench_specs()))
def test_help_shows_the_question_and_help_all_adds_the_protocol(name, capsys):
    spec = bench_specs()[name]
    short, full = _shown(spec, "--help", capsys), _shown(spec, "--help-all", capsys)
    every = {flag(f.name) for f in dataclasses.fields(spec.config) if f.metadata.get("cli", True)}
    assert short < full and every <= full
    assert {flag(n) for n in QUESTION} <= short and not {flag(n) for n in PROTOCOL} & short
    assert "--help-all" in short


@pytest.mark.parametrize("name", sorted(bench_specs()))
def test_every_flag_hidden_or_shown_still_parses_to_its_field(name):
    spec = bench_specs()[name]
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, spec.config)
    base = spec.config()
    protocol = [f for f in dataclasses.fields(spec.config) if f.metadata.get("group") == "protocol"]
    assert protocol, "every bench has protocol knobs (BenchConfig's)"
    for f in dataclasses.fields(spec.config):
        value = getattr(base, f.name)
        if not f.metadata.get("cli", True) or value is None or value == ():
            continue
        if isinstance(value, bool):
            argv = [flag(f.name) if value else "--no-" + flag(f.name)[2:]]
        elif isinstance(value, tuple):
            argv = [flag(f.name), ",".join(map(str, value))]
        else:
            argv = [flag(f.name), str(value)]
        cfg = config_from_args(spec.config, parser.parse_args(argv))
        assert getattr(cfg, f.name) == value, (f.name, argv)


def test_a_config_without_protocol_knobs_gets_no_help_all():
    @dataclasses.dataclass(frozen=True)
    class Plain(KnobConfig):
        n: int = knob(1, "a count")

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Plain)
    assert "--help-all" not in parser.format_help() and "--n" in parser.format_help()


def test_the_grouping_is_metadata_every_plug_in_shares():
    # BenchConfig's own protocol knobs, declared once, reach every bench
    groups = {f.name: f.metadata.get("group") for f in dataclasses.fields(BenchConfig)}
    assert {n for n, g in groups.items() if g == "protocol"} >= PROTOCOL
    assert all(groups[n] == "question" for n in QUESTION)


def _command_help(argv: list[str], capsys) -> set[str]:
    from harness.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    return _flags(capsys.readouterr().out)


def _commands() -> list[tuple[str, str, type]]:
    from harness.cuda.registry import experiments
    from harness.mech import mechanisms

    return ([("mech", name, m.config) for name, m in sorted(mechanisms().items())]
            + [("cuda", name, e.config) for name, e in sorted(experiments().items())])


# what only --help-all shows on every mechanism and CUDA experiment: where the run goes, how it is signed, seeds
RUN_PROTOCOL = {"--out", "--sign"}


@pytest.mark.parametrize(("kind", "name", "config"), _commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_mech_and_cuda_help_show_the_question_and_help_all_the_protocol(kind, name, config, capsys):
    short = _command_help([kind, name, "--help"], capsys)
    full = _command_help([kind, name, "--help-all"], capsys)
    fields = {flag(cli_name(f)): f.metadata.get("group") for f in dataclasses.fields(config)
              if f.metadata.get("cli", True)}
    question = {option for option, group in fields.items() if group != "protocol"}
    assert short == question | {"--help-all"}  # exactly the question's knobs
    assert set(fields) | RUN_PROTOCOL <= full and RUN_PROTOCOL.isdisjoint(short)
    assert "--seed" not in short and ("--device" in full) == (kind == "cuda")
    assert len(short) < len(full)


def test_the_questions_of_mechanisms_and_experiments_are_their_workload_model_and_arms(capsys):
    assert {"--model", "--modes", "--requests", "--rate-rps"} <= _command_help(["mech", "batching", "--help"], capsys)
    assert {"--model", "--repeats"} <= _command_help(["mech", "calibrate", "--help"], capsys)
    assert {"--model", "--arms"} <= _command_help(["cuda", "proposal", "--help"], capsys)
    assert {"--warmup", "--iters", "--threads"}.isdisjoint(_command_help(["cuda", "attention", "--help"], capsys))
