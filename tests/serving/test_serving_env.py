"""The serving venv builder with a tiny spec: stamp, idempotence, partial rebuild, failure message."""

from __future__ import annotations

import json

import pytest

from harness.errors import CapabilityMissing
from harness.runtime.serving_env import (
    STAMP_NAME,
    ServingEnvSpec,
    ensure_serving_env,
    env_path,
    find_serving_env,
)

TINY = ServingEnvSpec(name="tiny", install=(), remove=(), extra=(), no_deps=(), smoke_imports=("json",),
                      smoke_present=("email",))


def test_cache_dir_follows_infkit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INFKIT_CACHE", str(tmp_path))
    assert env_path(TINY).parent == tmp_path / "venvs"
    assert env_path(TINY).name == f"tiny-{TINY.digest()}"
    assert TINY.digest() != ServingEnvSpec(name="tiny", install=("x==1",)).digest()


def test_build_is_idempotent_and_partial_env_is_rebuilt(tmp_path):
    lines: list[str] = []
    env = ensure_serving_env(TINY, root=tmp_path, progress=lines.append)
    assert env.python.exists() and any("ready" in ln for ln in lines)
    stamp = json.loads((env.path / STAMP_NAME).read_text())
    assert stamp["digest"] == TINY.digest() and "pip" in stamp["packages"]
    assert find_serving_env(TINY, root=tmp_path) == env

    lines.clear()
    ensure_serving_env(TINY, root=tmp_path, progress=lines.append)
    assert lines == []  # ready: nothing rebuilt

    (env.path / STAMP_NAME).unlink()  # an interrupted build leaves no stamp
    assert find_serving_env(TINY, root=tmp_path) is None
    ensure_serving_env(TINY, root=tmp_path, progress=lines.append)
    assert any("removing incomplete" in ln for ln in lines)
    assert find_serving_env(TINY, root=tmp_path) is not None


def test_failed_step_names_the_step_and_log(tmp_path):
    broken = ServingEnvSpec(name="broken", install=(), remove=(), extra=(), no_deps=(),
                            smoke_imports=("no_such_module_anywhere",), smoke_present=())
    with pytest.raises(CapabilityMissing, match=r"(?s)import check failed.*no_such_module_anywhere"):
        ensure_serving_env(broken, root=tmp_path, progress=lambda _: None)
    assert find_serving_env(broken, root=tmp_path) is None
