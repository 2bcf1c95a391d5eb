"""The package's shape is checked, not claimed: layers import only downwards, modules and functions stay short.

Layers, lowest first. A module may import its own layer and the ones below; an import of a higher layer
(also a lazy one, or one for type checking only) fails here, with the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "harness"
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(names.split()) for names in (
    "__init__ errors registry knobs progress",  # foundations: no infkit imports but these
    "contract ids",  # documents: schemas, results, hashes, atomic writes
    "workload telemetry",  # what is sent, what is scraped
    "client",  # the streaming client and its records
    "rundir manifest images",  # the run directory, the manifest that signs it, the images (and their provenance)
    "runtime",  # processes and containers
    "backends models",  # engines' launch specs, prepared checkpoints
    "serving",  # one measured run against one server
    "report",  # tables, figures, the page
    "mech cuda",  # mechanisms and CUDA experiments
    "bench",  # the bench framework and the benches
    "commands",  # the CLI's subcommands
    "cli __main__",
))
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def layer_of(module: str) -> int:
    room = module.split(".")[1] if "." in module else "__init__"
    for level, names in enumerate(LAYERS):
        if room in names:
            return level
    raise AssertionError(f"{module}: its room {room!r} is in no layer of tests/test_layout.py")


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "harness":
                found += [(node.lineno, f"harness.{a.name}") for a in node.names]
            elif node.module.startswith("harness."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("harness.")]
    return found


def modules() -> list[tuple[Path, str]]:
    return [(p, ".".join(p.relative_to(ROOT).with_suffix("").parts)) for p in sorted(HARNESS.rglob("*.py"))]


def test_every_import_goes_down_the_layers():
    upward = []
    for path, module in modules():
        own = layer_of(module)
        for line, target in imported(ast.parse(path.read_text())):
            if target == "harness.__version__":
                continue
            if layer_of(target) > own:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


@pytest.mark.parametrize("root", ["harness", "benchmarks"])
def test_modules_and_functions_stay_short(root):
    too_long = []
    for path in sorted((ROOT / root).rglob("*.py")):
        text = path.read_text()
        if (lines := text.count("\n")) > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} has {length} lines "
                                    f"(at most {MAX_FUNCTION_LINES})")
    assert not too_long, "split these:\n" + "\n".join(too_long)


def test_the_layer_table_names_every_room():
    rooms = {
        p.name.removesuffix(".py") for p in HARNESS.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    assert rooms <= set().union(*LAYERS), sorted(rooms - set().union(*LAYERS))
