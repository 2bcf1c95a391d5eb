"""Every `infkit ...` command a page shows in a code block runs here as a reader would run it, every command a page
names (in a code block or a code span of its prose) exists with each flag it shows, and every `make ...` names a
target Make knows.

Placeholders (NN, URL, FILE, DIR, <run_id>, ...) become small values; a run, manifest or trust file a command needs
is made first (a CPU mechanism's run, signed or not, stands in for a bench's), the committed reference runs stand in
for a bench run's documents, and a bench command runs as ``--dry-run`` (the whole plan, no server). A line that is a
synopsis rather than a command (``...``, ``[--flag]``, ``a|b``) is checked for its command's name only; a line of
output (``infkit bench: error: ...``) is not a command. What would start a server or a container, or needs a GPU,
is parsed, not run: ``UNRUN`` says why for each kind.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.cli import build_parser, expand_argv, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"NN": "69", "URL": "http://127.0.0.1:8000", "FILE": "w.jsonl", "DIR": "d", "RUN_DIR": "runs/x",
                "NAME": "m", "$ARGS": "", "~/trust.json": "trust.json", "<run_id>": "20260101T000000Z-abcdef",
                "run.yaml": "docs/runfiles/bench-69.yaml"}
NAMES = {"cuda": "proposal", "mech": "budget", "model": "smollm2-135m"}  # NAME where a command takes a registry name
# the bench options that start nothing
RUNS = ("--help", "--help-all", "--print-config", "--print-schema", "--dry-run")
UNRUN = {
    "run": "measures a server (tests/test_run_flags.py runs its examples' parsing)",
    "images": "starts a container",
    "cuda": "needs an NVIDIA GPU and a checkpoint (its --help runs)",
}
COMMITTED = ROOT / "benchmarks" / "results"
STAND_INS = {  # what a page's run and manifest paths are here (the `reader` fixture makes them)
    "runs/69/<run_id>/comparison.json": str(next(COMMITTED.glob("runs/69/*/comparison.json"), "missing")),
    "manifests/INF-PREFIX-CACHE/<run_id>.intoto.json": "manifests/INF-ITERATION-BUDGET/signed.intoto.json",
    "manifests/INF-ITERATION-BUDGET/<run_id>.intoto.json": "manifests/INF-ITERATION-BUDGET/signed.intoto.json",
    "manifests/INF-PREFIX-CACHE": "manifests/INF-ITERATION-BUDGET",
    "runs/69/<run_id>": "runs/mech/budget/unsigned", "RUN_DIR": "runs/mech/budget/unsigned",
    "excerpt RUN ": "excerpt runs/mech/budget/signed ", "DEST": "dest",
}


def _commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"^(\$ )?(\.venv/bin/)?", "", line.strip())
                if line.startswith("infkit ") and not re.match(r"infkit \w+: error:", line):
                    command = re.split(r"\s{3,}|\s+#", line)[0]  # a table's or a comment's words follow
                    found.append((f"{page.name}: {command}", command))
    return found


def _inline() -> list[tuple[str, str]]:
    """The commands prose names in code spans, once each (the page that names one first)."""
    found: dict[str, str] = {}
    for page in PAGES:
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for span in re.findall(r"`(?:\.venv/bin/)?(infkit [^`]+)`", prose):
            found.setdefault(" ".join(span.split()), page.name)
    return [(f"{page}: {command}", command) for command, page in found.items()]


COMMANDS = _commands()
INLINE = _inline()


def _synopsis(command: str) -> bool:
    return any(mark in command for mark in ("...", "[", "|"))


def _argv(command: str) -> list[str]:
    words = shlex.split(command)[1:]
    names = {"NAME": NAMES[words[0]]} if words[0] in NAMES else {}
    return [w for w in ({**PLACEHOLDERS, **names}.get(w, w) for w in words) if w]


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 40, COMMANDS


NEEDS_RUNS = ("sign", "audit", "excerpt", "report", "keys")


@pytest.fixture
def reader(tmp_path, monkeypatch, tokenizer_dir):
    """A reader's folder, with a signing key and trust policy of their own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    return tokenizer_dir


def _make_runs() -> None:
    """A signed and an unsigned mechanism run (the first makes the key), and a trust policy naming the key."""
    budget = ["mech", "budget", "--batches", "1", "--contexts", "512", "--out", "runs/mech", "--quiet"]
    assert main([*budget, "--run-id", "signed"]) == 0 and main([*budget, "--run-id", "unsigned", "--no-sign"]) == 0
    assert main(["keys", "trust", "trust.json"]) == 0


def _here(command: str, tokenizer_dir: Path) -> list[str]:
    for page_path, here in STAND_INS.items():
        command = command.replace(page_path, here)
    words = _argv(command.replace("--tokenizer DIR", f"--tokenizer {shlex.quote(str(tokenizer_dir))}"))
    # a repository file the page names (a run file, the committed results) is read where it is
    return words[:1] + [str(ROOT / w) if not Path(w).exists() and (ROOT / w).exists() else w for w in words[1:]]


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_command_a_page_shows_runs_or_parses(where, command, reader, capsys):
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    words = _here(command, reader)
    assert words[0] in commands, f"{where}: no command {words[0]!r}"
    if _synopsis(command):
        return  # a usage line: its command exists; the flags it sketches are each command's --help
    if words[0] in UNRUN and not {"--help", "--help-all"} & set(words):
        assert _exit_code(lambda: parser.parse_args(expand_argv(words))) == 0, (where, capsys.readouterr().err)
        return
    if words[0] == "bench" and not set(RUNS) & set(words):
        words.append("--dry-run")  # the whole plan, checked, without a server
    if words[0] in NEEDS_RUNS:
        _make_runs()
    if words[:2] == ["workload", "show"]:
        assert main(["workload", "make", "shared-prefix", "--tokenizer", str(reader), "--groups", "2",
                     "--prompts-per-group", "2", "--prefix-tokens", "32", "--concurrency", "1", "-o", words[2]]) == 0
    assert _exit_code(lambda: main(words)) == 0, (where, words, capsys.readouterr().err)
    if words[0] == "report":  # it exits 0 with INVALID rows too: the stand-in run must read VALID
        assert "1 VALID, 0 INVALID" in capsys.readouterr().out


def _parser_of(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser the leading words name, and the words that name it."""
    parser, named = build_parser(), []
    for word in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        parser, named = sub.choices[word], [*named, word]
    return parser, named


@pytest.mark.parametrize("where, command", COMMANDS + INLINE, ids=[w for w, _ in COMMANDS + INLINE])
def test_every_command_a_page_names_exists_with_each_flag_it_shows(where, command, monkeypatch):
    monkeypatch.chdir(ROOT)
    words = _argv(command)
    if "--config" in words:  # a run file names the bench whose flags follow: the page's example stands in
        words[words.index("--config") + 1] = PLACEHOLDERS["run.yaml"]
        words = expand_argv(words)
    parser, named = _parser_of(words)
    assert named, f"{where}: no command {words[0]!r}"
    options = {o: action for action in parser._actions for o in action.option_strings}
    own = _own_words(words[len(named):], parser, options)
    shown = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", " ".join(own)))
    missing = sorted(shown - set(options))
    assert not missing, f"{where}: {' '.join(named)} has no {', '.join(missing)}"


def _own_words(words: list[str], parser: argparse.ArgumentParser, options: dict[str, argparse.Action]) -> list[str]:
    """The words up to the first positional where the command passes the rest on (``images run IMAGE CMD...``)."""
    if not any(a.nargs == argparse.REMAINDER for a in parser._actions):
        return words
    own, value = [], False
    for word in words:
        if not word.startswith("-") and not value:
            break
        own.append(word)
        action = options.get(word.split("=")[0])
        value = bool(action and action.nargs != 0 and "=" not in word)
    return own


STARTS_NOTHING = [(w, c) for w, c in INLINE if {"--help", "--help-all", "--dry-run", "--print-config"} & set(c.split())]


@pytest.mark.parametrize("where, command", STARTS_NOTHING, ids=[w for w, _ in STARTS_NOTHING])
def test_every_command_prose_names_that_starts_nothing_runs(where, command, capsys):
    assert _exit_code(lambda: main(_argv(command))) == 0, (where, capsys.readouterr().err)


def test_every_make_target_a_page_shows_is_one_make_knows():
    shown = {(page.name, m.group(1)) for page in PAGES
             for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S)
             for m in re.finditer(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+\s+)*make\s+([a-z][a-z0-9-]*)", block, re.M)}
    database = subprocess.run(["make", "-C", str(ROOT), "-pn", "help"], capture_output=True, text=True).stdout
    known = set(re.findall(r"^([a-zA-Z0-9_%-]+):", database, re.M))
    patterns = [re.compile(re.escape(t).replace("%", ".+") + "$") for t in known if "%" in t]
    unknown = {(page, t) for page, t in shown if t not in known and not any(p.match(t) for p in patterns)
               and not t.endswith("-NAME")}
    assert len(shown) >= 30 and not unknown, unknown


def _exit_code(call) -> int:
    try:
        call()
    except SystemExit as done:
        return int(done.code or 0)
    return 0
