"""infkit report on real signed mechanism runs: verified rows, INVALID inputs without numbers,
like-for-like flags and the environment diff, in report.json, index.html and report.md alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_runs import derive, tamper_manifest

from harness.cli import main
from harness.contract.schemas import validate_file
from harness.report.markdown import md

MARK = 424242.5  # a headline value no real run has; rendered as "424,242" (or "424,243")
MARK_TEXTS = ("424242", "424,242", "424,243")


def report(root, inputs, out: Path, *extra: str) -> dict:
    proc = root.infkit("report", *map(str, inputs), "-o", str(out), *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads((out / "report.json").read_text())


def rows(doc: dict) -> dict[str, dict]:
    return {r["run_id"] or r["input"]: r for s in doc["benches"] for r in s["runs"]}


def outputs_text(out: Path) -> str:
    return "".join((out / name).read_text() for name in ("index.html", "report.json", "report.md"))


def with_mark(doc: dict) -> None:
    doc["details"]["headline"] = [{"name": "TTFT p50", "value": MARK, "unit": "ms"}]


def test_valid_runs_give_rows_figures_and_a_schema_valid_report(root, mech_runs, tmp_path):
    out = tmp_path / "out"
    doc = report(root, [mech_runs["budget"].run_dir, mech_runs["kvcache"].manifest], out)
    assert validate_file(out / "report.json") == []
    assert doc["counts"] == {"inputs": 2, "valid": 2, "invalid": 0}
    by_id = rows(doc)
    kv = by_id[mech_runs["kvcache"].run_dir.name]
    assert kv["verdict"] == "VALID" and kv["semantic_id"] == "INF-PREFIX-CACHE"
    result = json.loads((mech_runs["kvcache"].run_dir / "result.json").read_text())
    # derived headline: the performance group's P50s, exactly as the verified result states them
    ttft = next(h for h in kv["headline"] if h["name"] == "TTFT p50")
    assert ttft["value"] == result["performance"]["ttft_ms"]["p50"] and ttft["unit"] == "ms"
    assert kv["conclusion"]["decision"] == result["conclusion"]["decision"]
    # the run's own PNG is embedded, with the digest the manifest signed
    assert [f["name"].rsplit("/", 1)[1] for f in kv["figures"]] == ["kvcache.png"]
    assert (out / Path(kv["links"]["run_dir"]) / "kvcache.png").resolve() == \
        (mech_runs["kvcache"].run_dir / "kvcache.png").resolve()
    assert (out / kv["links"]["manifest"]).resolve() == mech_runs["kvcache"].manifest.resolve()
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page  # nothing to fetch: no CDN, no server
    assert f'href="{kv["links"]["manifest"]}"' in page
    md = (out / "report.md").read_text()
    assert "| VALID |" in md and f"TTFT p50: {result['performance']['ttft_ms']['p50']:.3g} ms" in md


@pytest.mark.parametrize("how", ["manifest-edited", "file-edited-after-signing"])
def test_a_tampered_input_is_invalid_and_contributes_no_number(root, mech_runs, tmp_path, how):
    marked = derive(root, mech_runs["kvcache"], f"mark-{how}", result=with_mark)
    control = report(root, [marked.manifest], tmp_path / "control")
    assert rows(control)[marked.run_dir.name]["headline"][0]["value"] == MARK  # the mark shows when VALID
    assert any(t in outputs_text(tmp_path / "control") for t in MARK_TEXTS)

    if how == "manifest-edited":
        tamper_manifest(marked.manifest, lambda s: s["predicate"].update(run_label="better numbers"))
    else:
        result = marked.run_dir / "result.json"
        result.write_text(result.read_text().replace('"value": 424242.5', '"value": 424243.5'))
    out = tmp_path / "out"
    doc = report(root, [mech_runs["kvcache"].manifest, marked.manifest], out)
    assert doc["counts"] == {"inputs": 2, "valid": 1, "invalid": 1}
    bad = next(r for s in doc["benches"] for r in s["runs"] if r["verdict"] == "INVALID")
    checks = {r["check"] for r in bad["reasons"]}
    assert checks >= ({"signature"} if how == "manifest-edited" else {"subject-digest"})
    assert bad["headline"] == [] and bad["conclusion"] is None and bad["figures"] == []
    assert not any(t in outputs_text(out) for t in MARK_TEXTS)
    page = (out / "index.html").read_text()
    assert page.count('class="invalid"') == 1 and "INVALID" in page
    assert page.count("data:image/png;base64,") == 1  # only the VALID run's figure
    assert "**INVALID**" in (out / "report.md").read_text()


def test_different_workload_ids_are_flagged_not_like_for_like(root, mech_runs, tmp_path):
    other = "sha256:" + "ab" * 32
    variant = derive(root, mech_runs["kvcache"], "other-workload", run=lambda r: r.update(workload_ids=[other]))
    same = derive(root, mech_runs["kvcache"], "same-workload")
    doc = report(root, [mech_runs["kvcache"].run_dir, variant.run_dir, same.run_dir], tmp_path / "out")
    by_id = rows(doc)
    original = mech_runs["kvcache"].run_dir.name
    assert by_id[original]["like_for_like"] is True
    assert by_id[same.run_dir.name]["like_for_like"] is True
    flagged = by_id[variant.run_dir.name]
    assert flagged["like_for_like"] is False
    assert any(r.startswith("different workload: abababababab here") for r in flagged["not_like_for_like"])
    (section,) = [s for s in doc["benches"] if s["semantic_id"] == "INF-PREFIX-CACHE"]
    assert section["reference_run_id"] == original
    page = (tmp_path / "out" / "index.html").read_text()
    assert page.count("not like-for-like") >= 1 and "different workload: abababababab here" in page


def test_environment_diff_lists_an_injected_package_version_change(root, mech_runs, tmp_path):
    source = mech_runs["budget"]
    fingerprint = json.loads((source.run_dir / "fingerprint.json").read_text())
    package, version = next(iter(sorted(fingerprint["packages"].items())))

    def bump(fp: dict) -> None:
        fp["packages"][package] = "0.0.1+injected"

    variant = derive(root, source, "bumped", fingerprint=bump)
    doc = report(root, [variant.manifest, source.manifest], tmp_path / "out")
    (section,) = doc["benches"]
    (diff,) = section["diffs"]
    assert (diff["a"], diff["b"]) == (source.run_dir.name, variant.run_dir.name)  # time order, then run id
    packages = [e for e in diff["environment"] if e["group"] == "packages"]
    assert packages == [{"group": "packages", "key": package, "a": version, "b": "0.0.1+injected"}]
    assert diff["like_for_like"] is True
    page = (tmp_path / "out" / "index.html").read_text()
    assert f"<code>{package}</code>" in page and "0.0.1+injected" in page
    expected = f"**{md(package)}**: {md(version)} → {md('0.0.1+injected')}"
    assert expected in (tmp_path / "out" / "report.md").read_text()


def test_requested_vs_effective_settings_are_listed_per_run(root, mech_runs, tmp_path):
    doc = report(root, [mech_runs["budget"].run_dir], tmp_path / "out")
    (row,) = rows(doc).values()
    run = mech_runs["budget"].run_json()
    expected = {k for k in run["requested"] if k in run["effective"] and run["requested"][k] != run["effective"][k]}
    assert expected and {o["key"] for o in row["overridden_settings"]} == expected


def test_a_run_named_twice_is_one_input_and_signed_run_dirs_map_to_their_manifest(root, mech_runs, tmp_path):
    kv = mech_runs["kvcache"]
    doc = report(root, [kv.run_dir, kv.manifest, root.path / "manifests" / "INF-PREFIX-CACHE"], tmp_path / "out")
    assert doc["counts"]["inputs"] == len(list((root.path / "manifests" / "INF-PREFIX-CACHE").glob("*.intoto.json")))
    assert sum(r["run_id"] == kv.run_dir.name for r in rows(doc).values()) == 1


def test_without_charts_the_report_needs_no_matplotlib_figures_of_its_own(root, mech_runs, tmp_path):
    out = tmp_path / "out"
    marked = derive(root, mech_runs["kvcache"], "ci", result=lambda d: d["details"].update(
        headline=[{"name": "effect", "value": 0.5, "unit": "ratio", "ci_low": 0.4, "ci_high": 0.7}]))
    doc = report(root, [marked.run_dir], out)
    assert [f["file"] for f in doc["benches"][0]["figures"]] == ["figures/INF-PREFIX-CACHE-1.png"]
    assert (out / "figures" / "INF-PREFIX-CACHE-1.png").read_bytes().startswith(b"\x89PNG")
    doc = report(root, [marked.run_dir], out, "--no-charts")
    assert doc["benches"][0]["figures"] == [] and not (out / "figures").exists()


def test_main_returns_zero_and_prints_where_the_page_is(root, mech_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(root.path)
    assert main(["report", str(mech_runs["budget"].run_dir), "-o", str(tmp_path / "o")]) == 0
    assert f"report: {tmp_path / 'o' / 'index.html'}" in capsys.readouterr().out

