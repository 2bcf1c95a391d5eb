"""bench-72's SLOs: the limits every probe is held to, and the light-load reference relative limits scale from."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.bench.lib.citations import cited_saturation
from harness.bench.metrics import TPOT_P50, TTFT_P50
from harness.contract.result import Result


@dataclass(frozen=True)
class SLO:
    """The limits every probe is held to, and how they were chosen."""

    ttft_p99_ms: float
    tpot_p99_ms: float
    error_rate: float
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        return (f"P99 TTFT <= {self.ttft_p99_ms:.0f} ms, P99 TPOT <= {self.tpot_p99_ms:.1f} ms, "
                f"errors <= {self.error_rate:.1%}")


@dataclass(frozen=True)
class LightLoad:
    """Light-load medians relative SLOs scale from (unqueued requests: a cited bench-66 run's lightest level that
    kept up, or this bench's own one-at-a-time probe), and a rate known to be served."""

    ttft_ms: float | None  # median TTFT: a median is stable where a P99 of a few requests is their maximum
    tpot_ms: float | None  # median TPOT
    rate_rps: float | None  # a rate known to be served (bench-66's saturation point, or the probe's)
    source: str


def scaled_slo(cfg: Any, light: LightLoad | None) -> SLO | None:
    """Explicit limits win; the others are the light-load median times the factors; None while one is missing."""
    parts, basis = {}, []
    for key, ref, factor, name in (("ttft_p99_ms", "ttft_ms", cfg.slo_ttft_factor, "TTFT"),
                                   ("tpot_p99_ms", "tpot_ms", cfg.slo_tpot_factor, "TPOT")):
        given = getattr(cfg, f"slo_{key}")
        measured = getattr(light, ref) if light else None
        if given is not None:
            parts[key] = given
            basis.append(f"P99 {name} {given:g} ms as set (--slo-{key.replace('_', '-')})")
        elif measured:
            parts[key] = factor * measured
            basis.append(f"P99 {name} {factor:g} x the light-load median {measured:.1f} ms")
        else:
            return None
    source = f" ({light.source})" if light and any(getattr(cfg, f"slo_{k}") is None for k in parts) else ""
    return SLO(error_rate=cfg.slo_error_rate, basis="; ".join(basis) + source, **parts)


def cited_light_load(result: Result | None, source: str) -> tuple[LightLoad | None, str]:
    """bench-66's light-load medians and saturation rate from its sweep result (details.baseline), or None and why
    it cannot be used (no baseline, an undetermined bracket: ``cited_saturation``): this bench then probes itself."""
    baseline = (result.detail("baseline") if result else None) or {}
    if not baseline:
        return None, "it records no baseline"
    served, why = cited_saturation(result)
    latency = (baseline.get("light_load") or {}).get("latency_ms") or {}
    if served is None or not latency.get(TTFT_P50.name) or not latency.get(TPOT_P50.name):
        return None, why or "it has no light-load level that kept up"
    return LightLoad(latency[TTFT_P50.name], latency[TPOT_P50.name], served.get("offered_rps"), source), ""
