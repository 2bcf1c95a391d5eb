"""A draft model for served speculative decoding: the prepared target's first N decoder layers.

The draft is a checkpoint a server loads (vLLM's ``draft_model`` method), made from the
prepared target by a byte-level filter of its safetensors file: tensors of decoder layers
``>= N`` are dropped, every other tensor (embeddings, final norm, the tied head) is copied
unchanged, and ``config.json`` says ``num_hidden_layers = N``. No framework runs, nothing is
re-quantized or re-trained, so the same target and N give byte-identical files anywhere, and
the stamp records the draft's sha256 next to the target's it came from.

(``harness.cuda.proposal.truncated_draft`` builds the same draft in memory for Transformers'
assisted generation, sharing the target's modules; a server needs files.)
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.contract.paths import cache_root
from harness.errors import CapabilityMissing, InvalidInput
from harness.models.stamp import STAMP_NAME, PreparedModel, from_stamp, ready, write_stamp
from harness.runtime.serving_env import Progress, file_lock

LAYER_TENSOR = re.compile(r"^model\.layers\.(\d+)\.")
HEADER_ALIGN_BYTES = 8  # safetensors writers pad the JSON header with spaces to this alignment
COPY_CHUNK_BYTES = 1 << 20


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (tensor name → dtype, shape, data_offsets) and where its data starts."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise InvalidInput(f"{path}: not a safetensors file (shorter than its header length)")
        (size,) = struct.unpack("<Q", raw)
        try:
            header = json.loads(fh.read(size))
        except ValueError:
            raise InvalidInput(f"{path}: not a safetensors file (its header is not JSON)") from None
    return header, 8 + size


def filter_safetensors(src: Path, dst: Path, keep: Callable[[str], bool]) -> list[str]:
    """Write ``dst`` holding the tensors of ``src`` whose names ``keep`` accepts; their bytes are copied as they are.

    Tensors are laid out in name order with the header's keys sorted, so the output depends only on
    the input and ``keep``. Returns the names kept.
    """
    header, data_start = read_header(src)
    meta = header.pop("__metadata__", None)
    names = sorted(n for n in header if keep(n))
    out: dict[str, Any] = {} if meta is None else {"__metadata__": meta}
    offset = 0
    for name in names:
        begin, end = header[name]["data_offsets"]
        out[name] = {**header[name], "data_offsets": [offset, offset + end - begin]}
        offset += end - begin
    blob = json.dumps(out, sort_keys=True, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % HEADER_ALIGN_BYTES)
    with src.open("rb") as fin, dst.open("wb") as fout:
        fout.write(struct.pack("<Q", len(blob)) + blob)
        for name in names:
            begin, end = header[name]["data_offsets"]
            fin.seek(data_start + begin)
            left = end - begin
            while left:
                chunk = fin.read(min(COPY_CHUNK_BYTES, left))
                if not chunk:
                    raise InvalidInput(f"{src}: tensor {name} runs past the end of the file")
                fout.write(chunk)
                left -= len(chunk)
    return names


def checked_config(src: Path, layers: int) -> dict[str, Any]:
    """The target's config.json, after checking that a ``layers``-deep draft is shallower than it."""
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    total = config.get("num_hidden_layers")
    if not isinstance(total, int) or not 1 <= layers < total:
        raise InvalidInput(f"draft layers must be between 1 and {total - 1 if isinstance(total, int) else '?'} "
                           f"(the target has {total} decoder layers), got {layers}")
    return config


def truncate_checkpoint(src: Path, dst: Path, layers: int) -> None:
    """Copy the checkpoint directory ``src`` to ``dst`` keeping decoder layers ``0 .. layers-1``."""
    config = checked_config(src, layers)
    weights = sorted(src.glob("*.safetensors"))
    if not weights:
        raise InvalidInput(f"{src} holds no *.safetensors checkpoint to truncate")
    dst.mkdir(parents=True)
    for path in sorted(src.iterdir()):
        if path.is_file() and path.suffix != ".safetensors" and path.name not in (STAMP_NAME, "config.json"):
            shutil.copyfile(path, dst / path.name)
    (dst / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}, indent=2, sort_keys=True)
                                     + "\n", encoding="utf-8")

    def keep(name: str) -> bool:
        match = LAYER_TENSOR.match(name)
        return match is None or int(match.group(1)) < layers

    for path in weights:
        filter_safetensors(path, dst / path.name, keep)


def draft_dir(target: PreparedModel, layers: int, root: Path | None = None) -> Path:
    # A folder of its own: ``models/`` holds only prepared targets (``find_model`` globs it by name).
    return (root or cache_root()) / "drafts" / f"{target.path.name}-{layers}L"


def ensure_draft(target: PreparedModel, layers: int, *, root: Path | None = None,
                 progress: Progress = print) -> PreparedModel:
    """The truncated draft of ``target`` (its first ``layers`` layers), made once in the cache and re-verified."""
    checked_config(target.path, layers)
    path = draft_dir(target, layers, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent / f".{path.name}.lock"):
        found = ready(path, verify=True)
        if found is not None:
            return found
        if path.exists():
            progress(f"draft: cache entry {path} is partial or corrupt; rebuilding")
            shutil.rmtree(path)
        scratch = path.with_name(f"{path.name}.partial")
        shutil.rmtree(scratch, ignore_errors=True)
        progress(f"draft: writing the first {layers} layers of {target.name} to {path}")
        try:
            truncate_checkpoint(target.path, scratch, layers)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        write_stamp(scratch, {
            "key": f"{target.key}-draft-{layers}L", "name": f"{target.name} (first {layers} layers)",
            "gguf_sha256": target.gguf_sha256, "layers": layers,
            "source_checkpoint_sha256": target.checkpoint_sha256, "method": "first N decoder layers, bytes copied"})
        scratch.rename(path)
        made = from_stamp(path, verify=True)
        if made is None:
            raise CapabilityMissing(f"draft model at {path} does not match its own stamp")
        return made
