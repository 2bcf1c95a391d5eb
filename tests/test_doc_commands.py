"""Every `infkit ...` command a page shows in a code block parses; the bench commands that start nothing run.

Placeholders (NN, URL, FILE, DIR, <run_id>, ...) become small values. A line that is a synopsis rather than a
command (``...``, ``[--flag]``, ``a|b``) is checked for its command's name only; a line of output
(``infkit bench: error: ...``) is not a command. Commands that would start servers, sign, or need a signed run are
parsed, not run: ``UNRUN`` says why for each kind.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.cli import build_parser, expand_argv, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"NN": "69", "URL": "http://127.0.0.1:8000", "FILE": "w.jsonl", "DIR": "d", "RUN_DIR": "runs/x",
                "NAME": "m", "$ARGS": "", "~/trust.json": "trust.json", "<run_id>": "20260101T000000Z-abcdef",
                "run.yaml": "docs/runfiles/bench-69.yaml"}
NAMES = {"cuda": "proposal", "mech": "budget", "model": "smollm2-135m"}  # NAME where a command takes a registry name
# the commands a test may run here: nothing started, nothing written outside stdout
RUNS = ("--help", "--help-all", "--print-config", "--print-schema", "--dry-run")
UNRUN = {
    "audit": "needs a signed run (tests/manifest covers it)",
    "sign": "needs a finished run directory (tests/manifest covers it)",
    "report": "needs audited runs (tests/report covers it)",
    "run": "measures a server (tests/test_run_flags.py runs its examples' parsing)",
    "workload": "writes or reads a workload file made with a prepared tokenizer",
    "images": "starts a container",
    "excerpt": "needs a signed run (tests/manifest covers it)",
    "validate": "needs a run's result file (tests/test_contract.py validates the examples)",
    "keys": "writes or reads the user's signing key",
    "cuda": "needs an NVIDIA GPU and a checkpoint",
    "bench": "starts servers (only --help, --print-config, --print-schema and --dry-run run here)",
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


COMMANDS = _commands()


def _synopsis(command: str) -> bool:
    return any(mark in command for mark in ("...", "[", "|"))


def _argv(command: str) -> list[str]:
    words = shlex.split(command)[1:]
    names = {"NAME": NAMES[words[0]]} if words[0] in NAMES else {}
    return [w for w in ({**PLACEHOLDERS, **names}.get(w, w) for w in words) if w]


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 40, COMMANDS


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_command_a_page_shows_parses(where, command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    words = _argv(command)
    assert words[0] in commands, f"{where}: no command {words[0]!r}"
    if _synopsis(command):
        return  # a usage line: its command exists; the flags it sketches are each command's --help
    if any(w in RUNS for w in words) and words[0] == "bench":
        code = _exit_code(lambda: main(words))
        assert code == 0, (where, capsys.readouterr().err)
        return
    assert words[0] in UNRUN, f"{where}: say why this command does not run here, or run it"
    assert _exit_code(lambda: parser.parse_args(expand_argv(words))) == 0, (where, capsys.readouterr().err)


def _exit_code(call) -> int:
    try:
        call()
    except SystemExit as done:
        return int(done.code or 0)
    return 0
