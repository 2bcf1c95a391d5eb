"""The GPU-check bundle's two Python steps, standard library only (they run before any dependency).

    python bundle_python.py install LOCK WHEELS SITE [SKIP...]   (building the bundle) verify each wheel's sha256
                                                       against LOCK and its tags against LOCK's CPython, unpack into
                                                       SITE with a SHA256SUMS of every file; SKIP: locked
                                                       distributions left out on purpose
    python bundle_python.py link SITE_A SITE_B         hard-link files SITE_B holds identically to SITE_A (the
                                                       bundle's archive then stores them once)
    python bundle_python.py verify LOCK SITE           (on the machine) this interpreter is LOCK's CPython, and
                                                       every file of SITE matches its SHA256SUMS
    python bundle_python.py imports SITE MODULE...     import each module (SITE after the machine's packages) and
                                                       print the ones that fail, with why
    python bundle_python.py run SITE ARGS...           `infkit ARGS...` from this tree, SITE after the machine's
                                                       packages

``install`` needs no pip: a wheel is a zip whose top level is the import tree (its
``*.data/purelib`` and ``platlib`` go there too); a wheel whose hash is not in the lock, whose
tags do not load on the lock's CPython, or a locked distribution with no wheel, stops it. The
bundle ships the unpacked sites (one per CPython, identical files stored once), not the wheels:
two wheel sets would not fit its 60 MB. ``run`` appends SITE to ``sys.path``, so a package the
machine's Python already has (numpy next to its torch) always wins.
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


def lock_python(lock: Path) -> str | None:
    """The CPython ``X.Y`` a lock's wheels are for (its ``# Target: CPython X.Y, ...`` line)."""
    match = re.search(r"^# Target: CPython (\d+\.\d+)", lock.read_text(), re.M)
    return match.group(1) if match else None


def wheel_fits(name: str, version: tuple[int, int] = sys.version_info[:2]) -> bool:
    """Whether a wheel's python/abi tags load on this interpreter (cpXY, abi3 from its cp3Y up, or pure py3)."""
    python_tag, abi_tag = name[:-4].split("-")[-3:-1]
    here = f"cp{version[0]}{version[1]}"
    for tag in python_tag.split("."):
        if tag in ("py3", "py2.py3") or (tag == here and abi_tag in (here, "none", "abi3")):
            return True
        if abi_tag == "abi3" and tag.startswith("cp3") and int(tag[3:] or 0) <= version[1]:
            return True
    return python_tag.startswith("py3")


SUMS = "SHA256SUMS"


def install(lock: Path, wheels: Path, site: Path, skip: tuple[str, ...] = ()) -> int:
    target = lock_python(lock)
    if target is None:
        print(f"bundle_python: {lock.name} names no target CPython", file=sys.stderr)
        return 5
    version = tuple(int(p) for p in target.split("."))
    wanted = {d: n for d, n in locked_hashes(lock).items() if n.split("==")[0] not in skip}
    found: dict[str, Path] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        if not wheel_fits(wheel.name, version):  # type: ignore[arg-type]
            print(f"bundle_python: {wheel.name} does not load on CPython {target}: refusing it", file=sys.stderr)
            return 5
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest not in wanted and any(wheel.name.lower().startswith(n.replace("-", "_") + "-") for n in skip):
            continue
        if digest not in wanted:
            print(
                f"bundle_python: {wheel.name} is not in {lock.name} (sha256 {digest[:12]}…): refusing it",
                file=sys.stderr,
            )
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
    (partial / SUMS).write_text("".join(f"{sha256(p)}  {p.relative_to(partial)}\n" for p in files(partial)))
    shutil.rmtree(site, ignore_errors=True)
    partial.rename(site)  # all or nothing: a half-unpacked site never looks complete
    print(f"bundle_python: {len(found)} wheels checked against {lock.name} and unpacked into {site}")
    return 0


def files(root: Path) -> list[Path]:
    """Every file of a site but its sums and the bytecode Python writes beside the sources as they are imported."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != SUMS and "__pycache__" not in p.parts)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def link(first: Path, second: Path) -> int:
    """Replace each file of ``second`` that ``first`` holds byte for byte at the same path by a hard link."""
    linked = 0
    for path in files(second):
        twin = first / path.relative_to(second)
        if twin.is_file() and twin.stat().st_size == path.stat().st_size and twin.read_bytes() == path.read_bytes():
            path.unlink()
            path.hardlink_to(twin)
            linked += 1
    print(f"bundle_python: {linked} files of {second.name} stored once with {first.name}")
    return 0


def verify(lock: Path, site: Path) -> int:
    """Before anything of SITE is used: this interpreter is the lock's CPython and every file is as unpacked."""
    target, here = lock_python(lock), "{}.{}".format(*sys.version_info[:2])
    if target != here:
        print(f"bundle_python: {lock.name} holds packages for CPython {target}, this is {here}", file=sys.stderr)
        return 5
    sums = site / SUMS
    if not sums.is_file():
        print(f"bundle_python: {site} has no {SUMS}", file=sys.stderr)
        return 5
    listed = dict(line.split("  ", 1)[::-1] for line in sums.read_text().splitlines() if line)
    present = {str(p.relative_to(site)) for p in files(site)}
    bad = sorted(
        n for n in present | set(listed) if n not in listed or n not in present or sha256(site / n) != listed[n]
    )
    if bad:
        print(f"bundle_python: {len(bad)} file(s) of {site} differ from {SUMS}, e.g. {bad[0]}", file=sys.stderr)
        return 5
    print(f"bundle_python: {len(listed)} files of {site} match {SUMS} (CPython {here}, {lock.name})")
    return 0


def imports(site: Path, modules: list[str]) -> int:
    """Import each module for real (``find_spec`` succeeds on a folder whose extension cannot load)."""
    import importlib

    sys.path.append(str(site))
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure to import is what this reports
            failed.append(f"{name} ({type(exc).__name__}: {str(exc)[:80]})")
    print("; ".join(failed))
    return 0


def run(site: Path, args: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.append(str(site))
    from harness.cli import main

    return main(args)


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "install":
        raise SystemExit(install(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), tuple(sys.argv[5:])))
    if len(sys.argv) == 4 and sys.argv[1] in ("link", "verify"):
        command = link if sys.argv[1] == "link" else verify
        raise SystemExit(command(Path(sys.argv[2]), Path(sys.argv[3])))
    if len(sys.argv) >= 3 and sys.argv[1] == "imports":
        raise SystemExit(imports(Path(sys.argv[2]), sys.argv[3:]))
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        raise SystemExit(run(Path(sys.argv[2]), sys.argv[3:]))
    print(__doc__, file=sys.stderr)
    raise SystemExit(2)
