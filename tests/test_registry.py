"""The prebuilt-image path against a real Distribution registry: push → lock → pull by digest → verify → run → audit.

inf-cpu is built once per session (``inf_cpu`` in conftest) and pushed once per module, into a
copied checkout (``INFKIT_IMAGE_LOCKS``) so the repository's own locks stay untouched. Pulls go
into fresh podman stores. Each refusal is a case where a kit that pulled by tag, or took a digest
from the local store, would have gone on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.contract.schemas import validate_document
from harness.errors import InfkitError
from harness.images.distribute import pull_verified, registry_lock
from harness.images.locks import load_lock, lock_problems, write_lock
from tests.registry_helpers import (
    blob_file,
    copy_checkout,
    drop_store,
    fresh_store,
    head_digest,
    infkit,
    make,
    namespace,
    registry_or_skip,
    store_images,
    tiny_image,
)

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def pushed(inf_cpu, tmp_path_factory):
    """inf-cpu pushed to the test registry and locked from it, in a copied checkout."""
    ns = namespace(registry_or_skip())
    root = tmp_path_factory.mktemp("checkout")
    env = {"INFKIT_IMAGE_LOCKS": str(copy_checkout(root)), "XDG_CONFIG_HOME": str(root / "config")}
    t0 = time.monotonic()
    push = make(["push", "ROLE=inf-cpu", f"REGISTRY={ns}"], env)
    assert push.returncode == 0, push.stdout + push.stderr
    lock = make(["lock", "ROLE=inf-cpu", f"REGISTRY={ns}"], env)
    assert lock.returncode == 0, lock.stdout + lock.stderr
    print(f"push + lock: {time.monotonic() - t0:.0f} s")
    return {"root": root, "env": env, "ns": ns, "image": inf_cpu}


@pytest.fixture
def new_store(tmp_path: Path):
    """Fresh podman stores for one test, emptied and unmounted afterwards."""
    made: list[dict[str, str]] = []

    def make_store(name: str = "store") -> dict[str, str]:
        made.append(fresh_store(tmp_path / name))
        return made[-1]

    yield make_store
    for env in made:
        drop_store(env)


def _lock(pushed):
    return load_lock("inf-cpu", pushed["root"] / "images")


def test_lock_records_the_registry_digest_not_the_local_one(pushed):
    lock = _lock(pushed)
    tag_ref = f"{pushed['ns']}/inf-cpu:0.1.0"
    assert lock.digest == head_digest(tag_ref)  # what the registry says, asked independently
    skopeo = subprocess.run(["skopeo", "--registries-conf", os.environ["CONTAINERS_REGISTRIES_CONF"], "inspect",
                             "--format", "{{.Digest}}", f"docker://{tag_ref}"],
                            capture_output=True, text=True, timeout=120)
    assert skopeo.returncode == 0 and skopeo.stdout.strip() == lock.digest, skopeo.stderr  # and by a third client
    local = subprocess.run(["podman", "image", "inspect", "--format", "{{.Digest}}", "localhost/infkit/inf-cpu:0.1.0"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert local != lock.digest  # podman's own digest of the unpushed image is another manifest's
    image = lock.doc["image"]
    labels = pushed["image"].labels
    assert image["registry_ref"] == f"{pushed['ns']}/inf-cpu" and image["tag"] == "0.1.0"
    assert image["built_utc"] == labels["org.opencontainers.image.created"]
    assert image["revision"] == labels["org.opencontainers.image.revision"]
    assert pushed["ns"].split("/")[0] in image["digest_source"]
    assert validate_document(lock.doc) == []
    assert lock_problems(lock, pushed["root"]) == []
    check = make(["images-check", "ROLE=inf-cpu"], pushed["env"])
    assert check.returncode == 0 and "inf-cpu: ok" in check.stdout, check.stdout + check.stderr
    assert (pushed["root"] / image["provenance"]).is_file()


def test_provenance_names_the_build_inputs(pushed):
    from harness.manifest.dsse import parse_envelope

    lock = _lock(pushed)
    statement = json.loads(parse_envelope((pushed["root"] / lock.doc["image"]["provenance"]).read_bytes()).payload)
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [{"name": lock.registry_ref, "digest": {"sha256": lock.digest[7:]}}]
    build = statement["predicate"]["buildDefinition"]
    deps = {d["name"]: d for d in build["resolvedDependencies"]}
    assert deps["dependency-lock"]["digest"]["sha256"] == lock.doc["dependency_lock"]["sha256"][7:]
    assert deps["base"]["digest"]["sha256"] == pushed["image"].labels["org.opencontainers.image.base.digest"][7:]
    assert deps["base"]["annotations"]["substitutedFor"] == lock.base_image
    assert build["externalParameters"]["buildArgs"]["BASE_IMAGE"] == os.environ["INFKIT_LOCAL_BASE_IMAGE"]
    assert "wheelhouse" not in deps  # inf-cpu installs from the indexes


def test_pull_by_digest_into_a_fresh_store(pushed, tmp_path: Path, new_store):
    store = new_store()
    run = make(["pull", "ROLE=inf-cpu"], pushed["env"] | store)
    assert run.returncode == 0, run.stdout + run.stderr
    (held,) = store_images(store)
    lock = _lock(pushed)
    assert held["Digest"] == lock.digest and f"{lock.registry_ref}@{lock.digest}" in held["RepoDigests"]
    assert not held.get("Names") or all("@" in n or ":<none>" in n for n in held["Names"])  # no tag was pulled
    assert "sha256:" + held["Id"] == pushed["image"].id


def _refused(pushed, store: dict[str, str], lock_dir: Path | None = None) -> str:
    env = pushed["env"] | store | ({"INFKIT_IMAGE_LOCKS": str(lock_dir)} if lock_dir else {})
    run = infkit(["images", "pull", "inf-cpu"], env)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused to pull inf-cpu" in lines[0], run.stderr
    assert store_images(store) == []  # nothing left behind
    return lines[0]


def _lock_copy(pushed, tmp_path: Path, **image) -> Path:
    """A copy of the pushed lock with ``image`` fields replaced."""
    folder = copy_checkout(tmp_path / "checkout")
    lock = _lock(pushed)
    lock.doc["image"].update(image)
    write_lock(type(lock)(lock.role, folder / lock.path.name, lock.doc))
    return folder


def test_pull_refuses_an_edited_lock_digest(pushed, tmp_path: Path, new_store):
    folder = _lock_copy(pushed, tmp_path, digest="sha256:" + "5" * 64)
    line = _refused(pushed, new_store(), folder)
    assert "sha256:" + "5" * 64 in line  # the tag still resolves; a kit pulling by tag would have gone on


def test_pull_gets_the_locked_image_when_the_tag_moves(pushed, tmp_path: Path, new_store, monkeypatch):
    tag_ref = f"{pushed['ns']}/moved:0.1.0"
    first = tiny_image(tmp_path / "a", tag_ref)
    folder = _lock_copy(pushed, tmp_path, registry_ref=f"{pushed['ns']}/moved", digest=None)
    write_lock(registry_lock(load_lock("inf-cpu", folder)))
    second = tiny_image(tmp_path / "b", tag_ref)
    assert head_digest(tag_ref) == second != first  # the registry now serves another image under the tag
    store = new_store()
    for name, value in store.items():
        monkeypatch.setenv(name, value)
    pull_verified(load_lock("inf-cpu", folder))
    assert [i["Digest"] for i in store_images(store)] == [first]


def test_pull_refuses_a_registry_serving_another_manifest_for_the_digest(pushed, tmp_path: Path, new_store):
    locked = tiny_image(tmp_path / "a", f"{pushed['ns']}/swapped:0.1.0")
    other = tiny_image(tmp_path / "b", f"{pushed['ns']}/other:0.1.0")
    blob_file(locked).write_bytes(blob_file(other).read_bytes())  # the registry's storage now lies
    folder = _lock_copy(pushed, tmp_path, registry_ref=f"{pushed['ns']}/swapped", digest=locked)
    assert "serves a manifest whose sha256 is" in _refused(pushed, new_store(), folder)


def test_pull_refuses_a_truncated_blob(pushed, tmp_path: Path, new_store):
    digest = tiny_image(tmp_path / "a", f"{pushed['ns']}/cut:0.1.0")
    layer = json.loads(blob_file(digest).read_bytes())["layers"][0]["digest"]
    data = blob_file(layer)
    data.write_bytes(data.read_bytes()[:100])
    folder = _lock_copy(pushed, tmp_path, registry_ref=f"{pushed['ns']}/cut", digest=digest)
    assert "bytes, the manifest says" in _refused(pushed, new_store(), folder)


def test_a_refusal_raised_in_process_is_one_line(pushed, tmp_path: Path):
    folder = _lock_copy(pushed, tmp_path, digest="sha256:" + "6" * 64)
    with pytest.raises(InfkitError, match="refused to pull inf-cpu") as info:
        pull_verified(load_lock("inf-cpu", folder))
    assert "\n" not in str(info.value)


@pytest.fixture
def pulled_engine(pushed, tmp_path: Path, new_store):
    """A Docker-API engine whose store holds nothing but the image `make pull` fetched by digest."""
    store = new_store()
    pull = infkit(["images", "pull", "inf-cpu"], pushed["env"] | store)
    assert pull.returncode == 0, pull.stderr
    sock = tmp_path / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"], env=os.environ | store,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        ping = subprocess.run(["curl", "-sf", "--unix-socket", str(sock), "http://d/_ping"], capture_output=True)
        if ping.returncode == 0:
            break
        time.sleep(0.2)
    try:
        yield store | {"DOCKER_HOST": f"unix://{sock}"}
    finally:
        service.terminate()
        service.wait(timeout=60)


def test_mech_budget_runs_from_the_pulled_image_and_audits_with_its_provenance(pushed, pulled_engine):
    root, lock = pushed["root"], _lock(pushed)
    env = pushed["env"] | pulled_engine | {"INFKIT_PULL_ONLY": "1"}
    out = root / "runs" / "mech"
    run = make(["mech-budget", "RUNTIME=docker", "PULL_ONLY=1", "MECH_ARGS=--run-id pulled --quiet"], env, root)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert [i["Digest"] for i in store_images(pulled_engine)] == [lock.digest]  # nothing was built
    (image,) = json.loads((out / "budget" / "pulled" / "run.json").read_text())["images"]
    assert (image["ref"], image["digest"], image["source"]) == (lock.registry_ref, lock.digest, "registry")
    policy = root / "trust.json"
    assert infkit(["keys", "trust", str(policy)], env, cwd=root).returncode == 0
    manifest = "manifests/INF-ITERATION-BUDGET/pulled.intoto.json"

    def audit() -> dict:
        done = infkit(["audit", manifest, "--trust", str(policy), "--json"], env, cwd=root)
        return json.loads(done.stdout)["manifests"][0]

    report = audit()
    assert report["verdict"] == "VALID", report["reasons"]
    assert report["images"][0]["digest"] == lock.digest and report["images"][0]["source"] == "registry"
    (line,) = report["provenance"]
    assert "signed by key" in line and "dependency-lock sha256:" + lock.doc["dependency_lock"]["sha256"][7:19] in line
    provenance = root / lock.doc["image"]["provenance"]
    signed = provenance.read_bytes()
    envelope = json.loads(signed)
    envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"][::-1]
    provenance.write_text(json.dumps(envelope))
    tampered = audit()
    assert tampered["verdict"] == "INVALID" and any(r["check"] == "provenance" for r in tampered["reasons"])
    provenance.unlink()
    assert audit()["provenance"] == ["INF-CPU: no provenance"]
    provenance.write_bytes(signed)
    text = infkit(["audit", manifest, "--trust", str(policy)], env, cwd=root).stdout
    assert "(from the registry)" in text and "provenance INF-CPU: signed by key" in text


def test_an_index_is_locked_pulled_and_checked_through_its_amd64_image(pushed, tmp_path: Path, new_store):
    image_ref, index_ref = f"{pushed['ns']}/one:0.1.0", f"{pushed['ns']}/multi:0.1.0"
    image = tiny_image(tmp_path / "a", image_ref)
    local = f"localhost/infkit-test/index-{tmp_path.name[-12:].lower()}"
    for argv in (["manifest", "create", local], ["manifest", "add", local, f"docker://{image_ref}"],
                 ["manifest", "push", "--all", local, f"docker://{index_ref}"]):
        subprocess.run(["podman", *argv], capture_output=True, text=True, timeout=300, check=True)
    subprocess.run(["podman", "manifest", "rm", local], capture_output=True, timeout=60)
    folder = _lock_copy(pushed, tmp_path, registry_ref=f"{pushed['ns']}/multi", digest=None)
    locked = registry_lock(load_lock("inf-cpu", folder))  # the role label is read from the amd64 image's config
    assert locked.digest == head_digest(index_ref) != image
    write_lock(locked)
    intact = new_store("intact")
    pulled = infkit(["images", "pull", "inf-cpu"], pushed["env"] | intact | {"INFKIT_IMAGE_LOCKS": str(folder)})
    assert pulled.returncode == 0, pulled.stderr
    assert [i["Digest"] for i in store_images(intact)] == [locked.digest]
    layer = json.loads(blob_file(image).read_bytes())["layers"][0]["digest"]
    blob_file(layer).write_bytes(b"cut")
    assert "bytes, the manifest says" in _refused(pushed, new_store(), folder)
