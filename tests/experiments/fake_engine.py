"""A stand-in engine process for runner tests: the fake OpenAI server, or an engine that refuses to start.

``--refuse MESSAGE`` prints the message the way an engine's log does and exits 1 (a configuration
this platform does not run); ``--crash-after N`` stops answering after N requests; ``--max-running N``
serves N requests at once and queues the rest (a capacity that latency under load can find).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fake_openai_server import FakeConfig, FakeOpenAIServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--crash-after", type=int, default=0)
    ap.add_argument("--refuse", default=None)
    ap.add_argument("--max-running", type=int, default=0)
    args, _ = ap.parse_known_args()
    if args.refuse:
        print(f"ERROR engine start failed: {args.refuse}", flush=True)
        return 1
    server = FakeOpenAIServer(FakeConfig(ttft_s=args.ttft_ms / 1e3, gap_s=args.gap_ms / 1e3,
                                         crash_after=args.crash_after, max_running=args.max_running),
                              port=args.port)

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
