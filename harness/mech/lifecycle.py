"""Request lifecycle (INF-REQUEST-LIFECYCLE): a state machine over event traces, and its reducer.

States: waiting -> running -> (preempted -> running)* -> finished_{stopped, length, aborted, timeout, error}.
The same reducer turns the simulator's event trace, or events rebuilt from a
real run's ``requests.jsonl``, into per-request TTFT / TPOT / E2E and final state.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract import Conclusion, Correctness, Performance, WorkloadInfo
from harness.contract.distribution import distribution_ms, token_summary
from harness.contract.jsonio import iter_json_lines
from harness.contract.schemas import DocumentError
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.mech import Mechanism, MechConfig
from harness.mech.engine.blocks import PlainPool
from harness.mech.engine.costmodel import StepCostModel
from harness.mech.engine.engine import Engine
from harness.mech.engine.types import EngineConfig, Event, Seq
from harness.mech.engine.workload import SimRequest
from harness.mech.output import MechOutput, save_figure, table
from harness.report.plots import pyplot

FINAL = {"finish_stop": "finished_stopped", "finish_length": "finished_length",
         "finish_aborted": "finished_aborted", "finish_timeout": "finished_timeout",
         "finish_error": "finished_error"}
TERMINATION = {"finished_stopped": "stop", "finished_length": "length", "finished_aborted": "aborted",
               "finished_timeout": "timeout", "finished_error": "error"}
# event -> {state before: state after}; None is "not seen yet"
TRANSITIONS: dict[str, dict[str | None, str]] = {
    "arrive": {None: "waiting"},
    "schedule": {"waiting": "running", "preempted": "running"},
    "first_token": {"running": "running"},
    "preempt": {"running": "preempted"},
    "finish_stop": {"running": "finished_stopped"},
    "finish_length": {"running": "finished_length"},
    "finish_timeout": {"waiting": "finished_timeout", "preempted": "finished_timeout"},
    "finish_aborted": {s: "finished_aborted" for s in ("waiting", "running", "preempted")},
    "finish_error": {s: "finished_error" for s in ("waiting", "running", "preempted")},
}


@dataclass
class Lifecycle:
    index: int
    state: str | None = None
    path: list[str] = field(default_factory=list)
    arrival_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    first_schedule_s: float | None = None
    preemptions: int = 0

    def ttft_ms(self) -> float | None:
        if self.first_token_s is None or self.arrival_s is None:
            return None
        return 1000 * (self.first_token_s - self.arrival_s)

    def e2e_ms(self) -> float | None:
        if self.finish_s is None or self.arrival_s is None or self.first_token_s is None:
            return None
        return 1000 * (self.finish_s - self.arrival_s)

    def tpot_ms(self, output_tokens: int | None) -> float | None:
        if output_tokens is None or output_tokens < 2 or self.finish_s is None or self.first_token_s is None:
            return None
        return 1000 * (self.finish_s - self.first_token_s) / (output_tokens - 1)


def reduce(events: Iterable[Event]) -> dict[int, Lifecycle]:
    """Apply events in the given (causal) order; an event not allowed in the current state is an error."""
    out: dict[int, Lifecycle] = {}
    for ev in events:
        lc = out.setdefault(ev.index, Lifecycle(ev.index))
        allowed = TRANSITIONS.get(ev.kind)
        if allowed is None or lc.state not in allowed:
            raise InvalidInput(f"request {ev.index}: event {ev.kind!r} at t={ev.t_s}s is not allowed in state "
                               f"{lc.state or 'unseen'}")
        lc.state = allowed[lc.state]
        if not lc.path or lc.path[-1] != lc.state:
            lc.path.append(lc.state)
        if ev.kind == "arrive":
            lc.arrival_s = ev.t_s
        elif ev.kind == "schedule" and lc.first_schedule_s is None:
            lc.first_schedule_s = ev.t_s
        elif ev.kind == "first_token":
            lc.first_token_s = ev.t_s
        elif ev.kind == "preempt":
            lc.preemptions += 1
        elif ev.kind in FINAL:
            lc.finish_s = ev.t_s
    return out


# events rebuilt from timestamps: same-time events apply in causal order
_ORDER = {"arrive": 0, "schedule": 1, "first_token": 2}


def termination_counts(cycles: dict[int, Lifecycle]) -> dict[str, int]:
    return dict(sorted(Counter(TERMINATION[c.state] for c in cycles.values() if c.state in TERMINATION).items()))


def _field(rec: dict[str, Any], *names: str) -> Any:
    for name in names:
        if rec.get(name) is not None:
            return rec[name]
    return None


def events_from_records(path: str | Path) -> tuple[list[Event], dict[int, int]]:
    """Rebuild lifecycle events from a serving run's ``requests.jsonl``.

    Uses per record: ``index``; the scheduled offset (``scheduled_s`` or ``offset_s``, seconds from run
    start); the send offset (``sent_s``, defaults to the scheduled one); ``ttft_ms``; ``e2e_ms``;
    ``output_tokens``; the outcome (``status`` or ``finish_reason``; when absent, ``stop`` if a token
    arrived, else ``error``); and, when the server's queue time
    is known per request, ``server_queue_ms`` (scheduling then happens that long after sending).
    """
    events: list[Event] = []
    outputs: dict[int, int] = {}
    try:
        lines = [row for _, row in iter_json_lines(path)]
    except DocumentError as exc:
        raise InvalidInput(f"cannot read request records: {exc}") from None
    for n, rec in enumerate(lines):
        if rec.get("schema", "").startswith("infkit/workload"):
            continue
        index = int(_field(rec, "index") if _field(rec, "index") is not None else n)
        scheduled, sent_at = _field(rec, "scheduled_s", "offset_s"), _field(rec, "sent_s", "send_s")
        arrive = float(scheduled if scheduled is not None else sent_at if sent_at is not None else 0.0)
        sent = float(sent_at if sent_at is not None else arrive)
        # without an outcome field, a request that streamed a token is taken to have stopped normally
        default = "stop" if _field(rec, "ttft_ms") is not None else "error"
        outcome = str(_field(rec, "status", "finish_reason") or default).lower()
        outcome = {"ok": "stop", "eos": "stop", "stopped": "stop", "cancelled": "aborted"}.get(outcome, outcome)
        if f"finish_{outcome}" not in FINAL:
            outcome = "error"
        events.append(Event(arrive, index, "arrive"))
        scheduled = sent + float(_field(rec, "server_queue_ms") or 0.0) / 1000
        ttft, e2e = _field(rec, "ttft_ms"), _field(rec, "e2e_ms")
        if outcome in ("timeout",) and ttft is None:
            events.append(Event(sent + float(e2e or 0) / 1000, index, "finish_timeout"))
            continue
        events.append(Event(scheduled, index, "schedule"))
        if ttft is not None:
            events.append(Event(max(scheduled, sent + float(ttft) / 1000), index, "first_token"))
        end = sent + float(e2e or ttft or 0) / 1000
        kind = f"finish_{outcome}" if outcome in ("stop", "length", "aborted", "error") else "finish_error"
        events.append(Event(max(end, scheduled), index, kind))
        if _field(rec, "output_tokens") is not None:
            outputs[index] = int(rec["output_tokens"])
    if not events:
        raise InvalidInput(f"{path} holds no request records")
    return sorted(events, key=lambda e: (e.index, e.t_s, _ORDER.get(e.kind, 9))), outputs


# -- the mechanism run ---------------------------------------------------------------------------

TINY_REQUESTS = (
    SimRequest(0, 0.0, 5, 8),
    SimRequest(1, 0.0, 6, 6, stop_after=5),
    SimRequest(2, 0.002, 3, 2),
)
TINY_ENGINE = EngineConfig(max_num_batched_tokens=8, max_num_seqs=3, block_size=4, num_blocks=4, trace=True)
TINY_COST = StepCostModel(base_ms=1.0, prefill_ms_per_token=0.5, decode_ms_per_seq=0.25, decode_ms_per_kilotoken=0.0)


@dataclass(frozen=True)
class LifecycleConfig(MechConfig):
    requests: str | None = knob(None, "a serving run's requests.jsonl to reconstruct (default: the tiny simulated "
                                "scenario)")


def tiny_trace() -> tuple[list[Event], dict[int, int]]:
    """3 requests, block size 4, 4 blocks: one preemption (recompute), one stop, two length finishes."""
    engine = Engine(TINY_ENGINE, TINY_COST, PlainPool(TINY_ENGINE.num_blocks, TINY_ENGINE.block_size),
                    [Seq(r, float(r.arrival_s or 0.0)) for r in TINY_REQUESTS])
    result = engine.run()
    return list(result.events), {r.index: r.output_tokens for r in result.records}


def run(cfg: LifecycleConfig) -> MechOutput:
    events, outputs = events_from_records(cfg.requests) if cfg.requests else tiny_trace()
    cycles = reduce(events)
    rows = [[c.index, " > ".join(c.path), c.preemptions, c.ttft_ms(), c.tpot_ms(outputs.get(c.index)), c.e2e_ms()]
            for c in sorted(cycles.values(), key=lambda c: c.index)]
    counts = termination_counts(cycles)
    perf = Performance.not_applicable(
        "no request in the trace reached this point",
        ttft_ms=distribution_ms([c.ttft_ms() for c in cycles.values() if c.ttft_ms() is not None]),
        tpot_ms=distribution_ms([t for c in cycles.values() if (t := c.tpot_ms(outputs.get(c.index))) is not None]),
        e2e_ms=distribution_ms([c.e2e_ms() for c in cycles.values() if c.e2e_ms() is not None]),
        queue_wait_server_ms=distribution_ms([1000 * (c.first_schedule_s - c.arrival_s) for c in cycles.values()
                                              if c.first_schedule_s is not None and c.arrival_s is not None]))
    perf.null_reasons.update({"itl_ms": "the lifecycle holds events, not streamed chunks",
                              "queue_wait_client_ms": "not part of the lifecycle trace",
                              "throughput": "a lifecycle trace is not a throughput measurement",
                              "peak_memory_bytes": "no memory is measured"})
    source = f"records {cfg.requests}" if cfg.requests else "tiny simulated scenario"
    trace_lines = "".join(json.dumps(e.__dict__, sort_keys=True) + "\n" for e in events)
    seen = len(cycles)
    info = WorkloadInfo(request_count=seen, input_tokens=token_summary([r.input_tokens for r in TINY_REQUESTS]
                                                                       if not cfg.requests else []),
                        output_tokens=token_summary(list(outputs.values())), arrival={"process": "trace"},
                        concurrency=None, seed=0,
                        token_budget={"max_num_batched_tokens": TINY_ENGINE.max_num_batched_tokens,
                                      "max_num_seqs": TINY_ENGINE.max_num_seqs, "block_size": TINY_ENGINE.block_size}
                        if not cfg.requests else {"max_num_batched_tokens": None, "max_num_seqs": None})
    info.null_reasons["concurrency"] = "requests follow the trace's own timing"
    return MechOutput(
        semantic_id="INF-REQUEST-LIFECYCLE", run_label="lifecycle/" + ("records" if cfg.requests else "tiny"),
        model=None, model_null_reason="a lifecycle trace is model-independent", workload=info, performance=perf,
        correctness=Correctness(output_count=counts.get("stop", 0) + counts.get("length", 0),
                                termination_counts=counts,
                                quality={"metric": "every_event_a_legal_transition", "value": True, "passed": True}),
        conclusion=Conclusion(evidence_level="single", decision="inconclusive",
                              next_step="reconstruct a real run's lifecycle with --requests runs/.../requests.jsonl",
                              summary=f"{seen} request lifecycles from the {source}"),
        details={"source": source, "lifecycles": [c.__dict__ for c in sorted(cycles.values(), key=lambda c: c.index)],
                 "events": [e.__dict__ for e in events]},
        summary_text=f"lifecycles from the {source}\n\n" + table(
            ["request", "states", "preemptions", "TTFT ms", "TPOT ms", "E2E ms"], rows),
        requested={"requests": cfg.requests}, kind="simulation" if not cfg.requests else "mechanism",
        extra_files={"trace.jsonl": trace_lines},
        plots={"lifecycle.png": lambda path: _plot(events, path)},
    )


STATE_COLOURS = {"waiting": "#bbbbbb", "running": "#4c72b0", "preempted": "#dd8452"}


def _plot(events: list[Event], path: Path) -> None:
    """One row per request: state segments over time, first tokens as dots, finishes as bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len({e.index for e in events})))
    state: dict[int, tuple[str, float]] = {}
    for ev in events:
        prev = state.get(ev.index)
        after = TRANSITIONS[ev.kind].get(prev[0] if prev else None, "")
        if prev and prev[0] in STATE_COLOURS and after != prev[0]:
            ax.barh(ev.index, 1000 * (ev.t_s - prev[1]), left=1000 * prev[1], color=STATE_COLOURS[prev[0]])
        if ev.kind == "first_token":
            ax.plot(1000 * ev.t_s, ev.index, "k.", markersize=8)
        if ev.kind in FINAL:
            ax.plot(1000 * ev.t_s, ev.index, "k|", markersize=14)
        if after != (prev[0] if prev else None):
            state[ev.index] = (after, ev.t_s)
    from matplotlib.patches import Patch

    ax.set_xlabel("time (ms); dot: first token, bar: finish")
    ax.set_ylabel("request")
    ax.set_yticks(sorted(state))
    ax.invert_yaxis()
    ax.legend(handles=[Patch(color=c, label=n) for n, c in STATE_COLOURS.items()], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1))
    save_figure(fig, path)


MECHANISM = Mechanism("lifecycle", LifecycleConfig, run,
                      "request state machine, event trace and TTFT/TPOT/E2E derived from it")
