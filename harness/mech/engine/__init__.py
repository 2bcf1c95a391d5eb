"""The simulated serving engine: a deterministic step machine with vLLM v1's scheduling.

``engine`` (the scheduler loop), ``types`` (config, per-request state, records),
``queues`` (waiting-queue policies), ``blocks`` and ``radix`` (KV block pools and
prefix caches), ``costmodel`` (the step-cost model every simulated millisecond comes
from; ``harness.mech.calibrate`` fits it), ``workload`` (simulated requests),
``simulate`` (continuous, static and disaggregated serving) and ``metrics``.
"""
