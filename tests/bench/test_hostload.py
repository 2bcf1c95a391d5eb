"""The quiet-host check read from /proc, against a real CPU-burning process that is not the kit's."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest

from harness.bench import hostload
from harness.bench.hostload import Competitor, HostLoad, host_load, kit_pids, wait_quiet
from harness.bench.invalid import Reruns
from harness.progress import Reporter
from tests.bench.test_analysis import read
from tests.bench.test_invalid import LOOP_LAG, UNIQUE, bench69_step

BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"
pytestmark = pytest.mark.skipif(not os.path.isfile("/proc/stat"), reason="reads /proc")


def burner(seconds: float, detached: bool) -> int:
    """A busy loop for ``seconds`` (bounded): detached, it is started by a short-lived launcher and so is not a
    descendant of this process (another job on the host); else it is this process's own child."""
    code = BURN.format(s=seconds)
    if not detached:
        return subprocess.Popen([sys.executable, "-c", code]).pid
    launch = (f"import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', {code!r}], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True).pid)")  # not our pipe
    return int(subprocess.run([sys.executable, "-c", launch], capture_output=True, text=True, check=True).stdout)


def stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_cpu_bound_process_that_is_not_the_kits_is_named_with_its_share():
    pid = burner(4.0, detached=True)
    try:
        load = host_load(1.0)
    finally:
        stop(pid)
    assert load.measured and load.cores == os.cpu_count() and load.run_queue is not None
    named = {c.pid: c for c in load.competitors}
    # named with its share: a busy loop holds a core on an idle host, less where others share the cores with it
    assert pid in named and named[pid].name.startswith("python") and named[pid].share >= 0.05, load.line()
    assert load.others_cores >= named[pid].share and load.steal_share is not None
    assert not load.quiet and load.line().startswith("host not quiet: processes not the kit's use ")
    assert f"(pid {pid}, " in load.line() and "expect invalid runs" in load.line() and "--wait-quiet-s S" in load.line()
    assert load.to_dict()["line"] == load.line() and load.to_dict()["quiet"] is False


def test_the_kits_own_children_are_not_competitors():
    pid = burner(3.0, detached=False)
    try:
        load = host_load(0.8)
        assert pid in kit_pids(hostload._processes(), os.getpid())  # noqa: SLF001
    finally:
        stop(pid)
    assert pid not in {c.pid for c in load.competitors}
    assert os.getppid() not in {c.pid for c in load.competitors}  # what launched the kit is the kit's too


def test_waiting_for_quiet_reads_until_quiet_or_the_deadline(monkeypatch):
    busy = HostLoad(True, 0.5, 2, 1.0, (Competitor("stress", 41, 0.98),), 3, 0.0)
    quiet = HostLoad(True, 0.5, 2, 0.02, (), 1, 0.0)
    readings = iter([busy, busy, quiet, busy])
    monkeypatch.setattr(hostload, "host_load", lambda window_s: next(readings))
    said: list[str] = []
    assert list(wait_quiet(60.0, said.append)) == [busy, busy, quiet]
    assert said[0].startswith("host not quiet") and said[-1].startswith("host quiet: ")
    monkeypatch.setattr(hostload, "host_load", lambda window_s: busy)
    assert list(wait_quiet(0.0)) == [busy]  # no wait: one reading, said and recorded
    assert HostLoad(False, reason="no /proc/stat on this host").line() == ("host load not measured: no /proc/stat on "
                                                                          "this host")


def test_each_invalid_run_is_explained_by_the_load_read_after_it():
    busy = HostLoad(True, 0.5, 2, 1.0, (Competitor("stress", 41, 0.98),), 3, 0.0)
    reruns = Reruns(0, Reporter(io.StringIO()), host=HostLoad(True, 0.5, 2, 0.01, (), 1, 0.0),
                    probe=lambda: busy)
    run = reruns.settle(bench69_step(1, UNIQUE, {(UNIQUE, 1, 1)}), lambda n: bench69_step(1, UNIQUE, set(), n))
    assert not run.valid and reruns.failure is not None
    assert reruns.failure.message.endswith(f"{LOOP_LAG}; competing for the CPU: stress (pid 41, 98% of a core)")
    assert reruns.host_note() == ("competing for the CPU: stress (pid 41, 98% of a core); --wait-quiet-s S waits up "
                                  "to S s for them to stop")
    reading = reruns.named(read([run]), [run])
    assert reading.recommendations[0].endswith("(competing for the CPU: stress (pid 41, 98% of a core); "
                                               "--wait-quiet-s S waits up to S s for them to stop)")


def test_on_a_quiet_host_a_spent_budget_leaves_the_run_out_and_a_runs_own_make_up_is_not_redone():
    quiet = HostLoad(True, 0.5, 2, 0.01, (), 1, 0.0)
    reruns = Reruns(0, Reporter(io.StringIO()), host=quiet, probe=lambda: quiet)
    run = reruns.settle(bench69_step(1, UNIQUE, {(UNIQUE, 1, 1)}), lambda n: bench69_step(1, UNIQUE, set(), n))
    assert not run.valid and reruns.failure is None and not reruns.done  # the kit's own contention: left out
    assert reruns.host_note().startswith("the host was quiet")
    # the client-share rule fails by the layout itself: never redone, never a stop, whatever the budget
    own = Reruns(3, Reporter(io.StringIO()), probe=lambda: quiet)
    shared = bench69_step(1, UNIQUE, set())
    shared.result.conclusion.valid = False
    shared.result.conclusion.invalid_reasons = ["client-bound here: the client and API server used 1.30 cores"]
    assert own.settle(shared, lambda n: bench69_step(1, UNIQUE, set(), n)) is shared and not own.done


def test_bench68s_all_lagged_arms_stop_early_naming_the_competing_load():
    # the recorded run: 28 of 33 arm runs lagged ("client event-loop lag P99 20-46 ms > 20 ms") beside a niced job;
    # it ran 7 min 18 s to a blocked end. Now the first lagged run is redone 3 times, lags again, and the bench stops
    # on its second arm run, naming the job.
    from tests.bench.test_invalid import arm_run

    busy = HostLoad(True, 0.5, 2, 1.0, (Competitor("stress", 4121, 0.97),), 3, 0.0)
    reruns = Reruns(3, Reporter(io.StringIO()), host=busy, probe=lambda: busy)
    lag = [f"client event-loop lag P99 {20 + k:.1f} ms > 20.0 ms (5% of TTFT P99 / mean arrival gap) with 1 client "
           "process(es): the client is a bottleneck" for k in range(1, 34)]
    steps = [(r, label) for r in range(1, 12) for label in ("off", "ngram-k4", "draft-10L")]  # 33 arm runs
    ran = []
    for i, (repeat, label) in enumerate(steps):
        first = arm_run(label, repeat, {0: 50.0}, (lag[i],) if i % 6 else ())  # 28 of 33 lag on their first try
        ran.append(reruns.settle(first, lambda n, i=i, r=repeat, lab=label: arm_run(lab, r, {0: 50.0}, (lag[i],), n)))
        if reruns.failure is not None:
            break
    assert len(reruns.done) == 3 and len(ran) == 2  # three re-runs (all lagged again), then the stop
    assert reruns.failure.message.startswith("ngram-k4 repeat 1 invalid after 4 attempt(s)")
    assert reruns.failure.kind == "client_bottleneck" and "stress (pid 4121, 97% of a core)" in reruns.failure.message
    assert [d["host"] for d in reruns.done] == [busy.line()] * 3
