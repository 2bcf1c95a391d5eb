"""Evidence rules across the predicate and the run's verified documents.

The result schema already holds each result to its own rules; these rules hold
the signed verdict to the results it vouches for:

- ``adopt-reject-need-paired``: a predicate adopt/reject has evidence_level paired or start-pooled (a cross-start
  contrast with the host's pooled start-to-start variance in its interval);
- ``verdict-backed-by-result``: ...and some such result reaches the same decision;
- ``level-backed-by-results``: the predicate's evidence level is no stronger than the
  strongest result's;
- ``failure-blocks-decision``: a failure in any result, or a failed/aborted run,
  means the decision is blocked or inconclusive (such a manifest is a valid record);
- ``run-record-matches``: the signed run.json agrees with the predicate;
- ``result-behind-evidence``: evidence above precheck, or an adopt/reject decision, needs the
  run's result (run.json ``outputs.result``, else any result) to be a verified subject that
  parses as a result document.
"""

from __future__ import annotations

from typing import Any

from harness.manifest.findings import Finding

LEVEL_RANK = {"precheck": 0, "single": 1, "repeated": 2, "start-pooled": 3, "paired": 4}
DECIDING = ("paired", "start-pooled")  # the levels that may adopt or reject
RUN_MARKER = "infkit/run/v1"
RESULT_MARKER = "infkit/result/v1"
MATCHED_FIELDS = ("semantic_id", "run_id", "run_label", "evidence_level", "decision", "workload_ids",
                  "command", "images", "model", "tokenizer", "started_utc", "ended_utc")


def _run_record_rules(predicate: dict[str, Any], documents: dict[str, dict[str, Any]]) -> list[Finding]:
    name = f"{predicate['run_dir']}/run.json"
    run = documents.get(name)
    if run is None or run.get("schema") != RUN_MARKER:
        return [Finding("evidence", f"run-record-matches: {name} is not a verified subject of this manifest", name)]
    findings = []
    for field in MATCHED_FIELDS:
        if run.get(field) != predicate.get(field):
            findings.append(Finding("evidence", f"run-record-matches: predicate {field} differs from {name}", name))
    if run.get("status", "completed") != predicate["status"]:
        findings.append(Finding("evidence", f"run-record-matches: predicate status differs from {name}", name))
    return findings


def _result_behind(predicate: dict[str, Any], documents: dict[str, dict[str, Any]],
                   results: dict[str, dict[str, Any]]) -> list[Finding]:
    decision, level = predicate["decision"], predicate["evidence_level"]
    if level == "precheck" and decision not in ("adopt", "reject"):
        return []
    run = documents.get(f"{predicate['run_dir']}/run.json") or {}
    named = (run.get("outputs") or {}).get("result") if isinstance(run.get("outputs"), dict) else None
    claim = f"{level} evidence" + (f" and decision {decision}" if decision in ("adopt", "reject") else "")
    if isinstance(named, str) and named:
        name = f"{predicate['run_dir']}/{named}"
        if name not in results:
            return [Finding("evidence", f"result-behind-evidence: {claim}, but the run's result {name} is not a "
                            "verified subject that parses as a result", name)]
        return []
    if not results:
        return [Finding("evidence", f"result-behind-evidence: {claim}, but no verified subject parses as a result")]
    return []


def check_evidence(predicate: dict[str, Any], documents: dict[str, dict[str, Any]]) -> list[Finding]:
    """Findings for a schema-valid predicate and the run's schema-valid infkit documents."""
    findings = _run_record_rules(predicate, documents)
    decision, level = predicate["decision"], predicate["evidence_level"]
    results = {n: d for n, d in documents.items() if d.get("schema") == RESULT_MARKER}
    findings += _result_behind(predicate, documents, results)
    if decision in ("adopt", "reject") and level not in DECIDING:
        findings.append(Finding("evidence", f"adopt-reject-need-paired: decision {decision} with {level} evidence"))
    if decision in ("adopt", "reject") and not any(
        d["conclusion"]["evidence_level"] in DECIDING and d["conclusion"]["decision"] == decision
        for d in results.values()
    ):
        findings.append(
            Finding("evidence",
                    f"verdict-backed-by-result: no paired or start-pooled result in the run decides {decision}")
        )
    if results:
        strongest = max(results.values(), key=lambda d: LEVEL_RANK[d["conclusion"]["evidence_level"]])
        strongest_level = strongest["conclusion"]["evidence_level"]
        if LEVEL_RANK[level] > LEVEL_RANK[strongest_level]:
            findings.append(
                Finding(
                    "evidence",
                    f"level-backed-by-results: predicate claims {level}, strongest result is {strongest_level}",
                )
            )
    if decision not in ("blocked", "inconclusive"):
        failed = sorted(n for n, d in results.items() if d["conclusion"].get("failure"))
        if failed:
            findings.append(
                Finding(
                    "evidence",
                    f"failure-blocks-decision: {failed[0]} records a failure, yet the decision is {decision}",
                    failed[0],
                )
            )
        if predicate["status"] != "completed":
            findings.append(
                Finding(
                    "evidence",
                    f"failure-blocks-decision: the run {predicate['status']}, yet the decision is {decision}",
                )
            )
    return findings
