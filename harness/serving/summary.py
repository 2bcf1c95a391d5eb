"""A serving result as a short table for people (printed by `infkit run`, written as summary.txt)."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from harness.contract.verdict import verdict_lines

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "itl_token_ms", "e2e_ms", "queue_wait_client_ms", "queue_wait_server_ms")


def render_summary(doc: dict[str, Any]) -> str:
    perf, concl, ident = doc["performance"], doc["conclusion"], doc["identity"]
    rows = []
    for name in LATENCIES:
        d = perf.get(name)
        rows.append((name, *(f"{d[k]:.2f}" if d and k in d else "-" for k in ("n", "mean", "p50", "p90", "p99"))))
    lines = [
        *verdict_lines(f"{ident['semantic_id']} {ident['run_label']}", concl),
        f"run {ident['run_id']} workload {ident['workload_id'][:19]}",
        "",
        tabulate(rows, headers=["metric", "n", "mean", "p50", "p90", "p99"]),
        "",
    ]
    tp = perf["throughput"]
    if tp:
        good = f", goodput {tp['goodput_rps']:.2f} req/s under {tp['slo']}" if tp.get("goodput_rps") is not None else ""
        lines.append(
            f"{tp['request_rate_rps']:.2f} req/s, {tp['output_tokens_per_s']:.1f} output tok/s, "
            f"{tp['total_tokens_per_s']:.1f} total tok/s over {tp['duration_s']:.2f} s{good}"
        )
        lines.append(steady_line(tp.get("steady_state")))
    prefix = (doc.get("details", {}).get("server_metrics") or {}).get("prefix_cache")
    if prefix and prefix.get("hit_rate") is not None:
        lines.append(f"prefix-cache hit rate {prefix['hit_rate']:.1%} ({prefix['series'][0]})")
    cpu = doc.get("details", {}).get("cpu") or {}
    if cpu.get("measured"):
        lines.append(f"CPU: client + API server {cpu['client_frontend_cores']:.2f} cores (client "
                     f"{cpu.get('client_cores') or 0:.2f}), engine "
                     f"{cpu['engine_cores_used']:.2f} (bound to {cpu['engine_cores'] or 'no core'}, "
                     f"client limit {cpu['limit_cores'] if cpu['limit_cores'] is not None else 'not judged'})")
    lines += energy_lines(perf)
    lines.append(f"terminations: {doc['correctness']['termination_counts']}")
    return "\n".join(lines) + "\n"


def steady_line(st: dict[str, Any] | None) -> str:
    """The steady-state window's rates, or why there are none, with the drain fraction."""
    if not st:
        return "steady state: not measured"
    drain = "-" if st["drain_fraction"] is None else f"{st['drain_fraction']:.0%}"
    head = f"steady state {st['start_s']:.2f}-{st['end_s']:.2f} s (drain {drain} of the run): "
    if st["request_rate_rps"] is None:
        return head + str(st["null_reason"])
    return head + (f"{st['request_rate_rps']:.2f} req/s, {st['output_tokens_per_s']:.1f} output tok/s, "
                   f"{st['total_tokens_per_s']:.1f} total tok/s over {st['requests']} completions")


def energy_lines(perf: dict[str, Any]) -> list[str]:
    """Energy (or why not), and GPU memory over its idle baseline with the clock events that were seen."""
    energy, reasons = perf.get("energy"), perf.get("null_reasons", {})
    if energy:
        per_token = energy["energy_per_output_token_j"]
        cost = energy["cost_per_million_output_tokens_usd"]
        lines = [f"energy ({energy['scope']}, {energy['source']}): {energy['energy_j']:.1f} J over "
                 f"{energy['window_s']:.1f} s, avg {energy['avg_power_w'] or 0:.1f} W"
                 + (f", {per_token:.4g} J/output token" if per_token is not None else "")
                 + (f", {cost:.4g} USD per million output tokens" if cost is not None else "")]
    else:
        lines = [f"energy: {reasons.get('energy', 'not measured')}"] if "energy" in perf else []
    memory = perf.get("device_memory")
    if memory and memory["peak_minus_idle_bytes"] is not None:
        lines.append(f"GPU memory over idle ({memory['baseline']}): {memory['peak_minus_idle_bytes'] / 2**30:.2f} GiB "
                     f"on {len(memory['devices'])} device(s)")
    for row in (perf.get("gpu_telemetry") or {}).get("devices", []):
        events = ", ".join(f"{k} {v}/{row['samples']}" for k, v in row["clock_event_reasons"].items()) or "none"
        sm = f"{row['sm_clock_mhz']['mean']:.0f}" if row["sm_clock_mhz"] else "-"
        lines.append(f"GPU {row['device']}: SM clock {sm} MHz mean, clock events: {events}")
    return lines
