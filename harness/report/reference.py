"""Pages as views of committed results: each docs/bench-NN.md's reference-run block and the report beside the
committed excerpts, regenerated from ``benchmarks/results`` (the excerpt root ``infkit excerpt`` writes).

Like sigstore-python's generated files, everything here is rebuilt by one command (``make docs``) and a test
rebuilds it and fails on any difference, so a page never says what its committed, signed run does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.ids import sha256_file
from harness.manifest.audit import AuditConfig, ManifestReport, audit_paths
from harness.manifest.sign import MANIFESTS_DIR
from harness.rundir.record import RUN_FILE, RunRecord

RESULTS = Path("benchmarks/results")
REPORT_DIR = "report"  # under RESULTS: report.md and report.json of every committed run
BLOCK = re.compile(r"(<!-- BEGIN GENERATED reference-run bench-(?P<bench>\d+) [^\n]*-->\n)(?P<body>.*?)"
                   r"(<!-- END GENERATED reference-run -->)", re.S)


@dataclass(frozen=True)
class Reference:
    """A committed reference run: its audit and the verified summary's verdict lines."""

    bench: str
    report: ManifestReport
    verdict: tuple[str, ...]

    @property
    def run(self) -> RunRecord:
        name = f"{self.report.predicate['run_dir']}/{RUN_FILE}"  # type: ignore[index]
        return RunRecord.from_dict(self.report.documents[name], name)


def references(repo: Path) -> dict[str, Reference]:
    """Every committed excerpt under ``repo/benchmarks/results`` by bench number, audited (an INVALID one raises:
    a page must never quote what does not verify)."""
    root = repo / RESULTS
    if not (root / MANIFESTS_DIR).is_dir():
        return {}
    keys = tuple(sorted((root / MANIFESTS_DIR / "keys").glob("*.pub.pem")))
    found: dict[str, Reference] = {}
    for report in audit_paths([root / MANIFESTS_DIR], AuditConfig(root=root, trusted_keys=keys, excerpt=True)):
        if not report.valid or report.predicate is None:
            reasons = "; ".join(f.message for f in report.findings[:3])
            raise ValueError(f"{report.manifest}: the committed reference run does not audit ({reasons})")
        run_dir = report.predicate["run_dir"]
        summary = root / run_dir / "summary.txt"
        if report.subject_digests.get(f"{run_dir}/summary.txt") != sha256_file(summary).removeprefix("sha256:"):
            raise ValueError(f"{summary}: not the summary its manifest signs")
        text = summary.read_text(encoding="utf-8")
        bench = run_dir.split("/")[1]
        found[bench] = Reference(bench, report, page_verdict(text.split("\n\n", 1)[0].splitlines()))
    return found


def page_verdict(lines: list[str]) -> tuple[str, ...]:
    """A summary's verdict lines for a page: each invalid or undecided reason by its first line (its whole text
    stays in the signed summary.txt), everything else as written."""
    kept: list[str] = []
    reasons = False
    for line in lines:
        if not line.startswith(" "):
            reasons = line == "invalid or undecided:"
        elif reasons and not line.startswith("  - "):
            if not kept[-1].endswith(" …"):
                kept[-1] += " …"
            continue
        kept.append(line)
    if any(line.endswith(" …") for line in kept):
        kept.append("(each reason in full: the run's summary.txt)")
    return tuple(kept)


def block_body(bench: str, ref: Reference | None) -> str:
    """The text between a page's markers: the reference run's verdict, what ran it and how to audit it."""
    if ref is None:
        return f"No reference run of bench-{bench} is committed yet: `make bench-{bench}` makes one on this host.\n"
    run, fp = ref.run, ref.report.predicate["fingerprint"]  # type: ignore[index]
    size = run.effective.get("size") or run.requested.get("size")
    machine, gpus = fp.get("host") or {}, fp.get("gpus") or []
    cores = machine.get("cpu_cores_logical")
    host = ", ".join(str(x) for x in (machine.get("cpu_model"), f"{cores} cores" if cores else None,
                                      ", ".join(g.get("name") or "GPU" for g in gpus) or "no GPU") if x)
    where = f"{RESULTS}"
    return "\n".join([
        "```text", *ref.verdict, "```", "",
        f"Reference run `{run.run_id}` ({f'SIZE={size}, ' if size else ''}started {run.started_utc}, "
        f"{host}), committed as a signed excerpt under [{where}](../{where}); check it with "
        f"`infkit audit --excerpt --root {where} {where}/{MANIFESTS_DIR}`.", ""])


def report_files(repo: Path, refs: dict[str, Reference]) -> dict[str, str]:
    """report.md and report.json of every committed reference run, built by ``infkit report`` beside the committed
    folder (so its links are the same), from paths relative to the repository (so no checkout's location enters)
    and dated by the newest run (so the same runs give the same bytes)."""
    import contextlib
    import os
    import shutil

    from harness.report.build import ReportConfig, build_report

    newest = max(ref.run.started_utc for ref in refs.values())
    stage = RESULTS / f".{REPORT_DIR}-{os.getpid()}"
    with contextlib.chdir(repo):
        keys = tuple(sorted((RESULTS / MANIFESTS_DIR / "keys").glob("*.pub.pem")))
        config = ReportConfig(out_dir=stage, root=RESULTS, trusted_keys=keys, charts=False, excerpt=True,
                              created_utc=newest)
        try:
            build_report([str(RESULTS / MANIFESTS_DIR)], config)
            return {name: (stage / name).read_text(encoding="utf-8") for name in ("report.md", "report.json")}
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def regenerate(repo: Path, *, check: bool = False) -> list[Path]:
    """Rewrite every page's reference-run block and the committed report from the committed excerpts; the files
    that changed (with ``check``, the files that would change, nothing written)."""
    refs = references(repo)
    changed: list[Path] = []
    for name, text in (report_files(repo, refs) if refs else {}).items():
        target = repo / RESULTS / REPORT_DIR / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            changed.append(target)
            if not check:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    for page in sorted((repo / "docs").glob("bench-*.md")):
        text = page.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m: m.group(1) + block_body(m["bench"], refs.get(m["bench"])) + m.group(4), text)
        if new != text:
            changed.append(page)
            if not check:
                page.write_text(new, encoding="utf-8")
    return changed


def main() -> int:
    """``make docs``: regenerate; ``make docs CHECK=1`` (``--check``): exit 1 naming what is out of date."""
    import sys

    check = "--check" in sys.argv[1:]
    changed = regenerate(Path.cwd(), check=check)
    for path in changed:
        print(f"{'out of date' if check else 'regenerated'}: {path.relative_to(Path.cwd())}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
