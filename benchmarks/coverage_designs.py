"""One simulated case per bench design, run through the kit's own functions as the runner runs it.

Each case simulates whole bench runs at a known truth and reads them with the code a bench reads its arm runs
with (``spec.phases_for`` for the order, ``invalid.Reruns`` for re-runs, ``claims.claim_effect`` /
``design_of`` / ``secondary_entries`` / ``control_entry``, ``startcontrol.start_rows`` / ``estimates_of`` for the
start variance a simulated bench-00 run gives, ``realisation.arrival_seed`` and ``workload.arrival`` for fresh
arrivals, bench-81's ``scaling`` ratios).
The truth sits on the margin edge (the treatment better by exactly the margin), so one run gives both the
interval's coverage of the truth and whether the decision adopted when it should not (its false-adopt rate; a
control: declared equivalent when it moved by exactly its margin). Latencies are lognormal per request with a
per-prompt effect shared by the arms (the same prompts), a per-arm-run effect and, where the design crosses server
starts, a per-start effect (``START_SD``, or each of ``START_SDS``). ``coverage.py`` prints the table;
``KNOWN_FAILURES`` names the designs that leave nominal today, with the reason (none now), and the CI test checks that
exactly those fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from coverage_stalls import simulated_result, stalled_run  # its sibling (``coverage.py`` puts this folder on the path)

from harness.bench.benches import bench00, bench68
from harness.bench.benches.bench81.scaling import paired_log_ratio
from harness.bench.claims import claim_effect, control_entry, design_of, secondary_entries
from harness.bench.hostload import HostLoad
from harness.bench.invalid import Reruns
from harness.bench.metrics import TTFT_P50
from harness.bench.records import ArmRun
from harness.bench.spec import Arm, Claim, Phase, Plan, Schedule, ServerVariant, phases_for
from harness.bench.startcontrol import StartVariance, estimates_of, start_rows
from harness.bench.stats import DEFAULT_CONFIDENCE, MIN_PAIRED_REPEATS
from harness.client import RequestRecord

MARGIN = TTFT_P50.margin  # 5 %: every simulated claim uses the metric's own margin
EDGE = 1 / (1 + MARGIN)  # the treatment better by exactly the margin: adopting is a false adopt
LEVEL = (1 - DEFAULT_CONFIDENCE) / 2  # the stated one-sided error of a decision (2.5 %)
METHOD_TOLERANCE = 0.02  # how far from nominal a design may sit (issue 45: within 2 points)
START_SD = 0.05  # start-to-start sd of a server start's latency scale (log scale); issue 45 measured 5-8 %
RUN_SD = 0.02  # arm-run to arm-run sd on one start
REQUEST_SD = 0.15
PROMPT_SD = 0.2
INVALID_SHARE = 0.1  # share of arm runs a stall makes invalid (re-run in place up to --reruns)
RERUNS = 3  # the runner's default --reruns
STALL_REASON = "client event-loop lag P99 77.5 ms > 20 ms"

KNOWN_FAILURES: dict[str, str] = {}


@dataclass(frozen=True)
class Outcome:
    """One simulated bench run: whether its interval covered the truth (None: it stopped without one) and whether
    its decision adopted (a control: was declared equivalent) at the margin edge."""

    covered: bool | None
    adopted: bool


@dataclass(frozen=True)
class Design:
    name: str
    n: int  # repeats (rounds, starts) the interval is computed from
    run: Callable[[np.random.Generator], Outcome]
    how: str
    level: float | None = LEVEL  # the stated false-adopt level (None: the design decides nothing)
    nominal: float = DEFAULT_CONFIDENCE
    capped: bool = False  # its claim is capped below paired (a control: not judged): it must never adopt


# ---- arm runs as the runner records them -------------------------------------------------------------------------

def _records(ttft_ms: np.ndarray) -> tuple[RequestRecord, ...]:
    return tuple(RequestRecord(index=i, status="length", scheduled_s=0.0, sent_s=0.0, first_token_s=v / 1e3,
                               end_s=v / 1e3 + 0.1) for i, v in enumerate(ttft_ms))


def arm_run(label: str, repeat: int, ttft_ms: np.ndarray, *, stalled: bool = False) -> ArmRun:
    return ArmRun(label, repeat, Path(f"sim/{label}/r{repeat}"),
                  simulated_result([STALL_REASON] if stalled else []), _records(ttft_ms))


@dataclass(frozen=True)
class Latencies:
    """Per-request TTFT of one simulated bench: per-prompt effects fixed for the run, ``misses`` slower."""

    prompts: np.ndarray
    request_sd: float = REQUEST_SD

    @classmethod
    def draw(cls, rng: np.random.Generator, requests: int, misses: int = 0, request_sd: float = REQUEST_SD
             ) -> Latencies:
        cold = np.where(np.arange(requests) < misses, 3.0, 1.0)
        return cls(100.0 * cold * np.exp(PROMPT_SD * rng.standard_normal(requests)), request_sd)

    def run(self, rng: np.random.Generator, scale: float) -> np.ndarray:
        noise = np.exp(self.request_sd * rng.standard_normal(self.prompts.size) + RUN_SD * rng.standard_normal())
        return scale * self.prompts * noise


def _stall(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A client stall: three consecutive requests late by ~200 ms."""
    out = values.copy()
    at = int(rng.integers(0, max(1, out.size - 3)))
    out[at:at + 3] += 200.0
    return out


def measure(plan: Plan, lat: Latencies, rng: np.random.Generator, scale: Callable[[str, int, int], float],
            invalid_share: float = 0.0, quiet: bool = False, per_request: bool = False) -> tuple[list[ArmRun], bool]:
    """Every fixed step of ``plan`` in run order, an invalid one re-run in place by ``Reruns``; (runs, stopped).
    ``scale(label, repeat, position)`` is the arm run's latency scale (truth, start effect, drift). With the
    budget spent, a stall stops the bench, or with ``quiet`` (the host load read as quiet) is left out. With
    ``per_request`` the client keeps its stalls: a stall excludes the requests it held (``coverage_stalls``)
    and the run is kept for the plan's claims, not redone."""
    probe = (lambda: HostLoad(measured=True, window_s=1.0, cores=2)) if quiet else None
    reads = tuple(c.metric for c in plan.claims) if per_request else ()
    reruns = Reruns(RERUNS, lambda *_: None, probe=probe, metrics=reads)
    runs: list[ArmRun] = []
    position = 0
    for phase in plan.phases:
        steps = phase.steps(SimpleNamespace(refused={})) if callable(phase.steps) else phase.steps  # type: ignore
        for repeat, arm in steps:
            def once(attempt: int, arm: Arm = arm, repeat: int = repeat, at: int = position) -> ArmRun:
                values = lat.run(rng, scale(arm.label, repeat, at))
                stalled = bool(rng.random() < invalid_share)
                if stalled and per_request:
                    return stalled_run(arm.label, repeat, values, rng)
                return arm_run(arm.label, repeat, _stall(values, rng) if stalled else values, stalled=stalled)

            runs.append(reruns.settle(once(1), once))
            position += 1
            if reruns.failure is not None:
                return runs, True
    return runs, False


def _covers(ci: tuple[float, float], truth: float) -> bool:
    return ci[0] <= truth <= ci[1]


def _plan(arms: Sequence[Arm], claims: Sequence[Claim], schedule: Schedule) -> Plan:
    servers = tuple(ServerVariant(s, {}) for s in dict.fromkeys(a.server for a in arms))
    return Plan(workloads=(), servers=servers, arms=tuple(arms), schedule=schedule, claims=tuple(claims))


# ---- bench-69: interleaved on one start, stratified, re-runs ---------------------------------------------------

GROUPS, PROMPTS = 8, 40  # bench-69's synthetic list at a small size: the first GROUPS requests miss the cache
BENCH69_ARMS = (Arm("unique", "unique-prefix", "cache-on"), Arm("shared", "shared-prefix", "cache-on"))


def _misses(rec: RequestRecord) -> bool:
    return rec.index < GROUPS


def bench69(drift: float = 0.0, invalid_share: float = INVALID_SHARE, quiet: bool = False, per_request: bool = False
            ) -> Callable[[np.random.Generator], Outcome]:
    claim = Claim(TTFT_P50, "unique", "shared", strata=_misses)
    plan = _plan(BENCH69_ARMS, (claim,), phases_for(BENCH69_ARMS, MIN_PAIRED_REPEATS, "sequential"))

    def run(rng: np.random.Generator) -> Outcome:
        lat = Latencies.draw(rng, PROMPTS, GROUPS)
        runs, stopped = measure(plan, lat, rng, lambda label, _r, pos: (EDGE if label == "shared" else 1.0)
                                * (1 + drift) ** pos, invalid_share, quiet, per_request)
        return _claim_outcome(None if stopped else claim_effect(runs, claim, seed=0, resamples=0,
                                                                design=design_of(plan, claim)))
    return run


# ---- cross-start claims with the host's start variance, estimated by a simulated bench-00 ---------------------

AA = bench00.Config()  # bench-00's defaults: the starts, repeats and requests it runs with
START_SDS = (0.02, 0.05, 0.08)  # start-to-start sd of a server start's latency scale (log scale)
AA_REQUEST_SD = 0.03  # bench-00's short requests vary little: its reference run's per-repeat log ratios: sd 1.4-2.6 %


def start_variance_run(rng: np.random.Generator, start_sd: float) -> StartVariance:
    """A simulated bench-00 run (``AA.starts`` starts of ``AA.repeats`` runs of ``AA.requests`` requests), read by
    its own ``start_rows`` and cited as ``estimates_of`` reads a run: the start variance a bench pools."""
    names = bench00.labels(AA)
    arms = tuple(Arm(n, "aa", n) for n in names)
    claim = Claim(TTFT_P50, names[0], names[1], name=TTFT_P50.title)
    plan = _plan(arms, (claim,), phases_for(arms, AA.repeats, "sequential"))
    lat = Latencies.draw(rng, AA.requests, request_sd=AA_REQUEST_SD)
    starts = dict(zip(names, np.exp(start_sd * rng.standard_normal(len(names))), strict=True))
    runs, _ = measure(plan, lat, rng, lambda label, _r, _p: starts[label])
    res = claim_effect(runs, claim, seed=0, resamples=0, design=design_of(plan, claim))
    return StartVariance((("sim-aa", {"manifest": "sim"}, estimates_of(start_rows([res], runs, names))),))


def cross_start(rng: np.random.Generator, truths: dict[str, float], claims: Sequence[Claim], arms: Sequence[Arm],
                schedule: Schedule | None = None, start_sd: float = START_SD):
    """Each server variant one start (``sequential`` unless ``schedule``), read with the start variance of a freshly
    simulated bench-00 run on the same host (start sd ``start_sd``) pooled in."""
    plan = _plan(arms, claims, schedule or phases_for(arms, MIN_PAIRED_REPEATS, "sequential"))
    lat = Latencies.draw(rng, PROMPTS)
    starts = {a.server: math.exp(start_sd * rng.standard_normal()) for a in arms}
    by_label = {a.label: a.server for a in arms}
    runs, _ = measure(plan, lat, rng, lambda label, _r, _p: truths.get(label, 1.0) * starts[by_label[label]])
    pooled = start_variance_run(rng, start_sd)
    return [claim_effect(runs, c, seed=0, resamples=0, design=design_of(plan, c), start=pooled) for c in claims]


CROSS_ARMS = (Arm("seqs-low", "bursty", "seqs-low"), Arm("base", "bursty", "base"))


BENCH68_PAIR = (Arm("copy/off@ngram", "copy", "off"), Arm("copy/ngram", "copy", "ngram"))
BENCH68_REPEATS = bench68.Config().repeats  # the bench default


def _claim_outcome(res, truth: float = EDGE) -> Outcome:
    if res is None or res.stats is None:
        return Outcome(None, False)
    return Outcome(_covers((res.stats.ci_low, res.stats.ci_high), truth), res.decision == "adopt")


def cross_claim(start_sd: float, truth: float = EDGE) -> Callable[[np.random.Generator], Outcome]:
    """A claim across two starts at ``truth`` (default: the margin edge), the simulated bench-00's variance in it."""
    def run(rng: np.random.Generator) -> Outcome:
        claim = Claim(TTFT_P50, "seqs-low", "base")
        return _claim_outcome(cross_start(rng, {"base": truth}, (claim,), CROSS_ARMS, start_sd=start_sd)[0], truth)
    return run


def bench68_pairs(rng: np.random.Generator) -> Outcome:
    """A speculative variant's start beside the baseline's, their arms alternating per repeat (bench-68's own
    ``paired_steps``): each side one start, so the claim crosses starts."""
    from harness.bench.benches.bench68.arms import paired_steps

    base, spec = BENCH68_PAIR
    schedule = Schedule((Phase("off+ngram", ("off", "ngram"), paired_steps([BENCH68_PAIR], BENCH68_REPEATS,
                                                                            "ngram")),), "bench-68")
    claim = Claim(TTFT_P50, base.label, spec.label)
    return _claim_outcome(cross_start(rng, {spec.label: EDGE}, (claim,), BENCH68_PAIR, schedule)[0])


CONTROL_ARMS = (Arm("unique-off", "unique-prefix", "cache-off"), Arm("cache-off", "shared-prefix", "cache-off"))


def bench69_control(rng: np.random.Generator) -> Outcome:
    """bench-69's cache-off control: its twins interleaved ABBA on the cache-off start (another start than the
    primary's, with its own start effect), moved by exactly its equivalence margin (the stated 5 %, since a fifth
    of a x0.8 primary's log effect is less), so a verdict 'equivalent' is the false one."""
    primary = Claim(TTFT_P50, "unique", "shared")
    control = Claim(TTFT_P50, "unique-off", "cache-off", name="cache-off")
    arms = (*BENCH69_ARMS, *CONTROL_ARMS)
    prim, ctrl = cross_start(rng, {"shared": 0.8, "cache-off": 1 + MARGIN}, (primary, control), arms)
    if prim is None or ctrl is None or ctrl.stats is None:
        return Outcome(None, False)
    entry = control_entry(ctrl, prim)
    edge = 1 + entry["equivalence_margin"]
    return Outcome(_covers((ctrl.stats.ci_low, ctrl.stats.ci_high), edge), entry["equivalence"] == "equivalent")


# ---- Holm over a bench's secondary claims (bench-70: one primary and nine secondaries) -------------------------

SECONDARIES = 9
HOLM_ARMS = tuple(Arm(f"arm-{i}", "closed", "base") for i in range(SECONDARIES + 2))


def holm_family(rng: np.random.Generator) -> Outcome:
    """Every secondary on one start, interleaved, each at the margin edge: any one adopted is a family-wise error;
    the coverage counted is the first secondary's."""
    base = HOLM_ARMS[0].label
    claims = [Claim(TTFT_P50, base, a.label, name=a.label, primary=i == 0) for i, a in enumerate(HOLM_ARMS[1:])]
    plan = _plan(HOLM_ARMS, claims, phases_for(HOLM_ARMS, MIN_PAIRED_REPEATS, "sequential"))
    lat = Latencies.draw(rng, 20)
    runs, _ = measure(plan, lat, rng, lambda label, _r, _p: 1.0 if label == base else EDGE)
    results = [claim_effect(runs, c, seed=0, resamples=0, design=design_of(plan, c)) for c in claims]
    entries = secondary_entries(results, 0)
    first = results[1]
    covered = None if first is None or first.stats is None else _covers((first.stats.ci_low, first.stats.ci_high),
                                                                          EDGE)
    return Outcome(covered, any(e["role"] == "secondary" and e["decision"] == "adopt" for e in entries))


# ---- bench-81: speedup over ABAB restarts, by its own ratio --------------------------------------------------

ROUNDS, SPEEDUP = 3, 1.6


def bench81(rng: np.random.Generator) -> Outcome:
    """Three rounds (baseline start, then the layout's start), a start's throughput lognormal about its mean; the
    speedup as ``layout_scaling`` reads it (``paired_log_ratio``)."""
    base = 30.0 * np.exp(START_SD * rng.standard_normal(ROUNDS) + RUN_SD * rng.standard_normal(ROUNDS))
    mine = 30.0 * SPEEDUP * np.exp(START_SD * rng.standard_normal(ROUNDS) + RUN_SD * rng.standard_normal(ROUNDS))
    ratio = paired_log_ratio(list(mine), list(base))
    assert ratio is not None
    return Outcome(_covers((ratio.ci_low, ratio.ci_high), SPEEDUP), False)


# ---- bench-70: a bursty list, a fresh arrival draw per repeat, arms restarted every repeat ----------------------

QUEUE_REQUESTS, QUEUE_RATE, BURSTINESS, LOAD = 30, 1.0, 0.25, 0.6  # bench-70's gamma list, scaled down
QUEUE_ARMS = (Arm("seqs-low", "bursty", "seqs-low"), Arm("base", "bursty", "base"))
SERVICE = np.exp(0.5 * np.random.default_rng(70).standard_normal(QUEUE_REQUESTS))  # the list's lengths: one file


def queue_latency(gaps: np.ndarray, service: np.ndarray) -> np.ndarray:
    """E2E from the scheduled send through one FIFO server (Lindley), per request; rows are independent runs."""
    wait = np.zeros(gaps.shape[:-1])
    out = np.empty(np.broadcast_shapes(gaps.shape, service.shape))
    for i in range(gaps.shape[-1]):
        wait = np.maximum(0.0, wait - gaps[..., i]) if i else wait
        out[..., i] = wait + service[..., i]
        wait = out[..., i]
    return out


def _service(scale: np.ndarray | float, noise: np.ndarray) -> np.ndarray:
    return LOAD / QUEUE_RATE * SERVICE / SERVICE.mean() * np.asarray(scale)[..., None] * noise


def queue_truth(k: float, runs: int = 20_000) -> float:
    """E over realisations, starts and noise of log(median B / median A) with B's service scaled by ``k``
    (common random numbers, so it is smooth in ``k``); gaps as ``arrival.scheduled`` spans them."""
    rng = np.random.default_rng(7070)
    gaps = rng.gamma(BURSTINESS, 1.0, size=(runs, QUEUE_REQUESTS))
    gaps[:, 0] = 0.0
    gaps *= (QUEUE_REQUESTS - 1) / gaps.sum(axis=1, keepdims=True) / QUEUE_RATE
    arms = []
    for scale in (1.0, k):
        start = np.exp(START_SD * rng.standard_normal(runs) + RUN_SD * rng.standard_normal(runs))
        noise = np.exp(0.1 * rng.standard_normal((runs, QUEUE_REQUESTS)))
        arms.append(np.median(queue_latency(gaps, _service(scale * start, noise)), axis=1))
    return float(np.mean(np.log(arms[1] / arms[0])))


def edge_scale() -> float:
    """B's service scale whose true effect is exactly the margin edge (secant on ``queue_truth``)."""
    target, x0, x1 = math.log(EDGE), 1.0, EDGE
    f0, f1 = queue_truth(x0) - target, queue_truth(x1) - target
    for _ in range(6):
        if abs(f1) < 1e-5:
            break
        x0, x1, f0 = x1, x1 - f1 * (x1 - x0) / (f1 - f0), f1
        f1 = queue_truth(x1) - target
    return x1


def bench70_arrivals(scale_b: float) -> Callable[[np.random.Generator], Outcome]:
    from harness.bench.realisation import arrival_seed
    from harness.workload.arrival import Arrival, drawn, scheduled

    claim = Claim(TTFT_P50, "seqs-low", "base")  # the records carry E2E from the scheduled send as their TTFT
    plan = _plan(QUEUE_ARMS, (claim,), phases_for(QUEUE_ARMS, MIN_PAIRED_REPEATS, "alternate"))
    nominal = Arrival("gamma", rate_rps=QUEUE_RATE, burstiness=BURSTINESS)

    def run(rng: np.random.Generator) -> Outcome:
        base_seed = int(rng.integers(1 << 40))
        lists = {}
        for r in range(1, MIN_PAIRED_REPEATS + 1):
            seed = arrival_seed(base_seed, r)
            lists[r] = np.diff(drawn(scheduled(nominal, QUEUE_REQUESTS, seed), QUEUE_REQUESTS, seed), prepend=0.0)
        runs = []
        for phase in plan.phases:  # alternating restarts: every arm run is a start of its own
            for repeat, arm in phase.steps:  # type: ignore[union-attr]
                start = math.exp(START_SD * rng.standard_normal() + RUN_SD * rng.standard_normal())
                noise = np.exp(0.1 * rng.standard_normal(QUEUE_REQUESTS))
                scale = start * (scale_b if arm.label == "base" else 1.0)
                runs.append(arm_run(arm.label, repeat, 1e3 * queue_latency(lists[repeat], _service(scale, noise))))
        return _claim_outcome(claim_effect(runs, claim, seed=0, resamples=0, design=design_of(plan, claim)))
    return run


# ---- the table -----------------------------------------------------------------------------------------------

def designs() -> tuple[Design, ...]:
    n = MIN_PAIRED_REPEATS
    return (
        Design("bench-69 interleaved", n, bench69(), f"the runner's order on one start (ABBA), hit/miss strata, "
               f"{INVALID_SHARE:.0%} of arm runs stalled and re-run (budget {RERUNS}; past it the bench stops)"),
        Design("bench-69 dropout", n, bench69(invalid_share=0.25, quiet=True, per_request=True), "bench-69 "
               "interleaved with 25 % of arm runs stalled over 3 requests' TTFT, judged per request: the stalled "
               "requests left out, the run kept, the claim capped where every request reads otherwise"),
        Design("bench-69 under drift", n, bench69(-0.01), "bench-69 interleaved with the host drifting -1 %/arm run"),
        *(Design(f"cross-start, start sd {sd:.0%}", n, cross_claim(sd), f"each arm on its own start (sd {sd:.0%}), "
                 f"the start variance of a simulated bench-00 ({AA.starts} starts x {AA.repeats} repeats of "
                 f"{AA.requests} requests) in the interval: start-pooled") for sd in START_SDS),
        Design("bench-69 control (TOST)", n, bench69_control, "cache-off's twins interleaved on their own start "
               f"(sd {START_SD:.0%}), moved by its equivalence margin; 'adopt' = declared equivalent"),
        Design("bench-70 Holm, 9 secondaries", n, holm_family, "primary + 9 secondaries on one start, all at the "
               "margin edge; 'adopt' = any secondary adopted"),
        Design("bench-70 fresh arrivals", n, bench70_arrivals(edge_scale()), f"gamma({BURSTINESS}) list of "
               f"{QUEUE_REQUESTS} through a FIFO queue at load {LOAD}, redrawn per repeat, --order alternate"),
        Design("bench-81 rounds", ROUNDS, bench81, f"speedup {SPEEDUP} over {ROUNDS} ABAB restart rounds, "
               "Student t on the per-round log ratios", level=None),
        Design("bench-68 pairs, cross-start", BENCH68_REPEATS, bench68_pairs, "a variant's start beside the "
               f"baseline's, arms alternating per repeat, {BENCH68_REPEATS} repeats (the bench default), "
               "the bench-00 start variance in the interval", capped=BENCH68_REPEATS < 5),
    )
