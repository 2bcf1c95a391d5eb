"""The one summary writer's first lines: decision first, the effect in words, controls, reasons with advice."""

from __future__ import annotations

from harness.contract.verdict import control_words, effect_words, metric_words, verdict_lines

EFFECT = {"metric": "ttft_ms.p50", "value": 0.123, "ci_low": 0.114, "ci_high": 0.132, "confidence": 0.95,
          "better": "lower", "n_pairs": 5, "unit": "repeat", "margin": 0.05, "arm_a": "unique-prefix/cache-on",
          "arm_b": "shared-prefix/cache-on"}
ADOPT = {"decision": "adopt", "evidence_level": "paired", "valid": True, "invalid_reasons": [], "failure": None,
         "effect": EFFECT, "next_step": "keep prefix caching on"}


def test_a_ratio_reads_as_the_change_a_reader_takes_in_at_once():
    assert metric_words("ttft_ms.p50") == "TTFT p50" and metric_words("output_tokens_per_s") == "output tokens/s"
    assert effect_words(EFFECT) == ("shared-prefix/cache-on vs unique-prefix/cache-on: TTFT p50 ×0.123 [0.114, "
                                    "0.132], −88 %, lower is better (95% CI, n = 5 repeats, margin 5%)")
    slower = {**EFFECT, "value": 1.25, "ci_low": 1.1, "ci_high": 1.4, "arm_a": None, "arm_b": None}
    assert effect_words(slower).startswith("TTFT p50 ×1.25 [1.1, 1.4], +25 %, lower is better")


def test_the_decision_comes_first_in_capitals_then_the_effect_and_each_control():
    control = {"name": "cache-off", "equivalence": "equivalent", "equivalence_margin": 0.05,
               "effect": {"value": 0.999, "ci_low": 0.982, "ci_high": 1.017}}
    lines = verdict_lines("bench-69 INF-PREFIX-CACHE", ADOPT, controls=[control])
    assert lines[0] == "bench-69 INF-PREFIX-CACHE: ADOPT (paired evidence, VALID)"
    assert lines[1].startswith("  shared-prefix/cache-on vs unique-prefix/cache-on: TTFT p50 ×0.123")
    assert control_words(control) == "control cache-off: equivalent, ×0.999 [0.982, 1.02] (equivalence margin ±5.0%)"
    assert lines[-1] == "next step: keep prefix caching on"
    assert all(len(line) <= 100 for line in lines)


def test_every_invalid_reason_and_its_recommendation_is_named_and_a_measurement_leads_with_its_figure():
    invalid = {**ADOPT, "decision": "inconclusive", "valid": False, "effect": None,
               "invalid_reasons": ["shared-prefix/cache-on repeat 3: client event-loop lag P99 77.5 ms > 20 ms " * 3],
               "failure": {"kind": "client_bottleneck", "message": "the client fell behind"}}
    lines = verdict_lines("bench-69 INF-PREFIX-CACHE", invalid, recommendations=["run on a quiet host"])
    assert lines[0] == "bench-69 INF-PREFIX-CACHE: INCONCLUSIVE (paired evidence, INVALID)"
    assert "invalid or undecided:" in lines and "  - failure: client_bottleneck: the client fell behind" in lines
    assert "recommendations:" in lines and "  - run on a quiet host" in lines
    assert all(len(line) <= 100 for line in lines) and any(line.startswith("    ") for line in lines)  # wrapped
    sweep = {"decision": "inconclusive", "evidence_level": "repeated", "valid": True, "failure": None,
             "invalid_reasons": [], "next_step": "cite it", "summary": "the bracket"}
    measured = verdict_lines("bench-66", sweep, figure="saturation between 5.97 and 9.95 req/s")
    assert measured[0] == "bench-66: MEASURED saturation between 5.97 and 9.95 req/s (repeated evidence, VALID)"
    assert measured[1:] == ["next step: cite it"]  # the figure is said once, in the headline
    long = verdict_lines("bench-81", sweep, figure="no valid, measurable layout past the baseline here " * 3)
    assert all(len(line) <= 100 for line in long) and long[1].startswith("  ") and long[-1] == "next step: cite it"
    blocked = verdict_lines("bench-66", {**sweep, "decision": "blocked"}, figure="no bracket")
    assert blocked[0] == "bench-66: BLOCKED (repeated evidence, VALID)" and blocked[1] == "  no bracket"


def test_excluded_requests_are_named_with_what_the_decision_reads_with_them_put_back():
    work = {"count": 1, "requests": ["shared-prefix repeat 3 request 4 (time to first token): client stall 2.101-2.328 "
                                     "s (227 ms)"], "consequence": "-", "decision_all": "adopt",
            "decision_kept": "adopt", "effect_all": {**EFFECT, "value": 0.125}, "agree": True}
    flat = " ".join(" ".join(verdict_lines("bench-69", {**ADOPT, "excluded_work": work})).split())
    assert ("excluded: 1 request(s) a client stall held (shared-prefix repeat 3 request 4 (time to first "
            "token): client stall 2.101-2.328 s (227 ms)); on every request ADOPT ×0.125 [0.114, 0.132] too: the "
            "decision stands") in flat
    capped = {**ADOPT, "decision": "inconclusive",
              "excluded_work": {**work, "decision_all": "inconclusive", "agree": False}}
    flat = " ".join(" ".join(verdict_lines("bench-69", capped)).split())
    assert "on every request INCONCLUSIVE ×0.125 [0.114, 0.132], on the kept ones ADOPT: capped at inconclusive" in flat


def test_a_single_run_names_its_excluded_requests_without_a_decision_to_compare():
    from harness.contract.verdict import excluded_words

    work = {"count": 3, "requests": ["request 1 (ttft): a", "request 4 (ttft): b", "request 6 (e2e): c"],
            "consequence": "-"}
    assert excluded_words(work) == ("excluded: 3 request(s) a client stall held (request 1 (ttft): a; request 4 "
                                    "(ttft): b; 1 more), left out of the figures it could move")
