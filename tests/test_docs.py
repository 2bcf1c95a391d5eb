"""The docs pages are views: no dated history outside generated blocks, one template per bench page, and every
link between pages resolves. History lives in CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GENERATED = re.compile(r"<!-- BEGIN GENERATED .*?<!-- END GENERATED [^>]*-->", re.S)
# a date (2026-12-04, 20261204) or a run id (20261206T031450Z-bf1339)
_MONTH, _DAY = r"(?:0[1-9]|1[0-2])", r"(?:0[1-9]|[12]\d|3[01])"
DATED = re.compile(rf"\b(?:19|20)\d\d(?:-{_MONTH}-{_DAY}|{_MONTH}{_DAY}(?:T\d{{6}}Z(?:-[0-9a-f]+)?)?)\b")
REFERENCE_BLOCK = re.compile(r"^<!-- BEGIN GENERATED reference-run bench-(\d\d) \(make docs rewrites this block from "
                             r"benchmarks/results/bench-\1\) -->\n.*?\n<!-- END GENERATED reference-run -->$",
                             re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
MAX_BENCH_PAGE_LINES = 160


def _pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _bench_pages(root: Path) -> list[Path]:
    return sorted((root / "docs").glob("bench-[0-9][0-9].md"))


def dated_lines(text: str) -> list[str]:
    """Lines outside generated blocks that name a date or a run id."""
    kept = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [f"{n}: {line.strip()}" for n, line in enumerate(kept.splitlines(), 1) if DATED.search(line)]


def test_the_dated_pattern_finds_dates_and_run_ids_and_spares_versions_and_digests():
    assert dated_lines("run `20261206T031450Z-bf1339`, 2026-12-04\nstamp 20261204\n") != []
    assert len(dated_lines("a\n2026-12-04\nb\n20261206T031450Z-bf1339\n")) == 2
    assert dated_lines("vllm 0.11.0, torch 2.13.0+cpu, sha256 9f20261204ab, 2048 tokens, ray==2.60.0\n") == []
    block = "<!-- BEGIN GENERATED x -->\nrun 20261206T031450Z-bf1339 on 2026-12-06\n<!-- END GENERATED x -->\n"
    assert dated_lines(block) == []
    assert dated_lines(block + "2026-12-06\n") == ["4: 2026-12-06"]


def test_no_page_carries_a_date_or_run_id_outside_generated_blocks(repo_root):
    found = {p.name: dated_lines(p.read_text()) for p in _pages(repo_root)}
    assert {name: lines for name, lines in found.items() if lines} == {}, "history belongs in CHANGELOG.md"


@pytest.mark.parametrize("number", ["00", "66", "68", "69", "70", "72", "81"])
def test_each_bench_page_fits_the_template(repo_root, number):
    page = repo_root / "docs" / f"bench-{number}.md"
    text = page.read_text()
    assert len(text.splitlines()) <= MAX_BENCH_PAGE_LINES
    blocks = REFERENCE_BLOCK.findall(text)
    assert blocks == [number], f"{page.name}: exactly one reference-run block, of its own bench"
    assert text.count("<!-- BEGIN GENERATED reference-run") == text.count("<!-- END GENERATED reference-run") == 1
    # the verdict comes first: the block sits before the first section
    assert text.index("<!-- BEGIN GENERATED reference-run") < text.index("\n## ")
    assert "measurement.md" in text, "the rules are linked, not restated"


def test_every_bench_page_is_tested(repo_root):
    assert {p.stem[-2:] for p in _bench_pages(repo_root)} == {"00", "66", "68", "69", "70", "72", "81"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path, root: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or root.resolve() not in [dest, *dest.parents]:
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    return broken


def test_every_link_between_pages_resolves(repo_root):
    pages = [*_pages(repo_root), repo_root / "CHANGELOG.md"]
    found = {p.name: broken_links(p, repo_root) for p in pages}
    assert {name: links for name, links in found.items() if links} == {}
