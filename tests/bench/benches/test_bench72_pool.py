"""bench-72's like-for-like KV pool: the pool the engine reports is compared with the one its share was sized for."""

from __future__ import annotations

from harness.bench.benches.bench72.candidates import GIB, kv_bytes_per_token_of, pool_check
from tests.bench.dry_run_model import write_model


def test_the_engine_pool_is_compared_with_the_estimate_within_a_stated_tolerance(tmp_path):
    model = write_model(tmp_path)
    per_token = kv_bytes_per_token_of(model.path)
    assert per_token == 2 * 30 * 3 * 64 * 2  # SmolLM2: 30 layers, 3 KV heads of 64, bf16
    mapping = {"kv_pool_gib": 8.0}
    exact = int(8 * GIB / per_token)
    assert pool_check(mapping, exact, per_token)["matches"] is True
    short = pool_check(mapping, int(exact * 0.8), per_token)  # e.g. the activation reserve was underestimated
    assert short["matches"] is False and short["ratio"] == 0.8 and short["tolerance"] == 0.10
    assert pool_check(mapping, None, per_token) is None and pool_check(None, exact, per_token) is None
