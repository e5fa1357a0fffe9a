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
    Reason.NO_DURABLE_SIGNAL: "Nothing was written: the task holds nothing worth remembering "
    "for later tasks. Either the memory model judged so (its reason is in the detail) or, "
    "without a model, the result only repeats the goal and adds nothing to it. It is looked at "
    "again when the task is continued or your settings change.",
    Reason.ALREADY_KNOWN: "Nothing was written: the consolidation model found that an existing "
    "memory of the project (linked) already says what this task taught. It is looked at again "
    "when the task is continued or your settings change.",
    Reason.MODEL_UNAVAILABLE: "The memory model could not be used (a timeout, a connection "
    "error, a rate limit, a server error, or a refused key or model; the detail says which), so "
    "nothing was written. The task is retried automatically, at growing intervals while the "
    "model stays away. Turn on the deterministic fallback in My settings to write the plain "
    "excerpt instead.",
    Reason.MEMORY_BUDGET_EXHAUSTED: "Your monthly memory budget (what memory model calls may "
    "cost) is used up, so no model call was made and nothing was written. The task is retried "
    "at the start of next month (UTC); raise the budget or turn on the deterministic fallback "
    "in My settings to go on now.",
    Reason.NEW: "A new memory was written from this task.",
    Reason.SUPERSEDED: "A new memory was written and replaced older ones: the earlier memory "
    "of the same goal, or the memories the consolidation model judged it makes obsolete (the "
    "detail lists them).",
    Reason.SUPERSEDED_ON_WRITE: "A memory was written but replaced at once: another task with "
    "the same goal finished later, and its memory stays the active one (the detail names it).",
    Reason.MERGED: "No new memory: the consolidation model merged what this task taught into an "
    "existing memory of the project (linked), whose text was rewritten to include it.",
    Reason.HELD_FOR_AUTHOR: "A memory was written and is held for you: the task received your "
    "own (private) memories and the project has other members, so what the agent made of "
    "them stays yours until you share it (the memory's page, or POST /memories/{id}/share).",
    Reason.MODEL_OUTPUT_INVALID: "The memory model answered, but not in the expected shape even "
    "after being asked once to correct it, so nothing was written and the answer was not kept. "
    "The task is retried at the next sweeps (a few times at most).",
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
