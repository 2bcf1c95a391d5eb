"""sign_run: the signed manifest of one run directory."""

from __future__ import annotations

import os
from pathlib import Path

from harness.contract.atomic import atomic_write_json
from harness.contract.paths import check_output_dir, check_output_file
from harness.contract.schemas import DocumentError, load_document, validate_document
from harness.errors import InvalidInput, SchemaViolation
from harness.manifest.dsse import sign_payload
from harness.manifest.keys import KEY_PEM_ENV, default_private_key_path, load_signing_key, publish_public_key
from harness.manifest.predicate import build_predicate, build_statement, statement_bytes
from harness.manifest.subjects import check_run_files, collect_subjects, is_within, relative_name, run_dir_name
from harness.rundir import fingerprint as fingerprint_mod
from harness.rundir.record import RUN_FILE

MANIFESTS_DIR = "manifests"
KEYS_DIR = "keys"
MANIFEST_SUFFIX = ".intoto.json"


def _load_valid(path: Path, what: str) -> dict:
    try:
        doc = load_document(path)
        problems = validate_document(doc)
    except DocumentError as exc:
        raise InvalidInput(f"cannot sign: {what}: {exc}") from None
    if problems:
        raise SchemaViolation(f"cannot sign: {path} is not a valid {what}: " + "; ".join(map(str, problems)))
    return doc


def _check_key_outside(key_path: str | os.PathLike | None, run_real: Path) -> None:
    """A private key inside the run directory would be signed into it as a subject: refused."""
    if key_path is None and os.environ.get(KEY_PEM_ENV):
        return
    path = Path(key_path).expanduser() if key_path is not None else default_private_key_path()
    if is_within(os.path.realpath(path), str(run_real)):
        raise InvalidInput(f"cannot sign: the private key {path} lies inside the run directory {run_real}",
                           hint="keep the key outside every run directory (docs/manifests.md, Keys)")


def default_manifest_path(root: str | Path, semantic_id: str, run_id: str) -> Path:
    return Path(root) / MANIFESTS_DIR / semantic_id / f"{run_id}{MANIFEST_SUFFIX}"


def run_dir_manifest(run_dir: Path, root: Path) -> tuple[Path | None, str | None]:
    """The manifest a run directory is signed into, located from its (not yet verified) run.json; or why not."""
    try:
        run = load_document(run_dir / RUN_FILE)
        semantic_id, run_id = run["semantic_id"], run["run_id"]
        if not (isinstance(semantic_id, str) and isinstance(run_id, str)) or "/" in semantic_id + run_id:
            raise TypeError
    except DocumentError as exc:
        return None, f"cannot read the run record: {exc}"
    except (KeyError, TypeError):
        return None, f"{run_dir / RUN_FILE} names no semantic_id and run_id"
    manifest = default_manifest_path(root, semantic_id, run_id)
    if not manifest.is_file():
        return None, f"unsigned: no manifest at {manifest} (sign it: infkit sign {run_dir})"
    return manifest, None


def sign_run(
    run_dir: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    key_path: str | os.PathLike | None = None,
    links: bool = True,
) -> Path:
    """Sign every file of ``run_dir`` into an in-toto Statement in a DSSE envelope.

    ``root`` (default: the current directory, normally the repository root) is what subject
    paths are relative to; the run directory must lie under it. The predicate comes from
    ``run.json``; ``fingerprint.json`` is collected and written into the run directory first
    when absent, so it is a subject too. The public key is published under
    ``<root>/manifests/keys/``; the default output is
    ``<root>/manifests/<semantic_id>/<run_id>.intoto.json``. Without ``links`` a symlink anywhere
    in the run directory is refused (runs a container wrote). Returns the manifest path.
    """
    root_real, run_rel = run_dir_name(run_dir, root if root is not None else Path.cwd())
    run_real = Path(root_real) / run_rel
    run = _load_valid(run_real / RUN_FILE, "run record (run.json)")
    # Everything that can refuse is checked before the first write (fingerprint.json, the public key).
    target = Path(out) if out else default_manifest_path(root_real, run["semantic_id"], run["run_id"])
    check_output_file(target, "--out")
    expected = default_manifest_path(root_real, run["semantic_id"], run["run_id"])
    manifests_real = os.path.join(root_real, MANIFESTS_DIR)
    if is_within(os.path.realpath(target), manifests_real) and os.path.realpath(target) != str(expected):
        raise InvalidInput(f"--out {out}: under {MANIFESTS_DIR}/ a manifest is stored as "
                           f"{relative_name(expected, root_real)}, the path `audit` binds to the run it signs")
    keys_dir = check_output_dir(Path(root_real) / MANIFESTS_DIR / KEYS_DIR, "manifests/keys")
    check_run_files(run_real, root_real, links=links)
    _check_key_outside(key_path, run_real)
    key = load_signing_key(key_path)
    fp_path = run_real / fingerprint_mod.FINGERPRINT_FILE
    if not fp_path.exists():
        atomic_write_json(fp_path, fingerprint_mod.collect())
    fingerprint = _load_valid(fp_path, "fingerprint (fingerprint.json)")

    target = Path(os.path.realpath(target.parent)) / target.name
    # A manifest written inside the run directory must not list itself.
    exclude = frozenset({relative_name(target, root_real)})
    subjects = collect_subjects(run_real, root_real, exclude, links=links)
    fp_name = relative_name(fp_path, root_real)
    predicate = build_predicate(run, fingerprint, fp_name, fp_path.read_bytes(), run_rel)
    problems = validate_document(predicate)
    if problems:
        raise SchemaViolation("manifest predicate does not match its schema: " + "; ".join(map(str, problems)))
    envelope = sign_payload(statement_bytes(build_statement(subjects, predicate)), key)
    publish_public_key(key.public_key, keys_dir)
    return atomic_write_json(target, envelope)
