"""Privacy: a project memory never carries a user's private notes to the other members.

User-level memories are private to their user, and a project memory is read by every
member. Two rules, one by where the text came from, one by what it says:

- **Consent.** A task that received its user's own (user-level) memories, in a project with
  other members, may have reworded them anywhere in its answer, and no comparison of text
  catches a paraphrase. Its memory is written held for its author (`visibility` author):
  nobody else lists, reads, gets or finds it until the author shares it. The user's
  `share_private_derived` setting shares such memories at once.
- **Quotes.** Before any memory is written, its text (and a consolidation's merged text) is
  compared with the user-level memories of the task's user and of every member of the
  task's project (a member's private text can arrive through an inter-task message), in any
  status, and with those recorded at the task's injection (deleted or edited since). A match
  skips the task as `private_content`, as does a task that received memories whose text can
  no longer be checked (before anything is drafted). The comparison is by word shingles
  (`provenance`).
"""

from collections.abc import Sequence

from automemory.models import Reason
from automemory.services.extraction.candidates import Candidate
from automemory.services.extraction.log import Verdict, skipped
from automemory.services.provenance import (
    Fingerprint,
    PrivateTexts,
    matching_fingerprints,
    memory_fingerprint,
)
from controlplane.models import IdentityMemory, Membership, MemoryScope


class PrivateContent(Exception):
    """The memory would hold a user-level memory's text (the message never quotes it)."""


def private_texts_read(candidates: Sequence[Candidate]) -> dict[int, Verdict]:
    """Set each candidate's `private` (what its project memory must never hold) and
    `held_for_author` (consent); a `private_content` skip per task id of those that received
    memories whose text can no longer be checked. Two queries for the batch (the projects'
    members, their user-level memories)."""
    if not candidates:
        return {}
    project_ids = {candidate.task.project_id for candidate in candidates}
    members: dict[int, set[int]] = {}
    for project_id, user_id in Membership.objects.filter(project_id__in=project_ids).values_list(
        "project_id", "user_id"
    ):
        members.setdefault(project_id, set()).add(user_id)
    user_ids = {candidate.task.user_id for candidate in candidates}.union(*members.values())
    by_user: dict[int, list[Fingerprint]] = {}
    for memory in IdentityMemory.objects.filter(scope=MemoryScope.USER, user_id__in=user_ids).only(
        "pk", "scope", "user_id", "content"
    ):
        by_user.setdefault(memory.user_id, []).append(memory_fingerprint(memory))
    for candidate in candidates:
        task = candidate.task
        owners = members.get(task.project_id, set()) | {task.user_id}
        recorded = [fp for fp in candidate.injected.recorded if fp.scope == MemoryScope.USER]
        candidate.private = PrivateTexts(
            fingerprints=[fp for user_id in owners for fp in by_user.get(user_id, [])] + recorded,
            unverifiable=candidate.injected.unrecorded,
        )
        received_own = any(fp.scope == MemoryScope.USER for fp in candidate.injected_fingerprints)
        others = members.get(task.project_id, set()) - {task.user_id}
        candidate.held_for_author = (
            received_own and bool(others) and not candidate.prefs.share_private_derived
        )
    return {
        candidate.task.pk: skipped(
            Reason.PRIVATE_CONTENT,
            f"{candidate.private.unverifiable} of the memories injected into the task are gone "
            "and their text cannot be checked",
        )
        for candidate in candidates
        if candidate.private.unverifiable
    }


def private_content_check(text: str, private: PrivateTexts, *, what: str = "memory") -> None:
    """Raise `PrivateContent` when `text` holds the text of one of the user-level memories."""
    leaked = matching_fingerprints(text, fingerprints=private.fingerprints)
    if leaked:
        count = len({fingerprint.memory_id or id(fingerprint) for fingerprint in leaked})
        raise PrivateContent(
            f"the {what} would hold the text of {count} user-level "
            f"{'memory' if count == 1 else 'memories'}"
        )
