"""What a container can reach on the host, checked on the container spec the runtime hands the engine
(no engine needed): its own folder as its only read-write mount, a log the host made before the start
and never reopens by path, capabilities dropped, no-new-privileges, a read-only root with tmpfs
caches, no network for commands; and a sign queue that signs nothing outside the container's folder."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.errors import InvalidInput
from harness.runtime.base import ServerSpec
from harness.runtime.docker import CACHE_MOUNT, DockerRuntime, DockerSettings
from harness.runtime.docker_run import run_harness


@dataclass
class FakeImage:
    id: str = "sha256:" + "1" * 64
    tags: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)


class FakeContainer:
    short_id = "c0ffee"
    status = "exited"

    def __init__(self, output: bytes):
        self.output = output

    def logs(self, stream: bool = False, **_):
        return iter([self.output]) if stream else self.output

    def reload(self):
        pass

    def wait(self, timeout=None):
        return {"StatusCode": 0}

    def kill(self, signal=None):
        pass

    def remove(self, force=False):
        pass


class FakeApi:
    """Just enough of the SDK: the image is present, and ``containers.run`` keeps what it was given."""

    def __init__(self, output: bytes = b"server says hello\n"):
        self.runs: list[dict] = []
        self.output = output
        api = self

        class Images:
            def get(self, ref):
                return FakeImage(tags=[ref])

        class Containers:
            def run(self, image, **kwargs):
                api.runs.append(kwargs)
                return FakeContainer(api.output)

        self.images, self.containers = Images(), Containers()


def start_server(tmp_path: Path, api: FakeApi, name: str = "server-a.log"):
    servers = tmp_path / "run" / "servers"
    servers.mkdir(parents=True, exist_ok=True)
    runtime = DockerRuntime(DockerSettings(), api=api, notify=lambda line: None)
    handle = runtime.start(ServerSpec(argv=("python3", "-m", "http.server", "8000"), port=8000, role="inf-cpu"),
                           servers, log_name=name)
    handle._pump.join(timeout=5)
    return servers, handle


def test_a_planted_log_link_is_never_followed_or_read(tmp_path):
    secret = tmp_path / "host-file"
    secret.write_text("host secret\n")
    servers = tmp_path / "run" / "servers"
    servers.mkdir(parents=True)
    (servers / "server-a.log").symlink_to(secret)  # what a container sharing servers/ could plant
    servers, handle = start_server(tmp_path, FakeApi())
    assert secret.read_text() == "host secret\n"  # nothing appended through the link
    assert handle.log_path != servers / "server-a.log" and not handle.log_path.is_symlink()
    assert handle.log_path.read_text() == "server says hello\n"
    assert "host secret" not in handle.log_tail() and "server says hello" in handle.log_tail()


def test_the_log_is_read_through_the_descriptor_kept_at_creation(tmp_path):
    servers, handle = start_server(tmp_path, FakeApi())
    elsewhere = tmp_path / "other"
    elsewhere.write_text("another file\n")
    handle.log_path.unlink()
    handle.log_path.symlink_to(elsewhere)  # swapped after the start: the tail still reads the server's own log
    assert handle.log_tail() == "server says hello"


def test_each_server_container_gets_its_own_folder_as_its_only_writable_mount(tmp_path):
    api = FakeApi()
    servers, a = start_server(tmp_path, api, "server-a.log")
    _, b = start_server(tmp_path, api, "server-b.log")
    writable = [[(host, v["bind"]) for host, v in run["volumes"].items() if v["mode"] == "rw"] for run in api.runs]
    assert writable == [[(str(servers / "server-a"),) * 2], [(str(servers / "server-b"),) * 2]]
    assert all(str(servers) not in run["volumes"] for run in api.runs)  # the logs' folder is mounted nowhere
    assert a.log_path.parent == servers and (servers / "server-a").is_dir()


def test_server_containers_are_confined_and_say_so(tmp_path):
    api = FakeApi()
    _, handle = start_server(tmp_path, api)
    (run,) = api.runs
    assert run["cap_drop"] == ["ALL"]
    assert run["security_opt"] == ["no-new-privileges"]
    assert run["read_only"] is True
    assert set(run["tmpfs"]) == {"/tmp", CACHE_MOUNT}
    assert all(v["bind"] != CACHE_MOUNT for v in run["volumes"].values())  # no cache shared across runs
    assert handle.confinement["tmpfs"] == run["tmpfs"]  # servers.json records the options the engine got
    record = handle.confinement
    assert record["capabilities"] == "all dropped" and record["no_new_privileges"] and record["read_only_root"]
    assert record["network"] == "bridge" and any("egress" in e for e in record["exceptions"])
    json.dumps(record)  # servers.json can hold it


def test_a_harness_command_has_no_network_and_its_log_is_made_by_the_host(tmp_path):
    api = FakeApi(b"command output\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (run_dir / "container.log").symlink_to(outside)  # left behind by an earlier container of this folder
    outcome = run_harness("inf-cpu", ["fingerprint"], run_dir, api=api, settings=DockerSettings())
    (run,) = api.runs
    assert run["network_mode"] == "none" and run["cap_drop"] == ["ALL"] and run["read_only"] is True
    assert [v for v in run["volumes"].values() if v["mode"] == "rw"] == [{"bind": str(run_dir), "mode": "rw"}]
    assert outside.read_text() == "keep"
    assert outcome.output == "command output\n" and outcome.log_path.read_text() == "command output\n"


def test_the_writable_root_exception_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("INFKIT_CONTAINER_WRITABLE_ROOT", "1")
    api = FakeApi()
    _, handle = start_server(tmp_path, api)
    assert api.runs[0]["read_only"] is False
    assert any("INFKIT_CONTAINER_WRITABLE_ROOT" in e for e in handle.confinement["exceptions"])


# --- the sign queue a container writes ---------------------------------------------------------------


@pytest.fixture
def host_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INFKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("INFKIT_SIGNING_KEY_PEM", raising=False)
    monkeypatch.delenv("INFKIT_TRUST_POLICY", raising=False)


def finished_run(parent: Path, run_id: str) -> Path:
    from harness.rundir.directory import RunDirectory

    rd = RunDirectory.create(parent, semantic_id="INF-ITERATION-BUDGET", run_label="t", requested={}, run_id=run_id,
                             sign=False, root=parent)
    return rd.finish(summary="s", result=None, evidence_level="precheck", decision="blocked").path


def test_the_queue_signs_a_run_inside_the_mounted_folder(tmp_path, host_key):
    from harness.rundir.directory import sign_queued

    mount = tmp_path / "mount"
    run = finished_run(mount, "r1")
    queue = mount / ".sign-queue-x"
    queue.write_text(f"{run}\n")
    (manifest,) = sign_queued(queue, tmp_path)
    assert manifest == tmp_path / "manifests/INF-ITERATION-BUDGET/r1.intoto.json" and not queue.exists()


def test_the_queue_never_signs_another_run_under_the_root(tmp_path, host_key):
    from harness.rundir.directory import sign_queued

    other = finished_run(tmp_path / "runs", "victim")  # a run under the root, outside the container's folder
    mount = tmp_path / "mount"
    mount.mkdir()
    queue = mount / ".sign-queue-x"
    queue.write_text(f"{other}\n")
    with pytest.raises(InvalidInput, match="outside the folder the container was given"):
        sign_queued(queue, tmp_path)
    assert not (tmp_path / "manifests").exists()


def test_the_queue_follows_no_link(tmp_path, host_key):
    from harness.rundir.directory import sign_queued

    other = finished_run(tmp_path / "runs", "victim")
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "alias").symlink_to(other)  # a path inside the folder that leads out of it
    queue = mount / ".sign-queue-x"
    queue.write_text(f"{mount / 'alias'}\n")
    with pytest.raises(InvalidInput, match="is a link or not a folder"):
        sign_queued(queue, tmp_path)
    inside = finished_run(mount, "r2")
    (inside / "stolen.json").symlink_to(other / "run.json")  # a link to another run's file, signed as its own
    queue.write_text(f"{inside}\n")
    with pytest.raises(InvalidInput, match="a run written in a container may hold none"):
        sign_queued(queue, tmp_path)
    link_queue = mount / ".sign-queue-y"
    link_queue.symlink_to(tmp_path / "runs" / "elsewhere.txt")
    assert sign_queued(link_queue, tmp_path) == []
    assert not (tmp_path / "manifests").exists()



def mount_options(text: str) -> set[str]:
    return set(text.split(","))


def test_the_cache_tmpfs_says_exec_and_tmp_says_noexec_so_both_engines_mount_them_alike(tmp_path):
    """Docker Engine starts a tmpfs from noexec,nosuid,nodev and merges the options given: a cache tmpfs that does
    not say ``exec`` stays noexec there, and Triton cannot ``dlopen`` the launcher it compiles into its cache."""
    api = FakeApi()
    _, handle = start_server(tmp_path, api)
    (run,) = api.runs
    cache, tmp = mount_options(run["tmpfs"][CACHE_MOUNT]), mount_options(run["tmpfs"]["/tmp"])
    assert {"rw", "exec", "nosuid", "nodev"} <= cache and "noexec" not in cache
    assert {"rw", "noexec", "nosuid", "nodev"} <= tmp and "exec" not in tmp
    env = run["environment"]
    for name in ("HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME"):  # all on the exec tmpfs
        assert env[name] == CACHE_MOUNT or env[name].startswith(CACHE_MOUNT + "/"), name
