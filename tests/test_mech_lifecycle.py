"""Request lifecycle: legal transitions, metrics from the trace, reconstruction from request records."""

from __future__ import annotations

import json

import pytest

from harness.errors import InvalidInput
from harness.mech.engine.types import Event
from harness.mech.lifecycle import (
    LifecycleConfig,
    events_from_records,
    reduce,
    run,
    termination_counts,
    tiny_trace,
)


def test_tiny_trace_reduces_to_expected_lifecycles() -> None:
    events, outputs = tiny_trace()
    cycles = reduce(events)
    assert cycles[1].path == ["waiting", "running", "preempted", "running", "finished_stopped"]
    assert cycles[0].path == ["waiting", "running", "finished_length"]
    assert cycles[1].preemptions == 1
    assert cycles[0].ttft_ms() == pytest.approx(5.0)
    assert cycles[0].e2e_ms() == pytest.approx(15.75)
    assert cycles[0].tpot_ms(outputs[0]) == pytest.approx((15.75 - 5.0) / 7)
    assert cycles[2].ttft_ms() == pytest.approx(23.75 - 2.0)
    assert termination_counts(cycles) == {"length": 2, "stop": 1}


@pytest.mark.parametrize("events", [
    [Event(0, 0, "schedule")],
    [Event(0, 0, "arrive"), Event(1, 0, "first_token")],
    [Event(0, 0, "arrive"), Event(1, 0, "schedule"), Event(2, 0, "finish_timeout")],
    [Event(0, 0, "arrive"), Event(1, 0, "finish_length")],
    [Event(0, 0, "arrive"), Event(1, 0, "schedule"), Event(2, 0, "finish_stop"), Event(3, 0, "schedule")],
    [Event(0, 0, "arrive"), Event(1, 0, "teleport")],
])
def test_illegal_transitions_are_rejected(events: list[Event]) -> None:
    with pytest.raises(InvalidInput, match="not allowed"):
        reduce(events)


def test_failure_states() -> None:
    cycles = reduce([Event(0, 0, "arrive"), Event(5, 0, "finish_timeout"),
                     Event(0, 1, "arrive"), Event(1, 1, "schedule"), Event(2, 1, "finish_aborted"),
                     Event(0, 2, "arrive"), Event(1, 2, "schedule"), Event(2, 2, "preempt"),
                     Event(3, 2, "finish_error")])
    assert termination_counts(cycles) == {"aborted": 1, "error": 1, "timeout": 1}
    assert cycles[0].ttft_ms() is None and cycles[0].e2e_ms() is None


def test_reconstruct_from_request_records(tmp_path) -> None:
    records = [
        {"index": 0, "scheduled_s": 0.0, "sent_s": 0.001, "ttft_ms": 120.0, "e2e_ms": 520.0, "output_tokens": 5,
         "status": "length", "server_queue_ms": 20.0},
        {"index": 1, "scheduled_s": 0.5, "ttft_ms": 80.0, "e2e_ms": 280.0, "output_tokens": 3,
         "finish_reason": "stop"},
        {"index": 2, "scheduled_s": 1.0, "ttft_ms": None, "e2e_ms": 3000.0, "status": "timeout"},
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    events, outputs = events_from_records(path)
    cycles = reduce(events)
    assert cycles[0].ttft_ms() == pytest.approx(121.0)  # arrival at the scheduled time, sent 1 ms late
    assert cycles[0].first_schedule_s == pytest.approx(0.021)
    assert cycles[0].tpot_ms(outputs[0]) == pytest.approx(100.0)
    assert cycles[1].path[-1] == "finished_stopped"
    assert cycles[2].state == "finished_timeout"
    out = run(LifecycleConfig(requests=str(path)))
    assert out.correctness.termination_counts == {"length": 1, "stop": 1, "timeout": 1}
    assert out.kind == "mechanism"


def test_unreadable_records(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        events_from_records(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InvalidInput, match="empty file"):
        events_from_records(empty)


def test_records_without_schedule_or_status(tmp_path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps({"index": 0, "sent_s": 2.0, "ttft_ms": 50.0, "e2e_ms": 150.0,
                                "output_tokens": 3}) + "\n")
    cycles = reduce(events_from_records(path)[0])
    assert cycles[0].arrival_s == 2.0 and cycles[0].ttft_ms() == pytest.approx(50.0)
    assert cycles[0].state == "finished_stopped"
