"""Servers the user runs: one endpoint per server variant (``--server NAME=URL``), each checked before any measurement.

``check_endpoint`` asks the server what it serves (``GET /v1/models``: the served name, the checkpoint
directory it reports as ``root``, its context length) and which release it is (``GET /version``), and refuses
one that does not answer or serves another model, in one line. ``verify`` then reads its effective
configuration where the engine exposes it (vLLM ``/server_info`` in dev mode, else the labels of
``vllm:cache_config_info`` on ``/metrics``; SGLang ``/get_server_info``), compares the variant's ``expect``
with it and says, per setting, what was checked, what differs (field, expected, found) and what could not be
read. What the kit cannot do to a server it did not start is part of the answer: it never restarts one, and
resets its prefix cache only where the engine offers a reset endpoint (vLLM with ``VLLM_SERVER_DEV_MODE=1``,
SGLang's ``/flush_cache``). ``given_session`` makes such a server a ``ServerSession`` whose handle owns no
process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import Backend, BackendConfig, lookup
from harness.backends.cache_reset import CacheReset, post
from harness.errors import InvalidInput
from harness.runtime.external import ExternalHandle
from harness.serving.session import ServerSession

URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?(/[\w.~\-/]*)?$")
CHECK_TIMEOUT_S = 10.0


def from_file(item: str) -> list[str]:
    """A file mapping variant names to endpoints (``{"cache-on": "http://h:8001", ...}``) as ``VARIANT=URL`` items;
    any other value is itself."""
    path = Path(item)
    if "=" in item or not path.is_file():
        return [item]
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(f"--server {item}: not a JSON file ({exc})") from None
    if not isinstance(doc, dict) or not doc or not all(isinstance(v, str) for v in doc.values()):
        raise InvalidInput(f"--server {item}: expected a JSON object of variant names to URLs",
                           hint='e.g. {"cache-on": "http://127.0.0.1:8001"}')
    return [f"{name}={url}" for name, url in doc.items()]


def parse_endpoints(values: Sequence[str]) -> dict[str, str]:
    """``("cache-on=http://h:8001", ...)`` (or a file of them, ``from_file``) as {variant: base URL}; a malformed or
    repeated entry is an input error."""
    out: dict[str, str] = {}
    for item in (entry for value in values for entry in from_file(value)):
        name, sep, url = item.partition("=")
        name, url = name.strip(), url.strip().rstrip("/")
        if not sep or not name or not URL.match(url):
            raise InvalidInput(f"--server {item!r}: expected VARIANT=http://HOST:PORT",
                               hint="e.g. --server cache-on=http://127.0.0.1:8001")
        if url.endswith("/v1"):
            url = url[:-3]  # the OpenAI base URL people copy: the kit adds /v1/... itself
        if name in out:
            raise InvalidInput(f"--server {name}: given twice ({out[name]} and {url})")
        out[name] = url
    return out


@dataclass(frozen=True)
class Served:
    """What an endpoint says it serves."""

    url: str
    names: tuple[str, ...]  # GET /v1/models ids
    root: str | None  # the checkpoint directory the engine reports (vLLM), if any
    max_model_len: int | None
    version: str | None  # GET /version, if the engine has it


def _get_json(url: str) -> tuple[int, Any]:
    status, text = post(url, CHECK_TIMEOUT_S, method="GET")
    try:
        return status, json.loads(text) if status == 200 else text
    except ValueError:
        return status, None


def check_endpoint(variant: str, url: str, served_name: str | None) -> Served:
    """The endpoint answers ``GET /v1/models`` and serves ``served_name`` (None: any model); else a one-line input
    error."""
    status, doc = _get_json(url + "/v1/models")
    if status == 0:
        raise InvalidInput(f"--server {variant}={url}: nothing answers there ({doc})",
                           hint="start the server first, or leave --server out to let the kit start it")
    models = doc.get("data") if isinstance(doc, dict) else None
    if status != 200 or not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise InvalidInput(f"--server {variant}={url}: GET /v1/models answered {status}, not an OpenAI model list")
    names = tuple(str(m.get("id")) for m in models)
    if served_name is not None and served_name not in names:
        raise InvalidInput(f"--server {variant}={url} serves {', '.join(names) or 'no model'} (GET /v1/models), "
                           f"not {served_name}", hint=f"serve the run's model as {served_name} "
                           f"(--served-model-name {served_name}), or name the served model with --model")
    entry = next((m for m in models if m.get("id") == served_name), models[0] if models else {})
    _, version = _get_json(url + "/version")
    length = entry.get("max_model_len")
    return Served(url, names, entry.get("root") if isinstance(entry.get("root"), str) else None,
                  length if isinstance(length, int) else None,
                  str(version.get("version")) if isinstance(version, dict) and version.get("version") else None)


def same_model(served: Mapping[str, Served], model_dir: str) -> str:
    """How every endpoint was matched to the run's model; endpoints reporting different checkpoints are refused."""
    roots = {name: s.root for name, s in served.items() if s.root}
    if len(set(roots.values())) > 1:
        shown = ", ".join(f"{n} serves {r}" for n, r in roots.items())
        raise InvalidInput(f"--server: the endpoints serve different checkpoints ({shown})")
    if roots and len(roots) == len(served) and Path(next(iter(roots.values()))).resolve() == Path(model_dir).resolve():
        return f"every endpoint reports the run's checkpoint directory {model_dir} (GET /v1/models root)"
    return "the served model name (GET /v1/models); the checkpoint behind it could not be compared with the run's"


@dataclass(frozen=True)
class Verification:
    """What was checked of a given server before measuring, and what the kit cannot do to it."""

    variant: str
    url: str
    served: Served
    effective: dict[str, Any] | None
    source: str | None
    checked: dict[str, Any] = field(default_factory=dict)  # expect key -> the value found (equal to expected)
    mismatched: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # expect key -> (expected, found)
    unverified: tuple[str, ...] = ()  # expect keys the engine does not expose
    reset: CacheReset | None = None  # the reset tried before measuring (None: the protocol needs none)
    cannot: tuple[str, ...] = ()  # what the kit cannot do to this server, in words

    def mismatch(self) -> str | None:
        """One line naming each setting that differs (field, expected, found), or None."""
        if not self.mismatched:
            return None
        parts = [f"{k} expected {want!r}, found {got!r}" for k, (want, got) in self.mismatched.items()]
        return f"server {self.variant} at {self.url}: {'; '.join(parts)} (read by {self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"endpoint": self.url, "served_model_names": list(self.served.names), "root": self.served.root,
                "max_model_len": self.served.max_model_len, "version": self.served.version,
                "effective_source": self.source, "checked": self.checked,
                "mismatched": {k: {"expected": w, "found": g} for k, (w, g) in self.mismatched.items()},
                "unverified": list(self.unverified), "prefix_cache_reset": self.reset.to_dict() if self.reset else None,
                "kit_cannot": list(self.cannot)}


def verify(variant: str, served: Served, backend: Backend, expect: Mapping[str, Any], *, reset: bool) -> Verification:
    """Read the server's effective configuration, hold ``expect`` to it, and (``reset``: the protocol resets the
    prefix cache before every arm run) try one reset now, so a server that offers none is known before measuring."""
    doc, source = backend.read_effective(served.url)
    found = {k: lookup(doc, k) for k in expect} if doc is not None else {}
    checked = {k: v for k, v in found.items() if v is not None and v == expect[k]}
    mismatched = {k: (expect[k], v) for k, v in found.items() if v is not None and v != expect[k]}
    unverified = tuple(k for k in expect if found.get(k) is None)
    cannot = ["restart it: the kit did not start it"]
    outcome = backend.reset_prefix_cache(served.url) if reset else None
    if outcome is not None and not outcome.requested:
        cannot.append(f"reset its prefix cache: it offers no reset ({outcome.evidence}); a vLLM server offers one "
                      "with VLLM_SERVER_DEV_MODE=1 in its environment")
    return Verification(variant, served.url, served, doc, source, checked, mismatched, unverified, outcome,
                        tuple(cannot))


@contextmanager
def given_session(name: str, backend: Backend, config: BackendConfig, verification: Verification, log_dir: Path, *,
                  progress: Callable[[str], None] = print,
                  on_start: Callable[[ServerSession], None] | None = None,
                  on_stop: Callable[[ServerSession], None] | None = None) -> Iterator[ServerSession]:
    """A ``ServerSession`` on a server the user runs: checked healthy, never stopped."""
    handle = ExternalHandle(verification.url, log_dir / f"server-{name}.log")
    handle.note(f"server {name}: given at {verification.url}, not started by the kit; checked before measuring: "
                f"{json.dumps(verification.to_dict(), sort_keys=True, default=str)}")
    handle.wait_healthy(CHECK_TIMEOUT_S)
    session = ServerSession(name=name, backend=backend, handle=handle, config=config, command=[], env={},
                            startup_s=0.0, given=verification.url, engine_version=verification.served.version,
                            verification=verification.to_dict())
    progress(f"server {name}: using {verification.url} (given; the kit does not start or stop it)")
    try:
        if on_start:
            on_start(session)
        yield session
    finally:
        handle.note(f"server {name}: no longer used by this run (left running)")
        if on_stop:
            on_stop(session)
