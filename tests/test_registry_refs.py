"""The registry client's parts that need no registry: references, registries.conf, mirrors, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import InvalidInput
from harness.images.registry import Reference, api_base, insecure_registries

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
