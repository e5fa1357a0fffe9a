"""Transcripts: what agents wrote in a task, as the project's other members read it.

An agent may echo or quote its prompt, and with it the user's own (private) memories that
were injected into the task's first turn. The task's user reads its result whole; everyone
else reads it with those memories' text taken out, each place marked
`[private note removed]` (the same provenance removal extraction uses: fenced blocks, the
block's header, and every run of a private memory's words, however quoted). A paraphrase
cannot be taken out: the user's `personal_memories_in_shared_projects` setting decides
whether their memories reach tasks of shared projects at all.

The cleaned text is kept per task, turn and text (`TaskTextCleaned`), so the next reader
pays a checksum and a read instead of the removal; a new turn, another text or another
`SECRET_KEY` (the fingerprints' key) is another entry, and a new turn's write drops the
entries of the turns before.

Registered with the host in `AutoMemoryConfig.ready()` (`task_text_filter_register`).
"""

import hashlib
import zlib

from django.conf import settings
from django.db import IntegrityError, transaction

from automemory.models import TaskTextCleaned
from automemory.services.provenance import injected_for, injected_text_removed
from controlplane.models import MemoryScope, Task

PRIVATE_NOTE_REMOVED = "[private note removed]"
UNCHECKABLE = (
    "[result hidden: it may quote private notes of the task's user that can no longer be checked]"
)


def private_notes_removed(task: Task, text: str) -> str:
    """`text` without the task user's private memories injected into it. Kept once cleaned:
    one query when it was (the notes are not even looked up), else two to find the task's
    injected memories (none when nothing was injected) and, when some were the user's own,
    the removal and a write."""
    source = _source_key(text)
    kept = (
        TaskTextCleaned.objects.filter(task_id=task.pk, turn=task.turn, source=source)
        .values_list("pk", "text")
        .first()
    )
    if kept is not None:
        return text if kept[1] is None else kept[1]
    injected = injected_for([task]).get(task.pk)
    if injected is None:
        return text
    if injected.unrecorded:
        return UNCHECKABLE
    private = [fp for fp in injected.fingerprints if fp.scope == MemoryScope.USER]
    if not private:
        return text
    cleaned = injected_text_removed(text, fingerprints=private, marker=PRIVATE_NOTE_REMOVED)
    _keep(task, source, None if cleaned == text else cleaned)
    return cleaned


def _source_key(text: str) -> str:
    """What a cleaned text was made from: the text's length and CRC-32, and the key of the
    fingerprints."""
    key_id = hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest()[:16]
    data = text.encode("utf-8", "surrogatepass")
    return f"{len(data)}:{zlib.crc32(data):08x}:{key_id}"


def _keep(task: Task, source: str, cleaned: str | None) -> None:
    """Keep the cleaned text (None: unchanged) and drop those of earlier turns; two readers
    cleaning at once keep one."""
    try:
        with transaction.atomic():
            TaskTextCleaned.objects.create(
                task_id=task.pk, turn=task.turn, source=source, text=cleaned
            )
            TaskTextCleaned.objects.filter(task_id=task.pk, turn__lt=task.turn).delete()
    except IntegrityError:
        pass  # another reader kept the same
