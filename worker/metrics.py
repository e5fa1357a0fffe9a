"""Prometheus metrics of the worker: claims, outcomes per executor, recoveries, refusals,
codex session records.

Incremented by `worker.services` (and `worker.codex.session_store`, and the loop's finish retry)
once the change they count is committed. A worker serves them itself on
`WORKER_METRICS_PORT` (`worker.metrics_server`), or shares `PROMETHEUS_MULTIPROC_DIR` with
the API processes of its host, whose `/metrics` then includes them (docs/operations.md).
"""

from prometheus_client import Counter, Histogram

task_claims = Counter(
    "worker_task_claims",
    "Tasks claimed from the queue, by executor.",
    ["executor"],
)
task_completions = Counter(
    "worker_task_completions",
    "Task turns finished as completed, by executor.",
    ["executor"],
)
task_failures = Counter(
    "worker_task_failures",
    "Task turns finished as failed (the executor's failure, not a quota refusal), by executor.",
    ["executor"],
)
task_recoveries = Counter(
    "worker_task_recoveries",
    "Running tasks whose heartbeat went stale, re-queued as resumes.",
)
finish_retries = Counter(
    "worker_finish_retries",
    "Turns whose finish met a database outage and was retried, by outcome (recorded; not_held: "
    "the task was taken over meanwhile, nothing written; dropped: the retry time ran out).",
    ["outcome"],
)
quota_refusals = Counter(
    "worker_quota_refusals",
    "Claimed tasks failed without running because their user's monthly quota was used up.",
)
session_stores = Counter(
    "worker_codex_session_stores",
    "Codex session records stored after a run, by outcome (stored; not_held: recorded without "
    "its bytes, too large or object storage failed; not_owner; no_files; failed).",
    ["outcome"],
)
session_restores = Counter(
    "worker_codex_session_restores",
    "Codex session records looked up before a resume, by outcome (current: the local copy was "
    "it; restored; local_only: none stored; absent: none anywhere; failed).",
    ["outcome"],
)
session_seconds = Histogram(
    "worker_codex_session_seconds",
    "Time to store a codex session record after a run, or to restore one before a resume.",
    ["operation"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
agent_egress_refused = Counter(
    "worker_agent_egress_refused",
    "Connections a sandboxed agent asked the egress proxy for that WORKER_AGENT_EGRESS does not "
    "allow (refused with a 403).",
)
