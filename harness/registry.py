"""The one registry pattern: a module declares itself by exporting a named object; packages are scanned.

Benches (``SPEC``), mechanisms (``MECHANISM``), CUDA experiments (``EXPERIMENT``),
backends (``BACKEND``) and runtimes (``RUNTIME``) each live in a module of their
package that exports one object with a ``name``. Adding one is adding a file:
there is no list to keep by hand. Discovery imports every module of the package
(but not subpackages' children), so such modules import heavy dependencies lazily.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any, TypeVar

from harness.errors import InvalidInput

T = TypeVar("T")


@cache
def _scan(package: str, attr: str) -> tuple[tuple[str, Any], ...]:
    pkg = importlib.import_module(package)
    found: dict[str, Any] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        obj = getattr(module, attr, None)
        if obj is None:
            continue
        name = obj.name
        if name in found:
            raise RuntimeError(f"{package}: two modules declare {attr} named {name!r}")
        found[name] = obj
    return tuple(found.items())


def discover(package: str, attr: str, kind: type[T]) -> dict[str, T]:
    """Every ``attr`` exported by a module of ``package`` that is a ``kind`` (or a subclass of it), by name."""
    return {name: obj for name, obj in _scan(package, attr)
            if isinstance(obj, kind) or (isinstance(obj, type) and issubclass(obj, kind))}


def lookup(package: str, attr: str, kind: type[T], name: str, what: str) -> T:
    """One registered object by name, or ``InvalidInput`` naming the known ones."""
    known = discover(package, attr, kind)
    if name not in known:
        raise InvalidInput(f"unknown {what} {name!r}", hint="choose one of: " + ", ".join(known))
    return known[name]
