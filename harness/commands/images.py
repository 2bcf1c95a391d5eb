"""infkit images: environment-role images — list, check, build, pull, lock, run a command inside."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tabulate import tabulate

from harness.errors import InvalidInput, SchemaViolation


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("images", help="environment-role images: list, check, build, pull, lock, run")
    s = p.add_subparsers(dest="images_command", metavar="ACTION", required=True)

    q = s.add_parser("list", help="roles with their locked base, CUDA floor and image digest")
    q.set_defaults(func=run_list)

    q = s.add_parser("check", help="validate locks against their files, digest pins, hadolint")
    q.add_argument("roles", nargs="*", metavar="ROLE")
    q.add_argument("--no-hadolint", action="store_true", help="skip hadolint")
    q.set_defaults(func=run_check)

    q = s.add_parser("build", help="build a role's image (docker, or podman where no daemon runs)")
    q.add_argument("role")
    q.add_argument("--engine", choices=["docker", "podman"])
    q.add_argument("--base-image", help="build on this local image instead of the locked base (recorded in the image)")
    q.add_argument("--ca-bundle", type=Path, help="CA bundle passed to pip as a build secret (default: the system one)")
    q.add_argument("--wheelhouse", default="auto", metavar="auto|off|DIR",
                   help="locked wheels from the host's pip as a build context (auto: when the Dockerfile takes one)")
    q.add_argument("--log", type=Path, help="also write the engine's build output to this file")
    q.set_defaults(func=run_build)

    _register_registry(s)

    q = s.add_parser("lock-deps", help="regenerate requirements/<name>.lock (hashes) from requirements/<name>.in")
    q.add_argument("name")
    q.add_argument("--python", default="3.11", help="the image's Python (default 3.11)")
    q.add_argument("--glibc", default="2.36", help="the image's glibc (bookworm 2.36, Ubuntu 22.04 2.35)")
    q.add_argument("--exclude", action="append", default=[], help="distribution the base provides (glob; repeatable)")
    q.add_argument("--extra-index-url", action="append", default=[])
    q.add_argument("--find-links", action="append", default=[])
    q.set_defaults(func=run_lock_deps)

    q = s.add_parser("wheels", help="download the wheels a lock names (requirements/<name>.lock), hashes checked")
    q.add_argument("name")
    q.add_argument("--dest", type=Path, required=True)
    q.add_argument("--extra-index-url", action="append", default=[])
    q.set_defaults(func=run_wheels)

    q = s.add_parser("run", help="run `infkit ARGS...` inside a role image with the harness mounted read-only")
    q.add_argument("role")
    q.add_argument("--run-dir", type=Path, required=True, help="mounted read-write; the container log goes here")
    q.add_argument("--gpu", action="append", default=[], help="GPU index or list, e.g. 0 or 0,1 (repeatable)")
    q.add_argument("--network", action="store_true", help="give the container a network (default: none)")
    q.add_argument("args", nargs=argparse.REMAINDER, metavar="ARG",
                   help="infkit arguments (options for `images run` go before ROLE, as with docker run)")
    q.set_defaults(func=run_in_image)


def _register_registry(s: argparse._SubParsersAction) -> None:
    """The actions that talk to a registry: push, pull, lock, lock-base."""
    q = s.add_parser("push", help="push a role's local build to REGISTRY/<role>:<tag>; sign its digest's provenance")
    q.add_argument("role")
    q.add_argument("--registry", required=True,
                   help="host[:port][/namespace], e.g. ghcr.io/OWNER or 127.0.0.1:5000/infkit")
    q.add_argument("--engine", choices=["docker", "podman"])
    q.set_defaults(func=run_push)

    q = s.add_parser("pull", help="pull a role's image by the digest in its lock, verified against the registry")
    q.add_argument("role")
    q.add_argument("--engine", choices=["docker", "podman"])
    q.set_defaults(func=run_pull)

    q = s.add_parser("lock", help="refresh a lock: dependency-lock hash and, after a push, the image digest")
    q.add_argument("role")
    q.add_argument("--digest", help="pushed manifest digest (sha256:...), which the registry must serve; "
                   "default: the registry's digest for the lock's tag")
    q.add_argument("--registry-ref", help="where the image was pushed (e.g. ghcr.io/OWNER/inf-cpu), if not the lock's")
    q.set_defaults(func=run_lock)

    q = s.add_parser("lock-base", help="resolve the base tag's digest against a registry; rewrite lock and Dockerfile")
    q.add_argument("role")
    q.add_argument("--registry", help="resolve against this registry (a mirror holding the upstream name) instead")
    q.add_argument("--repin", action="store_true",
                   help="accept a registry digest that differs from the Dockerfile's pin")
    q.set_defaults(func=run_lock_base)


def run_list(args: argparse.Namespace) -> int:
    from harness.images.locks import load_lock, roles

    rows = []
    for role in roles():
        lock = load_lock(role)
        base = lock.doc["base"]
        rows.append((role, f"{base['name']}{'' if base['digest_verified'] else ' (digest unverified)'}",
                     f"CUDA {lock.cuda.version} / driver >= {lock.cuda.min_driver}" if lock.cuda else "cpu",
                     lock.digest or "not pushed"))
    print(tabulate(rows, headers=["role", "base", "cuda", "image digest"], tablefmt="plain"))
    return 0


def run_check(args: argparse.Namespace) -> int:
    from harness.images.dockerfile import hadolint
    from harness.images.locks import REPO_ROOT, load_lock, lock_problems, roles

    failed = 0
    for role in args.roles or roles():
        try:
            lock = load_lock(role)
            problems = lock_problems(lock)
            if not args.no_hadolint:
                problems += hadolint(lock.dockerfile, REPO_ROOT / ".hadolint.yaml")
        except SchemaViolation as exc:
            problems = [str(exc), *exc.errors]
        for problem in problems:
            print(f"{role}: {problem}", file=sys.stderr)
        failed += bool(problems)
        if not problems:
            print(f"{role}: ok")
    return 1 if failed else 0


def run_build(args: argparse.Namespace) -> int:
    from harness.images.build import BuildConfig, build_image
    from harness.images.locks import load_lock

    cfg = BuildConfig(role=args.role, engine=args.engine, base_image=args.base_image, ca_bundle=args.ca_bundle,
                      wheelhouse=args.wheelhouse, log_path=args.log)
    outcome = build_image(load_lock(args.role), cfg)
    note = f" (base substituted for {outcome.base_substituted_for})" if outcome.base_substituted_for else ""
    print(f"built {', '.join(outcome.refs)} {outcome.image_id} on {outcome.base_image}{note} "
          f"in {outcome.seconds:.0f} s")
    return 0


def run_wheels(args: argparse.Namespace) -> int:
    from harness.images.locks import REPO_ROOT
    from harness.images.wheelhouse import fetch_locked, lock_target

    lock_file = REPO_ROOT / "requirements" / f"{args.name}.lock"
    if not lock_file.is_file():
        raise InvalidInput(f"no lock {lock_file.relative_to(REPO_ROOT)}")
    got = fetch_locked(lock_file, args.dest, lock_target(lock_file, tuple(args.extra_index_url)))
    print(f"{got.wheels} wheels ({got.total_bytes / 1e6:.1f} MB) in {got.path}, hashes match {lock_file.name}")
    return 0


def run_push(args: argparse.Namespace) -> int:
    from harness.images.distribute import push_image
    from harness.images.locks import load_lock

    pushed = push_image(load_lock(args.role), args.registry, args.engine)
    print(f"pushed {pushed.ref} {pushed.digest} (the registry's digest); provenance {pushed.provenance}")
    print(f"record it: make lock ROLE={args.role} REGISTRY={args.registry}")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from harness.images.distribute import pull_verified
    from harness.images.locks import load_lock

    print(f"pulled {pull_verified(load_lock(args.role), args.engine)} (manifest and blobs verified)")
    return 0


def run_lock(args: argparse.Namespace) -> int:
    from harness.errors import CapabilityMissing
    from harness.images.distribute import registry_lock
    from harness.images.locks import load_lock, refreshed, with_registry_ref, write_lock

    if args.digest is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", args.digest):
        raise InvalidInput(f"--digest {args.digest!r} is not sha256:<64 hex>")
    lock = load_lock(args.role)
    # Only the registry knows what was pushed: local engines (podman) report digests for
    # images that never left the machine.
    try:
        new, note = registry_lock(lock, args.registry_ref, args.digest), ""
    except CapabilityMissing as exc:
        if args.digest:
            raise
        kept = with_registry_ref(lock, args.registry_ref) if args.registry_ref else lock
        new, note = refreshed(kept), f" (unchanged: {exc})"
    write_lock(new)
    print(f"{new.path}: image digest {new.digest or 'none (not pushed)'}{note}; "
          f"{new.doc['dependency_lock']['path']} {new.doc['dependency_lock']['sha256']}")
    return 0


def run_lock_base(args: argparse.Namespace) -> int:
    from harness.images.build import pin_dockerfile_base
    from harness.images.distribute import resolve_base
    from harness.images.locks import load_lock, write_lock

    lock = load_lock(args.role)
    new, digest = resolve_base(lock, args.registry, args.repin)
    pin_dockerfile_base(lock.dockerfile, lock.doc["base"]["name"], digest)
    write_lock(new)
    print(f"{args.role}: {lock.doc['base']['name']}@{digest} ({new.doc['base']['digest_source']})")
    return 0


def run_lock_deps(args: argparse.Namespace) -> int:
    from harness.contract.atomic import atomic_write_text
    from harness.images.deplock import LockTarget, render_lock, resolve
    from harness.images.locks import REPO_ROOT

    source = REPO_ROOT / "requirements" / f"{args.name}.in"
    target = LockTarget(python_version=args.python, glibc=args.glibc, exclude=tuple(args.exclude),
                        extra_index_urls=tuple(args.extra_index_url), find_links=tuple(args.find_links))
    dists = resolve(source, target)
    out = atomic_write_text(source.with_suffix(".lock"), render_lock(dists, f"requirements/{args.name}.in", target))
    print(f"{out}: {len(dists)} distributions")
    return 0


def run_in_image(args: argparse.Namespace) -> int:
    from harness.commands._runargs import relative
    from harness.ids import new_run_id
    from harness.rundir.directory import sign_queued
    from harness.runtime.docker_run import run_harness
    from harness.runtime.gpus import parse_gpus

    inner = args.args[1:] if args.args[:1] == ["--"] else args.args
    if not inner:
        raise InvalidInput("no infkit arguments to run", hint="infkit images run --run-dir DIR ROLE mech budget ...")
    # Runs finished in the container are signed here, with the host's key, once it exits.
    queue = args.run_dir.resolve() / f".sign-queue-{new_run_id()}"
    gpus = parse_gpus(",".join(args.gpu)) if args.gpu else ()
    outcome = run_harness(args.role, inner, args.run_dir, gpus=gpus, network=args.network,
                          sign_queue=queue)
    sys.stdout.write(outcome.output)
    for manifest in sign_queued(queue, Path.cwd()):
        print(f"manifest: {relative(manifest)}")
        print(f"check it: infkit audit {relative(manifest)}")
    print(json.dumps({"exit_code": outcome.exit_code, "image": outcome.image, "seconds": round(outcome.seconds, 1)}),
          file=sys.stderr)
    return outcome.exit_code
