"""--help shows the knobs that change a bench's answer; --help-all adds the protocol; every flag parses either way."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from harness.bench import bench_specs
from harness.bench.spec import BenchConfig
from harness.knobs import KnobConfig, add_config_arguments, config_from_args, flag, knob

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
