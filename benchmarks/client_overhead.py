"""How much latency and throughput the client itself costs.

A fake OpenAI server (separate processes; by default the lean one, tests/lean_fake_server.py,
since its CPU counts: it shares the cores with the client) streams 32 tokens with TTFT 50 ms
and 10 ms between tokens, so every request ideally takes 360 ms. Closed loops of 1, 16, 64, 256
and 1024 concurrent streams then show the request rate sustained as a fraction of the
ideal (streams / 0.36 s) and the measured-minus-injected TTFT (P50/P99). At 1024 streams
the same load is also driven by a plain single-process asyncio client that opens a
session per request, the pattern of simple benchmark scripts.

Targets (2 cores, server included): at 256 streams >= 90 % of ideal with TTFT P99
error <= 20 ms; at 1024 streams at least twice the plain client's rate.

    .venv/bin/python benchmarks/client_overhead.py [--streams 1 16 64 256 1024] [--rounds 4] [--repeat 3]
        [--server lean|aiohttp] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
import psutil
from tabulate import tabulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from tiny_tokenizer import train_tokenizer  # noqa: E402

from harness.client import ClientConfig, auto_workers, plan_shares, read_records, run_client  # noqa: E402
from harness.contract import atomic_write_json  # noqa: E402
from harness.rundir.fingerprint import collect  # noqa: E402
from harness.serving.metrics import performance  # noqa: E402
from harness.workload import Arrival, Common, make_workload  # noqa: E402

TTFT_MS, GAP_MS, OUT_TOKENS = 50.0, 10.0, 32
IDEAL_E2E_S = (TTFT_MS + (OUT_TOKENS - 1) * GAP_MS) / 1e3  # 0.36 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVERS = {"lean": "lean_fake_server.py", "aiohttp": "fake_openai_server.py"}


def start_servers(kind: str, port: int, processes: int) -> list[subprocess.Popen]:
    cmd = [sys.executable, str(REPO / "tests" / SERVERS[kind]), "--port", str(port),
           "--ttft-ms", str(TTFT_MS), "--gap-ms", str(GAP_MS)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    for p in procs:
        line = p.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"fake server did not start: {line!r}")
    return procs


def cpu_s(servers: list[subprocess.Popen]) -> tuple[float, float]:
    """(CPU seconds of this process and its reaped children, CPU seconds of the server processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    client = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    server = sum(sum(psutil.Process(s.pid).cpu_times()[:2]) for s in servers)
    return client, server


def infkit_client(url: str, requests, streams: int, workers: int | None,
                  out: Path) -> tuple[float, np.ndarray, np.ndarray, float | None, int]:
    """(request/s, TTFT error ms of every request, of the requests after the first wave, loop lag P99, processes)."""
    out.write_bytes(b"")
    client = ClientConfig(endpoint=url, model="fake", timeout_s=60, keep_text=False)
    n_workers = workers or auto_workers(streams)
    run = run_client(plan_shares(tuple(requests), client, str(out), workers=n_workers, closed_concurrency=streams,
                                 max_concurrency=None))
    recs = read_records(out)
    perf = performance(recs)
    done = [r for r in recs if r.completed]
    ttft_err = np.array([(r.first_token_s - r.sent_s) * 1e3 - TTFT_MS for r in done])
    # Requests 0..streams-1 are every slot's first: all sent at t0 in one burst that the server accepts at once.
    steady = np.array([(r.first_token_s - r.sent_s) * 1e3 - TTFT_MS for r in done if r.index >= streams])
    lag = max((s.loop_lag_p99_ms for s in run.stats if s.loop_lag_p99_ms is not None), default=None)
    return perf["throughput"]["request_rate_rps"], ttft_err, steady, lag, run.workers


async def _plain(url: str, prompts: list[str], streams: int) -> tuple[float, np.ndarray]:
    """The naive pattern: one asyncio process, a new ClientSession per request, readline-based SSE."""
    queue = list(prompts)
    ttfts: list[float] = []
    ends: list[float] = []
    start = time.monotonic()

    async def one(prompt: str) -> None:
        body = {"model": "fake", "prompt": prompt, "max_tokens": OUT_TOKENS, "stream": True}
        async with aiohttp.ClientSession() as session:
            sent = time.monotonic()
            first = None
            async with session.post(url + "/v1/completions", json=body) as resp:
                async for raw in resp.content:
                    line = raw.decode().strip()
                    if line.startswith("data:") and line != "data: [DONE]":
                        chunk = json.loads(line[5:])
                        if chunk["choices"] and chunk["choices"][0]["text"] and first is None:
                            first = time.monotonic()
            ttfts.append((first - sent) * 1e3 - TTFT_MS)
            ends.append(time.monotonic())

    async def slot() -> None:
        while queue:
            await one(queue.pop())

    await asyncio.gather(*(slot() for _ in range(streams)))
    return len(ends) / (max(ends) - start), np.array(ttfts)


HEADERS = ["client", "streams", "procs", "requests", "req/s", "ideal req/s", "of ideal", "TTFT err P50 ms",
           "TTFT err P99 ms", "after 1st wave P99 ms", "loop lag P99 ms", "client CPU us/chunk", "server CPU us/chunk"]


def one_pass(args, url: str, servers: list[subprocess.Popen], tok_dir: Path, tmp: Path) -> tuple[list, dict]:
    """Every stream count with infkit, then the plain client at 1024 streams: (table rows, target figures)."""
    rows, summary = [], {}
    for streams in args.streams:
        n = max(streams * args.rounds, 8)
        w = make_workload("random", Common(arrival=Arrival("closed", concurrency=streams), requests=n, input_tokens=16,
                                           output_tokens=OUT_TOKENS), {}, tok_dir)
        c0, s0 = cpu_s(servers)
        rate, err, steady, lag, workers = infkit_client(url, w.requests, streams, args.workers,
                                                        tmp / f"r{streams}.jsonl")
        c1, s1 = cpu_s(servers)
        chunks = n * (OUT_TOKENS + 1)
        ideal = streams / IDEAL_E2E_S
        p50, p99 = np.percentile(err, [50, 99])
        summary[streams] = {"rate_rps": rate, "of_ideal": rate / ideal, "ttft_err_p99_ms": p99}
        rows.append(("infkit", streams, workers, n, round(rate, 1), round(ideal, 1), f"{rate / ideal:.1%}",
                     round(p50, 1), round(p99, 1), round(float(np.percentile(steady, 99)), 1) if steady.size else "-",
                     round(lag, 1) if lag is not None else "-", round((c1 - c0) / chunks * 1e6, 1),
                     round((s1 - s0) / chunks * 1e6, 1)))
    if not args.no_plain and 1024 in args.streams:
        prompts = [r.prompt for r in w.requests]
        c0, s0 = cpu_s(servers)
        rate, err = asyncio.run(_plain(url, prompts, 1024))
        c1, s1 = cpu_s(servers)
        chunks = len(prompts) * (OUT_TOKENS + 1)
        p50, p99 = np.percentile(err, [50, 99])
        summary["plain"] = {"rate_rps": rate}
        rows.append(("plain asyncio", 1024, 1, len(prompts), round(rate, 1), round(1024 / IDEAL_E2E_S, 1),
                     f"{rate / (1024 / IDEAL_E2E_S):.1%}", round(p50, 1), round(p99, 1), "-", "-",
                     round((c1 - c0) / chunks * 1e6, 1), round((s1 - s0) / chunks * 1e6, 1)))
    return rows, summary


def verdicts(summary: dict) -> list[str]:
    out = []
    if 256 in summary:
        t = summary[256]
        ok = t["of_ideal"] >= 0.9 and t["ttft_err_p99_ms"] <= 20.0
        out.append(f"target 256 streams: >= 90% of ideal and TTFT P99 error <= 20 ms: {'PASS' if ok else 'FAIL'} "
                   f"({t['of_ideal']:.1%}, {t['ttft_err_p99_ms']:.1f} ms)")
    if 1024 in summary and "plain" in summary:
        ratio = summary[1024]["rate_rps"] / summary["plain"]["rate_rps"]
        summary["ratio_1024"] = ratio
        out.append(f"target 1024 streams: >= 2x the plain client: {'PASS' if ratio >= 2 else 'FAIL'} ({ratio:.2f}x)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64, 256, 1024])
    ap.add_argument("--rounds", type=int, default=4, help="requests per stream")
    ap.add_argument("--workers", type=int, help="client processes (default: infkit's auto rule)")
    ap.add_argument("--server", choices=sorted(SERVERS), default="lean",
                    help="lean: timer callbacks and raw transport writes; aiohttp: the tests' fault-injecting server")
    ap.add_argument("--server-processes", type=int, default=1)
    ap.add_argument("--no-plain", action="store_true", help="skip the plain-client comparison")
    ap.add_argument("--repeat", type=int, default=1, help="measure the whole sequence this many times")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the unmeasured warm-up (one request per stream at the largest stream count)")
    ap.add_argument("--json", type=Path, help="also write every pass, the load averages and the host summary here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="infkit-overhead-"))
    tok_dir = train_tokenizer(tmp / "tok")
    port = free_port()
    servers = start_servers(args.server, port, args.server_processes)
    url = f"http://127.0.0.1:{port}"
    passes = []
    try:
        if not args.no_warmup:
            # Without it the first pass's first burst pays both processes' one-time costs (heap growth,
            # first touches), which showed as a ~20 ms TTFT tail at 256 streams in pass 1 only.
            streams = max(args.streams)
            w = make_workload("random", Common(arrival=Arrival("closed", concurrency=streams), requests=streams,
                                               input_tokens=16, output_tokens=OUT_TOKENS), {}, tok_dir)
            infkit_client(url, w.requests, streams, args.workers, tmp / "warmup.jsonl")
        for k in range(args.repeat):
            load_before = os.getloadavg()[0]
            rows, summary = one_pass(args, url, servers, tok_dir, tmp)
            lines = verdicts(summary)
            passes.append({"load_average_1m_before": load_before, "load_average_1m_after": os.getloadavg()[0],
                           "rows": [dict(zip(HEADERS, r, strict=True)) for r in rows], "targets": summary,
                           "verdicts": lines})
            print(f"pass {k + 1}/{args.repeat}: fake server TTFT {TTFT_MS:g} ms, {GAP_MS:g} ms/token, "
                  f"{OUT_TOKENS} tokens (ideal E2E {IDEAL_E2E_S * 1e3:.0f} ms); {os.cpu_count()} CPUs, "
                  f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; "
                  f"{args.server_processes} {args.server} server process(es)")
            print(tabulate(rows, headers=HEADERS))
            print("\n".join(lines), flush=True)
    finally:
        for s in servers:
            s.terminate()
            s.wait(10)
    if args.repeat > 1:
        print(spread(passes))
    if args.json:
        fp = collect()
        host = fp["host"]
        doc = {"benchmark": "client_overhead", "command": " ".join(sys.argv), "harness": fp["harness"],
               "host": {k: host[k] for k in ("os", "kernel", "machine", "cpu_model", "cpu_cores_logical",
                                             "memory_total_bytes")},
               "python": sys.version.split()[0], "passes": passes}
        atomic_write_json(args.json, doc)
    return 0


def spread(passes: list[dict]) -> str:
    """min / median / max over passes of each target figure."""
    def mmm(values: list[float], fmt: str) -> str:
        return "/".join(format(v, fmt) for v in (min(values), float(np.median(values)), max(values)))
    out = [f"spread over {len(passes)} passes (min/median/max):"]
    t256 = [p["targets"][256] for p in passes if 256 in p["targets"]]
    if t256:
        out.append(f"  256 streams: {mmm([t['of_ideal'] * 100 for t in t256], '.1f')} % of ideal, "
                   f"TTFT err P99 {mmm([t['ttft_err_p99_ms'] for t in t256], '.1f')} ms")
    ratios = [p["targets"]["ratio_1024"] for p in passes if "ratio_1024" in p["targets"]]
    if ratios:
        out.append(f"  1024 streams: {mmm(ratios, '.2f')} x the plain client")
    loads = [p["load_average_1m_before"] for p in passes]
    out.append(f"  load average before each pass: {', '.join(f'{v:.2f}' for v in loads)}")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
