"""What a registry says, asked over its own HTTP API (the OCI distribution spec).

Digests come from the registry, never from the local engine: a tag's manifest digest is the
``Docker-Content-Digest`` the registry answers with, and it must equal the sha256 of the bytes
it served. The same client reads a pushed image's config (its labels) and checks that every
blob a manifest names is served at its declared size. On a 401 it fetches a bearer token,
anonymous (Docker Hub, public GHCR packages) or for the login ``podman login`` / ``docker login``
stored (auth.json, ~/.docker/config.json), so a private package needs nothing more. Plain HTTP
is used only for a registry that the containers ``registries.conf`` (``$CONTAINERS_REGISTRIES_CONF``)
marks ``insecure``, the file podman reads too.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CapabilityMissing, InfkitError, InvalidInput
from harness.ids import sha256_bytes

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
TIMEOUT_S = 60
MAX_MANIFEST_BYTES = 4 << 20


class RegistryRefusal(InfkitError):
    """The registry answered, but with something other than what the lock or the caller requires."""


class NotInRegistry(CapabilityMissing):
    """The registry does not hold (or will not show) the manifest asked for."""


@dataclass(frozen=True)
class Reference:
    """``host/repository`` plus a tag or a digest (``docker.io/library/x:t``, ``127.0.0.1:5000/infkit/r@sha256:…``)."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, ref: str) -> Reference:
        name, _, digest = ref.partition("@")
        head, _, last = name.rpartition("/")
        tag = None
        if ":" in last:
            last, tag = last.rsplit(":", 1)
        name = f"{head}/{last}" if head else last
        first, _, rest = name.partition("/")
        if not rest or ("." not in first and ":" not in first and first != "localhost"):
            first, rest = DOCKER_HUB, name  # Docker Hub's short form
        if first == DOCKER_HUB and "/" not in rest:
            rest = f"library/{rest}"
        if digest and not DIGEST.match(digest):
            raise InvalidInput(f"{ref}: the digest is not sha256:<64 hex>")
        return cls(first, rest, tag, digest or None)

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}"

    def on_mirror(self, prefix: str) -> Reference:
        """The same repository and tag under ``host[:port][/namespace]`` (a mirror holding the upstream name)."""
        host, _, namespace = prefix.partition("/")
        repository = f"{namespace}/{self.repository}" if namespace else self.repository
        return Reference(host, repository, self.tag, self.digest)

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def insecure_registries(path: str | None = None) -> frozenset[str]:
    """Registry locations ``registries.conf`` marks ``insecure`` (plain HTTP).

    Only ``[[registry]]`` tables' ``location`` and ``insecure`` keys matter here, so a line reader
    does (``tomllib`` is not in Python 3.10).
    """
    conf = Path(path or os.environ.get("CONTAINERS_REGISTRIES_CONF") or "/etc/containers/registries.conf")
    try:
        lines = conf.read_text().splitlines()
    except OSError:
        return frozenset()
    found: set[str] = set()
    location, insecure = None, False
    for line in [*lines, "[[registry]]"]:
        line = line.split("#", 1)[0].strip()
        if line.startswith("["):
            if location and insecure:
                found.add(location)
            location, insecure = None, False
        elif m := re.fullmatch(r'location\s*=\s*"([^"]*)"', line):
            location = m.group(1)
        elif re.fullmatch(r"insecure\s*=\s*true", line):
            insecure = True
    return frozenset(found)


def api_base(host: str) -> str:
    scheme = "http" if host in insecure_registries() else "https"
    return f"{scheme}://{DOCKER_HUB_API if host == DOCKER_HUB else host}/v2"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _open(url: str, method: str, headers: dict[str, str]) -> Answer:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            body = resp.read(MAX_MANIFEST_BYTES + 1) if method == "GET" else b""
            return Answer(resp.status, {k.lower(): v for k, v in resp.headers.items()}, body)
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read(4096))
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CapabilityMissing(f"cannot reach the registry at {url.split('/v2/')[0]}: {reason}") from None


def credentials(host: str) -> str | None:
    """``user:token`` (base64) that ``podman login`` / ``docker login`` stored for ``host``, if any."""
    home = Path.home()
    candidates = [os.environ.get("REGISTRY_AUTH_FILE"),
                  os.environ.get("XDG_RUNTIME_DIR") and f"{os.environ['XDG_RUNTIME_DIR']}/containers/auth.json",
                  str(home / ".config/containers/auth.json"),
                  str(Path(os.environ.get("DOCKER_CONFIG") or home / ".docker") / "config.json")]
    for path in filter(None, candidates):
        try:
            auths = json.loads(Path(path).read_text()).get("auths") or {}
        except (OSError, ValueError, AttributeError):
            continue
        entry = auths.get(host) or auths.get(f"https://{host}") or {}
        if isinstance(entry, dict) and entry.get("auth"):
            return entry["auth"]
    return None


def _authorization(challenge: str, host: str) -> str | None:
    """The header answering a 401: a bearer token (anonymous, or for the stored login) or basic auth."""
    basic = credentials(host)
    if challenge.lower().startswith("basic"):
        return f"Basic {basic}" if basic else None
    if not challenge.lower().startswith("bearer "):
        return None
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", None)
    if not realm:
        return None
    login = {"Authorization": f"Basic {basic}"} if basic else {}
    answer = _open(f"{realm}?{urllib.parse.urlencode(params)}", "GET", login)
    if answer.status != 200:
        return None
    doc = json.loads(answer.body or b"{}")
    token = doc.get("token") or doc.get("access_token")
    return f"Bearer {token}" if token else None


def request(ref: Reference, path: str, method: str = "GET", accept: tuple[str, ...] = MANIFEST_TYPES) -> Answer:
    url = f"{api_base(ref.host)}/{ref.repository}/{path}"
    headers = {"Accept": ", ".join(accept)}
    answer = _open(url, method, headers)
    if answer.status == 401 and (auth := _authorization(answer.headers.get("www-authenticate", ""), ref.host)):
        answer = _open(url, method, headers | {"Authorization": auth})
    return answer


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.body)


def manifest(ref: Reference) -> Manifest:
    """The manifest the registry serves for ``ref``'s digest (preferred) or tag, checked against its bytes."""
    wanted = ref.digest or ref.tag or "latest"
    answer = request(ref, f"manifests/{wanted}")
    if answer.status != 200:
        raise NotInRegistry(f"{ref}: the registry has no such manifest (HTTP {answer.status})")
    if len(answer.body) > MAX_MANIFEST_BYTES:
        raise RegistryRefusal(f"{ref}: the manifest is larger than {MAX_MANIFEST_BYTES >> 20} MiB")
    served = sha256_bytes(answer.body)
    reported = answer.headers.get("docker-content-digest", served)
    if reported != served:
        raise RegistryRefusal(f"{ref}: the registry reports {reported} but serves a manifest whose sha256 is {served}")
    if ref.digest and served != ref.digest:
        raise RegistryRefusal(f"{ref}: the registry serves a different manifest for this digest (sha256 {served})")
    return Manifest(served, answer.headers.get("content-type", ""), answer.body)


def tag_digest(ref: Reference) -> str:
    """The manifest digest the registry holds under ``ref``'s tag (asked of the registry, nothing pulled)."""
    if ref.digest:
        raise InvalidInput(f"{ref}: expected a tag, not a digest")
    return manifest(ref).digest


def platform_manifest(ref: Reference, found: Manifest) -> tuple[Reference, Manifest]:
    """An index's linux/amd64 image manifest (attestation entries are ``unknown/unknown``); an image's own."""
    entries = found.doc.get("manifests")
    if entries is None:
        return ref, found
    amd64 = [m for m in entries if (m.get("platform") or {}).get("architecture", "amd64") == "amd64"]
    if not amd64:
        raise RegistryRefusal(f"{ref}: the index has no linux/amd64 image")
    child = Reference(ref.host, ref.repository, digest=amd64[0]["digest"])
    return child, manifest(child)


def image_config(ref: Reference) -> dict[str, Any]:
    """The pushed image's config (labels, created) for ``ref``; an index resolves to its linux/amd64 entry."""
    ref, found = platform_manifest(ref, manifest(ref))
    config = found.doc["config"]
    answer = request(ref, f"blobs/{config['digest']}", accept=("*/*",))
    if answer.status != 200 or sha256_bytes(answer.body) != config["digest"]:
        raise RegistryRefusal(f"{ref}: the registry does not serve the image config {config['digest']} intact")
    return json.loads(answer.body)


def blob_problems(ref: Reference, found: Manifest) -> list[str]:
    """Blobs of the (linux/amd64) image the registry does not serve at their declared size."""
    ref, found = platform_manifest(ref, found)
    doc = found.doc
    problems = []
    for blob in [doc["config"], *doc.get("layers", [])]:
        answer = request(ref, f"blobs/{blob['digest']}", method="HEAD", accept=("*/*",))
        size = answer.headers.get("content-length")
        if answer.status != 200:
            problems.append(f"blob {blob['digest']} is missing (HTTP {answer.status})")
        elif size is not None and int(size) != int(blob["size"]):
            problems.append(f"blob {blob['digest']} is {size} bytes, the manifest says {blob['size']} (truncated)")
    return problems
