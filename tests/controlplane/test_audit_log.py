import pytest
from django.db import DatabaseError, connection, transaction

from controlplane.models import AuditEvent
from controlplane.services.audit import audit_record


def test_the_model_refuses_updates_and_deletes(alice):
    event = audit_record(action="task_created", actor=alice, target_type="task", target_id=1)
    event.action = "changed"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()


@pytest.mark.postgres
def test_the_database_refuses_updates_and_deletes_on_postgresql(alice):
    audit_record(action="task_created", actor=alice, target_type="task", target_id=1)
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.update(action="rewritten")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.get().action == "task_created"


@pytest.mark.postgres
def test_deleting_the_actor_keeps_the_event(alice):
    audit_record(action="task_created", actor=alice, target_type="task", target_id=1)
    alice.delete()
    event = AuditEvent.objects.get()
    assert event.actor_id is None and event.action == "task_created"
    assert connection.vendor == "postgresql"
