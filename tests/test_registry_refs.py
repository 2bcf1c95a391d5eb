"""The registry client's parts that need no registry: references, registries.conf, mirrors, bad input, and the
token handshake (a small HTTP front, the one client edge case a local Distribution registry does not show)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.errors import InvalidInput
from harness.ids import sha256_bytes
from harness.images.registry import (
    NotInRegistry,
    Reference,
    api_base,
    insecure_registries,
    tag_digest,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text, host, repository, tag, digest", [
    ("debian:bookworm-slim", "docker.io", "library/debian", "bookworm-slim", None),
    ("docker.io/library/debian:bookworm-slim", "docker.io", "library/debian", "bookworm-slim", None),
    ("pytorch/pytorch:2.8.0", "docker.io", "pytorch/pytorch", "2.8.0", None),
    ("127.0.0.1:5000/infkit/inf-cpu:0.1.0", "127.0.0.1:5000", "infkit/inf-cpu", "0.1.0", None),
    (f"ghcr.io/o/inf-cpu@{DIGEST}", "ghcr.io", "o/inf-cpu", None, DIGEST),
    ("localhost/infkit/inf-cpu:0.1.0", "localhost", "infkit/inf-cpu", "0.1.0", None),
])
def test_reference_parse(text, host, repository, tag, digest):
    ref = Reference.parse(text)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (host, repository, tag, digest)


def test_a_mirror_keeps_the_upstream_name():
    upstream = Reference.parse("debian:bookworm-slim")
    assert str(upstream.on_mirror("127.0.0.1:5000")) == "127.0.0.1:5000/library/debian:bookworm-slim"
    assert str(upstream.on_mirror("127.0.0.1:5000/m")) == "127.0.0.1:5000/m/library/debian:bookworm-slim"


def test_a_bad_digest_is_a_user_error():
    with pytest.raises(InvalidInput, match="not sha256"):
        Reference.parse("ghcr.io/o/r@sha256:xyz")


def test_plain_http_only_for_registries_marked_insecure(tmp_path: Path, monkeypatch):
    conf = tmp_path / "registries.conf"
    conf.write_text('unqualified-search-registries = []\n\n[[registry]]\nlocation = "127.0.0.1:5000"\n'
                    'insecure = true  # loopback only\n\n[[registry]]\nlocation = "ghcr.io"\ninsecure = false\n')
    assert insecure_registries(str(conf)) == {"127.0.0.1:5000"}
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
    assert api_base("127.0.0.1:5000") == "http://127.0.0.1:5000/v2"
    assert api_base("127.0.0.1:5001") == "https://127.0.0.1:5001/v2"
    assert api_base("docker.io") == "https://registry-1.docker.io/v2"
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(tmp_path / "missing.conf"))
    assert api_base("127.0.0.1:5000").startswith("https://")


@pytest.mark.parametrize("argv, message", [
    (["images", "push", "inf-cpu", "--registry", "Not A Host"], "is not host[:port][/namespace]"),
    (["images", "lock-base", "inf-cpu", "--registry", "bad host"], "is not host[:port][/namespace]"),
])
def test_cli_bad_registry_is_one_line(argv, message, capsys):
    from harness.cli import main

    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


class _TokenRegistry(BaseHTTPRequestHandler):
    """A registry front that wants a bearer token, as GHCR and Docker Hub do; the token needs the stored login."""

    body = b'{"schemaVersion": 2}'

    def do_GET(self):  # noqa: N802 (http.server's naming)
        host = self.headers["Host"]
        if self.path.startswith("/token?"):
            ok = self.headers.get("Authorization") == "Basic " + base64.b64encode(b"u:secret").decode()
            self._reply(200 if ok else 403, b'{"token": "t0k"}' if ok else b"{}")
        elif self.headers.get("Authorization") != "Bearer t0k":
            self._reply(401, b"{}", {"WWW-Authenticate": f'Bearer realm="http://{host}/token",service="{host}",'
                                                          'scope="repository:o/r:pull"'})
        else:
            self._reply(200, self.body, {"Docker-Content-Digest": sha256_bytes(self.body)})

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_token_registry_is_answered_with_the_stored_login(tmp_path: Path, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_port}"
    try:
        conf = tmp_path / "registries.conf"
        conf.write_text(f'[[registry]]\nlocation = "{host}"\ninsecure = true\n')
        monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
        auth = tmp_path / "auth.json"
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.delenv("DOCKER_CONFIG", raising=False)
        with pytest.raises(NotInRegistry, match="HTTP 401"):  # no login stored: the token is refused
            tag_digest(Reference.parse(f"{host}/o/r:1"))
        auth.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(b"u:secret").decode()}}}))
        assert tag_digest(Reference.parse(f"{host}/o/r:1")) == sha256_bytes(_TokenRegistry.body)
    finally:
        server.shutdown()
