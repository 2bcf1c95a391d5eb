"""Documents that are JSON but not what infkit reads: every reader refuses them the same way.

One strict layer (harness/contract/jsonio.py) parses workloads, results, run records, traces,
reference outputs, trust policies and manifests: non-finite numbers, over-long integers,
lone surrogates, bad encodings, binary data, excessive nesting and wrong top-level types are
one-line errors naming the file, the line and the JSON pointer. Each case runs the CLI in a
subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_helpers import assert_clean_error, assert_nothing_left, infkit

from harness.contract.atomic import atomic_write_json
from harness.contract.jsonio import parse_json
from harness.errors import InvalidInput
from harness.ids import canonical_json

EXAMPLES = Path(__file__).parent / "examples" / "valid"
WORKLOAD = (EXAMPLES / "workload-header.jsonl").read_text().splitlines()
RESULT = (EXAMPLES / "serving-single.json").read_text()
REQUEST = WORKLOAD[1]  # {"index": 0, "offset_s": null, "prompt": "a b c d", "input_tokens": 4, ...}


def _workload(request_line: str) -> str:
    return "\n".join([WORKLOAD[0], request_line, WORKLOAD[2]]) + "\n"


def _result_with(fragment: str) -> str:
    """The valid result with ``"key": value`` added at the top of its details."""
    assert '"details": {' in RESULT
    return RESULT.replace('"details": {', '"details": {' + fragment + ", ", 1)


# name -> (file name, content, text the one-line error names)
DOCUMENTS = {
    "jsonl-first-line-array": ("w.jsonl", "[1, 2]\n" + REQUEST + "\n", ":1: a document is a JSON object, not an array"),
    "jsonl-first-line-number": ("w.jsonl", "5\n", ":1: a document is a JSON object, not a number"),
    "jsonl-first-line-null": ("w.jsonl", "null\n", ":1: a document is a JSON object, not null"),
    "jsonl-first-line-string": ("w.jsonl", '"header"\n', ":1: a document is a JSON object, not a string"),
    "jsonl-request-line-array": ("w.jsonl", _workload("[0, 1]"), ":2: a document is a JSON object, not an array"),
    "jsonl-whitespace-only": ("w.jsonl", "  \n\n\t\n", "no JSON lines"),
    "json-top-level-string": ("r.json", '"result"', "a document is a JSON object, not a string"),
    "nan-offset": ("w.jsonl", _workload(REQUEST.replace('"offset_s": null', '"offset_s": NaN')),
                   ":2: NaN (JSON numbers must be finite) at /offset_s"),
    "infinity-tokens": ("w.jsonl", _workload(REQUEST.replace('"input_tokens": 4', '"input_tokens": Infinity')),
                        ":2: an infinite number (JSON numbers must be finite) at /input_tokens"),
    "1e999-tokens": ("w.jsonl", _workload(REQUEST.replace('"input_tokens": 4', '"input_tokens": 1e999')),
                     "an infinite number (JSON numbers must be finite) at /input_tokens"),
    "nan-in-result-details": ("r.json", _result_with('"x": [1, -Infinity]'),
                              "an infinite number (JSON numbers must be finite) at /details/x/1"),
    "5000-digit-integer": ("w.jsonl", _workload(REQUEST.replace('"input_tokens": 4', '"input_tokens": ' + "9" * 5000)),
                           ":2: an integer of 5000 digits (at most 40) at /input_tokens"),
    "41-digit-integer-in-result": ("r.json", _result_with('"n": ' + "1" * 41),
                                   "an integer of 41 digits (at most 40) at /details/n"),
    "lone-surrogate-in-prompt": ("w.jsonl", _workload(REQUEST.replace('"prompt": "', '"prompt": "\\ud800')),
                                 ":2: a string with a lone UTF-16 surrogate (not encodable as UTF-8) at /prompt"),
    "lone-surrogate-in-key": ("r.json", _result_with('"\\udc00": 1'), "a key with a lone UTF-16 surrogate"),
    "invalid-utf8-line": ("w.jsonl", _workload(REQUEST).encode().replace(b'"a b', b'"\xe9 b'), ":2: not UTF-8 text"),
    "utf16": ("w.jsonl", _workload(REQUEST).encode("utf-16"), "binary file, not JSON Lines"),
    "binary-json": ("r.json", bytes(range(256)) * 4, "binary file, not JSON text"),
    "nested-past-recursion-limit": ("r.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "nested-past-depth-limit": ("r.json", _result_with('"deep": ' + "[" * 80 + "]" * 80),
                                "nested deeper than 64 levels at /details/deep/0/0"),
    "messages-not-message-objects": ("w.jsonl", _workload(REQUEST.replace('"prompt": "a b c d"', '"messages": [1]')),
                                     "line 2/messages/0: 1 is not of type 'object'"),
}


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


@pytest.mark.parametrize("case", sorted(DOCUMENTS))
def test_validate_refuses_each_document(tmp_path, case):
    name, content, expected = DOCUMENTS[case]
    path = _write(tmp_path, name, content)
    assert_clean_error(infkit("validate", str(path)), expected)


@pytest.mark.parametrize("case", [c for c in sorted(DOCUMENTS) if DOCUMENTS[c][0].endswith(".jsonl")])
def test_workload_show_and_run_refuse_each_workload(tmp_path, case):
    name, content, expected = DOCUMENTS[case]
    path = _write(tmp_path, name, content)
    assert_clean_error(infkit("workload", "show", str(path)), expected)
    out = tmp_path / "run"
    assert_clean_error(infkit("run", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--workload", str(path),
                              "--out", str(out)), expected)
    assert_nothing_left(out)


TRACES = {
    "nan-timestamp": (
        '{"timestamp_s": NaN, "input_tokens": 5, "output_tokens": 3}\n',
        "NaN (JSON numbers must be finite)",
    ),
    "string-timestamp": ('{"timestamp_s": "1", "input_tokens": 5, "output_tokens": 3}\n', "timestamp_s is string"),
    "boolean-length": ('{"timestamp_s": 1, "input_tokens": true, "output_tokens": 3}\n', "input_tokens True is not"),
    "negative-length": ('{"timestamp_s": 1, "input_tokens": -5, "output_tokens": 3}\n', "input_tokens -5 is not"),
    "row-is-an-array": ("[1, 2, 3]\n", ":1: a document is a JSON object, not an array"),
    "binary": (bytes(range(256)), "binary file"),
    "deep": ("[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
    "blank": ("\n \n", "no JSON lines"),
}


@pytest.mark.parametrize("case", sorted(TRACES))
def test_workload_make_refuses_each_trace(tmp_path, case):
    content, expected = TRACES[case]
    trace = _write(tmp_path, "trace.jsonl", content)
    out = tmp_path / "w.jsonl"
    # --tokenizer does not exist: the trace must be refused before any tokenizer is looked at
    assert_clean_error(
        infkit(
            "workload",
            "make",
            "trace",
            "--trace",
            str(trace),
            "--arrival",
            "trace",
            "--tokenizer",
            str(tmp_path / "no-tokenizer"),
            "-o",
            str(out),
        ),
        expected,
    )
    assert_nothing_left(out)


REFERENCES = {
    "nan-index": ('{"index": NaN, "text": "x"}\n', "NaN (JSON numbers must be finite) at /index"),
    "string-index": ('{"index": "1", "text": "x"}\n', "need an integer index"),
    "line-is-an-array": ("[1]\n", "a document is a JSON object, not an array"),
    "binary": (b"\x00\x01\x02", "binary file"),
    "deep": ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_run_refuses_each_reference_file_before_any_work(tmp_path, case):
    content, expected = REFERENCES[case]
    workload = _write(tmp_path, "w.jsonl", "\n".join(WORKLOAD) + "\n")
    reference = _write(tmp_path, "ref.jsonl", content)
    out = tmp_path / "run"
    assert_clean_error(
        infkit(
            "run",
            "--endpoint",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--workload",
            str(workload),
            "--out",
            str(out),
            "--reference",
            str(reference),
        ),
        expected,
    )
    assert_nothing_left(out)


def _lines(*indexes: int) -> str:
    return "\n".join([WORKLOAD[0], *(WORKLOAD[1 + i] for i in indexes)]) + "\n"


EDITS = {
    "dropped-line": (_lines(0), "the header says 2 requests, the file has 1"),
    "duplicated-line": (_lines(0, 1, 1), "the header says 2 requests, the file has 3"),
    "reordered-lines": (_lines(1, 0), "request index 1 where 0 belongs"),
    "edited-prompt": (_lines(0, 1).replace("a b c d", "a b c X"), "does not match its content"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_validate_checks_a_workload_as_workload_show_does(tmp_path, case):
    content, expected = EDITS[case]
    path = _write(tmp_path, "w.jsonl", content)
    checked = infkit("validate", str(path))
    assert checked.returncode == 1 and expected in checked.stderr and "Traceback" not in checked.stderr
    assert_clean_error(infkit("workload", "show", str(path)), expected)


def test_the_intact_workload_passes_both():
    path = EXAMPLES / "workload-header.jsonl"
    assert infkit("validate", str(path)).returncode == 0
    assert infkit("workload", "show", str(path)).returncode == 0


def test_sign_refuses_a_run_record_with_nan_in_requested(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    text = (
        '{"schema": "infkit/run/v1", "semantic_id": "INF-X", "run_id": "r1", "run_label": "a", "workload_ids": [], '
        '"command": ["x"], "requested": {"timeout_s": NaN}, "effective": {}, "images": [], "model": null, '
        '"tokenizer": null, "started_utc": "2026-01-01T00:00:00Z", "ended_utc": null, "evidence_level": "single", '
        '"decision": "inconclusive"}'
    )
    (run_dir / "run.json").write_text(text)
    proc = infkit("sign", str(run_dir), "--root", str(tmp_path), env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert_clean_error(proc, "NaN (JSON numbers must be finite) at /requested/timeout_s")
    assert_nothing_left(tmp_path / "manifests", tmp_path / "cfg", run_dir / "fingerprint.json")


@pytest.mark.parametrize(
    "value, pointer",
    [
        ({"a": [1, float("nan")]}, "NaN (JSON numbers must be finite) at /a/1"),
        ({"a": {"b": float("inf")}}, "an infinite number (JSON numbers must be finite) at /a/b"),
        ({"prompt": "x\ud800"}, "a string with a lone UTF-16 surrogate (not encodable as UTF-8) at /prompt"),
        ({"seed": 10**50}, "an integer of more than 40 digits at /seed"),
    ],
)
def test_writers_refuse_what_readers_would_refuse(tmp_path, value, pointer):
    with pytest.raises(
        InvalidInput, match="cannot write .* as JSON: " + pointer.replace("(", r"\(").replace(")", r"\)")
    ):
        canonical_json(value)
    with pytest.raises(InvalidInput, match="cannot write"):
        atomic_write_json(tmp_path / "doc.json", value)
    assert_nothing_left(tmp_path / "doc.json")
    assert list(tmp_path.iterdir()) == []  # no temp file either


def test_what_infkit_writes_it_reads_back(tmp_path):
    doc = {"a": [1, 2.5, -0.0, "é", "😀", None, True], "n": 10**39, "deep": [[[[]]]]}
    atomic_write_json(tmp_path / "doc.json", doc)
    assert parse_json((tmp_path / "doc.json").read_bytes(), "doc.json") == doc
