"""The GPU check's first step: what this machine's Python, torch and transformers are and do, as one JSON document.

Versions found against the pins (the machine's own torch/transformers may be newer than the image's: the
figures then measure those, and the result says so), scikit-learn present or not (transformers re-fits the
assisted-generation confidence threshold only when it imports), the SDPA backends torch enables,
``torch.OutOfMemoryError`` caught and the memory returned, and the assisted-generation fields of
``GenerationConfig`` the proposal experiment sets. Needs torch; the rest is reported as found or missing.

Usage: python gpu_probe.py DEVICE SITE OUT   (DEVICE cuda or cpu; SITE: the bundle's packages, after the machine's;
       OUT: the JSON document; the console gets it too)
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata

PINS = {"torch": "2.8.0", "transformers": "4.57.1"}  # the INF-CUDA-MECHANISM image's
ASSISTED_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
                   "prompt_lookup_num_tokens", "assistant_lookbehind", "target_lookbehind")


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    found = {d: version(d) for d in ("torch", "transformers", "scikit-learn", "numpy", "accelerate")}
    pinned = {d: {"pinned": p, "found": found[d], "matches": (found[d] or "").split("+")[0] == p}
              for d, p in PINS.items()}
    return {"python": platform.python_version(), "found": found, "against_pins": pinned}


def oom_returns_memory(torch) -> dict:
    """Ask for more than the device has; the error must be catchable and the allocator back where it was."""
    before = torch.cuda.memory_allocated()
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        torch.empty(int(total * 2), dtype=torch.uint8, device="cuda")
        return {"raised": False}
    except torch.OutOfMemoryError as exc:
        caught = type(exc).__name__
    torch.cuda.empty_cache()
    after = torch.cuda.memory_allocated()
    return {"raised": True, "caught_as": caught, "allocated_before": before, "allocated_after": after,
            "returned": after == before}


def probe(device: str) -> dict:
    import torch

    out: dict = {"device": device, **versions(), "cuda": torch.version.cuda,
                 "cuda_available": torch.cuda.is_available()}
    sdp = torch.backends.cuda
    out["sdpa_backends"] = {name: bool(getattr(sdp, f"{name}_sdp_enabled")()) for name in
                            ("flash", "mem_efficient", "math", "cudnn") if hasattr(sdp, f"{name}_sdp_enabled")}
    out["oom"] = oom_returns_memory(torch) if device == "cuda" else {"skipped": "no CUDA device (rehearsal)"}
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    try:
        from transformers import GenerationConfig

        config = GenerationConfig()
        out["assisted_generation_fields"] = {f: hasattr(config, f) for f in ASSISTED_FIELDS}
    except ImportError as exc:
        out["assisted_generation_fields"] = {"error": str(exc)}
    return out


if __name__ == "__main__":
    device, site, out = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.append(site)  # as the experiments see them: the machine's packages first
    doc = probe(device)
    text = json.dumps(doc, indent=2, sort_keys=True)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    print(text)
    ok = doc["oom"].get("returned", True) and all(
        v is True for v in doc["assisted_generation_fields"].values() if isinstance(v, bool))
    raise SystemExit(0 if ok else 1)
