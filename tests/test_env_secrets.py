"""Secrets never reach a run: secret-like names are dropped and every kept value loses URL credentials,
in the fingerprint (signed, shown by report) and in a server's communication settings."""

from __future__ import annotations

import pytest

from harness.backends.comm import comm_env
from harness.contract.secrets import scrub_value
from harness.rundir import fingerprint


@pytest.mark.parametrize("name", ["HF_PASS", "RAY_DB_PWD", "VLLM_S3_CREDS", "INFKIT_KEY_PASSPHRASE", "HF_PASSWORD",
                                  "NCCL_AUTH_FILE", "TORCH_PRIVATE_DIR", "VLLM_BEARER"])
def test_secret_like_names_never_pass(name):
    assert fingerprint.allowed_env({name: "s3cret", "OMP_NUM_THREADS": "2"}) == {"OMP_NUM_THREADS": "2"}


@pytest.mark.parametrize("value, clean", [
    ("https://user:secret@hf.example/models", "https://hf.example/models"),
    ("ray://admin:secret@10.0.0.1:10001", "ray://10.0.0.1:10001"),
    ("https://token@host/x?a=1", "https://host/x?a=1"),
    ("https://host/x?access_token=abc&rev=main", "https://host/x?access_token=<redacted>&rev=main"),
    ("http://host/?sig=deadbeef", "http://host/?sig=<redacted>"),
    ("https://mirror.example/simple", "https://mirror.example/simple"),
    ("4", "4"),
])
def test_url_credentials_are_stripped_from_values(value, clean):
    assert scrub_value(value) == clean


def test_every_captured_environment_is_scrubbed():
    env = {"HF_ENDPOINT": "https://user:secret@hf.example/", "RAY_ADDRESS": "ray://admin:secret@head:10001",
           "NCCL_DEBUG": "INFO"}
    for captured in (fingerprint.allowed_env(env), comm_env(env)):
        assert "secret" not in repr(captured), captured
    assert fingerprint.allowed_env(env)["HF_ENDPOINT"] == "https://hf.example/"
    assert comm_env(env)["RAY_ADDRESS"] == "ray://head:10001"
