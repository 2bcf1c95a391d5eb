"""infkit model prepare|path: served checkpoints made from local GGUF files."""

from __future__ import annotations

import argparse
import json

from harness.errors import CapabilityMissing
from harness.models import CATALOG, ensure_model, find_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="prepare a served checkpoint from a packaged GGUF")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    prep = actions.add_parser("prepare", help="convert the GGUF to safetensors + tokenizer (idempotent)")
    prep.add_argument("name", choices=sorted(CATALOG))
    prep.add_argument("--json", action="store_true", help="print the prepared model as JSON")
    prep.set_defaults(func=run_prepare)
    path = actions.add_parser("path", help="print a prepared model's directory (exit 3 if not prepared)")
    path.add_argument("name", choices=sorted(CATALOG))
    path.set_defaults(func=run_path)


def run_prepare(args: argparse.Namespace) -> int:
    model = ensure_model(args.name)
    if args.json:
        print(json.dumps({"key": model.key, "path": str(model.path), "model": model.model_ref,
                          "tokenizer": model.tokenizer_ref, "gguf_sha256": model.gguf_sha256}, indent=2))
    else:
        print(f"model: {model.path}\n  checkpoint {model.checkpoint_sha256}\n  tokenizer  {model.tokenizer_sha256}"
              f"\n  gguf       {model.gguf_sha256}")
    return 0


def run_path(args: argparse.Namespace) -> int:
    model = find_model(args.name)
    if model is None:
        raise CapabilityMissing(f"model {args.name} is not prepared", hint=f"run `infkit model prepare {args.name}`")
    print(model.path)
    return 0
