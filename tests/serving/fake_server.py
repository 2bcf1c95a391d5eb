"""A stand-in server process for runtime tests: /health after a delay, a forked child, SIGINT handling.

Usage: python fake_server.py PORT [--health-delay S] [--ignore-sigint] [--exit-after S] [--child-pid-file F]
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import sys
import threading
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--health-delay", type=float, default=0.0)
    p.add_argument("--ignore-sigint", action="store_true")
    p.add_argument("--exit-after", type=float, default=None)
    p.add_argument("--child-pid-file", default=None)
    args = p.parse_args()
    started = time.monotonic()
    if args.ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.child_pid_file:
        pid = os.fork()
        if pid == 0:  # a worker that holds memory and never exits on its own
            block = bytearray(32 << 20)
            block[::4096] = b"x" * len(block[::4096])
            while True:
                time.sleep(1)
        with open(args.child_pid_file, "w") as fh:
            fh.write(str(pid))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/health" and time.monotonic() - started >= args.health_delay
            self.send_response(200 if ok else 503)
            self.end_headers()

        def log_message(self, fmt, *a):
            print("request", self.path, flush=True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.exit_after is not None:
        def die():
            time.sleep(args.exit_after)
            print("fatal: simulated engine failure", flush=True)
            os._exit(7)
        threading.Thread(target=die, daemon=True).start()
    print("serving on", args.port, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("shutting down", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
