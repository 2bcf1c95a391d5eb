"""Invalid arm runs: each one redone in its place up to a budget, and every one left named with what to do about it.

An arm run whose result is invalid (the client could not keep its schedule, a request broke, ...) describes the
host or a broken run, not the server. In a phase of fixed steps (the repeats a claim pairs) the runner redoes it at
once: the same arm, repeat and workload realisation, so the same place in the order, up to ``--reruns`` re-runs over
the whole bench. Each re-run and its reason go into the protocol record (``details.protocol.reruns``); the run it
replaced keeps its own result file. When the budget is spent and processes that are not the kit's compete for the
CPU (``harness.bench.hostload``), the bench stops early naming them: more runs on a host that invalidates them would
only spend time; on a quiet host the run is left out, as is a run whose own make-up fails it (its layout's CPU
share, tokens short of ``ignore_eos``), which no re-run can pass. A run invalid only by client stalls that left every
metric the bench reads enough requests is kept, not redone (``harness.bench.exclusion``). Steps a phase makes while
running (a sweep's levels, a search's probes) are read by their own rules and are not redone here.

Every reading then names each invalid run left in the result with its reasons, and gives one recommendation per
failed constraint (MLPerf LoadGen's ``Recommendations:``) — never "raise --repeats" for an interval that already lies
beyond its margin, where more repeats cannot change the decision but valid ones can.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness.bench.exclusion import stalls_of, usable
from harness.bench.hostload import HostLoad, host_load, wait_quiet
from harness.bench.metrics import Metric
from harness.bench.records import ArmRun, Reading
from harness.contract import Failure
from harness.progress import Reporter
from harness.serving.stalls import SPAN_TEXT, STALL_REASON


@dataclass(frozen=True)
class Constraint:
    """A failed validity constraint: how its reasons start, the failure kind it stops a bench with, the advice."""

    name: str
    starts: tuple[str, ...]
    kind: str
    advice: str
    redo: bool = True  # a re-run can pass it (contention, a broken request); False: the run's own make-up fails it


CONSTRAINTS = (
    Constraint("client schedule", ("client send lag", "client event-loop lag", "achieved send rate", STALL_REASON),
               "client_bottleneck", "the client ran late (another process held its core, or the engine's threads "
               "did): run on a quiet host (stop the competing jobs), or raise --reruns to redo more such runs"),
    Constraint("client CPU share", ("client-bound here",), "client_bottleneck",
               "the client and API server needed more CPU than was left to them: leave them a core (fewer engine "
               "threads) or lower the load", redo=False),
    Constraint("requests completed", ("requests did not complete",), "error",
               "requests broke: read the statuses in the arm's requests.jsonl and the server log tail"),
    Constraint("tokens generated", ("requests generated fewer tokens",), "correctness",
               "the engine stopped before max_tokens although ignore_eos was set: check the engine version",
               redo=False),
    Constraint("uninterrupted", ("the run was interrupted",), "aborted", "rerun without interrupting it", redo=False),
)
OTHER = Constraint("other", (), "error", "read the arm's result.json for the reason")
LATE_SENDS = ("client send lag", "achieved send rate")  # the client sent late: the load ran lower, never higher
LEFT_OUT = "left out of every effect and figure it would distort"


def constraint_text(reason: str) -> str:
    """The reason without a sweep's ``repeat N:`` prefix."""
    return reason.split(": ", 1)[1] if reason.startswith("repeat ") else reason


def constraint_of(reason: str) -> Constraint:
    """The constraint an invalid reason reports (matched on its wording, which ``serving.validity`` fixes)."""
    text = constraint_text(reason)
    return next((c for c in CONSTRAINTS if any(s in text[:60] for s in c.starts)), OTHER)


def reasons_of(run: ArmRun) -> list[str]:
    return list(run.result.conclusion.invalid_reasons) or ["invalid (no reason recorded)"]


def late_sends_only(reasons: Sequence[str]) -> bool:
    """Whether every reason says the client sent late (send lag, achieved rate): the load it ran was lower than
    scheduled, never higher, so a queue that still grew grows at the scheduled rate too."""
    return bool(reasons) and all(any(s in constraint_text(r)[:60] for s in LATE_SENDS) for r in reasons)


def is_invalid(run: ArmRun) -> bool:
    """Completed without failure, with records, but invalid: the runs a re-run can redo and a reading leaves out."""
    return not run.failure and bool(run.records) and not run.valid


def recommendations(reasons: Sequence[str], host: str | None = None) -> list[str]:
    """One recommendation per failed constraint, in the order first met; ``host`` names what competed for the CPU."""
    seen = list(dict.fromkeys(constraint_of(r) for r in reasons))
    return [f"{c.name}: {c.advice}" + (f" ({host})" if host and c.kind == "client_bottleneck" else "") for c in seen]


@dataclass
class Reruns:
    """The re-run budget of one bench, what it was spent on, and the host load that explains it
    (``harness.bench.hostload``: read before the first start and again after each invalid run)."""

    budget: int
    reporter: Reporter
    done: list[dict[str, Any]] = field(default_factory=list)  # one per re-run: arm, repeat, attempt, reason, result
    failure: Failure | None = None  # why the bench stops early, once the budget ran out
    host: HostLoad | None = None  # before the first start
    probe: Callable[[], HostLoad] | None = None  # the same reading, taken after an invalid run
    during: list[HostLoad] = field(default_factory=list)  # those readings
    # the metrics the bench's claims and controls read: a run invalid only by client stalls that left every one of
    # them enough requests is kept, not redone (``harness.bench.exclusion``); none: every invalid run is redone
    metrics: tuple[Metric, ...] = ()

    @classmethod
    def before_start(cls, cfg: Any, reporter: Reporter, effective: dict[str, Any], plan: Any = None) -> Reruns:
        """The budget of ``cfg.reruns``, after reading the host's load (waiting up to ``cfg.wait_quiet_s`` for it
        to go quiet); the reading goes into ``effective`` (run.json's). ``plan``: its claims' and controls' metrics."""
        *_, host = wait_quiet(cfg.wait_quiet_s, reporter)
        effective["host_load"] = host.to_dict()
        metrics = tuple(c.metric for c in (*plan.claims, *plan.controls)) if plan is not None else ()
        return cls(cfg.reruns, reporter, host=host, probe=host_load, metrics=metrics)

    def kept_as_is(self, run: ArmRun) -> bool:
        """Invalid only by client stalls, and usable for every metric the bench reads: kept, the requests it held
        left out of the figures they moved."""
        return bool(self.metrics) and all(usable(run, m) for m in self.metrics)

    @property
    def stopped(self) -> str | None:
        return self.failure.message if self.failure else None

    def host_note(self) -> str | None:
        """What competed for the CPU (the latest reading that saw competition, else the one before the start)."""
        seen = next((h for h in reversed(self.during) if not h.quiet), self.host)
        if seen is None or not seen.measured:
            return None
        if seen.quiet:
            return (f"the host was quiet (processes not the kit's {seen.others_cores:.2f} of {seen.cores} cores): "
                    "the kit's own processes competed")
        return f"competing for the CPU: {seen.who() or 'steal'}; --wait-quiet-s S waits up to S s for them to stop"

    def settle(self, run: ArmRun, again: Callable[[int], ArmRun]) -> ArmRun:
        """``run``, or its re-run (``again(attempt)``) until one is valid. A run invalid by its own make-up (the CPU
        share of its layout, tokens, an interrupt) is not redone; once the budget is spent, ``failure`` is set while
        processes that are not the kit's compete (or the load is unknown), and on a quiet host the run is left out:
        the contention is the kit's own and more runs would not change it. The last run is returned, to be kept."""
        attempt = 1
        while is_invalid(run) and not self.kept_as_is(run) and all(constraint_of(r).redo for r in reasons_of(run)):
            reasons = reasons_of(run)
            now = self.probe() if self.probe else None
            if now is not None:
                self.during.append(now)
                self.reporter(f"  {now.line()}")
            if len(self.done) >= self.budget:
                if now is not None and now.quiet:  # the kit's own contention: more runs would not change it
                    self.reporter(f"  {run.label} repeat {run.repeat} invalid with the re-run budget spent on a quiet "
                                  "host: left out")
                    return run
                why = (f"{run.label} repeat {run.repeat} invalid after {attempt} attempt(s) and the re-run budget "
                       f"({self.budget}, --reruns) is spent: {reasons[0]}"
                       + (f"; competing for the CPU: {now.who()}" if now and now.competitors else ""))
                self.reporter(f"  stopping early: {why}")
                self.failure = Failure(stage="run", kind=constraint_of(reasons[0]).kind, message=why)
                return run
            attempt += 1
            self.done.append({"arm": run.label, "repeat": run.repeat, "attempt": attempt, "reasons": reasons,
                              "replaced": str(run.result_path), "host": now.line() if now else None})
            self.reporter(f"  {run.label} repeat {run.repeat} invalid ({reasons[0]}): re-run {len(self.done)} of "
                          f"{self.budget}, same realisation and place")
            run = again(attempt)
        return run

    def record(self) -> dict[str, Any]:
        """The protocol record's ``reruns``: the budget, each re-run with its reason, and any early stop."""
        return {"budget": self.budget, "used": len(self.done), "runs": list(self.done), "stopped_early": self.stopped,
                "host_load_before_start": self.host.line() if self.host else None,
                "policy": "an invalid arm run of a fixed schedule is re-run at once (same arm, repeat and "
                          "realisation) unless its own make-up fails it; once the budget is spent, the next such run "
                          "stops the bench while other processes compete for the CPU, else it is left out"}

    def named(self, reading: Reading, runs: Sequence[ArmRun]) -> Reading:
        """``named`` with this bench's re-runs, early stop and host load."""
        return named(reading, runs, self.done, host=self.host_note(), stopped=self.stopped)


def invalid_entries(runs: Sequence[ArmRun], reruns: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Each invalid run: the ones re-run (redone) and the ones left in the result (left out of what they distort)."""
    redone = [{"arm": r["arm"], "repeat": r["repeat"], "attempt": r["attempt"] - 1, "reasons": r["reasons"],
               "consequence": "re-run in its place"} for r in reruns]
    kept = [{"arm": r.label, "repeat": r.repeat, "reasons": reasons_of(r), "consequence": consequence_of(r)}
            for r in runs if is_invalid(r)]
    return redone + kept


def consequence_of(run: ArmRun) -> str:
    """What became of an invalid run left in the result: left out, or (invalid only by client stalls) kept for the
    figures its stalls left enough requests."""
    record = stalls_of(run)
    valid_for = record["valid_for"] if record is not None else {}
    moved = [SPAN_TEXT[s] for s, ok in valid_for.items() if not ok]
    spared = [SPAN_TEXT[s] for s, ok in valid_for.items() if ok]
    if not spared or not all(r.startswith(STALL_REASON) for r in reasons_of(run)):
        return LEFT_OUT
    return (f"left out of the figures of its {', '.join(moved)}; kept for those of its {', '.join(spared)}, without "
            "the requests a stall held")


def named(reading: Reading, runs: Sequence[ArmRun], reruns: Sequence[dict[str, Any]] = (),
          host: str | None = None, stopped: str | None = None) -> Reading:
    """``reading`` with each invalid run's reasons and one recommendation per failed constraint. Its next step
    follows from them where the spec's would not: a bench ``stopped`` early on its re-run budget, or an
    inconclusive reading whose interval already lies beyond its margin (more repeats cannot change it; valid
    ones can)."""
    entries = invalid_entries(runs, reruns)
    if not entries:
        return reading
    advice = recommendations([why for e in entries for why in e["reasons"]], host)
    out = replace(reading, invalid_runs=tuple(entries), recommendations=tuple(advice))
    effect = reading.effect
    beyond = effect is not None and effect.finding in ("material gain", "material loss")
    if stopped:
        first = constraint_of(stopped.split(" is spent: ", 1)[-1])
        return replace(out, next_step=f"the bench stopped early on invalid runs: {first.advice}, then rerun it")
    lost = any(e["consequence"] == LEFT_OUT for e in entries)  # a run left out whole: its pair was lost
    if reading.decision == "inconclusive" and beyond and lost:
        out = replace(out, next_step=f"the interval already lies beyond the margin, so more repeats will not change "
                                     f"the decision; valid ones will: {advice[0]}")
    return out
