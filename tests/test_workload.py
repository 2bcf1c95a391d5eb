"""Workload generators: exact token counts, paired twins, canonical bytes and workload_id."""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from dataclasses import replace

import pytest

from harness.cli import main
from harness.errors import InvalidInput
from harness.workload import (
    Arrival,
    Common,
    ExactTokenizer,
    load_workload,
    make_workload,
    write_workload,
)
from harness.workload.arrival import offsets, poisson_scheduled, scheduled


def _closed(**kw) -> Common:
    return Common(arrival=Arrival("closed", concurrency=4), **kw)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 513])
def test_text_has_exact_token_count(tokenizer_dir, n):
    tok = ExactTokenizer(tokenizer_dir)
    text = tok.text(n, random.Random(n))
    assert tok.count(text) == n
    tail = tok.text(n, random.Random(n + 1), after=text)
    assert tok.count(text + tail) == 2 * n
    assert tok.ids(text + tail)[:n] == tok.ids(text)  # the prefix's tokens survive the join


def test_random_lengths_exact_and_within_range(tokenizer_dir):
    w = make_workload("random", _closed(requests=30, input_tokens=50, output_tokens=20, input_range=0.5,
                                        output_range=0.5), {}, tokenizer_dir)
    tok = ExactTokenizer(tokenizer_dir)
    assert [tok.count(r.prompt) for r in w.requests] == [r.input_tokens for r in w.requests]
    assert all(25 <= r.input_tokens <= 75 and 10 <= r.output_tokens <= 30 for r in w.requests)
    assert len({r.input_tokens for r in w.requests}) > 5  # the range is used, not collapsed
    assert w.header["token_counts"]["input"]["total"] == sum(r.input_tokens for r in w.requests)
    assert (
        w.header["tokenizer"]["sha256"]
        == "sha256:" + hashlib.sha256((tokenizer_dir / "tokenizer.json").read_bytes()).hexdigest()
    )


def test_shared_and_unique_prefix_twins_have_identical_lengths(tokenizer_dir):
    opts = {"groups": 3, "prompts_per_group": 4, "prefix_tokens": 40, "suffix_tokens": 9}
    shared = make_workload("shared-prefix", _closed(seed=5, output_tokens=8), opts, tokenizer_dir)
    unique = make_workload("unique-prefix", _closed(seed=5, output_tokens=8), opts, tokenizer_dir)
    tok = ExactTokenizer(tokenizer_dir)
    assert len(shared.requests) == len(unique.requests) == 12
    assert [(r.input_tokens, r.output_tokens, r.group) for r in shared.requests] == [
        (r.input_tokens, r.output_tokens, r.group) for r in unique.requests
    ]
    assert all(r.input_tokens == 49 and tok.count(r.prompt) == 49 for r in shared.requests + unique.requests)
    assert {r.prefix_tokens for r in shared.requests} == {40} and {r.prefix_tokens for r in unique.requests} == {0}
    # Shared: every member of a group starts with the group's 40 prefix tokens; unique: no two share them.
    for g in range(3):
        heads = {tuple(tok.ids(r.prompt)[:40]) for r in shared.requests if r.group == g}
        assert len(heads) == 1
    assert len({tuple(tok.ids(r.prompt)[:40]) for r in unique.requests}) == 12
    assert shared.header["paired_with"] == "unique-prefix" and unique.header["paired_with"] == "shared-prefix"


def test_copy_prompts_are_exact_restate_their_passage_and_twin_random_lengths(tokenizer_dir, tmp_path):
    common = _closed(requests=6, input_tokens=240, output_tokens=24, input_range=0.3, output_range=0.3)
    copy = make_workload("copy", common, {"primer_words": 3}, tokenizer_dir)
    tok = ExactTokenizer(tokenizer_dir)
    assert [tok.count(r.prompt) for r in copy.requests] == [r.input_tokens for r in copy.requests]
    twin = make_workload("random", common, {}, tokenizer_dir)
    assert [(r.input_tokens, r.output_tokens) for r in copy.requests] == [
        (r.input_tokens, r.output_tokens) for r in twin.requests
    ]
    assert copy.header["paired_with"] == "random" and copy.header["generator"]["primer_words"] == 3
    for r in copy.requests:
        body, _, tail = r.prompt.partition("\n\nText:")[2].partition("\n\nRepeated text:")
        assert body.split()[:3] == tail.split() and len(body.split()) > r.output_tokens  # the answer can copy
    again = make_workload("copy", common, {"primer_words": 3}, tokenizer_dir)
    assert again.workload_id == copy.workload_id
    write_workload(tmp_path / "copy.jsonl", copy)
    assert load_workload(tmp_path / "copy.jsonl").kind == "copy"


def test_copy_prompt_too_short_is_an_input_error(tokenizer_dir):
    with pytest.raises(InvalidInput, match="too short for a copy prompt"):
        make_workload("copy", _closed(requests=1, input_tokens=12, output_tokens=4), {}, tokenizer_dir)


def test_multi_turn_resends_history(tokenizer_dir):
    w = make_workload(
        "multi-turn", _closed(input_tokens=10, output_tokens=5), {"conversations": 2, "turns": 3}, tokenizer_dir
    )
    tok = ExactTokenizer(tokenizer_dir)
    assert len(w.requests) == 6
    for r in w.requests:
        assert len(r.messages) == 2 * r.turn + 1
        assert sum(tok.count(m["content"]) for m in r.messages) == r.input_tokens
    later = next(r for r in w.requests if r.conversation == 0 and r.turn == 1)
    first = next(r for r in w.requests if r.conversation == 0 and r.turn == 0)
    assert later.messages[0] == first.messages[0] and later.index > first.index


def test_trace_replays_timestamps_and_lengths(tokenizer_dir, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"timestamp": 1500, "input_length": 12, "output_length": 3},
                {"timestamp": 1000, "input_length": 20, "output_length": 4},
                {"timestamp": 4000, "input_length": 7, "output_length": 5},
            ]
        )
        + "\n"
    )
    w = make_workload("trace", Common(arrival=Arrival("trace")), {"trace": str(trace)}, tokenizer_dir)
    assert [(r.offset_s, r.input_tokens, r.output_tokens) for r in w.requests] == [
        (0.0, 20, 4),
        (0.5, 12, 3),
        (3.0, 7, 5),
    ]


def test_same_parameters_give_byte_identical_files(tokenizer_dir, tmp_path):
    args = ("random", Common(arrival=Arrival("poisson", rate_rps=3.0), requests=12, seed=11), {}, tokenizer_dir)
    a, b = (
        write_workload(tmp_path / "a.jsonl", make_workload(*args)),
        write_workload(tmp_path / "b.jsonl", make_workload(*args)),
    )
    assert a.read_bytes() == b.read_bytes()
    other = make_workload(
        "random", Common(arrival=Arrival("poisson", rate_rps=3.0), requests=12, seed=12), {}, tokenizer_dir
    )
    assert other.workload_id != load_workload(a).workload_id


@pytest.mark.parametrize("arrival", [Arrival("poisson", rate_rps=3.0), Arrival("gamma", rate_rps=3.0, burstiness=0.5)])
def test_a_longer_list_starts_with_the_same_requests(tokenizer_dir, arrival):
    """Capacity probes lengthen the list at faster rates (bench-72 --probe-seconds) and rely on this."""
    common = Common(
        arrival=arrival, requests=8, seed=5, input_tokens=40, output_tokens=10, input_range=0.5, output_range=0.5
    )
    short = make_workload("random", common, {}, tokenizer_dir).requests
    long = make_workload("random", replace(common, requests=30), {}, tokenizer_dir).requests
    assert [(r.prompt, r.input_tokens, r.output_tokens, r.offset_s) for r in short] == [
        (r.prompt, r.input_tokens, r.output_tokens, r.offset_s) for r in long[:8]
    ]


def test_workload_id_is_sha256_of_canonical_bytes_with_id_blanked(tokenizer_dir, tmp_path):
    w = make_workload("random", _closed(requests=3), {}, tokenizer_dir)
    path = write_workload(tmp_path / "w.jsonl", w)
    lines = path.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    header["workload_id"] = ""
    blank = (
        json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        + b"\n"
        + b"\n".join(lines[1:])
    )
    assert w.workload_id == "sha256:" + hashlib.sha256(blank).hexdigest()


def test_load_rejects_edited_file(tokenizer_dir, tmp_path):
    path = write_workload(tmp_path / "w.jsonl", make_workload("random", _closed(requests=3), {}, tokenizer_dir))
    lines = path.read_text().splitlines()
    req = json.loads(lines[2])
    req["output_tokens"] += 1
    lines[2] = json.dumps(req)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InvalidInput, match="does not match its content"):
        load_workload(path)


def test_arrival_offsets():
    assert offsets(Arrival("constant", rate_rps=4.0), 4, seed=0) == [0.0, 0.25, 0.5, 0.75]
    assert offsets(Arrival("closed", concurrency=2), 3, seed=0) == [None, None, None]
    gaps = lambda xs: [b - a for a, b in zip(xs, xs[1:], strict=False)]  # noqa: E731
    poisson = offsets(Arrival("poisson", rate_rps=10.0), 4001, seed=1)
    assert statistics.mean(gaps(poisson)) == pytest.approx(0.1, rel=0.05)
    assert statistics.stdev(gaps(poisson)) == pytest.approx(0.1, rel=0.08)  # exponential: sd = mean
    bursty = offsets(Arrival("gamma", rate_rps=10.0, burstiness=0.25), 4001, seed=1)
    assert statistics.mean(gaps(bursty)) == pytest.approx(0.1, rel=0.1)
    assert statistics.stdev(gaps(bursty)) == pytest.approx(0.2, rel=0.15)  # cv = 1/sqrt(shape) = 2
    assert offsets(Arrival("poisson", rate_rps=10.0), 5, seed=1) == poisson[:5]


@pytest.mark.parametrize(
    "arrival",
    [dict(process="poisson"), dict(process="gamma", rate_rps=1.0), dict(process="closed"), dict(process="sometimes")],
)
def test_arrival_rejects_missing_parameters(arrival):
    with pytest.raises(InvalidInput):
        Arrival(**arrival)


def test_cli_make_twins_and_show(tokenizer_dir, tmp_path, capsys):
    common = [
        "--tokenizer",
        str(tokenizer_dir),
        "--arrival",
        "poisson",
        "--rate",
        "5",
        "--seed",
        "2",
        "--groups",
        "2",
        "--prompts-per-group",
        "3",
        "--prefix-tokens",
        "30",
        "--suffix-tokens",
        "5",
    ]
    for kind in ("shared-prefix", "unique-prefix"):
        assert main(["workload", "make", kind, *common, "-o", str(tmp_path / f"{kind}.jsonl")]) == 0
    assert main(["workload", "make", "shared-prefix", *common, "-o", str(tmp_path / "again.jsonl")]) == 0
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "shared-prefix.jsonl").read_bytes()
    shared, unique = load_workload(tmp_path / "shared-prefix.jsonl"), load_workload(tmp_path / "unique-prefix.jsonl")
    assert [r.input_tokens for r in shared.requests] == [r.input_tokens for r in unique.requests]
    assert [r.offset_s for r in shared.requests] == [r.offset_s for r in unique.requests]
    capsys.readouterr()
    assert main(["workload", "show", str(tmp_path / "shared-prefix.jsonl")]) == 0
    assert shared.workload_id in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["random", "--requests", "2", "--arrival", "poisson"], "needs --rate"),
        (["random", "--arrival", "closed", "--concurrency", "1"], "--requests must be >= 1"),
        (["trace", "--arrival", "trace"], "needs --trace FILE"),
        (["random", "--requests", "2", "--concurrency", "1", "--input-range", "1.5"], "must be in [0, 1)"),
    ],
)
def test_cli_bad_input_is_one_line(tokenizer_dir, tmp_path, capsys, argv, message):
    code = main(["workload", "make", *argv, "--tokenizer", str(tokenizer_dir), "-o", str(tmp_path / "w.jsonl")])
    err = capsys.readouterr().err
    assert code == 1 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_tokenizer_is_clear(tmp_path):
    with pytest.raises(InvalidInput, match="no tokenizer.json"):
        ExactTokenizer(tmp_path)


def test_a_list_scheduled_at_a_rate_runs_at_it_whatever_its_draws():
    for seed in range(20):
        for rate in (0.3, 1.0, 4.7):
            arrival, n = poisson_scheduled(rate, 60.0, seed, at_least=10)
            sends = offsets(arrival, n, seed)
            assert (n - 1) / sends[-1] == pytest.approx(rate, rel=1e-3), (seed, rate)  # scheduled, not nominal
            assert sends[-1] >= 60.0 - 1e-3 and n == max(10, math.ceil(rate * 60.0) + 1)
    # the nominal rate is what moved: by the draws' own luck, the same at every rate for one seed
    nominal = [poisson_scheduled(r, 60.0, 7, at_least=100)[0].rate_rps / r for r in (1.0, 1.5)]
    assert nominal[0] == pytest.approx(nominal[1]) and nominal[0] != pytest.approx(1.0, abs=1e-3)
    assert poisson_scheduled(100.0, 1.0, 0, at_least=500)[1] == 500


def test_a_bursty_list_is_scheduled_at_its_rate_keeping_its_draws():
    gamma = Arrival("gamma", rate_rps=0.45, burstiness=0.25)
    for seed in range(20):
        for n in (2, 8, 16):
            sends = offsets(scheduled(gamma, n, seed), n, seed)
            assert (n - 1) / sends[-1] == pytest.approx(0.45, rel=1e-3), (seed, n)
            nominal = offsets(gamma, n, seed)  # the same draws, one scale: the gaps keep their proportions
            assert [a / sends[-1] for a in sends] == pytest.approx([a / nominal[-1] for a in nominal], abs=1e-5)
    assert scheduled(gamma, 1, 0) == gamma  # one request has no span to schedule
