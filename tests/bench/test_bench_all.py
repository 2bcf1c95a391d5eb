"""infkit bench --all (make benches-all): every bench in citing order, a failure does not stop the rest, one table."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import cli
from harness.bench.suite import EXITS, SuiteRow, run_suite, suite_exit_code, suite_table
from harness.commands import bench as bench_cmd
from harness.errors import InvalidInput
from harness.rundir.directory import Finished
from tests.typed_results import run_record

DECISIONS = {"00": "measured", "69": "adopt", "66": "blocked", "70": "reject", "72": "inconclusive", "81": "adopt"}


@pytest.fixture
def fake_benches(monkeypatch, tmp_path):
    """run_bench replaced: each bench writes runs/NN/run-NN/run.json with its decision; 66 fails, 68 raises."""
    monkeypatch.chdir(tmp_path)
    calls: list[tuple[str, int]] = []

    def fake_run_bench(spec, cfg, *, root, reporter, origin):
        assert origin.set_by.get("repeats") == ("make" if cfg.repeats == 4 else None)  # reaches run.json
        calls.append((spec.name, cfg.repeats))
        if spec.name == "68":
            raise InvalidInput("bench-68 refuses this host")
        run_dir = root / "runs" / spec.name / f"run-{spec.name}"
        run_dir.mkdir(parents=True, exist_ok=True)
        record = run_record(semantic_id=spec.semantic_id, run_id=f"run-{spec.name}", decision=DECISIONS[spec.name])
        (run_dir / "run.json").write_text(json.dumps(record.to_dict()))
        return SimpleNamespace(finished=Finished(run_dir, f"bench-{spec.name} summary\n", None),
                               result={"kind": "comparison"}, aborted=False, failed=spec.name == "66")

    monkeypatch.setattr(bench_cmd, "run_bench", fake_run_bench)
    monkeypatch.setattr(bench_cmd, "start_variance_here", lambda cfg, root: "pooled bench-00 run(s) ...")
    return calls


def test_every_bench_runs_in_citing_order_after_a_failure_and_the_table_says_what_each_did(fake_benches, capsys):
    code = cli.main(["bench", "--all", "--make-vars", "REPEATS=4 EXITS=69\\ 66 GPU="])
    out = capsys.readouterr()
    # every bench ran, in the default order, each with the Make variables
    assert fake_benches == [(n, 4) for n in EXITS]
    assert "bench-68 refuses this host" in out.err
    assert code == 1
    table = out.out[out.out.index("benches-all: 69 66 68 70 72 81"):].splitlines()
    rows = [line.split() for line in table[2:]]
    assert [r[0] for r in rows] == [f"bench-{n}" for n in EXITS]
    assert [r[-1] for r in rows] == ["adopt", "blocked", "run", "reject", "inconclusive", "adopt"]
    assert rows[0][3] == "ok" and rows[0][4] == str(Path("runs/69/run-69"))  # relative to where it ran
    assert rows[1][3:5] == ["exit", "1"] and rows[2][3:5] == ["exit", "1"] and rows[2][5:] == ["no", "run", "no", "run"]


def test_all_succeeding_exits_zero_and_exits_chooses_the_benches_and_their_order(fake_benches, capsys):
    assert cli.main(["bench", "--all", "--exits", "81", "69"]) == 0
    assert [name for name, _ in fake_benches] == ["81", "69"]
    assert "benches-all: 81 69" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["bench", "--all", "--exits", "69", "99"], "--exits: no bench 99"),
    (["bench", "--all", "--make-vars", "REPEATS=0"], "--repeats must be at least 1"),
    (["bench"], "name a bench or --all"),
])
def test_bad_input_is_refused_before_any_bench_runs(fake_benches, capsys, argv, message):
    assert cli.main(argv) != 0
    assert fake_benches == [] and message in capsys.readouterr().err
    assert not Path("runs").exists()


def test_an_interrupted_bench_ends_the_suite_and_the_rest_are_named_as_not_run(tmp_path):
    ran: list[str] = []

    def run_one(name: str) -> tuple[int, Path | None]:
        ran.append(name)
        return (130 if name == "66" else 0), None

    rows = run_suite(EXITS, run_one, clock=iter(range(100)).__next__)
    assert ran == ["69", "66"] and suite_exit_code(rows) == 130
    assert rows[0] == SuiteRow("69", 1, 0, None, "no run")
    assert "not run (interrupted): bench-68 bench-70 bench-72 bench-81" in suite_table(EXITS, rows)


def test_a_run_directory_without_a_readable_run_json_says_so(tmp_path):
    rows = run_suite(["69"], lambda name: (1, tmp_path))
    assert rows[0].decision == "no run.json" and suite_exit_code(rows) == 1
    (tmp_path / "run.json").write_text('{"schema": "infkit/run/v1", "decision": "adopt"}')
    (row,) = run_suite(["69"], lambda name: (0, tmp_path))
    assert row.decision.startswith(f"unreadable: {tmp_path / 'run.json'}: /: 'semantic_id' is a required property")


def test_make_benches_all_calls_the_command_with_the_exits_and_the_make_variables():
    mk = (Path(__file__).parents[2] / "mk" / "bench.mk").read_text()
    recipe = mk[mk.index("benches-all: setup"):]
    assert "$(INFKIT) bench --all --exits $(EXITS)" in recipe and "$(MAKEOVERRIDES)" in recipe
    assert "python -c" not in recipe and "for n in" not in recipe


def test_bench00_runs_first_when_a_cross_start_bench_would_pool_no_start_variance_here(fake_benches, monkeypatch,
                                                                                          capsys):
    asked: list[str] = []

    def nothing_pooled(cfg, root):
        asked.append(cfg.aa_control)
        return None

    monkeypatch.setattr(bench_cmd, "start_variance_here", nothing_pooled)
    cli.main(["bench", "--all"])
    out = capsys.readouterr()
    assert [name for name, _ in fake_benches] == ["00", *EXITS]
    assert "bench-00 runs first: bench-68, bench-70, bench-72 compare(s) arms across server starts" in out.err
    assert "benches-all: 00 69 66 68 70 72 81" in out.out and len(asked) == 3
    # benches that never cross starts, a suite naming 00 itself, or AA_CONTROL=none: the exits as given
    for argv, ran in ((["--exits", "66", "69", "81"], ["66", "69", "81"]), (["--exits", "69", "00"], ["69", "00"]),
                      (["--make-vars", "AA_CONTROL=none"], list(EXITS))):
        fake_benches.clear()
        cli.main(["bench", "--all", *argv])
        assert [name for name, _ in fake_benches] == ran
