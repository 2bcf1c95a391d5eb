"""A server the user runs: the kit sends to it and reads from it, and owns no process.

Its handle answers health and liveness over HTTP; it has no log but the notes the kit writes about it, no
memory or CPU figure of its own (those are the host's, not the kit's to read), and ``stop`` leaves it running.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from harness.runtime.base import ServerHandle, ServerStartError

HEALTH_TIMEOUT_S = 10.0


def answers(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> tuple[int, str]:
    """(HTTP status, reason) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - the user's own endpoint
            return resp.status, "ok"
    except urllib.error.HTTPError as exc:
        return exc.code, str(exc.reason)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return 0, str(getattr(exc, "reason", exc))


class ExternalHandle(ServerHandle):
    """An endpoint given by URL; ``log_path`` holds what the kit noted about it (it is listed in servers.json)."""

    owns_process = False

    def __init__(self, base_url: str, log_path: Path, health_path: str = "/health"):
        self.base_url = base_url.rstrip("/")
        self.log_path = log_path
        self.health_path = health_path

    def note(self, line: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")

    def wait_healthy(self, timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
        status, reason = answers(self.base_url + self.health_path, min(timeout_s, HEALTH_TIMEOUT_S))
        if status != 200:
            raise ServerStartError(f"the server at {self.base_url} does not answer GET {self.health_path}: "
                                   f"{status or ''} {reason}".replace(":  ", ": "))

    def alive(self) -> bool:
        return answers(self.base_url + self.health_path)[0] == 200

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def memory_bytes(self) -> int | None:
        return None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """The kit did not start it, so it keeps running."""
        return None
