"""Transcripts: what agents wrote in a task, as the project's other members read it.

An agent may echo or quote its prompt, and with it the user's own (private) memories that
were injected into the task's first turn. The task's user reads its result whole; everyone
else reads it with those memories' text taken out, each place marked
`[private note removed]` (the same provenance removal extraction uses: fenced blocks, the
block's header, and every run of a private memory's words, however quoted). A paraphrase
cannot be taken out: the user's `personal_memories_in_shared_projects` setting decides
whether their memories reach tasks of shared projects at all.

Registered with the host in `AutoMemoryConfig.ready()` (`task_text_filter_register`).
"""

from automemory.services.provenance import injected_for, injected_text_removed
from controlplane.models import MemoryScope, Task

PRIVATE_NOTE_REMOVED = "[private note removed]"
UNCHECKABLE = (
    "[result hidden: it may quote private notes of the task's user that can no longer be checked]"
)


def private_notes_removed(task: Task, text: str) -> str:
    """`text` without the task user's private memories injected into it (two queries when
    any memory was injected, none otherwise)."""
    injected = injected_for([task]).get(task.pk)
    if injected is None:
        return text
    if injected.unrecorded:
        return UNCHECKABLE
    private = [fp for fp in injected.fingerprints if fp.scope == MemoryScope.USER]
    if not private:
        return text
    return injected_text_removed(text, fingerprints=private, marker=PRIVATE_NOTE_REMOVED)
