"""build_report: audit every input, read the VALID ones, write index.html, report.json, report.md.

The three files (and the cross-run charts under ``figures/``) are written into a temporary
folder beside the output directory, which then replaces it in one rename: a reader sees the
old report or the new one, and an error leaves nothing half-written. Every report folder holds
a marker file (``MARKER``) listing what the report wrote; an existing output directory is
replaced only when it is empty or holds nothing but what its marker lists, and only those
files are deleted — a report never deletes what it did not write.

The page is bounded: a run shows at most ``MAX_FIGURES_PER_RUN`` figures, the page embeds at
most ``MAX_PAGE_IMAGE_BYTES`` of images, and one image (by sha256) is embedded once however
many runs or names carry it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_text, dumps_json
from harness.contract.paths import check_output_dir
from harness.contract.result import utc_now
from harness.contract.schemas import validate_document
from harness.errors import CapabilityMissing, InvalidInput, SchemaViolation
from harness.manifest.audit import AuditConfig
from harness.report.document import Placed, bench_sections, report_document
from harness.report.inputs import audit_inputs
from harness.report.markdown import render_markdown
from harness.report.page import render_page
from harness.report.reader import MAX_FIGURES_PER_RUN, read_run

REPORT_FILES = ("index.html", "report.json", "report.md")
MARKER = ".infkit-report"
MARKER_HEAD = "infkit report folder: the files below were written by `infkit report` and are replaced by it\n"
MAX_CHARTS_PER_BENCH = 4
MAX_PAGE_IMAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ReportConfig:
    out_dir: Path
    root: Path = field(default_factory=Path.cwd)
    trusted_keys: tuple[Path, ...] = ()  # empty: every <root>/manifests/keys/*.pub.pem
    trust_policy: Path | None = None  # key ids allowed to sign (harness.manifest.trust); None: integrity only
    charts: bool = True  # cross-run charts (need matplotlib)
    excerpt: bool = False  # the root holds published excerpts of runs (their absent subjects held back)
    created_utc: str | None = None  # the page's date (None: now); a regenerated page names its newest run's


def audit_config(config: ReportConfig) -> AuditConfig:
    return AuditConfig(root=config.root, trusted_keys=config.trusted_keys, trust_policy=config.trust_policy,
                       excerpt=config.excerpt)


@dataclass(frozen=True)
class ReportOutputs:
    out_dir: Path
    inputs: int
    valid: int
    invalid: int
    page_bytes: int

    @property
    def index(self) -> Path:
        return self.out_dir / "index.html"


def _written(out_dir: Path) -> set[str] | None:
    """The files an earlier report wrote into ``out_dir`` (its marker), or None when it has no marker."""
    marker = out_dir / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    lines = marker.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines or lines[0] + "\n" != MARKER_HEAD:
        return None
    return {line for line in lines[1:] if line} | {MARKER}


def _present(out_dir: Path) -> set[str]:
    """Every entry under ``out_dir`` by relative POSIX name (folders too, links not followed)."""
    out = set()
    for folder, dirs, files in os.walk(out_dir):
        rel = Path(folder).relative_to(out_dir)
        out.update((rel / n).as_posix() for n in (*dirs, *files))
    return out


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before any work, an output path that is a file, cannot be created, or a folder holding
    anything an earlier report did not write."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise InvalidInput(f"-o {out_dir}: exists and is not a directory")
    check_output_dir(out_dir, "-o")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    written = _written(out_dir)
    if written is None:
        raise InvalidInput(f"-o {out_dir}: the folder exists and is not a report folder (no {MARKER} of its own)",
                           hint="name a new or empty folder; a folder an earlier report wrote is replaced")
    stray = sorted(n for n in _present(out_dir) - written if not any(w.startswith(n + "/") for w in written))
    if stray:
        raise InvalidInput(f"-o {out_dir}: holds {stray[0]}, which no earlier report wrote; it would be deleted",
                           hint="move it out of the report folder, or name another folder")


def _chart_series(section: dict[str, Any]) -> dict[tuple[str, str | None], list[tuple[str, dict[str, Any]]]]:
    """Headline figures (name, arm) that carry an interval in some VALID run, with every run's value."""
    series: dict[tuple[str, str | None], list[tuple[str, dict[str, Any]]]] = {}
    for row in section["runs"]:
        for item in row["headline"]:
            if item["value"] is not None:
                series.setdefault((item["name"], item.get("arm")), []).append((row["run_id"], item))
    return {k: v for k, v in series.items() if any("ci_low" in i and "ci_high" in i for _, i in v)}


def _draw_charts(section: dict[str, Any], stage: Path) -> list[tuple[dict[str, Any], bytes]]:
    from harness.report.plots import interval_png

    out = []
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", section["semantic_id"] or "none")
    for n, ((name, arm), points) in enumerate(list(_chart_series(section).items())[:MAX_CHARTS_PER_BENCH], 1):
        unit = points[0][1]["unit"]
        rel = f"figures/{slug}-{n}.png"
        title = f"{section['semantic_id']}: {name}" + (f" ({arm})" if arm else "") + " across runs"
        interval_png(
            [(run_id, i["value"], i.get("ci_low"), i.get("ci_high")) for run_id, i in points],
            stage / rel,
            title=f"{section['semantic_id']}: {name} across runs" + (f"\n{arm}" if arm else ""),
            xlabel=f"{name}{f' [{unit}]' if unit else ''}",
            reference=1.0 if unit == "ratio" else None,
        )
        png = (stage / rel).read_bytes()
        out.append(({"title": title, "file": rel, "sha256": hashlib.sha256(png).hexdigest()}, png))
    return out


def _write_marker(stage: Path) -> None:
    names = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
    atomic_write_text(stage / MARKER, MARKER_HEAD + "".join(f"{n}\n" for n in names))


def _remove_written(folder: Path, written: set[str]) -> None:
    """Delete what a report wrote in ``folder``, then the folders left empty; anything else stays."""
    for name in sorted(written, key=lambda n: -n.count("/")):
        path = folder / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for sub, _, _ in sorted(os.walk(folder), key=lambda w: -len(w[0])):
        try:
            os.rmdir(sub)
        except OSError:
            pass  # not empty: something the report did not write, kept


def _replace_dir(stage: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        written = _written(out_dir) or set()
        os.replace(out_dir, old / "report")
    os.replace(stage, out_dir)
    if old:
        _remove_written(old / "report", written)
        try:
            os.rmdir(old)
        except OSError:
            pass


def write_report_folder(out_dir: Path, write: Callable[[Path], None]) -> None:
    """Have ``write`` fill a folder made beside ``out_dir``, mark what it wrote, and swap it in with one
    rename; on any error the folder is removed and ``out_dir`` is as it was."""
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        raise InvalidInput(f"-o {out_dir}: cannot create it: {exc.strerror or exc}") from None
    try:
        write(stage)
        _write_marker(stage)
        os.chmod(stage, 0o755)
        _replace_dir(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def bound_figures(placed: list[Placed]) -> list[Placed]:
    """At most ``MAX_FIGURES_PER_RUN`` figures a run (the reader reads no more) and ``MAX_PAGE_IMAGE_BYTES``
    of distinct images a page."""
    budget, embedded, out = MAX_PAGE_IMAGE_BYTES, set(), []
    for p in placed:
        if p.view is None:
            out.append(p)
            continue
        kept, notes = [], list(p.view.notes)
        for figure in p.view.figures:
            if len(kept) >= MAX_FIGURES_PER_RUN:
                notes.append(f"figure {figure.name}: more than {MAX_FIGURES_PER_RUN} figures in one run: left out")
            elif figure.sha256 not in embedded and len(figure.png) > budget:
                notes.append(
                    f"figure {figure.name}: the page's {MAX_PAGE_IMAGE_BYTES >> 20} MiB of images are used up: left out"
                )
            else:
                if figure.sha256 not in embedded:
                    budget -= len(figure.png)
                    embedded.add(figure.sha256)
                kept.append(figure)
        out.append(Placed(p.item, replace(p.view, figures=tuple(kept), notes=tuple(notes))))
    return out


def check_inputs(paths: list[str], config: ReportConfig) -> Path:
    """Refuse, before any work, no inputs, a root that is no folder and an output folder that may not be
    replaced; the absolute output folder."""
    if not paths:
        raise InvalidInput("no inputs: name run directories or manifests (or a folder of manifests)")
    if not config.root.is_dir():
        raise InvalidInput(f"--root {config.root}: not a directory")
    out_dir = Path(os.path.abspath(config.out_dir))
    check_out_dir(out_dir)
    return out_dir


def _write_page(stage: Path, placed: list[Placed], sections: list[dict[str, Any]],
                config: ReportConfig) -> tuple[dict[str, Any], str]:
    """Charts, report.json (validated), report.md and index.html into ``stage``: (report.json's document, page)."""
    notes: list[str] = []
    images = {f.sha256: f.png for p in placed if p.view for f in p.view.figures}
    if config.charts:
        try:
            for section in sections:
                for entry, png in _draw_charts(section, stage):
                    section["figures"].append(entry)
                    images[entry["sha256"]] = png
        except CapabilityMissing as exc:
            notes.append(f"no cross-run charts: {exc}")
    doc = report_document(
        sections,
        created_utc=config.created_utc or utc_now(),
        root=str(config.root),
        trusted_keys=[str(k) for k in config.trusted_keys],
        notes=notes,
        trust_policy=str(config.trust_policy) if config.trust_policy else None,
    )
    problems = validate_document(doc)
    if problems:
        raise SchemaViolation("report.json does not satisfy its schema: " + "; ".join(map(str, problems[:5])))
    page = render_page(doc, images)
    atomic_write_text(stage / "report.json", dumps_json(doc))
    atomic_write_text(stage / "report.md", render_markdown(doc))
    atomic_write_text(stage / "index.html", page)
    return doc, page


def build_report(paths: list[str], config: ReportConfig) -> ReportOutputs:
    """Audit ``paths`` (run directories, manifests, folders of manifests) and write the report."""
    out_dir = check_inputs(paths, config)
    items = audit_inputs(paths, audit_config(config))
    placed = [Placed(i, read_run(i, config.root) if i.valid else None) for i in items]
    sections = bench_sections(placed, config.root, out_dir)
    placed = bound_figures(placed)
    written: list[tuple[dict[str, Any], str]] = []
    write_report_folder(out_dir, lambda stage: written.append(_write_page(stage, placed, sections, config)))
    doc, page = written[0]
    counts = doc["counts"]
    return ReportOutputs(out_dir, counts["inputs"], counts["valid"], counts["invalid"], len(page.encode("utf-8")))
