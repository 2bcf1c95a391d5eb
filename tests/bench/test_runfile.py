"""Run files: one YAML document naming a bench and its knobs, validated against a schema made from the knobs.

A run from a file and the same run from flags make the same workloads and effective settings; the file is a
signed subject that audit names; a bad key, a bad value, an unknown bench are one line before any setup;
``--print-config`` turns any command line into a file that runs the same config.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

import harness.models
from harness.bench import bench_specs, get_bench
from harness.bench import runner as runner_mod
from harness.bench.runfile import RUN_FILE, bench_settings, read_run_file, run_file_schema, run_file_text
from harness.bench.spec import BenchSpec
from harness.cli import main
from harness.commands.bench import add_bench_arguments
from harness.errors import InvalidInput
from harness.knobs import knob, knob_fields
from harness.manifest.audit import AuditConfig, _run_file_is_subject, audit_paths
from harness.manifest.report import format_text
from harness.progress import Reporter
from harness.runtime import base as runtime_base
from tests.bad_input_helpers import assert_clean_error, infkit
from tests.bench.dry_run_model import write_model
from tests.bench.example_bench import SPEC as EXAMPLE
from tests.bench.example_bench import Config as ExampleConfig
from tests.bench.test_bench_runner import bench_env  # noqa: F401  (fixture: the stand-in engine as backend "fake")

REPO = Path(__file__).resolve().parents[2]
DOC_EXAMPLE = REPO / "docs" / "runfiles" / "bench-69.yaml"


def settings(spec: BenchSpec, *argv: str, make: str = ""):
    """(config, origin) of ``infkit bench NN ARGV`` for any spec, as the command makes them."""
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser, spec)
    return bench_settings(spec, parser.parse_args([*argv, "--make-vars", make]))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(bench_specs()))
def test_each_bench_has_a_draft_2020_12_schema_with_every_knob(name):
    spec = get_bench(name)
    schema = run_file_schema(spec)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False and schema["required"] == ["bench"]
    assert schema["properties"]["bench"]["const"] == name
    knobs = knob_fields(spec.config)
    assert list(schema["properties"]) == ["bench", *(f.name for f, _ in knobs)]
    for f, _ in knobs:
        assert schema["properties"][f.name]["description"] == f.metadata["help"]
    # the file --print-config writes of the defaults validates, and reads back as the same config
    doc = yaml.safe_load(run_file_text(spec, spec.config()))
    Draft202012Validator(schema).validate(doc)


def test_types_bounds_and_choices_come_from_the_knob_declarations():
    props = run_file_schema(get_bench("69"))["properties"]
    assert props["repeats"]["type"] == "integer" and props["repeats"]["minimum"] == 1
    assert props["scale"]["maximum"] == 1000 and props["seed"]["maximum"] == 2**63 - 1
    assert props["dtype"]["anyOf"][0]["enum"] == ["bfloat16", "float16", "float32", "auto"]
    assert props["dtype"]["anyOf"][1] == {"type": "null"}
    assert props["start_timeout_s"]["type"] == "number" and props["enforce_eager"]["type"] == "boolean"


@dataclass(frozen=True)
class WithServer(ExampleConfig):
    server: str | None = knob(None, "a server the bench is pointed at", choices=("local", "remote"))
    rates: tuple[float, ...] = knob((1.0,), "rates in requests per second", min=0.1)


def test_a_knob_added_to_a_config_is_in_its_schema_and_its_run_files(tmp_path):
    spec = dataclasses.replace(EXAMPLE, config=WithServer)
    props = run_file_schema(spec)["properties"]
    assert props["server"]["anyOf"][0] == {"type": "string", "enum": ["local", "remote"]}
    assert props["rates"] == {"description": "rates in requests per second", "default": [1.0], "type": "array",
                              "items": {"type": "number", "minimum": 0.1}, "minItems": 1}
    path = write(tmp_path / "r.yaml", 'bench: "98"\nserver: remote\nrates: [1, 2.5]\nprompts: 3\n')
    cfg, origin = settings(spec, "--config", str(path))
    assert cfg.server == "remote" and cfg.rates == (1.0, 2.5) and isinstance(cfg.rates[0], float)
    assert origin.set_by == {"prompts": "run_file", "rates": "run_file", "server": "run_file"}
    with pytest.raises(InvalidInput, match=r"rates: \[\] should be non-empty"):
        settings(spec, "--config", str(write(tmp_path / "e.yaml", 'bench: "98"\nrates: []\n')))


def test_make_variables_override_the_file_and_flags_override_both(tmp_path):
    path = write(tmp_path / "r.yaml", 'bench: "98"\nprompts: 3\nseqs: 8\nrepeats: 2\n')
    cfg, origin = settings(EXAMPLE, "--config", str(path), "--repeats", "4", make="SEQS=16 REPEATS=3 CONFIG=x")
    assert (cfg.prompts, cfg.seqs, cfg.repeats) == (3, 16, 4)
    assert origin.set_by == {"prompts": "run_file", "repeats": "command_line", "seqs": "make"}
    assert origin.record()["run_file"] == {"path": RUN_FILE, "given": str(path),
                                           "sha256": "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()}


@pytest.mark.parametrize("text, message", [
    ('bench: "98"\nprompt: 3\n', "unknown key 'prompt' (did you mean prompts? accepted: bench, "),
    ('bench: "98"\nprompts: 0\n', "prompts: 0 is less than the minimum of 1"),
    ('bench: "98"\nprompts: three\n', "prompts: 'three' is not of type 'integer'"),
    ('bench: "98"\nmargin: x\n', "margin: 'x' is not of type 'number'"),
    ('bench: "98"\ndtype: fp8\n', "dtype: 'fp8' is not one of ['bfloat16', 'float16', 'float32', 'auto']"),
    ('bench: "98"\nmargin: .inf\n', "margin: inf is not a finite number"),
    ('bench: "98"\nprompts: 2\nprompts: 3\n', "YAML: key 'prompts' is given twice (line 3)"),
    ('bench: "98"\nprompts: [2\n', "YAML: expected ',' or ']'"),
    ("- bench: 98\n", "a run file is one YAML mapping"),
    ("", "not an empty document"),
    ("prompts: 3\n", "no bench key"),
    ('bench: "69"\n', "names bench 69, the command bench 98"),
    ('bench: "98"\n---\nbench: "98"\n', "YAML: "),
])
def test_a_bad_run_file_is_one_line_naming_what_is_wrong(tmp_path, text, message):
    path = write(tmp_path / "r.yaml", text)
    with pytest.raises(InvalidInput) as err:
        settings(EXAMPLE, "--config", str(path))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert str(err.value).startswith(f"run file {path}")


@pytest.mark.parametrize("text, expected", [
    ('bench: "69"\nrepeat: 3\n', "unknown key 'repeat' (did you mean repeats?"),
    ('bench: "69"\nrepeats: 0\n', "repeats: 0 is less than the minimum of 1"),
    ("bench: 42\n", "bench: unknown bench '42' (choose one of: 00, 66,"),
])
def test_the_command_refuses_a_bad_run_file_in_one_line_before_any_setup(tmp_path, text, expected):
    write(tmp_path / "run.yaml", text)
    proc = infkit("bench", "--config", "run.yaml", cwd=tmp_path)
    assert_clean_error(proc, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]


@pytest.mark.parametrize("argv", [
    ["bench", "69", "--repeats", "5", "--groups", "3", "--print-config"],  # docs/runfiles.md's command
    ["bench", "69", "--dtype", "float32", "--think-time", "exp:0.5", "--trace-window", "0:60", "--print-config"],
])
def test_print_config_fed_back_gives_the_same_config(tmp_path, capsys, argv):
    assert main(argv) == 0
    text = capsys.readouterr().out
    path = write(tmp_path / "run.yaml", text)
    assert main(["bench", "--config", str(path), "--print-config"]) == 0
    assert capsys.readouterr().out == text
    spec = get_bench("69")
    from_flags, _ = settings(spec, *argv[2:-1])
    from_file, origin = settings(spec, "--config", str(path))
    assert from_file == from_flags and set(origin.set_by.values()) == {"run_file"}
    assert read_run_file(path)[0] is spec


def test_print_schema_writes_the_benchs_schema(capsys):
    assert main(["bench", "69", "--print-schema"]) == 0
    assert json.loads(capsys.readouterr().out) == run_file_schema(get_bench("69"))


def test_a_run_from_a_file_and_the_same_run_from_flags_agree_and_the_file_is_signed(bench_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # changes what a local engine runs: recorded
    flags = ("--backend", "fake", "--runtime", "local", "--repeats", "1", "--warmup-requests", "1",
             "--resamples", "200", "--prompts", "3", "--seed", "5")
    cfg, by_flags = settings(EXAMPLE, *flags)
    path = write(bench_env / "example.yaml", run_file_text(EXAMPLE, cfg))
    cfg_file, by_file = settings(EXAMPLE, "--config", str(path))
    assert cfg_file == cfg
    runs = [runner_mod.run_bench(EXAMPLE, c, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60), origin=o)
            for c, o in ((cfg, by_flags), (cfg_file, by_file))]
    a, b = (json.loads((r.run_dir / "run.json").read_text()) for r in runs)
    assert a["workload_ids"] == b["workload_ids"] and len(a["workload_ids"]) == 1
    settings_keys = {f.name for f, _ in knob_fields(ExampleConfig)} | {"backend", "runtime", "dtype", "environment"}
    assert {k: a["effective"][k] for k in settings_keys} == {k: b["effective"][k] for k in settings_keys}
    assert a["effective"]["prompts"] == 3
    assert a["effective"]["environment"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert a["effective"]["backend"] == "fake" and a["requested"]["dtype"] is None
    mine = ("run_file", "set_by")
    assert {k: v for k, v in a["requested"].items() if k not in mine} == \
        {k: v for k, v in b["requested"].items() if k not in mine}
    assert set(a["requested"]["set_by"].values()) == {"command_line"} and "run_file" not in a["requested"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert b["requested"]["run_file"] == {"path": RUN_FILE, "given": str(path), "sha256": f"sha256:{digest}"}
    assert (runs[1].run_dir / RUN_FILE).read_bytes() == path.read_bytes()
    reports = audit_paths([r.finished.manifest for r in runs], AuditConfig(root=bench_env))
    assert all(r.valid for r in reports), [r.findings for r in reports]
    name = f"{runs[1].run_dir.relative_to(bench_env).as_posix()}/{RUN_FILE}"
    assert reports[1].subject_digests[name] == digest and reports[1].run_file == (name, digest)
    text = format_text(reports)
    assert f"  run file {name} sha256:{digest} (signed)" in text and text.count("run file") == 1
    assert reports[1].to_dict()["run_file"] == {"name": name, "sha256": digest}


def test_audit_refuses_a_run_json_naming_a_run_file_that_is_not_signed():
    predicate = {"run_dir": "runs/98/x", "requested": {"run_file": {"path": RUN_FILE, "sha256": "sha256:" + "a" * 64}}}
    def subjects(hex_digest: str) -> list[dict]:
        return [{"name": "runs/98/x/run.yaml", "digest": {"sha256": hex_digest}}]

    assert _run_file_is_subject(predicate, subjects("a" * 64)) == []
    (finding,) = _run_file_is_subject(predicate, subjects("b" * 64))
    assert "run file runs/98/x/run.yaml is not a subject" in str(finding)
    assert len(_run_file_is_subject(predicate, [])) == 1
    assert _run_file_is_subject({"run_dir": "r", "requested": {"repeats": 1}}, []) == []


def test_the_docs_example_run_file_runs_as_a_dry_run(tmp_path, monkeypatch, capsys):
    model = write_model(tmp_path / "cache")
    monkeypatch.setattr(harness.models, "find_model", lambda key, root=None: model if key == model.key else None)
    monkeypatch.setattr(runtime_base, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(runtime_base, "docker_engine_present", lambda: False)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--config", str(DOC_EXAMPLE), "--dry-run"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bench"] == "69" and doc["run_file"]["given"] == str(DOC_EXAMPLE)
    assert (doc["requested"]["repeats"], doc["requested"]["groups"], doc["requested"]["enforce_eager"]) == (5, 3, True)
    assert all("--enforce-eager" in s["argv"] for s in doc["servers"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # a dry run writes nothing


def test_make_bench_passes_the_run_file_make_variables_and_dry_run():
    proc = subprocess.run(["make", "-n", "-C", str(REPO), "bench", f"CONFIG={DOC_EXAMPLE}", "REPEATS=3", "DRY_RUN=1"],
                          capture_output=True, text=True)
    assert f"bench --config '{DOC_EXAMPLE}'" in proc.stdout and "--dry-run" in proc.stdout
    assert "REPEATS=3" in proc.stdout.split("--make-vars", 1)[1]
    proc = subprocess.run(["make", "-n", "-C", str(REPO), "bench"], capture_output=True, text=True)
    assert proc.returncode != 0 and "CONFIG=FILE names the run file" in proc.stderr


def test_the_page_shows_the_example_file_as_it_is():
    page = (REPO / "docs" / "runfiles.md").read_text()
    assert DOC_EXAMPLE.read_text().strip() in page
