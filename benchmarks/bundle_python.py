"""The GPU-check bundle's two Python steps, standard library only (they run before any dependency).

    python bundle_python.py install LOCK WHEELS SITE   verify each wheel's sha256 against LOCK, unpack into SITE
    python bundle_python.py run SITE ARGS...           `infkit ARGS...` from this tree, SITE after the machine's packages

``install`` needs no pip: a wheel is a zip whose top level is the import tree (its
``*.data/purelib`` and ``platlib`` go there too); a wheel whose hash is not in the lock,
or a locked distribution with no wheel, stops it. ``run`` appends SITE to ``sys.path``,
so a package the machine's Python already has (numpy next to its torch) always wins.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def locked_hashes(lock: Path) -> dict[str, str]:
    """sha256 -> ``name==version`` for every entry of a hash-locked requirements file."""
    text = re.sub(r"\\\n\s*", " ", lock.read_text())
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            for digest in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
                out[digest] = line.split()[0]
    return out


def install(lock: Path, wheels: Path, site: Path) -> int:
    wanted = locked_hashes(lock)
    found: dict[str, Path] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest not in wanted:
            print(f"bundle_python: {wheel.name} is not in {lock.name} (sha256 {digest[:12]}…): refusing it", file=sys.stderr)
            return 5
        found[digest] = wheel
    missing = sorted(name for digest, name in wanted.items() if digest not in found)
    if missing:
        print(f"bundle_python: no wheel for {', '.join(missing)}", file=sys.stderr)
        return 5
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for wheel in found.values():
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(partial)
    for data in partial.glob("*.data"):
        for kind in ("purelib", "platlib"):
            if (data / kind).is_dir():
                shutil.copytree(data / kind, partial, dirs_exist_ok=True)
        shutil.rmtree(data)
    shutil.rmtree(site, ignore_errors=True)
    partial.rename(site)  # all or nothing: a half-unpacked site never looks complete
    print(f"bundle_python: {len(found)} wheels checked against {lock.name} and unpacked into {site}")
    return 0


def run(site: Path, args: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.append(str(site))
    from harness.cli import main

    return main(args)


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "install":
        raise SystemExit(install(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])))
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        raise SystemExit(run(Path(sys.argv[2]), sys.argv[3:]))
    print(__doc__, file=sys.stderr)
    raise SystemExit(2)
