"""bench-68's greedy identity, judged in float32 against speculation off: bf16 near-tie flips on the measured arms
never reject a correct engine; float32 outputs that differ beyond the stated tolerance always do."""

from __future__ import annotations

from dataclasses import replace

from harness.bench.benches.bench68.identity import CHECK_BASIS, MEASURED_BASIS, UNCHECKED, identities, identity_record
from harness.bench.benches.bench68.table import decide_top
from tests.bench.benches.test_speculative import claim, row, run

REF = ("the cat sat on the mat", "one two three four", "alpha beta gamma")
# the recorded idle-host run: in bf16, 6 of 9 n-gram outputs equal the baseline's (near-tied argmaxes flipped)
FLIPPED = ("the cat sat on a mat", "one two three four", "alpha beta gamma")


def measured(texts_by_repeat) -> list:
    """Three bf16 repeats of copy/off@ngram-k4 and copy/ngram-k4, the variant's texts per repeat as given."""
    runs = []
    for repeat, texts in enumerate(texts_by_repeat, start=1):
        runs += [run("copy/off@ngram-k4", repeat, texts=REF), run("copy/ngram-k4", repeat, texts=texts)]
    return runs


def checked(texts) -> list:
    return [run("identity/ngram-k4", 1, texts=texts), run("identity/off@ngram-k4", 1, texts=REF)]


def verdict(runs, dtype="bfloat16", share=1.0):
    judged, described = identities(runs, ["ngram-k4"], {"ngram-k4": ("copy",)}, dtype, share)
    return judged[("copy", "ngram-k4")], described.get(("copy", "ngram-k4"))


def test_bf16_near_tie_flips_on_the_measured_arms_do_not_reject_a_variant_identical_in_float32():
    runs = measured([FLIPPED, FLIPPED, FLIPPED]) + checked(REF)
    judged, described = verdict(runs)
    assert (judged.compared, judged.identical, judged.passed, judged.basis) == (3, 3, True, CHECK_BASIS)
    assert (described.compared, described.identical, described.passed) == (9, 6, False)  # described, not judged
    good = replace(row("copy", "ngram-k4", claim(0.6, 0.5, 0.7, "adopt")), agreement=judged,
                   measured_agreement=described)
    top = decide_top([good])
    assert top.rows[0].decision == "adopt" and top.decision == "adopt"
    assert top.quality["passed"] is True and top.quality["value"] == 1.0
    assert any(line.startswith("greedy identity (float32, float32 check): 3/3") and "measured arms 6/9" in line
               for line in top.lines)


def test_float32_outputs_that_differ_beyond_the_tolerance_reject_the_variant():
    runs = measured([REF, REF, REF]) + checked(FLIPPED)  # 2 of 3 equal in float32: a share of 0.67
    judged, _ = verdict(runs, share=0.9)
    assert (judged.compared, judged.identical, judged.passed) == (3, 2, False)
    assert judged.first_mismatch["index"] == 0 and judged.to_dict()["tolerance"] == 0.1
    bad = replace(row("copy", "ngram-k4", claim(0.6, 0.5, 0.7, "adopt")), agreement=judged)
    top = decide_top([bad])
    assert top.rows[0].decision == "reject (outputs differ)" and top.decision == "reject"
    assert top.quality["passed"] is False and top.quality["threshold"] == 0.9
    # within a stated tolerance of one in three, the same outputs pass
    assert verdict(runs, share=0.6)[0].passed


def test_measured_float32_arms_are_judged_themselves_and_no_check_means_never_adopted():
    judged, described = verdict(measured([REF, FLIPPED, REF]), dtype="float32")
    assert (judged.compared, judged.identical, judged.passed, judged.basis) == (9, 8, False, MEASURED_BASIS)
    assert described is None
    unchecked, _ = verdict(measured([REF, REF, REF]))  # bf16 measured, the float32 check never ran
    assert (unchecked.compared, unchecked.basis) == (0, UNCHECKED)
    top = decide_top([replace(row("copy", "ngram-k4", claim(0.6, 0.5, 0.7, "adopt")), agreement=unchecked)])
    assert top.rows[0].decision == "inconclusive (identity unchecked)" and top.decision == "inconclusive"
    record = identity_record("bfloat16", 1.0)
    assert (record["method"], record["dtype"], record["tolerance"]) == ("float32 check", "float32", 0.0)
    assert identity_record("float32", 0.95)["method"] == "measured arms (float32)"
