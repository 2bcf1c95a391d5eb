"""Bench flags and Make variables come from the spec's config; bad values are one line, before any work."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from harness.bench import bench_specs
from harness.errors import InvalidInput
from harness.knobs import KnobConfig, add_config_arguments, check_config, config_from_args, knob, make_vars
from tests.bench_runs import assert_bench_refuses


@dataclass(frozen=True)
class Knobs(KnobConfig):
    count: int = knob(3, "a count", min=1)
    ratio: float = knob(0.5, "a ratio", min=0, max=1)
    rates: tuple[float, ...] = knob((), "rates")
    mode: str = knob("a", "a mode", choices=("a", "b"))
    label: str | None = knob(None, "optional text")
    on: bool = knob(True, "a switch")


def parse(*argv: str, make: str = "") -> Knobs:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Knobs)
    return config_from_args(Knobs, parser.parse_args(list(argv)), make_overrides=make)


def test_flags_parse_into_the_config_and_unset_fields_keep_their_defaults():
    assert parse() == Knobs()
    assert parse("--rates", "1,2.5", "4", "--no-on", "--label", "x") == Knobs(
        rates=(1.0, 2.5, 4.0), on=False, label="x"
    )
    assert parse("--label", "") == Knobs(label=None)


def test_make_variables_set_fields_and_flags_win_over_them():
    assert make_vars(Knobs, r"COUNT=5 RATES=1,2 TESTS=x LABEL=a\ b ON=no") == {
        "count": 5,
        "rates": (1.0, 2.0),
        "label": "a b",
        "on": False,
    }
    assert parse("--count", "7", make="COUNT=5 MODE=b") == Knobs(count=7, mode="b")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--count", "x"], "--count: cannot read 'x' as int"),
        (["--count", "0"], "--count must be at least 1, got 0"),
        (["--ratio", "inf"], "--ratio: 'inf' is not a finite number"),
        (["--ratio", "1.5"], "--ratio must be at most 1, got 1.5"),
        (["--mode", "c"], "--mode: 'c' is not one of a, b"),
        (["--rates", "1,nan"], "--rates: 'nan' is not a finite number"),
    ],
)
def test_bad_values_name_the_flag(argv, message):
    with pytest.raises(InvalidInput, match=message):
        parse(*argv)


def test_a_spec_default_is_held_to_the_same_rules():
    with pytest.raises(InvalidInput, match="--count must be at least 1"):
        check_config(Knobs(count=0))


def test_every_bench_spec_lists_every_knob_in_its_help():
    import dataclasses

    for name, spec in bench_specs().items():
        out, short = (subprocess.run([sys.executable, "-m", "harness", "bench", name, option], capture_output=True,
                                     text=True, timeout=60).stdout for option in ("--help-all", "--help"))
        for f in dataclasses.fields(spec.config):
            shown = "--" + f.name.replace("_", "-") in out
            assert shown == f.metadata.get("cli", True), (name, f.name)  # cli=False: deliberately not a flag
            in_short = re.search(rf"^  --{f.name.replace('_', '-')}\b", short, re.M) is not None
            assert in_short == (shown and f.metadata.get("group") != "protocol"), (name, f.name)


@pytest.mark.parametrize(
    "bench, args, expected",
    [
        ("66", ["--rates", "1,x"], "--rates: cannot read 'x' as float"),
        ("66", ["--tolerance", "2"], "--tolerance must be at most 1"),
        ("66", ["--dtype", "int3"], "--dtype: 'int3' is not one of"),
        ("66", ["--rates", "nan"], "--rates: 'nan' is not a finite number"),
        ("69", ["--repeats", "0"], "--repeats must be at least 1, got 0"),
        ("69", ["--prefix-tokens", "4000", "--suffix-tokens", "200"], "exceed --max-model-len 4096"),
        ("69", ["--runtime", "local", "--backend", "vllm"], "does not run under runtime local"),
    ],
)
def test_cli_bad_input_is_one_line_without_traceback_and_leaves_nothing(tmp_path, bench, args, expected):
    assert_bench_refuses(tmp_path, bench, args, expected)


def test_every_bench_is_one_make_target_away_with_knobs_as_make_variables(repo_root):
    for name in bench_specs():
        proc = subprocess.run(
            ["make", "-C", str(repo_root), "-n", f"bench-{name}", "REPEATS=5"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert f"infkit bench {name} " in proc.stdout and "--make-vars 'REPEATS=5'" in proc.stdout, proc.stdout
