"""A process that starts one stand-in server under the local runtime, the way a bench does, then waits.

Usage: python stop_target.py RUN_DIR [--handle-signals]. It prints ``PIDS <server> <worker>`` once the
server is healthy. With ``--handle-signals`` it installs the CLI's SIGTERM/SIGHUP handling and stands
for a cleanup that never ends (each Ctrl-C it sees prints ``interrupted``); without, it just sleeps.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.commands._signals import StopSignals  # noqa: E402
from harness.runtime.base import ServerSpec, get_runtime  # noqa: E402
from harness.runtime.local import free_port  # noqa: E402

FAKE = Path(__file__).resolve().parent / "serving" / "fake_server.py"


def main() -> None:
    run_dir = Path(sys.argv[1])
    if "--handle-signals" in sys.argv:
        StopSignals("stop-target").install()
    port = free_port()
    child_file = run_dir / "worker.pid"
    spec = ServerSpec(argv=(sys.executable, str(FAKE), str(port), "--ignore-sigint", "--child-pid-file",
                            str(child_file)), port=port)
    handle = get_runtime("local").start(spec, run_dir)
    handle.wait_healthy(timeout_s=30)
    pids, announced = f"PIDS {handle.pid} {child_file.read_text().strip()}", False
    while True:  # the announcement is inside the loop: a signal right after it still lands in the handler below
        try:
            if not announced:
                announced = True
                print(pids, flush=True)
            time.sleep(0.05)
        except KeyboardInterrupt:
            print("interrupted", flush=True)


if __name__ == "__main__":
    main()
