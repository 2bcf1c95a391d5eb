"""Progress people expect on long work: a live view on a terminal, plain periodic lines elsewhere.

A ``Reporter`` is a callable that prints one log line (``reporter("server up")``), so
it goes wherever a ``Progress`` callback is taken. On top of that it tracks

- the whole job: ``begin(total_steps)`` and ``step_done()`` (arm runs, sweep probes),
- the current server's state: ``state("server cache-on: healthy")``,
- the current measured task: ``with reporter.task(label, total, requests_path):`` follows
  the run's ``requests.jsonl`` as the client appends records (done, errors), so the
  client's worker processes need no callback.

On a TTY it renders with ``rich`` (bars, elapsed, ETA); in CI or a pipe it prints a
status line every ``PLAIN_EVERY_S`` seconds while a task runs, and one when it ends.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

Progress = Callable[[str], None]
PLAIN_EVERY_S = 15.0
COMPLETED = ("stop", "length")


class RecordTail:
    """Counts the records appended to a ``requests.jsonl`` since the last look (a truncated file restarts)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.done = 0
        self.errors = 0
        self._partial = b""

    def poll(self) -> tuple[int, int]:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return self.done, self.errors
        if size < self.offset:
            self.offset, self.done, self.errors, self._partial = 0, 0, 0, b""
        if size > self.offset:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(size - self.offset)
            self.offset += len(chunk)
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                self.done += 1
                try:
                    status = json.loads(line).get("status")
                except ValueError:
                    status = None
                self.errors += status not in COMPLETED
        return self.done, self.errors


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(max(0, seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Reporter:
    """Plain reporter: log lines, and status lines every ``every_s`` while a task runs."""

    def __init__(self, out: TextIO | None = None, every_s: float = PLAIN_EVERY_S, name: str = "infkit"):
        self.out = out or sys.stdout
        self.every_s = every_s
        self.name = name
        self.total_steps: int | None = None
        self.steps_done = 0
        self.started = time.monotonic()
        self.server_state = ""
        self._step_seconds: list[float] = []

    def __call__(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def begin(self, total_steps: int | None, what: str = "") -> None:
        self.total_steps, self.steps_done, self.started = total_steps, 0, time.monotonic()
        if what:
            self(what)

    def state(self, text: str) -> None:
        self.server_state = text

    def step_done(self, seconds: float) -> None:
        self.steps_done += 1
        self._step_seconds.append(seconds)

    def job_eta_s(self) -> float | None:
        if not self.total_steps or not self._step_seconds:
            return None
        mean = sum(self._step_seconds) / len(self._step_seconds)
        return mean * max(0, self.total_steps - self.steps_done)

    def status_line(self, label: str, done: int, total: int, errors: int, elapsed_s: float) -> str:
        eta = elapsed_s / done * (total - done) if done else None
        job = (f"; step {self.steps_done + 1}/{self.total_steps}, job {_clock(time.monotonic() - self.started)} "
               f"elapsed, ETA {_clock(self.job_eta_s())}") if self.total_steps else ""
        server = f"; {self.server_state}" if self.server_state else ""
        return (f"  {label}: {done}/{total} requests, {errors} errors, {_clock(elapsed_s)} elapsed, "
                f"ETA {_clock(eta)}{job}{server}")

    @contextmanager
    def task(self, label: str, total: int, requests_path: Path) -> Iterator[RecordTail]:
        """Follow ``requests_path`` while the body runs: ``tick`` every ``period_s``, ``ended`` once at the end."""
        tail, stop, t0 = RecordTail(requests_path), threading.Event(), time.monotonic()
        handle = self.task_started(label, total)

        def loop() -> None:
            while not stop.wait(self.period_s):
                self.task_tick(handle, label, total, *tail.poll(), time.monotonic() - t0)

        thread = threading.Thread(target=loop, name="progress", daemon=True)
        thread.start()
        try:
            yield tail
        finally:
            stop.set()
            thread.join()
            self.task_ended(handle, label, total, *tail.poll(), time.monotonic() - t0)

    @property
    def period_s(self) -> float:
        return self.every_s

    def task_started(self, label: str, total: int) -> Any:
        return None

    def task_tick(self, handle: Any, label: str, total: int, done: int, errors: int, elapsed_s: float) -> None:
        self(self.status_line(label, done, total, errors, elapsed_s))

    def task_ended(self, handle: Any, label: str, total: int, done: int, errors: int, elapsed_s: float) -> None:
        self(self.status_line(label, done, total, errors, elapsed_s))


class LiveReporter(Reporter):
    """``rich`` live view: one bar for the job, one for the running task, the server state underneath."""

    def __init__(self, out: TextIO | None = None, name: str = "infkit"):
        super().__init__(out, name=name)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(file=self.out)
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[errors]}"), TimeElapsedColumn(), TextColumn("ETA"),
                             TimeRemainingColumn(), TextColumn("{task.fields[state]}"), console=self.console,
                             refresh_per_second=2, transient=False)
        self._job: Any = None

    def __call__(self, line: str) -> None:
        self.bars.console.print(line, highlight=False, markup=False)

    def begin(self, total_steps: int | None, what: str = "") -> None:
        super().begin(total_steps, what)
        self.bars.start()
        self._job = self.bars.add_task(self.name, total=total_steps, errors="", state="")

    def state(self, text: str) -> None:
        super().state(text)
        if self._job is not None:
            self.bars.update(self._job, state=text)

    def step_done(self, seconds: float) -> None:
        super().step_done(seconds)
        if self._job is not None:
            self.bars.update(self._job, completed=self.steps_done)

    def end(self) -> None:
        self.bars.stop()

    @property
    def period_s(self) -> float:
        return 0.5

    def task_started(self, label: str, total: int) -> Any:
        if self._job is None:
            self.bars.start()
        return self.bars.add_task(f"  {label}", total=total, errors="", state="")

    def task_tick(self, handle: Any, label: str, total: int, done: int, errors: int, elapsed_s: float) -> None:
        self.bars.update(handle, completed=done, errors=f"{errors} err" if errors else "")

    def task_ended(self, handle: Any, label: str, total: int, done: int, errors: int, elapsed_s: float) -> None:
        self.task_tick(handle, label, total, done, errors, elapsed_s)
        self.bars.remove_task(handle)
        self(self.status_line(label, done, total, errors, elapsed_s).strip())


def reporter(name: str = "infkit", out: TextIO | None = None) -> Reporter:
    """A live view on an interactive terminal outside CI, plain lines otherwise (``INFKIT_PROGRESS=plain`` forces
    them)."""
    stream = out or sys.stdout
    plain = (
        os.environ.get("INFKIT_PROGRESS") == "plain"
        or os.environ.get("CI")
        or not getattr(stream, "isatty", lambda: False)()
    )
    return Reporter(stream, name=name) if plain else LiveReporter(stream, name=name)
