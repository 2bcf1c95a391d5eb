"""The README's promises match the real CLI and Makefile."""

from __future__ import annotations

import re
import subprocess

from harness.cli import build_parser


def _subcommands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)


def test_readme_names_every_subcommand_and_no_other(repo_root):
    readme = (repo_root / "README.md").read_text()
    block = readme.split("## The command line", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"^infkit ([a-z-]+)", block, re.M))
    assert named == _subcommands()


def test_readme_make_targets_exist(repo_root):
    readme = (repo_root / "README.md").read_text()
    targets = {t for t in re.findall(r"`make ([a-z0-9-]+)", readme) if not t.endswith("-")}
    database = subprocess.run(["make", "-C", str(repo_root), "-pn", "help"], capture_output=True, text=True).stdout
    defined = set(re.findall(r"^([a-zA-Z0-9_-]+):", database, re.M))
    assert {"bench-69", "test", "audit", "images"} <= targets
    assert targets - defined == set()


def test_make_benches_all_refuses_a_bench_that_does_not_exist_before_any_runs(repo_root):
    # the loop itself is tests/bench/test_bench_all.py; here Make reaches the command with EXITS
    proc = subprocess.run(["make", "-C", str(repo_root), "--no-print-directory", "benches-all", "EXITS=69 98 99"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "--exits: no bench 98, 99" in proc.stderr and "benches-all:" not in proc.stdout
