"""GPU= through the one runner: the devices and memory shares it places reach each server and servers.json."""

from __future__ import annotations

import io
import json

from harness.bench import placement as placement_mod
from harness.bench import runner as runner_mod
from harness.progress import Reporter
from harness.runtime.base import ServerSpec
from tests.bench.test_bench_runner import SPEC, Config, FakeBackend
from tests.bench.test_bench_runner import bench_env as _bench_env  # noqa: F401 (registers the fixture)


class FakeGpuBackend(FakeBackend):
    """The stand-in engine under a GPU backend's name: what it is started with is what the runner placed."""

    name = "vllm"
    seen: list[ServerSpec] = []

    def server_spec(self, cfg):
        spec = super().server_spec(cfg)
        spec = ServerSpec(argv=(*spec.argv, "--gpu-memory-utilization", str(cfg.gpu_memory_utilization)),
                          port=spec.port, env=spec.env, gpus=cfg.gpus)
        self.seen.append(spec)
        return spec


def test_three_co_resident_servers_on_gpu_2_split_it_and_servers_json_records_it(bench_env, monkeypatch):
    backend = FakeGpuBackend()
    monkeypatch.setattr(runner_mod, "get_backend", lambda name: backend)
    monkeypatch.setattr(placement_mod, "get_backend", lambda name: backend)
    monkeypatch.setattr(placement_mod, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(placement_mod, "docker_engine_present", lambda: True)
    cfg = Config(gpu="2", backend="vllm", runtime="local", repeats=1, warmup_requests=0, resamples=300)
    outcome = runner_mod.run_bench(SPEC, cfg, root=bench_env, reporter=Reporter(io.StringIO(), every_s=60))
    started = {s.gpus for s in backend.seen}
    assert started == {(2,)}  # the old runner left gpus empty and the GPU backends defaulted to GPU 0
    servers = json.loads((outcome.run_dir / "servers" / "servers.json").read_text())["servers"]
    assert {s["name"]: (s["settings"]["gpus"], s["settings"]["gpu_memory_utilization"]) for s in servers} == {
        name: ([2], 0.3) for name in ("slow", "fast", "exotic")}  # three up at once: 0.9 / 3 each
