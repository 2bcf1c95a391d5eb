"""``/metrics`` text as SGLang 0.5.5 writes it, for the server-metrics tests.

Series names, types and help strings come from SGLang's
``python/sglang/srt/metrics/collector.py``: ``TokenizerMetricsCollector`` (the counters
``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
``sglang:cached_tokens_total``, ``sglang:num_requests_total``, labelled by
``model_name``) and ``SchedulerMetricsCollector`` (the gauges ``sglang:num_running_reqs``,
``sglang:num_queue_reqs``, ``sglang:token_usage`` with ``multiprocess_mode="mostrecent"``,
``sglang:num_retracted_reqs`` with the default mode, which keeps a ``pid`` label, and the
histogram ``sglang:queue_time_seconds``). Two behaviours of that source matter here:
``observe_one_finished_request`` increments ``cached_tokens_total`` only when a request
had cached tokens, so the labelled series is absent until the first cache hit; and the
scheduler gauges are set only when the scheduler logs (every ``decode_log_interval`` =
40 decode steps, or after 30 s idle). The server runs with ``PROMETHEUS_MULTIPROC_DIR``,
so counters carry no ``_created`` samples.
"""

from __future__ import annotations

MODEL = 'model_name="smollm2-135m"'
SCHED = 'engine_type="unified",model_name="smollm2-135m",pp_rank="0",tp_rank="0"'
QUEUE_BOUNDS = ("0.0", "0.1", "0.2", "0.5", "1.0", "2.0", "3.0", "4.0", "5.0", "10.0", "+Inf")


def exposition(*, prompt: float, generation: float, requests: float, cached: float | None,
               running: float, queued: float, token_usage: float, retracted: float,
               queue_counts: tuple[int, ...], queue_sum_s: float) -> str:
    """One scrape: ``cached=None`` leaves ``sglang:cached_tokens_total`` out, as before any hit."""
    lines = [
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f"sglang:prompt_tokens_total{{{MODEL}}} {prompt:.1f}",
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f"sglang:generation_tokens_total{{{MODEL}}} {generation:.1f}",
        "# HELP sglang:cached_tokens_total Number of cached prompt tokens.",
        "# TYPE sglang:cached_tokens_total counter",
    ]
    if cached is not None:
        lines.append(f"sglang:cached_tokens_total{{{MODEL}}} {cached:.1f}")
    lines += [
        "# HELP sglang:num_requests_total Number of requests processed.",
        "# TYPE sglang:num_requests_total counter",
        f"sglang:num_requests_total{{{MODEL}}} {requests:.1f}",
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{SCHED}}} {running:.1f}",
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{{{SCHED}}} {queued:.1f}",
        "# HELP sglang:token_usage The token usage.",
        "# TYPE sglang:token_usage gauge",
        f"sglang:token_usage{{{SCHED}}} {token_usage}",
        "# HELP sglang:num_retracted_reqs The number of retracted requests.",
        "# TYPE sglang:num_retracted_reqs gauge",
        'sglang:num_retracted_reqs{engine_type="unified",model_name="smollm2-135m",pid="412",pp_rank="0",tp_rank="0"}'
        f' {retracted:.1f}',
        "# HELP sglang:queue_time_seconds Histogram of queueing time in seconds.",
        "# TYPE sglang:queue_time_seconds histogram",
    ]
    for bound, count in zip(QUEUE_BOUNDS, queue_counts, strict=True):
        lines.append(f'sglang:queue_time_seconds_bucket{{{SCHED},le="{bound}"}} {count:.1f}')
    lines += [
        f"sglang:queue_time_seconds_count{{{SCHED}}} {queue_counts[-1]:.1f}",
        f"sglang:queue_time_seconds_sum{{{SCHED}}} {queue_sum_s}",
    ]
    return "\n".join(lines) + "\n"


# After start-up and an unmeasured warm-up of 2 unique prompts: no cache hit yet, and the
# scheduler's last log still shows the warm-up's batch.
BEFORE = exposition(
    prompt=2112,
    generation=32,
    requests=2,
    cached=None,
    running=1,
    queued=0,
    token_usage=0.02,
    retracted=0,
    queue_counts=(0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2),
    queue_sum_s=0.0031,
)
# After a shared-prefix arm of 6 requests (3 per group of a 1024-token prefix): the second
# and third request of each group hit 1024 cached tokens; one decode batch was retracted.
AFTER_HITS = exposition(
    prompt=8448,
    generation=128,
    requests=8,
    cached=4096,
    running=0,
    queued=0,
    token_usage=0.05,
    retracted=2,
    queue_counts=(0, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8),
    queue_sum_s=0.1374,
)
# After a unique-prefix arm of 6 requests: still no hit, so still no cached-tokens series.
AFTER_NO_HITS = exposition(
    prompt=8448,
    generation=128,
    requests=8,
    cached=None,
    running=1,
    queued=0,
    token_usage=0.02,
    retracted=0,
    queue_counts=(0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8),
    queue_sum_s=0.0412,
)
