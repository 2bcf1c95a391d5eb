"""The example bench of docs/benches.md is a real spec: the runner executes it unchanged, and the doc shows it as it
is."""

from __future__ import annotations

import io
import json
from pathlib import Path

from harness.bench import runner as runner_mod
from harness.contract.schemas import validate_file
from harness.progress import Reporter
from tests.bench.example_bench import SPEC, Config
from tests.bench.test_bench_runner import bench_env  # noqa: F401  (fixture: the stand-in engine as backend "fake")

DOC = Path(__file__).resolve().parents[2] / "docs" / "benches.md"


def test_the_docs_example_runs_with_the_framework_filling_in_warm_up_protocol_title_and_doc(bench_env):  # noqa: F811
    cfg = Config(backend="fake", runtime="local", repeats=2, warmup_requests=1, resamples=200, prompts=4)
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    assert validate_file(outcome.run_dir / "comparison.json") == []
    protocol = outcome.result["details"]["protocol"]
    assert protocol["order"].startswith("server variants alternate starts every repeat")
    assert protocol["warmup_requests_per_server_start"] == 1
    assert (outcome.run_dir / "workloads" / "warmup.jsonl").is_file()
    summary = (outcome.run_dir / "summary.txt").read_text()
    assert summary.startswith("bench-98 INF-EXAMPLE")
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert len(run["workload_ids"]) == 1  # the warm-up is not a measured workload
    assert SPEC.doc.startswith("bench-98 INF-EXAMPLE: does a larger running-request limit")


def test_the_doc_shows_the_example_file_verbatim():
    code = (Path(__file__).with_name("example_bench.py")).read_text()
    body = code[code.index("from __future__") :]
    assert body.strip() in DOC.read_text(), "docs/benches.md must embed tests/bench/example_bench.py as it is"
