"""Identity memories written and forgotten by hand (auto memories come from automemory).

Hand-written text (here and in the admin's memory form) passes the registered content checks
first, and once stored the registered text reviews (automemory flags instruction-like text
and holds it for a project owner). The host knows no rules of its own: an app registers its
checks, reviews and holds (automemory in `ready()`), so the host never imports the apps that
plug into it.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from controlplane.access import APPROVE_MEMORY, project_role, role_allows
from controlplane.errors import ConflictError, DomainError, NotFoundError
from controlplane.limits import MEMORY_MAX_CHARS, text_require
from controlplane.models import (
    IdentityMemory,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    Project,
)
from controlplane.services.audit import audit_record
from controlplane.services.memory_citations import citations_prepare, citations_store

logger = logging.getLogger(__name__)

# A check takes memory text and returns why it may not be stored (never quoting the text), or
# None when it may.
MemoryContentCheck = Callable[[str], str | None]
_content_checks: list[MemoryContentCheck] = []


def memory_content_check_register(check: MemoryContentCheck) -> None:
    """Run `check` on every manual memory's content before it is stored (once per check)."""
    if check not in _content_checks:
        _content_checks.append(check)


def memory_content_checks() -> tuple[MemoryContentCheck, ...]:
    return tuple(_content_checks)


# A hook takes a memory a project owner just released (`memory_approve`, inside its
# transaction, the memory locked) and the owner; automemory closes the reports it held.
MemoryApprovedHook = Callable[..., None]
_approved_hooks: list[MemoryApprovedHook] = []


@dataclass(frozen=True)
class MemoryHold:
    """A hold an app puts on a memory until a project owner reviews it (automemory: a
    report, or instruction-like text not yet approved). `held(memory)`: whether it holds
    the memory; `release(memory=..., user=...)`: lift it (approving calls it in its
    transaction, the memory locked); `approved(memory)`: whether it held the memory and an
    approval still stands (approving again changes nothing); `audit(memory=...,
    released=...)`: what the approval's audit event says of it."""

    held: Callable[[IdentityMemory], bool]
    release: Callable[..., object]
    approved: Callable[[IdentityMemory], bool] | None = None
    audit: Callable[..., dict] | None = None


_holds: list[MemoryHold] = []


def memory_hold_register(*, held, release, approved=None, audit=None) -> None:
    """Let approving release an app's hold (see `MemoryHold`; once per hold)."""
    hold = MemoryHold(held=held, release=release, approved=approved, audit=audit)
    if hold not in _holds:
        _holds.append(hold)


@dataclass(frozen=True)
class MemoryTextReview:
    """What an app's review of a memory's new text found: data for the write's audit event,
    and, when the text counts as approved by its author, the data of that approval's event
    (`memory_approved` with `by_author`)."""

    audit: dict
    approved_by_author: dict | None = None


# A review takes a memory whose text was just stored (in the write's transaction, the
# memory saved) with `user`, `may_approve` (asks whether they could approve it anyway; a
# review asks only when there is something to approve) and `created` (a new memory), and
# returns a `MemoryTextReview`.
MemoryTextReviewHook = Callable[..., MemoryTextReview]
_text_reviews: list[MemoryTextReviewHook] = []


def memory_text_review_register(review: MemoryTextReviewHook) -> None:
    """Call `review(memory=..., user=..., may_approve=..., created=...)` whenever a
    memory's text is written by hand (once per review)."""
    if review not in _text_reviews:
        _text_reviews.append(review)


def memory_text_reviewed(
    *, memory: IdentityMemory, user, may_approve: Callable[[], bool], created: bool
) -> MemoryTextReview:
    """The registered reviews of `memory`'s new text (call in the write's transaction, after
    the save), their audit data merged; `approved_by_author` when one approved it."""
    audit: dict = {}
    approved = None
    for review in _text_reviews:
        found = review(memory=memory, user=user, may_approve=may_approve, created=created)
        audit.update(found.audit)
        if found.approved_by_author is not None:
            approved = {**(approved or {}), **found.approved_by_author}
    return MemoryTextReview(audit=audit, approved_by_author=approved)


# A check takes a memory about to be restored (locked, in the restore's transaction) and
# returns why it may not be (automemory: its goal has another active memory now), or None.
MemoryRestoreCheck = Callable[[IdentityMemory], str | None]
_restore_checks: list[MemoryRestoreCheck] = []


def memory_restore_check_register(check: MemoryRestoreCheck) -> None:
    """Run `check` on every memory before it is restored (once per check)."""
    if check not in _restore_checks:
        _restore_checks.append(check)


def memory_approved_hook_register(hook: MemoryApprovedHook) -> None:
    """Call `hook(memory=..., user=...)` whenever an owner approves a memory (once per hook)."""
    if hook not in _approved_hooks:
        _approved_hooks.append(hook)


def memory_content_validate(*, content: str) -> str:
    """The content, checked and stripped; a `DomainError` on `content` when it may not be
    stored (too long, blank, or refused by a registered check)."""
    content = text_require(content, field="content", max_chars=MEMORY_MAX_CHARS).strip()
    for check in _content_checks:
        problem = check(content)
        if problem:
            raise DomainError(problem, field="content")
    return content


def author_may_approve(*, user, memory: IdentityMemory) -> bool:
    """Whether text `user` writes into `memory` counts as approved by its author: they could
    approve it anyway (a project owner; the user of their own user-level memory, which only
    their own tasks receive). A member's or an agent's text waits for an owner."""
    if memory.scope == MemoryScope.USER:
        return memory.user_id is not None and memory.user_id == getattr(user, "pk", None)
    role = project_role(user=user, project_id=memory.project_id)
    return role_allows(role, APPROVE_MEMORY)


def _audit_approved(*, user, memory: IdentityMemory, by_author: bool = False, **data) -> None:
    data = {"project_id": memory.project_id, **data}
    if by_author:
        data["by_author"] = True
    audit_record(
        action="memory_approved", actor=user, target_type="memory", target_id=memory.pk, data=data
    )


def _audit_memory(action: str, *, user, memory: IdentityMemory, **data) -> None:
    """Audit `action` by `user` on `memory`: its scope, source and project, then `data`."""
    audit_record(
        action=action,
        actor=user,
        target_type="memory",
        target_id=memory.pk,
        data={
            "scope": memory.scope,
            "source": memory.source,
            "project_id": memory.project_id,
            **data,
        },
    )


def memory_create(
    *, user, content: str, project: Project | None = None, citations: list[dict] | None = None
) -> IdentityMemory:
    """A manual memory: about `project` when given, else about the user themself, citing
    `citations` of the project's code when given (checked first: `memory_citations`).

    The registered reviews see the new text (automemory holds instruction-like text for a
    project owner's approval, unless its author may approve it: a project owner, or the user
    of a user-level memory; then it is approved by its author at once and audited,
    `memory_approved` with `by_author`)."""
    content = memory_content_validate(content=content)
    prepared = None
    if citations:
        prepared = citations_prepare(project=project, citations=citations)
    memory = IdentityMemory(
        scope=MemoryScope.USER if project is None else MemoryScope.PROJECT,
        user=user if project is None else None,
        project=project,
        content=content,
        source=MemorySource.MANUAL,
        created_by=user,
    )
    with transaction.atomic():
        memory.save()
        if prepared is not None:
            citations_store(memory=memory, prepared=prepared)
        review = memory_text_reviewed(
            memory=memory,
            user=user,
            may_approve=lambda: author_may_approve(user=user, memory=memory),
            created=True,
        )
        _audit_memory(
            "memory_created",
            user=user,
            memory=memory,
            **review.audit,
            citations=len(citations or []),
        )
        if review.approved_by_author is not None:
            _audit_approved(user=user, memory=memory, by_author=True, **review.approved_by_author)
    return memory


def memory_citations_set(*, user, memory: IdentityMemory, citations: list[dict]) -> IdentityMemory:
    """The memory cites `citations` and nothing else (an empty list: nothing), checked
    against its project's code before anything is written. The caller has checked the user
    may change the memory."""
    prepared = None
    if citations:
        prepared = citations_prepare(project=memory.project, citations=citations)
    with transaction.atomic():
        memory = memory_locked(memory)
        citations_store(memory=memory, prepared=prepared)
        _audit_memory(
            "memory_citations_changed", user=user, memory=memory, citations=len(citations)
        )
    return memory


MEMORY_GONE = "Memory not found."


def memory_locked(memory: IdentityMemory) -> IdentityMemory:
    """`memory` read again and locked until the transaction ends (call inside one); a
    `NotFoundError` (404) when it was deleted meanwhile. Every change of a memory goes
    through this lock, so of two requests racing on one memory, one waits for the other:
    the loser of a race with a delete answers 404 and writes nothing."""
    locked = IdentityMemory.objects.select_for_update().filter(pk=memory.pk).first()
    if locked is None:
        raise NotFoundError(MEMORY_GONE)
    return locked


@transaction.atomic
def memory_update(*, user, memory: IdentityMemory, content: str) -> IdentityMemory:
    """Replace a memory's content (manual or auto; an auto memory edited by hand stays auto).

    The content passes the same checks as a new memory's and the registered reviews see it
    again (automemory: new text needs a new approval, unless the editor may approve it, as
    in `memory_create`). The caller has checked the user may (see controlplane.access).
    """
    content = memory_content_validate(content=content)
    memory = memory_locked(memory)
    if content == memory.content:
        return memory
    memory.content = content
    memory.save(update_fields=["content", "updated_at"])
    review = memory_text_reviewed(
        memory=memory,
        user=user,
        may_approve=lambda: author_may_approve(user=user, memory=memory),
        created=False,
    )
    _audit_memory("memory_updated", user=user, memory=memory, **review.audit)
    if review.approved_by_author is not None:
        _audit_approved(user=user, memory=memory, by_author=True, **review.approved_by_author)
    return memory


@transaction.atomic
def memory_approve(*, user, memory: IdentityMemory) -> IdentityMemory:
    """Release a memory held for review: a project owner read it and found it fine.

    A memory is held when an app holds it (`memory_hold_register`; auto memory: its text is
    flagged as instruction-like and not yet approved, whoever wrote it, or a report holds
    it); approving releases every hold, and the memory is injected and found again.
    Approving an approved memory changes nothing; 409 when it is neither flagged nor
    reported. The caller has checked the user owns the project (see controlplane.access).
    """
    memory = memory_locked(memory)
    held = [hold for hold in _holds if hold.held(memory)]
    if not held:
        if any(hold.approved is not None and hold.approved(memory) for hold in _holds):
            return memory
        raise ConflictError(
            "This memory is not held for review: only a flagged or reported memory awaits approval."
        )
    memory.save(update_fields=["updated_at"])
    for hold in held:
        hold.release(memory=memory, user=user)
    for hook in _approved_hooks:
        hook(memory=memory, user=user)
    data = {}
    for hold in _holds:
        if hold.audit is not None:
            data.update(hold.audit(memory=memory, released=hold in held))
    _audit_approved(user=user, memory=memory, **data)
    return memory


@transaction.atomic
def memory_restore(*, user, memory: IdentityMemory) -> IdentityMemory:
    """Bring an archived memory back to active (it is injected again).

    409 when the memory is not archived, or when a registered check refuses it (automemory:
    its goal has another active auto memory now; one goal keeps one active auto memory,
    forget or edit that one first). Restoring
    resets the retention clock (`updated_at`), so the next sweep does not archive it again.
    """
    memory = memory_locked(memory)
    if memory.status != MemoryStatus.ARCHIVED:
        raise ConflictError(
            f"Only an archived memory can be restored; this one is {memory.status}."
        )
    for check in _restore_checks:
        problem = check(memory)
        if problem:
            raise ConflictError(problem)
    archived_at = memory.archived_at
    memory.status = MemoryStatus.ACTIVE
    memory.archived_at = None
    try:
        with transaction.atomic():
            memory.save(update_fields=["status", "archived_at", "updated_at"])
    except IntegrityError:
        # An app's constraint refused it: another memory took its place between the checks
        # and the save (auto memory: another active memory of its goal).
        raise ConflictError(RESTORE_REFUSED) from None
    _audit_memory(
        "memory_restored",
        user=user,
        memory=memory,
        archived_at=archived_at.isoformat() if archived_at else None,
    )
    logger.info("memory %s restored by user %s", memory.pk, getattr(user, "pk", None))
    return memory


RESTORE_REFUSED = (
    "Another memory took this one's place meanwhile (the same goal has an active auto "
    "memory now); forget it before restoring this one."
)


@transaction.atomic
def memory_delete(*, user, memory: IdentityMemory) -> None:
    """Forget a memory, once: of several deletes at once, one deletes it and is audited, the
    others get `NotFoundError` (404). The caller has checked the user may (see
    controlplane.access)."""
    memory = memory_locked(memory)
    _audit_memory(
        "memory_deleted", user=user, memory=memory, source_thread_id=memory.source_task_id
    )
    memory.delete()
