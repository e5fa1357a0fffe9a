"""What each extraction log reason means for the user, and what they can do about it."""

from automemory.models import Outcome, Reason

REASON_EXPLANATIONS: dict[str, str] = {
    Reason.GENERATE_DISABLED: "Generating memories is off for this task (your setting or the "
    "task's flag). Turn it on in My settings or on the task page; the task is looked at again.",
    Reason.NOT_IDLE: "The task finished too recently: it could still be continued. It is "
    "looked at again once it has been idle long enough (or use Run now, skip the waiting gates).",
    Reason.MISSING_TIMESTAMPS: "The task has no start or finish time, so its run time cannot be "
    "checked. Run now, skip the waiting gates, extracts it anyway.",
    Reason.DURATION_TOO_SHORT: "The run was shorter than your minimum run time. Lower the "
    "minimum in My settings or use Run now, skip the waiting gates.",
    Reason.RESULT_TOO_SHORT: "The result was shorter than your minimum result length. Lower the "
    "minimum in My settings or use Run now, skip the waiting gates.",
    Reason.EXTERNAL_CONTEXT: "The task saw content from outside the project (an inter-task "
    "message, a coordinator, an MCP server not listed as internal, or a web search), which must "
    "not end up in a shared memory. List the server as internal in My settings if it is yours.",
    Reason.PRIVATE_CONTENT: "The memory would have repeated the text of one of your user-level "
    "memories, which stay private to you.",
    Reason.QUOTA_LOW: "Less of this month's quota was left than your minimum, so no quota was "
    "spent on memories. It is looked at again when quota is back or the setting is lowered.",
    Reason.QUOTA_CHECK_FAILED: "The quota could not be read, so extraction did not risk "
    "spending it. It is tried again at the next sweep.",
    Reason.NO_DURABLE_SIGNAL: "The model judged that the task holds nothing worth remembering "
    "for later tasks.",
    Reason.ALREADY_KNOWN: "The project already remembers this: consolidation found it in an "
    "existing memory.",
    Reason.MODEL_UNAVAILABLE: "The memory model could not be reached. The task is retried "
    "later (or turn on the deterministic fallback in My settings).",
    Reason.MEMORY_BUDGET_EXHAUSTED: "This month's memory budget is used up. The task is retried "
    "next month, or raise the budget in My settings.",
    Reason.NEW: "A new memory was written from this task.",
    Reason.SUPERSEDED: "A new memory was written and replaced an older one about the same goal.",
    Reason.SUPERSEDED_ON_WRITE: "A memory was written but at once replaced by the memory of a "
    "task on the same goal that finished later.",
    Reason.MERGED: "What the task taught was merged into an existing memory of the project.",
    Reason.MODEL_OUTPUT_INVALID: "The model's answer did not have the expected shape, so nothing "
    "was written. The task is retried at the next sweeps (a few times at most).",
    Reason.ERROR: "An unexpected error stopped the extraction; it is logged for the operator and "
    "the task is retried at the next sweeps (a few times at most).",
}

OUTCOME_EXPLANATIONS: dict[str, str] = {
    Outcome.EXTRACTED: "A memory was written or updated.",
    Outcome.SKIPPED: "A gate kept the task from being remembered.",
    Outcome.ERROR: "Extraction failed and is retried.",
}


def reason_explanation(reason: str) -> str:
    """The human explanation of a log reason (an empty string for an unknown one)."""
    return REASON_EXPLANATIONS.get(reason, "")
