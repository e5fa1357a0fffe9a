"""Writing to the append-only audit log."""

from typing import Any

from controlplane.models import AuditEvent


def audit_record(
    *,
    action: str,
    actor=None,
    actor_label: str = "",
    target_type: str = "",
    target_id: Any = "",
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit event. Callers redact task-derived text in `data` before passing it."""
    return AuditEvent.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        actor_label=actor_label,
        action=action,
        target_type=target_type,
        target_id=str(target_id) if target_id != "" else "",
        data=data or {},
    )
