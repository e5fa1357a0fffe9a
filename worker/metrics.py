"""Prometheus counters of the worker: claims, outcomes per executor, recoveries, refusals.

Incremented by `worker.services` once the change they count is committed. A worker process
has no HTTP server: run it with the same `PROMETHEUS_MULTIPROC_DIR` as the API processes of
its host and their `/metrics` includes its counters (docs/operations.md).
"""

from prometheus_client import Counter

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
quota_refusals = Counter(
    "worker_quota_refusals",
    "Claimed tasks failed without running because their user's monthly quota was used up.",
)
