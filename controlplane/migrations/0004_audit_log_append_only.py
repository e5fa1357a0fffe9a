"""On PostgreSQL the database itself keeps the audit log append-only.

A trigger refuses DELETE and any UPDATE except the one Django's `on_delete=SET_NULL` makes
when an actor's user account is deleted (only `actor_id` becomes NULL).
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND NEW.actor_id IS NULL
       AND (NEW.id, NEW.actor_label, NEW.action, NEW.target_type, NEW.target_id,
            NEW.data::text, NEW.created_at)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.actor_label, OLD.action, OLD.target_type, OLD.target_id,
            OLD.data::text, OLD.created_at)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log;
DROP FUNCTION IF EXISTS audit_log_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("controlplane", "0003_sweep_and_spend_indexes")]

    operations = [migrations.RunPython(forwards, backwards)]
