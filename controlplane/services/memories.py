"""Identity memories written and forgotten by hand (auto memories come from automemory)."""

from django.db import transaction

from controlplane.limits import MEMORY_MAX_CHARS, text_require
from controlplane.models import IdentityMemory, MemoryScope, MemorySource, Project
from controlplane.services.audit import audit_record


@transaction.atomic
def memory_create(*, user, content: str, project: Project | None = None) -> IdentityMemory:
    """A manual memory: about `project` when given, else about the user themself."""
    content = text_require(content, field="content", max_chars=MEMORY_MAX_CHARS).strip()
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
