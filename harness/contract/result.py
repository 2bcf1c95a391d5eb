"""Typed objects for the six result groups: the one function that writes a result, and the one that reads it.

``write_result`` builds the document, validates it against
``schemas/result.schema.json`` plus the evidence rules, and only then writes
it atomically: nothing invalid is ever written. ``Result.from_dict`` (``read_result``
for a file) reads a document back into the same groups after the same check, so a
reader never walks an unchecked dictionary: a malformed or outdated file is one
``InvalidInput`` line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from harness.contract.atomic import atomic_write_json
from harness.contract.schemas import load_document, require_valid, validate_document
from harness.errors import SchemaViolation

RESULT_SCHEMA = "infkit/result/v1"
ResultKind = Literal["serving", "mechanism", "simulation", "comparison", "sweep"]
EvidenceLevel = Literal["precheck", "single", "repeated", "start-pooled", "paired"]
Decision = Literal["adopt", "reject", "inconclusive", "blocked"]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clean(obj: Any) -> Any:
    """asdict() output without the optional keys left at None and without empty null_reasons."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k.startswith("_"):
                continue
            if k == "null_reasons" and not v:
                continue
            out[k] = _clean(v)
        return out
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


G = TypeVar("G", bound="_Group")


class _Group:
    """Base for groups: ``_optional`` names fields that are dropped when None."""

    _optional: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls: type[G], doc: Mapping[str, Any]) -> G:
        """The group as ``to_dict`` wrote it. ``Result.from_dict`` checked the document first, so every required
        field is there and no unknown one is."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in doc.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        raw = dataclasses.asdict(self)  # type: ignore[call-overload]
        for name in self._optional:
            if raw.get(name) is None:
                raw.pop(name, None)
        return _clean(raw)


@dataclass
class Identity(_Group):
    semantic_id: str
    workload_id: str
    run_label: str
    run_id: str
    model: dict[str, str] | None = None
    tokenizer: dict[str, str] | None = None
    created_utc: str = field(default_factory=utc_now)
    null_reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class WorkloadInfo(_Group):
    request_count: int
    input_tokens: dict[str, float]
    output_tokens: dict[str, float]
    arrival: dict[str, Any]
    concurrency: int | None
    seed: int
    token_budget: dict[str, int | None] = field(
        default_factory=lambda: {"max_num_batched_tokens": None, "max_num_seqs": None}
    )
    kind: str | None = None
    seeds: dict[str, int] | None = None
    repeats: int | None = None
    null_reasons: dict[str, str] = field(default_factory=dict)
    _optional = ("kind", "seeds", "repeats")


@dataclass
class Environment(_Group):
    profile_id: str
    backend: dict[str, Any]
    runtime: str = "local"
    python: str = field(default_factory=platform.python_version)
    torch: str | None = None
    cuda: str | None = None
    gpu: list[dict[str, Any]] = field(default_factory=list)
    image: dict[str, Any] | None = None
    fingerprint_sha256: str | None = None
    null_reasons: dict[str, str] = field(default_factory=dict)
    _optional = ("image", "fingerprint_sha256")


@dataclass
class Performance(_Group):
    ttft_ms: dict[str, float] | None = None
    tpot_ms: dict[str, float] | None = None
    itl_ms: dict[str, float] | None = None
    e2e_ms: dict[str, float] | None = None
    queue_wait_client_ms: dict[str, float] | None = None
    queue_wait_server_ms: dict[str, float] | None = None
    throughput: dict[str, Any] | None = None
    peak_memory_bytes: int | None = None
    peak_memory_source: str | None = None
    percentile_method: str = "linear"
    null_reasons: dict[str, str] = field(default_factory=dict)
    itl_chunk_ms: dict[str, float] | None = None  # serving: the gaps between content chunks (= itl_ms)
    itl_token_ms: dict[str, float] | None = None  # serving: each gap spread over the tokens its chunk carried
    chunk_tokens_source: str | None = None  # where the per-chunk token counts came from
    streamed: bool | None = None  # serving: False for non-streamed requests (no TTFT, TPOT or ITL)
    ttft_from_scheduled_ms: dict[str, float] | None = None  # LoadGen's latency: from the scheduled send
    e2e_from_scheduled_ms: dict[str, float] | None = None
    # serving: joules over the sampled window (GPU via NVML, CPU via RAPL), per token and request, cost at a price
    energy: dict[str, Any] | None = None
    # GPU serving: NVML memory in use at its peak minus the idle baseline, per device, beside the engine's KV figure
    device_memory: dict[str, Any] | None = None
    gpu_telemetry: dict[str, Any] | None = None  # GPU serving: power, clocks, utilisation, clock events, idle check
    _optional = ("peak_memory_source", "itl_chunk_ms", "itl_token_ms", "chunk_tokens_source", "streamed",
                 "ttft_from_scheduled_ms", "e2e_from_scheduled_ms", "energy", "device_memory", "gpu_telemetry")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        for name in ("energy", "device_memory"):  # optional, but a serving result states why it is null
            if name in self.null_reasons:
                out[name] = None
        return out

    @classmethod
    def not_applicable(cls, reason: str, **measured: Any) -> Performance:
        """A performance group for results without serving latency: every unmeasured field null with ``reason``."""
        perf = cls(**measured)
        for f in dataclasses.fields(cls):
            if f.name in ("percentile_method", "null_reasons", *cls._optional):
                continue
            if getattr(perf, f.name) is None:
                perf.null_reasons[f.name] = reason
        return perf


@dataclass
class Correctness(_Group):
    output_count: int
    termination_counts: dict[str, int]
    quality: dict[str, Any] | None = None
    output_tokens_requested: int | None = None
    output_tokens_reported: int | None = None
    null_reasons: dict[str, str] = field(default_factory=dict)
    _optional = ("output_tokens_requested", "output_tokens_reported")


@dataclass
class Failure(_Group):
    stage: str
    kind: str
    message: str
    recovered: bool = False
    log_tail: str | None = None
    _optional = ("log_tail",)


@dataclass
class Effect(_Group):
    metric: str
    estimator: str
    value: float
    ci_low: float
    ci_high: float
    confidence: float
    no_effect: float
    better: Literal["lower", "higher"]
    method: str
    n_pairs: int
    arm_a: str | None = None
    arm_b: str | None = None
    margin: float | None = None  # smallest relative effect worth acting on: band [1/(1+m), 1+m] around no_effect
    unit: str | None = None  # what one interval observation is: "repeat" or "request"
    n_requests: int | None = None  # fewest requests of an arm in any repeat
    p_value: float | None = None  # exact one-sided sign-flip p against no effect
    finding: str | None = None  # material gain / material loss / no material effect / undetermined
    _optional = ("arm_a", "arm_b", "margin", "unit", "n_requests", "p_value", "finding")


@dataclass
class ExcludedWork(_Group):
    """Requests left out of the figures a client stall or a late send could move (``harness.serving.stalls``), and
    the claim read on every request as well as on the kept ones: a decision stands only when both read the same."""

    count: int
    requests: list[str]  # each named: "<arm> repeat R request I (<spans>): <why>"
    consequence: str
    decision_all: Decision | None = None  # the claim on every request (the excluded ones put back)
    decision_kept: Decision | None = None  # the claim on the kept requests, before any cap
    effect_all: Effect | None = None
    agree: bool | None = None
    _optional = ("decision_all", "decision_kept", "effect_all", "agree")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.effect_all is not None:
            out["effect_all"] = self.effect_all.to_dict()
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ExcludedWork:
        effect = doc.get("effect_all")
        return super().from_dict({**doc, "effect_all": Effect.from_dict(effect) if effect else None})


@dataclass
class Conclusion(_Group):
    evidence_level: EvidenceLevel
    decision: Decision
    next_step: str
    failure: Failure | None = None
    valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    repeats: int | None = None
    effect: Effect | None = None
    summary: str | None = None
    excluded_work: ExcludedWork | None = None  # requests a client stall held, and the decision without them
    _optional = ("repeats", "effect", "summary", "excluded_work")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["failure"] = self.failure.to_dict() if self.failure else None
        if self.effect is not None:
            out["effect"] = self.effect.to_dict()
        if self.excluded_work is not None:
            out["excluded_work"] = self.excluded_work.to_dict()
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Conclusion:
        failure, effect = doc["failure"], doc.get("effect")
        work = doc.get("excluded_work")
        return super().from_dict({**doc, "failure": Failure.from_dict(failure) if failure else None,
                                  "effect": Effect.from_dict(effect) if effect else None,
                                  "excluded_work": ExcludedWork.from_dict(work) if work else None})


Group = _Group | dict[str, Any]


def _group(value: Group) -> dict[str, Any]:
    """A typed group as a dict; a dict is a group already in document form (e.g. an arm result's), taken as is."""
    return value.to_dict() if isinstance(value, _Group) else dict(value)


def build_result(
    *,
    kind: ResultKind,
    identity: Identity | dict[str, Any],
    workload: WorkloadInfo | dict[str, Any],
    environment: Environment | dict[str, Any],
    performance: Performance,
    correctness: Correctness,
    conclusion: Conclusion,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble a result document and validate it; raise ``SchemaViolation`` when invalid."""
    doc: dict[str, Any] = {
        "schema": RESULT_SCHEMA,
        "kind": kind,
        "identity": _group(identity),
        "workload": _group(workload),
        "environment": _group(environment),
        "performance": performance.to_dict(),
        "correctness": correctness.to_dict(),
        "conclusion": conclusion.to_dict(),
    }
    if details is not None:
        doc["details"] = details
    check_result(doc)
    return doc


def check_result(doc: dict[str, Any]) -> None:
    problems = validate_document(doc)
    if problems:
        lines = [str(p) for p in problems]
        raise SchemaViolation("result does not satisfy the contract:\n  " + "\n  ".join(lines), lines)


def write_result(path: str | os.PathLike, doc: dict[str, Any]) -> Path:
    """Validate ``doc`` and write it atomically; an invalid document is never written."""
    check_result(doc)
    return atomic_write_json(path, doc)


@dataclass(frozen=True)
class Result:
    """A result document read back: its kind, the six groups that wrote it and its free-form details."""

    kind: ResultKind
    identity: Identity
    workload: WorkloadInfo
    environment: Environment
    performance: Performance
    correctness: Correctness
    conclusion: Conclusion
    details: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> Result:
        """``doc`` (a parsed result document) as typed groups, after the check every reader shares: the result schema
        and the evidence rules. ``where`` (the file) and the first broken field name what is wrong in one line."""
        doc = require_valid(doc, RESULT_SCHEMA, where, "an infkit result")
        return cls(kind=doc["kind"], identity=Identity.from_dict(doc["identity"]),
                   workload=WorkloadInfo.from_dict(doc["workload"]),
                   environment=Environment.from_dict(doc["environment"]),
                   performance=Performance.from_dict(doc["performance"]),
                   correctness=Correctness.from_dict(doc["correctness"]),
                   conclusion=Conclusion.from_dict(doc["conclusion"]), details=doc.get("details"))

    def to_dict(self) -> dict[str, Any]:
        """The document again, as ``build_result`` writes it."""
        return build_result(kind=self.kind, identity=self.identity, workload=self.workload,
                            environment=self.environment, performance=self.performance,
                            correctness=self.correctness, conclusion=self.conclusion, details=self.details)

    def detail(self, *path: str) -> Any:
        """``details[path[0]][path[1]]...``, or None where the run recorded no such entry (details are each
        experiment's own; their absence is an older or another experiment's result, not an error)."""
        node: Any = self.details
        for key in path:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node


def read_result(path: str | os.PathLike) -> Result:
    """A result file as typed groups; any bad file (unreadable, malformed, older schema) is one ``InvalidInput``."""
    return Result.from_dict(load_document(path), str(path))
