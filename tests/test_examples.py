"""Schema cases driven by example folders: one case per file, the broken rule named."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract.schemas import load_document, validate_document

EXAMPLES = Path(__file__).parent / "examples"
VALID = sorted((EXAMPLES / "valid").iterdir())
INVALID = sorted((EXAMPLES / "invalid").iterdir())

# case file -> text the error must contain (the rule it breaks)
EXPECTED_RULE = {
    "adopt-ci-includes-no-effect.json": "adopt-needs-ci-excluding-no-effect",
    "adopt-inside-margin.json": "adopt-needs-ci-beyond-margin",
    "adopt-without-paired-evidence.json": "adopt/reject need paired evidence",
    "adopt-when-excluded-work-disagrees.json": "a decision stands only when it reads the same with the excluded",
    "energy-null-without-reason.json": "a null energy states its reason in null_reasons",
    "energy-unknown-source.json": "'wall_socket_meter' is not one of",
    "failure-with-adopt.json": "a failure means the decision is blocked or inconclusive",
    "fingerprint-no-gpu-no-reason.json": "no GPU listed => the reason is stated",
    "invalid-run-without-reasons.json": "an invalid run carries its reasons",
    "missing-group-conclusion.json": "'conclusion' is a required property",
    "missing-group-correctness.json": "'correctness' is a required property",
    "missing-group-environment.json": "'environment' is a required property",
    "missing-group-identity.json": "'identity' is a required property",
    "missing-group-performance.json": "'performance' is a required property",
    "missing-group-workload.json": "'workload' is a required property",
    "negative-latency.json": "/performance/ttft_ms/min: -5.0 is less than the minimum of 0",
    "null-without-reason.json": "a null or empty field states its reason",
    "paired-without-effect.json": "a paired conclusion carries its effect",
    "percentiles-out-of-order.json": "percentiles-ordered",
    "repeated-with-two-runs.json": "repeated evidence needs at least 3 runs",
    "requests-not-accounted.json": "every-request-accounted",
    "unknown-document-kind.json": "unknown document kind 'infkit/result/v9'",
    "unknown-evidence-level.json": "'anecdotal' is not one of",
    "unknown-failure-kind.json": "'meltdown' is not one of",
    "unknown-termination-status.json": "'exploded' is not one of",
    "wrong-unit-ttft-seconds.json": "'ttft_s' was unexpected",
    "workload-closed-loop-without-concurrency.jsonl": "'concurrency' is a required property",
    "workload-id-not-sha256.json": "does not match '^sha256:",
    "workload-request-zero-tokens.jsonl": "line 3/input_tokens: 0 is less than the minimum of 1",
}


def test_every_invalid_case_names_its_rule():
    assert sorted(EXPECTED_RULE) == [p.name for p in INVALID]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_examples(path, capsys):
    assert main(["validate", str(path)]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_examples(path, capsys):
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert EXPECTED_RULE[path.name] in err
    assert "Traceback" not in err


def test_all_valid_at_once_exit_zero(capsys):
    assert main(["validate", *map(str, VALID)]) == 0


def test_one_invalid_among_valid_fails(capsys):
    assert main(["validate", str(VALID[0]), str(INVALID[0])]) == 1


@pytest.mark.parametrize("group", ["identity", "workload", "environment", "performance", "correctness", "conclusion"])
@pytest.mark.parametrize("name", [p.name for p in VALID if p.name.startswith(("serving", "comparison", "simulation"))])
def test_removing_any_group_fails(name, group):
    doc = load_document(EXAMPLES / "valid" / name)
    assert validate_document(doc) == []
    broken = copy.deepcopy(doc)
    del broken[group]
    problems = validate_document(broken)
    assert any(f"'{group}' is a required property" in p.message for p in problems)


def test_adopt_turns_valid_with_paired_interval_on_better_side():
    doc = load_document(EXAMPLES / "valid" / "comparison-paired-adopt.json")
    flipped = copy.deepcopy(doc)
    flipped["conclusion"]["decision"] = "reject"
    assert [p.rule for p in validate_document(flipped)] == ["reject-needs-ci-excluding-no-effect"]
    higher = copy.deepcopy(doc)
    higher["conclusion"]["effect"].update(better="higher")
    assert [p.rule for p in validate_document(higher)] == ["adopt-needs-ci-excluding-no-effect"]
    json.dumps(doc)  # documents stay plain JSON
