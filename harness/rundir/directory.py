"""One run directory for every target: benches, mechanisms and CUDA experiments.

``RunDirectory.create`` makes ``<out_root>/<run_id>/`` and writes ``fingerprint.json``
(the machine as it was when the run started). The run then writes its documents
through the directory (results validated before they are written, everything
atomic). ``finish`` writes ``summary.txt`` and ``run.json`` — with ``outputs``
naming the top-level result, the summary and the figures — and signs the directory
in-process, so the manifest always belongs to this run, never to "the newest" one.

Inside a role image there is no signing key: the run appends its path to the file
named by ``INFKIT_SIGN_QUEUE`` and the host process that started the container
signs it when the container exits (``sign_queued``).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract import atomic_write_json, atomic_write_text, write_result
from harness.contract.result import utc_now
from harness.errors import InvalidInput
from harness.ids import new_run_id
from harness.rundir import fingerprint as fingerprint_mod
from harness.rundir.record import RunRecord, write_run_record

SIGN_QUEUE_ENV = "INFKIT_SIGN_QUEUE"
RUN_SCHEMA = "infkit/run/v1"
SUMMARY_FILE = "summary.txt"
# run.json's effective settings name the environment variables that can change what a run does (those the harness
# reads, INFKIT_*; those a local engine inherits: VLLM_*, threads, the CPU ISA torch and oneDNN may use, ...): the
# fingerprint's list (ENV_PREFIXES), secret-like names left out
ENVIRONMENT_KEY = "environment"


@dataclass(frozen=True)
class Finished:
    """Where a finished run's files are: the directory, its summary text and its manifest (None: not signed)."""

    path: Path
    summary: str
    manifest: Path | None
    figures: tuple[str, ...] = ()


@dataclass
class RunDirectory:
    """A run's folder, its run record and the figures it wrote, until ``finish``."""

    path: Path
    root: Path
    record: RunRecord
    fingerprint: dict[str, Any]
    sign: bool = True
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    made: tuple[Path, ...] = ()  # the folders above the run that ``create`` made, deepest first

    @classmethod
    def create(cls, out_root: str | os.PathLike, *, semantic_id: str, run_label: str, requested: dict[str, Any],
               effective: dict[str, Any] | None = None, root: str | os.PathLike | None = None,
               run_id: str | None = None, fingerprint: dict[str, Any] | None = None, sign: bool = True,
               started_utc: str | None = None, **record: Any) -> RunDirectory:
        """Make the run folder (it must not exist) and write its fingerprint."""
        check_run_target(out_root, run_id, sign=sign, root=root)
        run_id = run_id or new_run_id()
        path = Path(out_root) / run_id
        made = tuple(p for p in path.parents if not p.exists())
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            raise InvalidInput(f"run directory {path} already exists", hint="choose another --run-id") from None
        except OSError as exc:
            raise InvalidInput(f"cannot create the run directory {path}: {exc.strerror or exc}") from None
        doc = fingerprint if fingerprint is not None else fingerprint_mod.collect()
        atomic_write_json(path / fingerprint_mod.FINGERPRINT_FILE, doc)
        effective = {**(effective or {}), ENVIRONMENT_KEY: fingerprint_mod.allowed_env()}  # what it may change
        rec = RunRecord(semantic_id=semantic_id, run_id=run_id, run_label=run_label, requested=requested,
                        effective=effective, evidence_level="precheck", decision="blocked",
                        started_utc=started_utc or utc_now(), **record)
        return cls(path=path, root=Path(root) if root is not None else Path.cwd(), record=rec, fingerprint=doc,
                   sign=sign, made=made)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    def file(self, name: str | os.PathLike) -> Path:
        """A path inside the run directory, its parent folders made."""
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_json(self, name: str, doc: Any) -> Path:
        return atomic_write_json(self.file(name), doc)

    def write_text(self, name: str, text: str) -> Path:
        return atomic_write_text(self.file(name), text)

    def write_result(self, name: str, doc: dict[str, Any]) -> Path:
        """A result document, validated against its schema before it is written."""
        return write_result(self.file(name), doc)

    def figure(self, name: str, draw: Callable[[Path], Any]) -> Path | None:
        """Draw one PNG with ``draw(path)``; without matplotlib, note it in the summary and go on."""
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.notes.append(f"{name} skipped: matplotlib is not installed (pip install 'infkit[plots]')")
            return None
        target = self.file(name)
        draw(target)
        self.figures.append(name)
        return target

    def finish(self, *, summary: str, result: str | None, evidence_level: str, decision: str,
               status: str = "completed", images: Sequence[dict[str, Any]] | None = None,
               **record: Any) -> Finished:
        """Write summary.txt and run.json, then sign; returns where everything is."""
        text = "\n\n".join(filter(None, [summary.rstrip(), *self.notes])) + "\n"
        self.write_text(SUMMARY_FILE, text)
        rec = self.record
        rec.evidence_level, rec.decision, rec.status, rec.ended_utc = evidence_level, decision, status, utc_now()
        if images is not None:
            rec.images = list(images)
        for key, value in record.items():
            setattr(rec, key, value)
        rec.outputs = {"result": result, "summary": SUMMARY_FILE, "figures": list(self.figures)}
        write_run_record(self.path, rec)
        return Finished(path=self.path, summary=text, manifest=self._sign() if self.sign else None,
                        figures=tuple(self.figures))

    def abandon(self, *, has_data: bool, error: BaseException) -> None:
        """A run that raised: removed when it holds no measurement, else kept under a failed/aborted run.json."""
        if not has_data:  # nothing measured: nothing left behind, the folders made for it included
            shutil.rmtree(self.path, ignore_errors=True)
            for folder in self.made:
                try:
                    folder.rmdir()
                except OSError:  # another run wrote there meanwhile
                    break
            return
        rec = self.record
        rec.effective = {**rec.effective, "error": f"{type(error).__name__}: {error}"}
        rec.status = "aborted" if isinstance(error, KeyboardInterrupt) else "failed"
        rec.evidence_level, rec.decision, rec.ended_utc = "precheck", "blocked", utc_now()
        write_run_record(self.path, rec)
        if self.sign:
            self._sign()

    def _sign(self) -> Path | None:
        queue = os.environ.get(SIGN_QUEUE_ENV)
        if queue:
            with open(queue, "a", encoding="utf-8") as fh:
                fh.write(str(self.path.resolve()) + "\n")
            return None
        from harness.manifest import sign_run

        return sign_run(self.path, root=self.root)


def check_run_target(out_root: str | os.PathLike, run_id: str | None, *, sign: bool,
                     root: str | os.PathLike | None = None, flag: str = "--out") -> None:
    """Everything about where a run will go, checked before any work: the output folder can take a new
    run, the run id is one run.json accepts, and a signed run lies under the manifest root."""
    from harness.contract.paths import check_output_dir
    from harness.contract.schemas import value_problem

    check_output_dir(out_root, flag)
    if run_id is not None and (problem := value_problem(RUN_SCHEMA, "properties/run_id", run_id)):
        raise InvalidInput(f"--run-id {run_id!r}: {problem}")
    if sign:
        check_signable(out_root, root if root is not None else Path.cwd())


def check_signable(out_root: str | os.PathLike, root: str | os.PathLike) -> None:
    """Refuse, before any work, a signed run whose folder would lie outside the manifest root.

    A manifest names its files relative to ``root``; a run elsewhere could be written but
    never signed. Inside a role image the host signs against its own root, so nothing is checked.
    """
    if os.environ.get(SIGN_QUEUE_ENV):
        return
    out_real, root_real = os.path.realpath(out_root), os.path.realpath(root)
    if os.path.commonpath([out_real, root_real]) != root_real:
        raise InvalidInput(f"run directories under {out_root} would lie outside {root_real}, where the manifest "
                           "names its files", hint="choose an output folder inside it, or pass --no-sign")


MAX_QUEUE_BYTES = 1 << 20


def _queued_run(line: str, mount_real: str) -> Path:
    """A queued run directory, accepted only inside the mounted folder and reached through no link."""
    path = Path(line)
    if not path.is_absolute() or ".." in path.parts:
        raise InvalidInput(f"sign queue: {line!r} is not an absolute path without '..'")
    probe = Path(mount_real)
    if not (str(path) + os.sep).startswith(mount_real.rstrip(os.sep) + os.sep) or str(path) == mount_real:
        raise InvalidInput(f"sign queue: {line} lies outside the folder the container was given ({mount_real}); "
                           "not signed")
    for part in path.relative_to(mount_real).parts:
        probe = probe / part
        if probe.is_symlink() or not probe.is_dir():
            raise InvalidInput(f"sign queue: {probe} is a link or not a folder; {line} not signed")
    return path


def _read_queue(queue: Path) -> list[str]:
    """The lines of the queue file, opened without following a link and read at most ``MAX_QUEUE_BYTES``."""
    fd = os.open(queue, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise InvalidInput(f"sign queue {queue}: not a regular file")
        data = fh.read(MAX_QUEUE_BYTES + 1)
    if len(data) > MAX_QUEUE_BYTES:
        raise InvalidInput(f"sign queue {queue}: larger than {MAX_QUEUE_BYTES >> 10} KiB")
    return [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]


def sign_queued(queue: Path, root: Path, mount: Path | None = None) -> list[Path]:
    """Sign every run directory a container listed in ``queue`` (then remove the queue file).

    The container wrote the queue, so it is not trusted: a listed path is signed only when it lies
    inside ``mount`` (the folder the container was given; default: the queue's folder), is reached
    through no symlink, and holds no symlink itself (``sign_run(links=False)``). Anything else is
    refused unsigned — another run under the root is never re-signed from inside a container.
    """
    from harness.manifest import sign_run

    mount_real = os.path.realpath(mount if mount is not None else queue.parent)
    if queue.is_symlink() or not queue.exists():
        return []
    lines = _read_queue(queue)
    queue.unlink()
    runs = [_queued_run(line, mount_real) for line in dict.fromkeys(lines)]
    return [sign_run(p, root=root, links=False) for p in runs]
