"""infkit run's options come from MeasureConfig: one set of defaults, the names users have, the docs' examples parse."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.knobs import config_from_args
from harness.serving.measure import MeasureConfig

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ["--endpoint", "http://127.0.0.1:8000", "--model", "m", "--workload", "w.jsonl", "--out", "runs/x"]
# every option `infkit run` has had; a user's command line keeps working
NAMES = ("--endpoint --model --workload --out --api --max-concurrency --timeout --semantic-id --run-label --run-id "
         "--profile-id --backend-name --backend-version --metrics-url --server-pid --gpu --usd-per-gpu-hour "
         "--ignore-eos --min-tokens --no-stream --tokenizer --slo --client-workers --reference --max-send-lag-ms "
         "--max-loop-lag-ms").split()
PLACEHOLDERS = {"URL": "http://127.0.0.1:8000", "NAME": "m", "FILE": "w.jsonl", "DIR": "d", "PID": "1", "MS": "500"}


def _parse(argv: list[str]) -> MeasureConfig:
    args = build_parser().parse_args(["run", *argv])
    return config_from_args(MeasureConfig, args)


def test_the_defaults_are_measure_configs_own():
    cfg = _parse(REQUIRED)
    assert cfg == MeasureConfig(endpoint="http://127.0.0.1:8000", model="m", workload_path="w.jsonl", out_dir="runs/x")


def test_every_option_users_have_still_parses_to_its_field():
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()  # type: ignore[union-attr]
    assert all(name in text for name in NAMES), [n for n in NAMES if n not in text]
    cfg = _parse([*REQUIRED, "--api", "chat", "--max-concurrency", "3", "--timeout", "9", "--run-id", "abc",
                  "--tokenizer", "tok", "--reference", "ref.jsonl", "--no-stream", "--ignore-eos", "--min-tokens",
                  "--client-workers", "2", "--usd-per-gpu-hour", "2.5", "--backend-name", "sglang"])
    assert (cfg.api, cfg.max_concurrency, cfg.timeout_s, cfg.run_id) == ("chat", 3, 9.0, "abc")
    assert (cfg.tokenizer_path, cfg.reference_path, cfg.stream, cfg.ignore_eos, cfg.min_tokens) == \
        ("tok", "ref.jsonl", False, True, True)
    assert (cfg.client_workers, cfg.usd_per_gpu_hour, cfg.backend_name) == (2, 2.5, "sglang")


def test_options_set_in_code_are_not_on_the_command_line():
    text = build_parser().parse_args(["run", *REQUIRED])  # parses
    assert not hasattr(text, "memory_probe") and not hasattr(text, "batch_barrier")
    shown = {f.name for f in dataclasses.fields(MeasureConfig) if f.metadata.get("cli", True)}
    assert {"endpoint", "workload_path", "timeout_s", "stream"} <= shown and "reporter" not in shown


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in re.finditer(r"infkit run( [^`\n]*)?", page.read_text()):
            line = re.split(r"\s{3,}|\s#", match.group(0))[0]  # a table's or comment's words after the command
            found.append((f"{page.name}: {line}", line))
    return found


@pytest.mark.parametrize("where, line", _examples(), ids=[w for w, _ in _examples()])
def test_every_infkit_run_the_docs_show_parses(where, line):
    words = [PLACEHOLDERS.get(w, w) for w in shlex.split(line)[2:]]
    if words and words[-1] in ("--out", "--tokenizer"):  # prose naming an option (`infkit run --out` folder)
        words.append("d")
    given = {w for w in words if w.startswith("--")}
    missing = [REQUIRED[i:i + 2] for i in range(0, len(REQUIRED), 2) if REQUIRED[i] not in given]
    cfg = _parse([*words, *(w for pair in missing for w in pair)])  # a fragment (`--gpu 0,1`) gets the rest
    assert isinstance(cfg, MeasureConfig)
