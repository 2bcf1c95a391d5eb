"""report.md: the report as a short Markdown summary for pull requests, rendered from report.json."""

from __future__ import annotations

from typing import Any

from harness.report.text import change, headline_text, like_text, number, run_title

MAX_ENV_ITEMS = 12  # a pull-request comment lists the first few differences; the page has them all


def _cell(text: str) -> str:
    """Text for one table cell: no pipe, no newline, no raw HTML (names come from the runs)."""
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _lines(texts: list[str]) -> str:
    return "<br>".join(_cell(t) for t in texts)


def _run_cell(row: dict[str, Any]) -> str:
    title = f"`{run_title(row)}`"
    if row["links"]["run_dir"]:
        title = f"[{title}]({row['links']['run_dir']})"
    manifest = f" ([manifest]({row['links']['manifest']}))" if row["links"]["manifest"] else ""
    return _lines([title + manifest, *([row["run_label"]] if row["run_label"] else [])])


def _row(index: int, row: dict[str, Any], reference: str | None) -> str:
    if row["verdict"] == "INVALID":
        reasons = [f"[{r['check']}] {r['message']}" for r in row["reasons"][:5]]
        more = [f"… {len(row['reasons']) - 5} more"] if len(row["reasons"]) > 5 else []
        return f"| {index} | {_run_cell(row)} | **INVALID** | {_lines(reasons + more)} | — | — |"
    headline = _lines([headline_text(h) for h in row["headline"]]) or "no headline figures"
    c = row["conclusion"]
    conclusion = f"{c['decision']}, {c['evidence_level']}" + ("" if c["valid"] else ", run invalid") if c else "—"
    return (f"| {index} | {_run_cell(row)} | VALID | {headline} | {_cell(conclusion)} | "
            f"{_cell(like_text(row, reference))} |")


def _diff(diff: dict[str, Any]) -> list[str]:
    lines = [f"- `{diff['b']}` against `{diff['a']}`" + ("" if diff["like_for_like"] else " (not like-for-like)") + ":"]
    for f in diff["figures"]:
        arm = f" ({f['arm']})" if f["arm"] else ""
        lines.append(f"  - {f['name']}{arm}: {number(f['a'])} → {number(f['b'])} {f['unit']} ({change(f)})")
    lines += [f"  - {c['field']}: {c['a']} → {c['b']}" for c in diff["conclusion"]]
    env = diff["environment"]
    if not env:
        lines.append("  - environment: fingerprints and run records agree")
    for e in env[:MAX_ENV_ITEMS]:
        lines.append(f"  - {e['group']} `{e['key']}`: `{e['a']}` → `{e['b']}`")
    if len(env) > MAX_ENV_ITEMS:
        lines.append(f"  - … {len(env) - MAX_ENV_ITEMS} more environment differences in index.html")
    return lines


def render_markdown(doc: dict[str, Any]) -> str:
    counts = doc["counts"]
    lines = [
        "# infkit report", "",
        f"{counts['valid']} VALID, {counts['invalid']} INVALID of {counts['inputs']} inputs (every input audited "
        f"before any figure of it is shown) · created {doc['created_utc']} · [full page](index.html) · "
        "[report.json](report.json)",
    ]
    for note in doc.get("notes", []):
        lines += ["", f"> {note}"]
    for section in doc["benches"]:
        lines += ["", f"## {section['semantic_id'] or 'Inputs that name no bench'}", "",
                  "| # | run | verdict | headline | conclusion | like-for-like |", "|---|---|---|---|---|---|"]
        lines += [_row(i, r, section["reference_run_id"]) for i, r in enumerate(section["runs"], 1)]
        if section["diffs"]:
            lines += ["", "What changed:"]
            for diff in section["diffs"]:
                lines += _diff(diff)
    return "\n".join(lines) + "\n"
