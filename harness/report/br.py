"""Benchmark Report v0.2.1 (llm-d-benchmark's BR0.2.1): one document per measured serving result.

Only what infkit measured is written, as inference-perf's per-stage partial does, so another
producer's partial (the stack, the load description) merges on top without either overwriting
the other: ``version``, ``run`` (``uid``, ``eid`` and the evidence keywords) and
``results.request_performance.aggregate``. A BR field infkit does not measure is left out,
never filled with a guess (docs/report.md lists what maps and what BR cannot carry).

The schema is the file llm-d-benchmark publishes, vendored under
``schemas/vendor/llm-d-benchmark/`` with its revision and sha256 pinned in ``pin.json``; it is
read only when its bytes match the pin. Upstream's pydantic model also checks each field's unit
(``UNITS_*`` in its ``base.py``), which the JSON Schema does not carry: ``UNIT_RULES`` keeps
those rules for the fields written here, and ``br_problems`` checks them beside the schema.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from harness.contract.result import RESULT_SCHEMA, Result
from harness.contract.schemas import SCHEMA_DIR
from harness.errors import SchemaViolation

BR_VERSION = "0.2.1"
VENDOR_DIR = SCHEMA_DIR / "vendor" / "llm-d-benchmark"
SCHEMA_FILE = "br_v0_2_1_json_schema.json"
COMPLETED = ("stop", "length")
# (BR field, infkit performance field, unit): time-per-token figures in ms/token, as upstream's rules require
LATENCY = (("time_to_first_token", "ttft_ms", "ms"), ("request_latency", "e2e_ms", "ms"),
           ("time_per_output_token", "tpot_ms", "ms/token"), ("inter_token_latency", "itl_token_ms", "ms/token"))
# infkit distribution key -> BR Statistics key (BR's other percentiles are not in an infkit result)
STATISTICS = (("mean", "mean"), ("std", "stddev"), ("min", "min"), ("p50", "p50"), ("p90", "p90"),
              ("p95", "p95"), ("p99", "p99"), ("max", "max"))
# llm-d-benchmark base.py at the pinned revision: the units each written field may carry
UNIT_RULES = {
    "requests.input_length": ("count", "pixels"),
    "latency.time_to_first_token": ("ms", "s"), "latency.request_latency": ("ms", "s"),
    "latency.time_per_output_token": ("ms/token", "s/token"), "latency.inter_token_latency": ("ms/token", "s/token"),
    "throughput.input_token_rate": ("tokens/s",), "throughput.output_token_rate": ("tokens/s",),
    "throughput.total_token_rate": ("tokens/s",), "throughput.request_rate": ("queries/s",),
}


@dataclass(frozen=True)
class Evidence:
    """What ties a BR document to the signed run it came from (BR carries it as run keywords)."""

    manifest_sha256: str  # hex sha256 of the manifest file's bytes
    signer_keyid: str | None  # the key id the signature verified with
    result_sha256: str | None  # the signed digest of the result document

    def keywords(self, workload_id: str | None) -> list[str]:
        out = [f"infkit-manifest-sha256:{self.manifest_sha256}"]
        out += [f"infkit-signer-keyid:{self.signer_keyid}"] if self.signer_keyid else []
        out += [f"infkit-result-sha256:{self.result_sha256}"] if self.result_sha256 else []
        return out + ([f"infkit-workload-id:{workload_id}"] if workload_id else [])


def _statistics(dist: dict[str, Any] | None, units: str) -> dict[str, Any] | None:
    if not dist:
        return None
    return {"units": units, **{br: dist[ours] for ours, br in STATISTICS if dist.get(ours) is not None}}


def _requests(result: Result) -> dict[str, Any] | None:
    """Sent, failed (sent, not completed) and, when every request of the list was sent, their input lengths."""
    counts = result.correctness.termination_counts
    not_sent = counts.get("not_sent", 0)
    sent = sum(counts.values()) - not_sent
    if sent == 0:
        return None
    out: dict[str, Any] = {"total": sent, "failures": sent - sum(counts.get(s, 0) for s in COMPLETED)}
    lengths = result.workload.input_tokens
    if not not_sent:
        out["input_length"] = {"units": "count", "mean": lengths["mean"], "min": lengths["min"], "max": lengths["max"]}
    return out


def _throughput(throughput: dict[str, Any] | None) -> dict[str, Any] | None:
    """First send to last end, as inference-perf's window; input tokens/s is total minus output over it."""
    if not throughput:
        return None
    total, output = throughput["total_tokens_per_s"], throughput["output_tokens_per_s"]
    return {"input_token_rate": {"units": "tokens/s", "mean": round(total - output, 6)},
            "output_token_rate": {"units": "tokens/s", "mean": output},
            "total_token_rate": {"units": "tokens/s", "mean": total},
            "request_rate": {"units": "queries/s", "mean": throughput["request_rate_rps"]}}


def _aggregate(result: Result) -> dict[str, Any]:
    performance = result.performance
    latency = {br: s for br, ours, units in LATENCY if (s := _statistics(getattr(performance, ours), units))}
    parts = {"requests": _requests(result), "latency": latency or None,
             "throughput": _throughput(performance.throughput)}
    return {k: v for k, v in parts.items() if v}


def is_measured(doc: dict[str, Any]) -> bool:
    """A result BR has a place for: request-level figures measured against a server."""
    return doc.get("schema") == RESULT_SCHEMA and doc.get("kind") == "serving"


def br_document(result: Result, *, uid: str, eid: str | None, evidence: Evidence | None) -> dict[str, Any]:
    """The BR0.2.1 document of one serving result: measured fields only, absent ones left out."""
    run: dict[str, Any] = {"uid": uid, **({"eid": eid} if eid else {})}
    if evidence:
        run["keywords"] = evidence.keywords(result.identity.workload_id)
    aggregate = _aggregate(result)
    results = {"request_performance": {"aggregate": aggregate}} if aggregate else {}
    return {"version": BR_VERSION, "run": run, "results": results}


def vendored(name: str) -> bytes:
    """A vendored llm-d-benchmark file's bytes, refused unless they are the pinned ones."""
    pin = json.loads((VENDOR_DIR / "pin.json").read_text())["files"][name]
    data = (VENDOR_DIR / name).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != pin["sha256"]:
        raise SchemaViolation(f"{VENDOR_DIR / name}: sha256 {digest} is not the pinned {pin['sha256']}; restore it "
                              "from the revision pin.json names")
    return data


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads(vendored(SCHEMA_FILE)), format_checker=FormatChecker())


def _unit_problems(doc: dict[str, Any]) -> list[str]:
    aggregate = ((doc.get("results") or {}).get("request_performance") or {}).get("aggregate") or {}
    out = []
    for name, allowed in UNIT_RULES.items():
        group, field = name.split(".")
        units = ((aggregate.get(group) or {}).get(field) or {}).get("units")
        if units is not None and units not in allowed:
            out.append(f"results.request_performance.aggregate.{name}: units {units!r}, allowed {', '.join(allowed)}")
    return out


def br_problems(doc: dict[str, Any]) -> list[str]:
    """Every way ``doc`` breaks the vendored BR0.2.1 schema or upstream's unit rules (empty: valid)."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors] + _unit_problems(doc)
