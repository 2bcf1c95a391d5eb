"""Budget sweep: measured KV bytes, caught OOM under an injected allocator limit, recovery."""

from __future__ import annotations

from harness.cuda.budget import forward_step, kv_cache_bytes
from harness.cuda.models import random_llama
from harness.models.shapes import kv_bytes_per_token_heads


def test_measured_kv_bytes_equal_formula(torch):
    model = random_llama("tiny", seed=0, device="cpu")
    ids = torch.randint(0, 100, (3, 17))
    with torch.no_grad():
        cache, _ = forward_step(model, ids)
    c = model.config
    assert kv_cache_bytes(cache) == 3 * 17 * kv_bytes_per_token_heads(c.num_hidden_layers, c.num_key_value_heads,
                                                                      c.head_dim, 4)


def test_injected_cap_gives_boundary_and_recovers(run_cuda, valid):
    # tiny model, float32: prefill live bytes ~ 1.5 KiB per token at batch 2 -> a 1.5 MB cap stops (2, 256)
    out = run_cuda("budget", arch="tiny", batches=(1, 2, 4), contexts=(64, 128, 256), iters=2, warmup=1,
                   memory_cap_bytes=1_500_000)
    valid(out.run_dir / "result.json")
    valid(out.run_dir / "run.json")
    cells = {(c["batch"], c["context"]): c for c in out.result["details"]["cells"]}
    oom = [k for k, c in cells.items() if c["status"] == "oom"]
    assert oom, "the cap must stop at least one cell"
    for key in oom:
        assert cells[key]["recovered"] is True and cells[key]["memory_not_returned_bytes"] == 0
    for (b, c), cell in cells.items():
        beyond = any(b >= ob and c >= oc for ob, oc in oom) and (b, c) not in oom
        assert (cell["status"] == "skipped") == beyond
        if cell["status"] == "ok":
            assert cell["peak_memory_bytes"] <= 1_500_000
            assert cell["step_ms"]["n"] == 2
    bound = out.result["details"]["boundary"]
    assert bound["oom_seen"] and bound["largest_fitting"] is not None
    assert out.result["details"]["kv_bytes_match_formula"] is True
    assert out.result["conclusion"]["failure"] is None  # every OOM was caught and recovered


def test_cap_below_the_smallest_cell_reports_instead_of_crashing(run_cuda, valid):
    out = run_cuda("budget", arch="tiny", batches=(1, 2), contexts=(32, 64), iters=1, warmup=0, memory_cap_bytes=1000)
    valid(out.run_dir / "result.json")
    statuses = [c["status"] for c in out.result["details"]["cells"]]
    assert statuses == ["oom", "skipped", "skipped", "skipped"]
    failure = out.result["conclusion"]["failure"]
    assert failure["kind"] == "oom" and failure["recovered"] is True
    assert out.result["conclusion"]["decision"] == "inconclusive"


def test_prefill_computes_logits_for_the_last_position_only(torch):
    """Logits for every prompt position would dwarf the KV cache (SmolLM2: about 4.3x its bytes per token)."""
    model = random_llama("tiny", seed=0, device="cpu")
    seen = []
    model.register_forward_hook(lambda module, args, out: seen.append(tuple(out.logits.shape)))
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    cache, nxt = forward_step(model, ids)
    assert seen == [(2, 1, model.config.vocab_size)] and tuple(nxt.shape) == (2, 1)
