"""report.md: the report as a short Markdown summary for pull requests, rendered from report.json.

Every value that comes from a run (names, versions, labels, environment values, settings, reasons,
even an unsigned manifest's claims) passes through ``md`` and nothing else: it turns a value into
inert text — no link, image, heading, table cell break, code span or raw HTML — and link targets
go through ``href`` (percent-encoded relative paths). The only Markdown in the file is the
report's own.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any
from urllib.parse import quote

from harness.report.text import change, headline_text, like_text, number, run_title

MAX_ENV_ITEMS = 12  # a pull-request comment lists the first few differences; the page has them all
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|~@^$])")  # emphasis, code, links, images, headings, cells, math
_AUTOLINK = re.compile(r"(?i)(:)(?=//)|(?<=\bwww)(\.)")  # a bare URL GitHub would turn into a link
_LEADING = re.compile(r"^([-+](?=\s|$)|=|\d+\.(?=\s|$))")  # a list or heading marker where a value starts a line
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def md(value: Any) -> str:
    """One value as inert Markdown text on one line (see the module doc)."""
    text = _BREAKS.sub(" ", value if isinstance(value, str) else str(value))
    text = _MD_SPECIAL.sub(r"\\\1", escape(text, quote=False))
    text = _AUTOLINK.sub(lambda m: "\\" + m.group(), text)
    return _LEADING.sub(lambda m: m.group()[:-1] + "\\." if m.group()[-1] == "." else "\\" + m.group(), text)


def href(target: str) -> str:
    """A relative link target as Markdown accepts it: percent-encoded, no spaces, quotes or parentheses."""
    return quote(target, safe="/")


def _lines(texts: list[str]) -> str:
    return "<br>".join(md(t) for t in texts)


def _run_cell(row: dict[str, Any]) -> str:
    title = f"**{md(run_title(row))}**"
    if row["links"]["run_dir"]:
        title = f"[{title}]({href(row['links']['run_dir'])})"
    manifest = f" ([manifest]({href(row['links']['manifest'])}))" if row["links"]["manifest"] else ""
    label = f"<br>{md(row['run_label'])}" if row["run_label"] else ""
    return title + manifest + label


def _row(index: int, row: dict[str, Any], reference: str | None) -> str:
    if row["verdict"] == "INVALID":
        reasons = [f"[{r['check']}] {r['message']}" for r in row["reasons"][:5]]
        more = [f"… {len(row['reasons']) - 5} more"] if len(row["reasons"]) > 5 else []
        return f"| {index} | {_run_cell(row)} | **INVALID** | {_lines(reasons + more)} | — | — |"
    headline = _lines([headline_text(h) for h in row["headline"]]) or "no headline figures"
    c = row["conclusion"]
    conclusion = f"{c['decision']}, {c['evidence_level']}" + ("" if c["valid"] else ", run invalid") if c else "—"
    verdict = "VALID" if row.get("signer_trusted") else "VALID\\-UNTRUSTED"
    return (f"| {index} | {_run_cell(row)} | {verdict} | {headline} | {md(conclusion)} | "
            f"{md(like_text(row, reference))} |")


def _diff(diff: dict[str, Any]) -> list[str]:
    lines = [f"- **{md(diff['b'])}** against **{md(diff['a'])}**"
             + ("" if diff["like_for_like"] else " (not like\\-for\\-like)") + ":"]
    for f in diff["figures"]:
        arm = f" ({f['arm']})" if f["arm"] else ""
        lines.append("  - " + md(f"{f['name']}{arm}: {number(f['a'])} → {number(f['b'])} {f['unit']} ({change(f)})"))
    lines += ["  - " + md(f"{c['field']}: {c['a']} → {c['b']}") for c in diff["conclusion"]]
    env = diff["environment"]
    if not env:
        lines.append("  - environment: fingerprints and run records agree")
    for e in env[:MAX_ENV_ITEMS]:
        lines.append(f"  - {md(e['group'])} **{md(e['key'])}**: {md(e['a'])} → {md(e['b'])}")
    if len(env) > MAX_ENV_ITEMS:
        lines.append(f"  - … {len(env) - MAX_ENV_ITEMS} more environment differences in index.html")
    return lines


def render_markdown(doc: dict[str, Any]) -> str:
    counts = doc["counts"]
    lines = [
        "# infkit report", "",
        f"{counts['valid']} VALID, {counts['invalid']} INVALID of {counts['inputs']} inputs (every input audited "
        f"before any figure of it is shown) · created {md(doc['created_utc'])} · [full page](index.html) · "
        "[report.json](report.json)",
    ]
    for note in doc.get("notes", []):
        lines += ["", f"> {md(note)}"]
    for section in doc["benches"]:
        lines += ["", f"## {md(section['semantic_id']) if section['semantic_id'] else 'Inputs that name no bench'}", "",
                  "| # | run | verdict | headline | conclusion | like-for-like |", "|---|---|---|---|---|---|"]
        lines += [_row(i, r, section["reference_run_id"]) for i, r in enumerate(section["runs"], 1)]
        if section["diffs"]:
            lines += ["", "What changed:"]
            for diff in section["diffs"]:
                lines += _diff(diff)
    return "\n".join(lines) + "\n"
