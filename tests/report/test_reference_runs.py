"""Committed reference runs: a signed run's excerpt audits on its own, and the pages quoting it are regenerated
from it (regenerate-and-diff): the repository's own pages are checked against its committed excerpts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.manifest.audit import AuditConfig, audit_paths
from harness.manifest.excerpt import publish
from harness.report.reference import RESULTS, regenerate
from tests.bench.test_bench_runner import bench_env, run  # noqa: F401  (fixture: the stand-in engine as "fake")

REPO = Path(__file__).resolve().parents[2]
BLOCK = ("<!-- BEGIN GENERATED reference-run bench-{n} (make docs rewrites this block from "
         "benchmarks/results/bench-{n}) -->\nstale\n<!-- END GENERATED reference-run -->\n")


def excerpt_audit(root: Path, excerpt: bool = True):
    keys = tuple((root / "manifests" / "keys").glob("*.pub.pem"))
    return audit_paths([root / "manifests"], AuditConfig(root=root, trusted_keys=keys, excerpt=excerpt))


def test_an_excerpt_audits_on_its_own_every_copied_file_verified_the_rest_held_back(bench_env):  # noqa: F811
    outcome, _ = run(bench_env, slow_ttft_ms=80.0)
    dest = bench_env / "published"
    names = publish(outcome.run_dir, dest, bench_env)
    run_dir = outcome.run_dir.relative_to(bench_env)
    assert {Path(n).name for n in names} >= {"run.json", "summary.txt", "fingerprint.json", "comparison.json"}
    assert not (dest / run_dir / "arms").exists() and not (dest / run_dir / "servers").exists()
    [report] = excerpt_audit(dest)
    assert report.valid and report.subjects_verified == 4 and report.held_back
    assert all(name.startswith(f"{run_dir}/arms/") or "/" in name for name in report.held_back)
    [strict] = excerpt_audit(dest, excerpt=False)  # read as a whole run, the absent files are deleted subjects
    assert not strict.valid and any(f.check == "subject-deleted" for f in strict.findings)
    summary = dest / run_dir / "summary.txt"
    summary.write_text(summary.read_text().replace("bench-", "bench "))
    [tampered] = excerpt_audit(dest)
    assert not tampered.valid and any(f.check == "subject-digest" for f in tampered.findings)


def test_a_new_reference_run_replaces_the_benchs_earlier_one(bench_env):  # noqa: F811
    first, _ = run(bench_env, slow_ttft_ms=80.0)
    second, _ = run(bench_env, slow_ttft_ms=80.0)
    dest = bench_env / "published"
    publish(first.run_dir, dest, bench_env)
    publish(second.run_dir, dest, bench_env)
    assert [p.name for p in (dest / "runs" / "99").iterdir()] == [second.run_dir.name]
    assert len(list((dest / "manifests").rglob("*.intoto.json"))) == 1


def test_pages_and_the_report_are_regenerated_from_the_committed_excerpts(bench_env, capsys):  # noqa: F811
    outcome, _ = run(bench_env, slow_ttft_ms=80.0)
    repo = bench_env / "repo"
    (repo / "docs").mkdir(parents=True)
    for n in ("98", "99"):
        (repo / "docs" / f"bench-{n}.md").write_text(f"# bench-{n}\n\n" + BLOCK.format(n=n) + "\nmore\n")
    assert main(["excerpt", str(outcome.run_dir), "-o", str(repo / RESULTS), "--root", str(bench_env)]) == 0
    changed = regenerate(repo)
    assert {p.name for p in changed} == {"bench-98.md", "bench-99.md", "report.md", "report.json"}
    page = (repo / "docs" / "bench-99.md").read_text()
    verdict = (outcome.run_dir / "summary.txt").read_text().split("\n\n", 1)[0]
    assert f"```text\n{verdict}\n```" in page and f"Reference run `{outcome.run_dir.name}`" in page
    assert page.endswith("<!-- END GENERATED reference-run -->\n\nmore\n") and "stale" not in page
    assert "No reference run of bench-98 is committed yet" in (repo / "docs" / "bench-98.md").read_text()
    report = json.loads((repo / RESULTS / "report" / "report.json").read_text())
    assert report["created_utc"] == json.loads((outcome.run_dir / "run.json").read_text())["started_utc"]
    assert regenerate(repo, check=True) == []  # the same excerpts give the same bytes
    (repo / "docs" / "bench-99.md").write_text(page.replace("```text\n", "```text\nedited by hand\n"))
    assert regenerate(repo, check=True) == [repo / "docs" / "bench-99.md"]


def test_the_repositorys_pages_and_report_are_what_its_committed_reference_runs_say():
    stale = regenerate(REPO, check=True)
    assert stale == [], f"run `make docs`: out of date: {[str(p.relative_to(REPO)) for p in stale]}"


def test_every_committed_reference_run_audits_as_an_excerpt():
    root = REPO / RESULTS
    if not (root / "manifests").is_dir():
        pytest.skip("no reference run is committed yet")
    reports = excerpt_audit(root)
    assert reports and all(r.valid for r in reports), [(r.manifest, r.findings) for r in reports]
    assert shutil.disk_usage  # the excerpts stay small: tens of kilobytes a run
    assert all(p.stat().st_size < 200_000 for p in root.rglob("*") if p.is_file())
