"""index.html: one self-contained static page rendered from report.json.

No script, no network: figures are embedded as data: URIs and a Content-Security-Policy
forbids every other load. Tables turn into cards on narrow screens; a print stylesheet
keeps rows and figures whole and starts each bench on a new page.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from harness.report.text import change, interval, number, run_title

CSS = """
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--head:#f6f8fa;--ok:#1a7f37;--okbg:#dafbe1;
--bad:#cf222e;--badbg:#ffebe9;--warn:#9a6700;--warnbg:#fff8c5}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
margin:0 auto;max-width:1200px;padding:16px}
h1{font-size:1.6rem;margin:.2em 0}\
h2{font-size:1.3rem;border-bottom:2px solid var(--line);padding-bottom:4px;margin-top:2.2rem}
h3{font-size:1.05rem;margin-top:1.6rem}h4{font-size:.95rem;margin:1rem 0 .4rem}
a{color:#0969da}.meta,.muted{color:var(--muted)}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;\
font-size:.85em;overflow-wrap:anywhere}
.table-wrap{overflow-x:auto;margin:.5rem 0}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid var(--line);padding:6px 8px;text-align:left;vertical-align:top}
th{background:var(--head);font-weight:600;font-size:.9em}
td ul{margin:0;padding-left:1.1em}
.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;white-space:nowrap;padding:0 7px;border-radius:10px;\
font-size:.8em;font-weight:700;border:1px solid;
-webkit-print-color-adjust:exact;print-color-adjust:exact}
.badge.ok{color:var(--ok);background:var(--okbg)}.badge.bad{color:var(--bad);background:var(--badbg)}
.badge.warn{color:var(--warn);background:var(--warnbg)}
tr.invalid td{background:#fff8f8}
.reasons li{color:var(--bad)}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:12px}
figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:8px;break-inside:avoid}
figure.wide{grid-column:1/-1}
td.links a{display:block;white-space:nowrap}
td.headline{min-width:13em}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{font-size:.85em;color:var(--muted);margin-top:4px}
nav ul{padding-left:1.2em;margin:.3em 0}
@media (max-width:700px){
body{padding:10px;font-size:14px}
table.cards thead{display:none}
table.cards tr{display:block;border:1px solid var(--line);border-radius:6px;margin-bottom:10px}
table.cards td{display:block;border:0;padding:4px 10px}
table.cards td::before{content:attr(data-label);display:block;\
font-size:.72em;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.figures{grid-template-columns:1fr}
}
@media print{
body{max-width:none;padding:0;font-size:10pt}
nav{display:none}
a{color:inherit;text-decoration:none}
.table-wrap{overflow:visible}
section.bench+section.bench{break-before:page}
tr,figure,article{break-inside:avoid}
h2,h3,h4{break-after:avoid}
.figures{grid-template-columns:repeat(2,1fr)}
@page{margin:12mm}
}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _badge(text: str, tone: str) -> str:
    return f'<span class="badge {tone}">{escape(text)}</span>'


def _link(href: str | None, label: str) -> str:
    return f'<a href="{escape(href)}">{escape(label)}</a>' if href else ""


def _list(items: list[str], cls: str = "") -> str:
    if not items:
        return ""
    attr = f' class="{cls}"' if cls else ""
    return f"<ul{attr}>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _anchor(semantic_id: str | None) -> str:
    return f"bench-{semantic_id}" if semantic_id else "bench-unidentified"


def _headline(item: dict[str, Any]) -> str:
    ci = interval(item)
    parts = [f'{escape(item["name"])}: <b class="num">{number(item["value"])}</b>',
             escape(item["unit"]) if item["unit"] else "", f'<span class="num">{ci}</span>' if ci else "",
             f'<br><span class="muted">{escape(item["arm"])}</span>' if item.get("arm") else ""]
    return " ".join(p for p in parts if p)


def _conclusion_cell(c: dict[str, Any] | None, notes: list[str]) -> str:
    if c is None:
        return _list([escape(n) for n in notes]) or '<span class="muted">no result document</span>'
    tone = {"adopt": "ok", "reject": "bad", "blocked": "bad"}.get(c["decision"], "warn")
    parts = [f"{_badge(c['decision'], tone)} {escape(c['evidence_level'])} evidence"]
    if not c["valid"]:
        parts.append(_badge("run invalid", "bad") + _list([escape(r) for r in c["invalid_reasons"]]))
    if c.get("failure"):
        f = c["failure"]
        parts.append(_badge(f"failure: {f.get('kind')}", "bad") + f" at {escape(str(f.get('stage')))}")
    if c.get("summary"):
        parts.append(f'<span class="muted">{escape(c["summary"])}</span>')
    parts += [f'<span class="muted">note: {escape(n)}</span>' for n in notes]
    return "<br>".join(parts)


def _row(index: int, row: dict[str, Any], reference: str | None) -> str:
    links = row["links"]
    link_cell = "".join(x for x in (_link(links["run_dir"], "run directory"), _link(links["manifest"], "manifest"),
                                       _link(links["summary"], "summary"), _link(links["result"], "result")) if x)
    title = escape(run_title(row))
    label = f'<br><span class="muted">{escape(row["run_label"])}</span>' if row["run_label"] else ""
    started = f'<br><span class="muted">{escape(row["started_utc"])}</span>' if row["started_utc"] else ""
    kind = f'<br><span class="muted">{escape(row["kind"])}</span>' if row["kind"] else ""
    run_cell = f'<td data-label="run"><code>{title}</code>{label}{started}{kind}</td>'
    if row["verdict"] == "INVALID":
        reasons = _list([escape(f"[{r['check']}] {r['message']}") for r in row["reasons"]], "reasons")
        return (f'<tr class="invalid" id="row-{index}"><td data-label="#">{index}</td>{run_cell}'
                f'<td data-label="verdict">{_badge("INVALID", "bad")}</td>'
                f'<td data-label="why no figures" colspan="3">'
                f'no figures shown: the input failed its audit{reasons}</td>'
                f'<td data-label="links" class="links">{link_cell or escape(row["input"])}</td></tr>')
    headline = _list([_headline(h) for h in row["headline"]]) or '<span class="muted">no headline figures</span>'
    like = "reference" if row["run_id"] == reference else (
        _list([escape(r) for r in row["not_like_for_like"]]) or "same workloads, model and backend")
    like_badge = _badge("like-for-like" if row["like_for_like"] else "not like-for-like",
                        "ok" if row["like_for_like"] else "warn")
    return (f'<tr class="valid" id="row-{index}"><td data-label="#">{index}</td>{run_cell}'
            f'<td data-label="verdict">'
            f'{_badge("VALID", "ok") if row.get("signer_trusted") else _badge("VALID-UNTRUSTED", "warn")}</td>'
            f'<td data-label="headline" class="headline">{headline}</td>'
            f'<td data-label="conclusion">{_conclusion_cell(row["conclusion"], row["notes"])}</td>'
            f'<td data-label="like-for-like">{like_badge}{"<br>" if not like.startswith("<ul") else ""}{like}</td>'
            f'<td data-label="links" class="links">{link_cell}</td></tr>')


def _runs_table(section: dict[str, Any]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("#", "run", "verdict", "headline", "conclusion", "like-for-like", "links"))
    rows = "".join(_row(i, r, section["reference_run_id"]) for i, r in enumerate(section["runs"], 1))
    return (f'<div class="table-wrap"><table class="runs cards"><thead><tr>{head}</tr></thead>'
            f'<tbody>{rows}</tbody></table></div>')


def _small_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td data-label="{escape(h)}">{c}</td>' for h, c in zip(headers, r, strict=True))
                   + "</tr>" for r in rows)
    return (f'<div class="table-wrap"><table class="cards"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


def _overrides(section: dict[str, Any], run_id: str) -> list[dict[str, Any]]:
    row = next(r for r in section["runs"] if r["run_id"] == run_id and r["verdict"] == "VALID")
    return row["overridden_settings"]


def _diff(section: dict[str, Any], diff: dict[str, Any]) -> str:
    a, b = escape(diff["a"]), escape(diff["b"])
    comparable = "" if diff["like_for_like"] else " " + _badge("not like-for-like", "warn")
    parts = [f'<article class="diff"><h4><code>{b}</code> against <code>{a}</code>{comparable}</h4>']

    figures = [(escape(f["name"] + (f" ({f['arm']})" if f["arm"] else "")),
                f'<span class="num">{number(f["a"])}</span>', f'<span class="num">{number(f["b"])}</span>',
                f'<span class="num">{escape(change(f))}</span>', escape(f["unit"])) for f in diff["figures"]]
    figures += [(escape(c["field"]), escape(c["a"] or "—"), escape(c["b"] or "—"), "changed", "")
                for c in diff["conclusion"]]
    parts.append("<p><strong>Results</strong></p>"
                 + (_small_table(("figure", diff["a"], diff["b"], "change", "unit"), figures) if figures
                    else '<p class="muted">no headline figures to compare</p>'))
    env = [(escape(e["group"]), f"<code>{escape(e['key'])}</code>", f"<code>{escape(e['a'] or '—')}</code>",
            f"<code>{escape(e['b'] or '—')}</code>") for e in diff["environment"]]
    parts.append(f"<p><strong>Environment</strong> ({len(env)} difference{'s' if len(env) != 1 else ''})</p>"
                 + (_small_table(("group", "what", diff["a"], diff["b"]), env) if env
                    else '<p class="muted">fingerprints and run records agree</p>'))
    both = _overrides(section, diff["a"]) == _overrides(section, diff["b"])
    for run_id in (diff["a"],) if both else (diff["a"], diff["b"]):
        overrides = _overrides(section, run_id)
        if overrides:
            rows = [(f"<code>{escape(o['key'])}</code>", f"<code>{escape(o['requested'] or '—')}</code>",
                     f"<code>{escape(o['effective'] or '—')}</code>") for o in overrides]
            where = "both runs" if both else f"<code>{escape(run_id)}</code>"
            parts.append(f"<p><strong>Requested ≠ effective in {where}</strong></p>"
                         + _small_table(("setting", "requested", "effective"), rows))
    return "".join(parts) + "</article>"


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}" loading="eager">'


def _figures(section: dict[str, Any], images: dict[str, bytes], embedded: set[str]) -> str:
    """Each image (by sha256) is embedded once on the page; a repeat links to its first figure."""
    def figure(digest: str, alt: str, caption: str, cls: str = "") -> str:
        attr = f' class="{cls}"' if cls else ""
        if digest in embedded:
            return (f'<figure{attr}><figcaption>{caption}: the same image as '
                    f'<a href="#fig-{escape(digest[:16])}">the figure above</a> (sha256 {escape(digest[:16])}…)'
                    "</figcaption></figure>")
        embedded.add(digest)
        return (f'<figure{attr} id="fig-{escape(digest[:16])}">{_img(images[digest], alt)}'
                f"<figcaption>{caption}</figcaption></figure>")

    cells = [figure(f["sha256"], f["title"], escape(f["title"]), "wide") for f in section["figures"]]
    for row in section["runs"]:
        for f in row["figures"]:
            name = f["name"].rsplit("/", 1)[-1]
            cells.append(figure(f["sha256"], f"{row['run_id']} {name}",
                                f"<code>{escape(row['run_id'])}</code> · {escape(name)} (signed figure of the run)"))
    return f'<h3>Figures</h3><div class="figures">{"".join(cells)}</div>' if cells else ""


def _section(section: dict[str, Any], images: dict[str, bytes], embedded: set[str]) -> str:
    sid = section["semantic_id"]
    title = escape(sid) if sid else "Inputs that name no bench"
    runs = section["runs"]
    valid = sum(r["verdict"] == "VALID" for r in runs)
    ref = section["reference_run_id"]
    intro = (f'<p class="muted">{valid} VALID, {len(runs) - valid} INVALID. '
             + (f"Like-for-like means the same workloads, model, backend and kind of result as the reference run "
                f"<code>{escape(ref)}</code>.</p>" if ref else "</p>"))
    diffs = "".join(_diff(section, d) for d in section["diffs"])
    what_changed = f"<h3>What changed between runs</h3>{diffs}" if diffs else ""
    return (f'<section class="bench" id="{escape(_anchor(sid))}"><h2>{title}</h2>{intro}{_runs_table(section)}'
            f"{what_changed}{_figures(section, images, embedded)}</section>")


def render_page(doc: dict[str, Any], images: dict[str, bytes]) -> str:
    """The HTML page of a report document; ``images`` maps a figure's sha256 to its PNG bytes."""
    counts = doc["counts"]
    nav = "".join(f'<li><a href="#{escape(_anchor(s["semantic_id"]))}">{escape(s["semantic_id"] or "no bench")}</a> '
                  f'({len(s["runs"])})</li>' for s in doc["benches"])
    verdict = (_badge(f"{counts['valid']} VALID", "ok") + " "
               + _badge(f"{counts['invalid']} INVALID", "bad" if counts["invalid"] else "ok"))
    notes = _list([escape(n) for n in doc.get("notes", [])])
    keys = ", ".join(f"<code>{escape(k)}</code>" for k in doc["trusted_keys"]) or \
        "every <code>manifests/keys/*.pub.pem</code> under the root"
    keys += (f"; signers allowed by the trust policy <code>{escape(doc['trust_policy'])}</code>"
             if doc.get("trust_policy")
             else "; no trust policy: signatures prove the files are intact, not who signed them (VALID-UNTRUSTED)")
    embedded: set[str] = set()
    body = "".join(_section(s, images, embedded) for s in doc["benches"]) or "<p>No inputs.</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>infkit report: {counts['inputs']} runs</title>
<style>{CSS}</style></head>
<body><header><h1>infkit report</h1>
<p>{verdict} of {counts['inputs']} input{'s' if counts['inputs'] != 1 else ''}. Every input was audited first
(signature, subject digests, schemas, evidence rules, as <code>infkit audit</code>); an INVALID input shows its
reasons and no figure.</p>
<p class="meta">created {escape(doc['created_utc'])} by infkit {escape(doc['generator']['version'])} ·
root <code>{escape(doc['root'])}</code> · trusted keys: {keys}</p>{notes}
<nav><strong>Benches</strong><ul>{nav}</ul></nav></header>
<main>{body}</main>
<footer><p class="meta">Machine-readable: <a href="report.json">report.json</a> (schema infkit/report/v1) ·
summary for pull requests: <a href="report.md">report.md</a></p></footer>
</body></html>
"""
