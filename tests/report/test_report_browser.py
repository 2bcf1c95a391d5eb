"""The report page in a real headless Chromium, opened from file://: no console errors, every
figure decodes, every input has its row, nothing is fetched, it fits a phone, and it prints.

Each test keeps the page with its screenshots and print PDF under runs/report-browser/ (the
CI artifact); tests/report/test_report_bench69.py does the same for the bench-69 page.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from report_browser import PageCheck, browser_or_skip, open_page
from report_runs import REPO, derive

from harness.report.build import ReportConfig, build_report

ARTIFACTS = REPO / "runs" / "report-browser"


def check_page(page: Path, *, rows: int, invalid: int, images: int) -> PageCheck:
    seen = open_page(browser_or_skip(), page)
    assert seen.console_errors == []
    assert seen.resources == []  # figures are data: URIs; the page loads nothing
    assert seen.run_rows == rows and seen.invalid_rows == invalid
    assert seen.images == images and seen.images_decoded == images
    assert seen.phone_overflow_px <= 0  # no sideways scrolling of the page on a 390 px phone
    assert seen.screenshot.stat().st_size > 10_000 and seen.phone_screenshot.stat().st_size > 10_000
    assert seen.pdf.read_bytes().startswith(b"%PDF") and seen.pdf_pages >= 1
    return seen


def test_mechanism_report_in_a_real_browser(root, mech_runs):
    bumped = derive(root, mech_runs["budget"], "browser", fingerprint=lambda fp: fp["packages"].update(numpy="0.0.1"))
    out = ARTIFACTS / "mech"
    shutil.rmtree(out, ignore_errors=True)  # the screenshots of an earlier run are not the report's: start afresh
    build_report([str(mech_runs["budget"].run_dir), str(bumped.manifest), str(mech_runs["kvcache"].run_dir),
                  "no/such/run"], ReportConfig(out_dir=out, root=root.path))
    # the derived run's figure is byte-identical to its source's: embedded once, the repeat links to it
    seen = check_page(out / "index.html", rows=4, invalid=1, images=2)
    assert "0.0.1" in seen.text and "no such file or directory" in seen.text and "the figure above" in seen.text
