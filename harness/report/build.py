"""build_report: audit every input, read the VALID ones, write index.html, report.json, report.md.

The three files (and the cross-run charts under ``figures/``) are written into a temporary
folder beside the output directory, which then replaces it in one rename: a reader sees the
old report or the new one, and an error leaves nothing half-written. An existing output
directory is replaced only when it is empty or holds an earlier report.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.atomic import atomic_write_text, dumps_json
from harness.contract.result import utc_now
from harness.contract.schemas import validate_document
from harness.errors import CapabilityMissing, InvalidInput, SchemaViolation
from harness.manifest.audit import AuditConfig
from harness.report.document import Placed, bench_sections, report_document
from harness.report.inputs import audit_inputs
from harness.report.markdown import render_markdown
from harness.report.page import render_page
from harness.report.reader import read_run

REPORT_FILES = ("index.html", "report.json", "report.md")
MAX_CHARTS_PER_BENCH = 4


@dataclass(frozen=True)
class ReportConfig:
    out_dir: Path
    root: Path = field(default_factory=Path.cwd)
    trusted_keys: tuple[Path, ...] = ()  # empty: every <root>/manifests/keys/*.pub.pem
    trust_policy: Path | None = None  # key ids allowed to sign (harness.manifest.trust); None: integrity only
    charts: bool = True  # cross-run charts (need matplotlib)


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


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before any work, an output path that is a file or a folder holding something else."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise InvalidInput(f"-o {out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "report.json").is_file():
        raise InvalidInput(f"-o {out_dir}: the folder exists and does not hold a report",
                           hint="name a new or empty folder; an earlier report folder is replaced")
    parent = next((p for p in out_dir.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise InvalidInput(f"-o {out_dir}: {parent} is not a directory")


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
        interval_png([(run_id, i["value"], i.get("ci_low"), i.get("ci_high")) for run_id, i in points], stage / rel,
                     title=f"{section['semantic_id']}: {name} across runs" + (f"\n{arm}" if arm else ""), xlabel=f"{name}{f' [{unit}]' if unit else ''}",
                     reference=1.0 if unit == "ratio" else None)
        png = (stage / rel).read_bytes()
        out.append(({"title": title, "file": rel, "sha256": hashlib.sha256(png).hexdigest()}, png))
    return out


def _replace_dir(stage: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / "report")
    os.replace(stage, out_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def build_report(paths: list[str], config: ReportConfig) -> ReportOutputs:
    """Audit ``paths`` (run directories, manifests, folders of manifests) and write the report."""
    if not paths:
        raise InvalidInput("no inputs: name run directories or manifests (or a folder of manifests)")
    if not config.root.is_dir():
        raise InvalidInput(f"--root {config.root}: not a directory")
    out_dir = Path(os.path.abspath(config.out_dir))
    check_out_dir(out_dir)
    items = audit_inputs(paths, AuditConfig(root=config.root, trusted_keys=config.trusted_keys,
                                               trust_policy=config.trust_policy))
    placed = [Placed(i, read_run(i, config.root) if i.valid else None) for i in items]
    sections = bench_sections(placed, config.root, out_dir)
    notes: list[str] = []
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        images = {f.sha256: f.png for p in placed if p.view for f in p.view.figures}
        if config.charts:
            try:
                for section in sections:
                    for entry, png in _draw_charts(section, stage):
                        section["figures"].append(entry)
                        images[entry["sha256"]] = png
            except CapabilityMissing as exc:
                notes.append(f"no cross-run charts: {exc}")
        doc = report_document(sections, created_utc=utc_now(), root=str(config.root),
                              trusted_keys=[str(k) for k in config.trusted_keys], notes=notes,
                              trust_policy=str(config.trust_policy) if config.trust_policy else None)
        problems = validate_document(doc)
        if problems:
            raise SchemaViolation("report.json does not satisfy its schema: " + "; ".join(map(str, problems[:5])))
        page = render_page(doc, images)
        atomic_write_text(stage / "report.json", dumps_json(doc))
        atomic_write_text(stage / "report.md", render_markdown(doc))
        atomic_write_text(stage / "index.html", page)
        os.chmod(stage, 0o755)
        _replace_dir(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    counts = doc["counts"]
    return ReportOutputs(out_dir, counts["inputs"], counts["valid"], counts["invalid"], len(page.encode("utf-8")))
