"""Streaming OpenAI-compatible client: SSE parsing, per-request records, scheduled runs."""

from harness.client.openai import APIS, ClientConfig, build_payload, send_request
from harness.client.pool import ClientRun, auto_workers, plan_shares, run_client
from harness.client.records import COMPLETED, STATUSES, RecordWriter, RequestRecord, read_records
from harness.client.runner import Share, ShareStats, run_share
from harness.client.sse import SSEParser

__all__ = [
    "APIS",
    "COMPLETED",
    "STATUSES",
    "ClientConfig",
    "ClientRun",
    "RecordWriter",
    "RequestRecord",
    "SSEParser",
    "Share",
    "ShareStats",
    "auto_workers",
    "build_payload",
    "plan_shares",
    "read_records",
    "run_client",
    "run_share",
    "send_request",
]
