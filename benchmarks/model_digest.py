"""What a checkpoint's identity costs: resolving MODEL=<directory> with its files hashed, then again from the cache.

Writes a checkpoint of ``--weights-mib`` MiB of weights (in ``--shards`` files) plus config and tokenizer files
into a scratch folder, resolves it three times with a private digest cache (cold: every file hashed; warm: every
hash reused by path, size and mtime; one shard touched: only that shard hashed again) and prints the seconds of
each and the files each hashed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from harness.models.resolve import resolve_checkpoint


def write_checkpoint(root: Path, weights_mib: int, shards: int) -> Path:
    root.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (root / name).write_text("{}")
    chunk = os.urandom(1 << 20)
    for i in range(shards):
        with (root / f"model-{i + 1:05d}-of-{shards:05d}.safetensors").open("wb") as fh:
            for _ in range(weights_mib // shards):
                fh.write(chunk)
    return root


def timed(path: Path, cache: Path) -> tuple[float, list[str]]:
    start = time.perf_counter()
    model = resolve_checkpoint(str(path), cache_dir=cache)
    assert model is not None
    return time.perf_counter() - start, model.origin["hashed_now"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weights-mib", type=int, default=1024)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_checkpoint(Path(tmp) / "ckpt", args.weights_mib, args.shards)
        cache = Path(tmp) / "digests"
        for label in ("cold", "warm", "one shard touched"):
            if label == "one shard touched":
                os.utime(next(ckpt.glob("*.safetensors")))
            seconds, hashed = timed(ckpt, cache)
            print(f"{label:>18}: {seconds * 1000:9.1f} ms, {len(hashed)} file(s) hashed")


if __name__ == "__main__":
    main()
