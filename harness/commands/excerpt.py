"""infkit excerpt RUN_OR_MANIFEST -o DEST: publish a signed run's small files as an auditable excerpt."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.contract.paths import check_output_dir
from harness.manifest.excerpt import SMALL_FILES, publish


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "excerpt",
        help="copy a signed run's small files, its manifest and key into a folder that audits on its own",
        description="Audit the run's manifest, then copy its " + ", ".join(SMALL_FILES) + " and top-level "
        "result, the manifest and the signer's public key into the excerpt root DEST, each at the name it is "
        "signed under, replacing DEST's earlier excerpt of the same bench. DEST is the root of `infkit audit "
        "--excerpt --root DEST DEST/manifests`: every copied file is verified against its signed digest and the "
        "rest of the run is listed as held back. This is how benchmarks/results holds one reference run per bench "
        "in tens of kilobytes each.",
    )
    p.add_argument("run", metavar="RUN_OR_MANIFEST")
    p.add_argument("-o", "--out", required=True, metavar="DEST", help="the excerpt root (benchmarks/results)")
    p.add_argument("--root", default=".", help="directory subject paths are relative to (default: .)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    dest = check_output_dir(args.out, "-o/--out")
    names = publish(Path(args.run), dest, Path(args.root))
    print(f"{dest}: {len(names)} files ({', '.join(Path(n).name for n in names)})")
    print(f"audit it: infkit audit --excerpt --root {dest} {dest}/manifests")
    return 0
