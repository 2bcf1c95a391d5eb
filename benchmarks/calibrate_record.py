"""Record the calibration inputs against a live OpenAI-compatible server (vLLM API).

Sends the profiling plan's bursts, then a held-out Poisson workload, as token-id
prompts to ``/v1/completions`` (streamed, ``ignore_eos`` so every request
produces exactly its ``max_tokens``), and writes per-request records
``index, sent_s, ttft_ms, e2e_ms, output_tokens`` plus the held-out workload file:

    python benchmarks/calibrate_record.py --endpoint http://127.0.0.1:8000 --model NAME --out DIR
    infkit mech calibrate --profile-records DIR/profile.jsonl --heldout-workload DIR/heldout_workload.jsonl \\
        --heldout-records DIR/heldout.jsonl --max-num-batched-tokens N --max-num-seqs M

Start the server without prefix caching (the plan's prompts are distinct, the
simulator's default pool does not cache) and with the same token budget and
sequence limit you pass to ``infkit mech calibrate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import aiohttp
import numpy as np

from harness.contract import atomic_write_text
from harness.mech.calibrate import profiling_plan
from harness.mech.workload import SimRequest, SimWorkload, SyntheticSpec, synthetic


def token_ids(index: int, n: int, salt: int) -> list[int]:
    """Distinct ordinary-vocabulary ids per request, so no two prompts share a prefix."""
    return np.random.default_rng(1_000_003 * salt + index).integers(200, 48_000, size=n).tolist()


async def one(session: aiohttp.ClientSession, url: str, model: str, req: SimRequest, salt: int,
              t0: float) -> dict:
    body = {"model": model, "prompt": token_ids(req.index, req.input_tokens, salt), "max_tokens": req.output_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    ttft, usage = None, None
    async with session.post(url + "/v1/completions", json=body) as resp:
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            msg = json.loads(line[5:])
            if ttft is None and msg.get("choices") and msg["choices"][0].get("text"):
                ttft = time.perf_counter() - sent
            usage = msg.get("usage") or usage
    return {"index": req.index, "sent_s": round(sent - t0, 6), "ttft_ms": None if ttft is None else 1000 * ttft,
            "e2e_ms": 1000 * (time.perf_counter() - sent), "output_tokens": (usage or {}).get("completion_tokens")}


async def replay(url: str, model: str, workload: SimWorkload, salt: int, path: Path) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        t0, tasks = time.perf_counter(), []
        for req in workload.requests:
            delay = (req.arrival_s or 0.0) - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, url, model, req, salt, t0)))
        records = await asyncio.gather(*tasks)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def workload_file(workload: SimWorkload) -> str:
    header = {"schema": "infkit/workload/v1", "workload_id": workload.workload_id, "kind": workload.kind,
              "arrival": workload.arrival, "seeds": workload.seeds}
    rows = [{"index": r.index, "offset_s": r.arrival_s, "input_tokens": r.input_tokens,
             "output_tokens": r.output_tokens, "prompt": "token ids"} for r in workload.requests]
    return "".join(json.dumps(x) + "\n" for x in [header, *rows])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--gap-s", type=float, default=6.0, help="idle gap between profiling bursts")
    parser.add_argument("--heldout-rate-rps", type=float, default=0.5)
    parser.add_argument("--heldout-requests", type=int, default=40)
    args = parser.parse_args()
    url = args.endpoint.rstrip("/")
    warmup = synthetic(SyntheticSpec(requests=3, rate_rps=5, input_mean=64, output_mean=8, seed=99))
    await replay(url, args.model, warmup, 9, args.out / "warmup.jsonl")
    await replay(url, args.model, profiling_plan(repeats=2, gap_s=args.gap_s), 1, args.out / "profile.jsonl")
    heldout = synthetic(SyntheticSpec(requests=args.heldout_requests, rate_rps=args.heldout_rate_rps,
                                      input_mean=400, output_mean=40, seed=7))
    atomic_write_text(args.out / "heldout_workload.jsonl", workload_file(heldout))
    await replay(url, args.model, heldout, 2, args.out / "heldout.jsonl")


if __name__ == "__main__":
    asyncio.run(main())
