"""Server-side telemetry: Prometheus scrapes and deltas, peak-memory sampling."""

from harness.telemetry.prometheus import GaugePoller, Scrape, Snapshot, parse, scrape
from harness.telemetry.rss import PeakSampler, process_tree_rss, rss_probe
from harness.telemetry.server_metrics import (
    POLLED_GAUGES,
    histogram_quantile,
    occupancy,
    occupancy_rows,
    summarize,
)

__all__ = [
    "POLLED_GAUGES",
    "GaugePoller",
    "PeakSampler",
    "Scrape",
    "Snapshot",
    "histogram_quantile",
    "occupancy",
    "occupancy_rows",
    "parse",
    "process_tree_rss",
    "rss_probe",
    "scrape",
    "summarize",
]
