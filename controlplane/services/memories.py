"""Identity memories written and forgotten by hand (auto memories come from automemory).

Hand-written text (here and in the admin's memory form) passes the registered content checks
first. The host knows no rules of its own: an app registers a check (automemory registers its
secret check in `ready()`), so the host never imports the apps that plug into it.
"""

from collections.abc import Callable

from django.db import transaction

from controlplane.errors import DomainError
from controlplane.limits import MEMORY_MAX_CHARS, text_require
from controlplane.models import IdentityMemory, MemoryScope, MemorySource, Project
from controlplane.services.audit import audit_record

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


def memory_content_validate(*, content: str) -> str:
    """The content, checked and stripped; a `DomainError` on `content` when it may not be
    stored (too long, blank, or refused by a registered check)."""
    content = text_require(content, field="content", max_chars=MEMORY_MAX_CHARS).strip()
    for check in _content_checks:
        problem = check(content)
        if problem:
            raise DomainError(problem, field="content")
    return content


@transaction.atomic
def memory_create(*, user, content: str, project: Project | None = None) -> IdentityMemory:
    """A manual memory: about `project` when given, else about the user themself."""
    content = memory_content_validate(content=content)
    memory = IdentityMemory.objects.create(
        scope=MemoryScope.USER if project is None else MemoryScope.PROJECT,
        user=user if project is None else None,
        project=project,
        content=content,
        source=MemorySource.MANUAL,
        created_by=user,
    )
    audit_record(
        action="memory_created",
        actor=user,
        target_type="memory",
        target_id=memory.pk,
        data={"scope": memory.scope, "project_id": memory.project_id},
    )
    return memory


@transaction.atomic
def memory_delete(*, user, memory: IdentityMemory) -> None:
    """Forget a memory. The caller has checked the user may (see controlplane.access)."""
    data = {
        "scope": memory.scope,
        "source": memory.source,
        "project_id": memory.project_id,
        "source_thread_id": memory.source_task_id,
    }
    memory_id = memory.pk
    memory.delete()
    audit_record(
        action="memory_deleted", actor=user, target_type="memory", target_id=memory_id, data=data
    )
