"""What a report accepts from the runs it shows: Markdown that cannot be injected, an output folder
it never empties of files it did not write, a bounded page, and figures read once without links."""

from __future__ import annotations

import base64
import json
import os
import re
import time

import pytest
from report_runs import derive, tamper_manifest

from harness.report.build import MAX_PAGE_IMAGE_BYTES
from harness.report.markdown import md
from harness.report.reader import _read_figure

INJECT = ("x`\n## VALID\n| 9 | forged | VALID | [click](https://evil.example/a) "
          "![px](https://evil.example/p.png) <img src=x> |")


def run_report(root, *args: str):
    return root.infkit("report", *args)


def test_report_md_keeps_every_run_value_inert(root, mech_runs, tmp_path):
    source = mech_runs["budget"]

    def label(doc: dict) -> None:
        doc["run_label"] = INJECT

    def env(fp: dict) -> None:
        fp["env"] = {**(fp.get("env") or {}), "INJECTED": INJECT}
        fp["packages"] = {**fp["packages"], "[pkg](https://evil.example)": "1.0`\n# heading"}

    variant = derive(root, source, "md", run=label, fingerprint=env)
    unsigned = derive(root, source, "unsigned", run=label)
    tamper_manifest(unsigned.manifest, lambda s: s["predicate"].update(run_label=INJECT))
    out = tmp_path / "out"
    proc = run_report(root, str(source.manifest), str(variant.manifest), str(unsigned.manifest), "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (out / "report.md").read_text()
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("#")] == ["# infkit report", "## INF-ITERATION-BUDGET"]
    assert not [line for line in lines if line.startswith("| 9 ")]  # no row of its own
    assert "forged" in text  # the value is there, as text
    for raw in ("](https://", "![", "<img"):
        assert raw not in text, raw
    assert not re.search(r"(?<!\\)`", text)  # no code span opens
    assert md("[pkg](https://evil.example)") in text
    # the HTML page escapes the same values (its own function)
    page = (out / "index.html").read_text()
    assert "<img src=x>" not in page and "&lt;img src=x&gt;" in page


def test_report_o_refuses_a_folder_it_did_not_write_and_deletes_nothing(root, mech_runs, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "report.json").write_text("{}")  # looks like a report, was not written by one
    (out / "notes.txt").write_text("keep me")
    proc = run_report(root, str(mech_runs["budget"].run_dir), "-o", str(out))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sorted(os.listdir(out)) == ["notes.txt", "report.json"]


def test_report_o_refuses_a_file_added_to_its_own_folder(root, mech_runs, tmp_path):
    out = tmp_path / "o"
    assert run_report(root, str(mech_runs["budget"].run_dir), "-o", str(out), "--no-charts").returncode == 0
    (out / "screenshot.png").write_bytes(b"mine")
    proc = run_report(root, str(mech_runs["budget"].run_dir), "-o", str(out), "--no-charts")
    assert proc.returncode == 1 and "screenshot.png" in proc.stderr
    assert (out / "screenshot.png").read_bytes() == b"mine"


def test_report_o_under_an_uncreatable_path_is_one_line(root, mech_runs):
    proc = run_report(root, str(mech_runs["budget"].run_dir), "-o", "/proc/self/infkit-report")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("infkit report: error: -o ")


def test_one_figure_under_many_names_is_embedded_once(root, mech_runs, tmp_path):
    source = mech_runs["budget"]
    (png_name,) = source.run_json()["outputs"]["figures"]
    target = source.run_dir.with_name(f"{source.run_dir.name}-links")

    def links(doc: dict) -> None:
        for i in range(16):
            os.link(target / png_name, target / f"copy-{i}.png")
        doc["outputs"]["figures"] = [png_name, *(f"copy-{i}.png" for i in range(16))]

    variant = derive(root, source, "links", run=links)
    out = tmp_path / "out"
    assert run_report(root, str(variant.manifest), "-o", str(out), "--no-charts").returncode == 0
    page = (out / "index.html").read_text()
    png = base64.b64encode((target / png_name).read_bytes()).decode()
    assert page.count(png) == 1
    assert len(page.encode()) < MAX_PAGE_IMAGE_BYTES
    row = json.loads((out / "report.json").read_text())["benches"][0]["runs"][0]
    assert len(row["figures"]) == 12 and any("beyond the first 12" in n for n in row["notes"])


@pytest.mark.timeout(30)
def test_a_figure_swapped_for_a_link_to_a_fifo_does_not_block(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    fifo = tmp_path / "outside.fifo"
    os.mkfifo(fifo)
    (root / "f.png").symlink_to(fifo)
    os.mkfifo(root / "g.png")
    t0 = time.monotonic()
    figure, note = _read_figure(root, "f.png", "0" * 64)
    assert figure is None and "symlink" in note
    figure, note = _read_figure(root, "g.png", "0" * 64)
    assert figure is None and "not a regular file" in note
    assert time.monotonic() - t0 < 5


def test_a_figure_whose_folder_is_a_link_out_of_the_root_is_not_read(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "f.png").write_bytes(b"\x89PNG\r\n\x1a\nsecret")
    (root / "plots").symlink_to(outside)
    figure, note = _read_figure(root, "plots/f.png", "0" * 64)
    assert figure is None and "outside the root" in note


@pytest.mark.parametrize("raw, inert", [
    ("[a](b)", "\\[a\\]\\(b\\)"), ("![a](b)", "\\!\\[a\\]\\(b\\)"), ("`x`", "\\`x\\`"), ("<b>", "&lt;b&gt;"),
    ("a|b", "a\\|b"), ("**x**", "\\*\\*x\\*\\*"), ("# h", "\\# h"), ("- li", "\\- li"), ("1. li", "1\\. li"),
    ("https://x.example", "https\\://x.example"), ("www.x.example", "www\\.x.example"), ("a\nb\r\x1b", "a b "),
])
def test_md_makes_every_markdown_construct_inert(raw, inert):
    assert md(raw) == inert
