"""The usage ledger: recording runs, the monthly totals and their honesty check, the carry-over
of task costs, the runs endpoint and admin pages, and concurrent recorders on PostgreSQL."""

import importlib
import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.models import MonthlySpend, Task, TaskStatus, UsageRecord
from controlplane.services import usage
from controlplane.services.quota import quota_status_get
from controlplane.services.usage import monthly_spend_verify, task_cost_verify, usage_record

from .helpers import row_counts

pytestmark = pytest.mark.django_db

MARCH = datetime(2026, 3, 10, 12, tzinfo=UTC)
APRIL = datetime(2026, 4, 2, 8, tzinfo=UTC)


def run(task, cost: str, *, finished_at: datetime | None = None, **fields) -> UsageRecord:
    """Record one run of `task` that cost `cost`."""
    return usage_record(
        user_id=task.user_id,
        task_id=task.pk,
        project_id=task.project_id,
        turn=task.turn,
        cost_usd=Decimal(cost),
        finished_at=finished_at or timezone.now(),
        **fields,
    )


def months_of(user) -> dict[date, tuple[Decimal, int]]:
    return {
        row.month: (row.total_usd, row.entries) for row in MonthlySpend.objects.filter(user=user)
    }


# --- Recording --------------------------------------------------------------------------------


class TestRecording:
    def test_a_run_adds_to_its_task_and_to_the_month_it_finished_in(
        self, project, alice, task_factory
    ):
        task = task_factory(project, alice)

        run(task, "0.25", finished_at=MARCH, model="gpt-test", input_tokens=1000)
        run(task, "0.5", finished_at=APRIL)
        run(task, "0.125", finished_at=APRIL + timedelta(days=20))

        task.refresh_from_db()
        assert task.cost_usd == Decimal("0.875")
        assert months_of(alice) == {
            date(2026, 3, 1): (Decimal("0.25"), 1),
            date(2026, 4, 1): (Decimal("0.625"), 2),
        }
        first = UsageRecord.objects.filter(task=task).first()
        assert (first.model, first.input_tokens, first.kind) == ("gpt-test", 1000, "task_run")

    def test_the_month_is_the_utc_month_of_the_finish(self, project, alice, task_factory):
        task = task_factory(project, alice)

        run(task, "1", finished_at=datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC))
        run(task, "2", finished_at=datetime(2027, 1, 1, 0, 0, 0, tzinfo=UTC))

        assert months_of(alice) == {
            date(2026, 12, 1): (Decimal("1"), 1),
            date(2027, 1, 1): (Decimal("2"), 1),
        }

    def test_a_deleted_tasks_spend_still_counts(self, project, alice, task_factory):
        task = task_factory(project, alice)
        run(task, "3")

        task.delete()

        assert UsageRecord.objects.get().task_id is None
        assert quota_status_get(user_id=alice.pk).spent_usd == Decimal("3")
        assert monthly_spend_verify() == []

    @pytest.mark.parametrize("cost", ["-0.01", "NaN", "Infinity"])
    def test_a_bad_cost_writes_nothing(self, project, alice, task_factory, cost):
        task = task_factory(project, alice)
        before = row_counts(), MonthlySpend.objects.count(), UsageRecord.objects.count()

        with pytest.raises(DomainError) as error:
            run(task, cost)

        assert error.value.field == "cost_usd"
        assert (row_counts(), MonthlySpend.objects.count(), UsageRecord.objects.count()) == before
        task.refresh_from_db()
        assert task.cost_usd == 0

    def test_an_unknown_kind_is_refused(self, project, alice, task_factory):
        with pytest.raises(DomainError):
            run(task_factory(project, alice), "1", kind="lunch")

        assert not UsageRecord.objects.exists()
        assert not MonthlySpend.objects.exists()

    def test_a_failing_insert_rolls_the_month_and_task_back(self, project, alice, task_factory):
        task = task_factory(project, alice)

        with pytest.raises(IntegrityError), transaction.atomic():
            run(task, "1", input_tokens=-5)  # the database refuses a negative count

        assert not MonthlySpend.objects.exists()
        task.refresh_from_db()
        assert task.cost_usd == 0

    def test_ledger_rows_are_append_only(self, project, alice, task_factory):
        record = run(task_factory(project, alice), "1")
        record.cost_usd = Decimal("0")

        with pytest.raises(PermissionError):
            record.save()

    def test_the_database_refuses_a_negative_cost(self, project, alice, task_factory):
        task = task_factory(project, alice)
        with pytest.raises(IntegrityError), transaction.atomic():
            UsageRecord.objects.create(
                user=alice, task=task, cost_usd=Decimal("-1"), finished_at=timezone.now()
            )

    @pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's trigger")
    def test_sqlite_adds_any_ledger_row_to_its_month_and_a_lost_trigger_comes_back(
        self, project, alice, task_factory, caplog
    ):
        task = task_factory(project, alice)
        UsageRecord.objects.create(user=alice, task=task, cost_usd=Decimal("2"), finished_at=MARCH)
        assert months_of(alice) == {date(2026, 3, 1): (Decimal("2"), 1)}

        with connection.cursor() as cursor:  # what a rebuild of the table does to it
            cursor.execute(f"DROP TRIGGER {usage.SQLITE_MONTH_TRIGGER}")
        usage.sqlite_month_trigger_ensure()  # post_migrate

        run(task, "0.5", finished_at=MARCH)
        assert months_of(alice) == {date(2026, 3, 1): (Decimal("2.5"), 2)}
        assert "monthly spend trigger was missing" in caplog.text
        assert monthly_spend_verify() == []


# --- The honesty check -------------------------------------------------------------------------


class TestSpendCheck:
    @pytest.fixture
    def history(self, project, alice, bob, task_factory):
        first = task_factory(project, alice)
        run(first, "1.5", finished_at=MARCH)
        run(first, "2.25", finished_at=APRIL)
        run(task_factory(project, bob), "4", finished_at=APRIL)
        return first

    def test_consistent_totals_report_nothing(self, history, capsys):
        assert monthly_spend_verify() == []
        call_command("spend_check")
        assert "Monthly spend and task costs match the usage ledger." in capsys.readouterr().out

    def test_a_tampered_total_is_detected_then_fixed_by_the_command(self, history, alice, capsys):
        MonthlySpend.objects.filter(user=alice, month=date(2026, 4, 1)).update(
            total_usd=Decimal("0.01")
        )

        with pytest.raises(CommandError) as error:
            call_command("spend_check")
        out = capsys.readouterr().out
        assert error.value.returncode == 1
        assert f"user {alice.pk} 2026-04: stored $0.010000 (1 entries), ledger $2.25" in out

        call_command("spend_check", "--fix")

        assert "Fixed 1 total(s) from the ledger." in capsys.readouterr().out
        assert months_of(alice)[date(2026, 4, 1)] == (Decimal("2.25"), 1)
        assert monthly_spend_verify() == []

    def test_a_tampered_task_cost_is_detected_then_fixed(self, history, capsys):
        Task.objects.filter(pk=history.pk).update(cost_usd=Decimal("100"))

        with pytest.raises(CommandError):
            call_command("spend_check")
        assert f"drift: task {history.pk}: cost $100.000000, its runs $3.75" in (
            capsys.readouterr().out
        )
        call_command("spend_check", "--fix")

        history.refresh_from_db()
        assert history.cost_usd == Decimal("3.75")
        assert task_cost_verify() == []

    def test_a_task_cost_without_runs_is_drift(self, project, alice, task_factory):
        task = task_factory(project, alice, cost_usd=Decimal("2"))

        [drift] = task_cost_verify(fix=True)

        assert (drift.task_id, drift.stored_usd, drift.ledger_usd) == (task.pk, 2, 0)
        task.refresh_from_db()
        assert task.cost_usd == 0

    def test_a_wrong_entry_count_is_drift_too(self, history, alice):
        MonthlySpend.objects.filter(user=alice, month=date(2026, 3, 1)).update(entries=7)

        [drift] = monthly_spend_verify(fix=True)

        assert (drift.stored_entries, drift.ledger_entries) == (7, 1)
        assert months_of(alice)[date(2026, 3, 1)] == (Decimal("1.5"), 1)

    def test_a_missing_month_is_rebuilt(self, history, bob):
        MonthlySpend.objects.filter(user=bob).delete()

        [drift] = monthly_spend_verify()
        assert drift.stored_usd is None
        monthly_spend_verify(fix=True)

        assert months_of(bob) == {date(2026, 4, 1): (Decimal("4"), 1)}
        assert quota_status_get(user_id=bob.pk, now=APRIL).spent_usd == Decimal("4")

    def test_a_month_without_ledger_rows_is_removed(self, history, charlie):
        MonthlySpend.objects.create(user=charlie, month=date(2026, 4, 1), total_usd=5, entries=1)

        call_command("spend_check", "--fix")

        assert not MonthlySpend.objects.filter(user=charlie).exists()
        assert quota_status_get(user_id=charlie.pk, now=APRIL).spent_usd == 0

    def test_one_user_can_be_checked_alone(self, history, alice, bob):
        MonthlySpend.objects.filter(user=alice).update(total_usd=Decimal("99"))
        MonthlySpend.objects.filter(user=bob).update(total_usd=Decimal("99"))

        call_command("spend_check", "--fix", "--user", "bob")

        assert months_of(bob)[date(2026, 4, 1)] == (Decimal("4"), 1)
        assert months_of(alice)[date(2026, 3, 1)][0] == Decimal("99")

    def test_an_unknown_user_is_an_error(self):
        with pytest.raises(CommandError, match="No user"):
            call_command("spend_check", "--user", "nobody")

    def test_recording_after_a_fix_adds_to_the_fixed_total(self, history, alice):
        MonthlySpend.objects.filter(user=alice, month=date(2026, 4, 1)).update(total_usd=0)
        monthly_spend_verify(fix=True)

        run(history, "1", finished_at=APRIL)

        assert months_of(alice)[date(2026, 4, 1)] == (Decimal("3.25"), 2)
        assert monthly_spend_verify() == []


# --- Carrying task costs over ------------------------------------------------------------------


class TestCarryOver:
    @pytest.fixture
    def carry_over(self):
        """Migration 0007's carry-over, on the schema it ran on: before SQLite's monthly
        spend trigger (migration 0014) existed, the migration wrote the months itself."""
        migration = importlib.import_module("controlplane.migrations.0007_usage_ledger")
        editor = SimpleNamespace(connection=connection)  # what the migration reads of its editor

        def run():
            if connection.vendor != "sqlite":
                return migration.carry_over_task_costs(
                    django_apps, SimpleNamespace(connection=connection)
                )
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TRIGGER {usage.SQLITE_MONTH_TRIGGER}")
            try:
                migration.carry_over_task_costs(django_apps, editor)
            finally:
                with connection.cursor() as cursor:
                    cursor.execute(usage.sqlite_month_trigger_sql())

        return run

    def test_each_task_with_a_cost_or_a_finish_becomes_one_run(
        self, carry_over, project, alice, bob, task_factory
    ):
        finished = task_factory(
            project,
            alice,
            completed=True,
            cost_usd=Decimal("2.5"),
            turn=3,
            executor="codex",
            thread_id="th-1",
        )
        Task.objects.filter(pk=finished.pk).update(finished_at=MARCH)
        free = task_factory(project, bob, completed=True)
        Task.objects.filter(pk=free.pk).update(finished_at=APRIL)
        running = task_factory(project, alice, status=TaskStatus.RUNNING, cost_usd=Decimal("1"))
        Task.objects.filter(pk=running.pk).update(updated_at=APRIL)
        never_ran = task_factory(project, alice)

        carry_over()

        rows = {
            row.task_id: (row.kind, row.cost_usd, row.finished_at, row.turn, row.thread_id)
            for row in UsageRecord.objects.all()
        }
        assert rows == {
            finished.pk: ("task_run", Decimal("2.5"), MARCH, 3, ""),
            free.pk: ("task_run", Decimal("0"), APRIL, 1, ""),
            running.pk: ("task_run", Decimal("1"), APRIL, 1, ""),
        }
        assert never_ran.pk not in rows
        assert months_of(alice) == {
            date(2026, 3, 1): (Decimal("2.5"), 1),
            date(2026, 4, 1): (Decimal("1"), 1),
        }
        assert months_of(bob) == {date(2026, 4, 1): (Decimal("0"), 1)}
        assert monthly_spend_verify() == []
        assert task_cost_verify() == []

    def test_carried_costs_count_in_the_month_the_task_finished(
        self, carry_over, project, alice, task_factory
    ):
        task = task_factory(project, alice, completed=True, cost_usd=Decimal("8.0005"))

        carry_over()

        status = quota_status_get(user_id=alice.pk)
        assert status.spent_usd == Decimal("8.0005")
        assert status.remaining_percent == Decimal("19.995")
        task.refresh_from_db()
        assert task.cost_usd == Decimal("8.0005")  # the task's own figure is left as it was

    def test_many_tasks_are_carried_in_batches(self, carry_over, project, alice, task_factory):
        Task.objects.bulk_create(
            [
                Task(
                    project=project,
                    user=alice,
                    prompt=f"t{i}",
                    status=TaskStatus.COMPLETED,
                    cost_usd=Decimal("0.001"),
                    finished_at=MARCH,
                )
                for i in range(2500)
            ]
        )

        carry_over()

        assert UsageRecord.objects.count() == 2500
        assert months_of(alice) == {date(2026, 3, 1): (Decimal("2.5"), 2500)}


# --- The runs endpoint -------------------------------------------------------------------------


class TestRunsEndpoint:
    @pytest.fixture
    def task_with_runs(self, project, alice, task_factory):
        task = task_factory(project, alice, completed=True)
        run(task, "0.0018", finished_at=MARCH, model="gpt-5", executor="codex", input_tokens=1200)
        Task.objects.filter(pk=task.pk).update(turn=2)
        task.refresh_from_db()
        run(task, "0.002", finished_at=APRIL, thread_id="th-1", output_tokens=30)
        return task

    @pytest.mark.parametrize("role", ["owner", "member", "viewer"])
    def test_members_read_a_tasks_runs(self, api_client_for, user_for_role, task_with_runs, role):
        response = api_client_for(user_for_role[role]).get(f"/tasks/{task_with_runs.pk}/runs")

        assert response.status_code == 200
        body = response.json()
        assert body["count"] == 2
        first, second = body["results"]
        assert first == {
            "id": first["id"],
            "task_id": task_with_runs.pk,
            "kind": "task_run",
            "turn": 1,
            "finished_at": "2026-03-10T12:00:00Z",
            "executor": "codex",
            "model": "gpt-5",
            "thread_id": "",
            "input_tokens": 1200,
            "cached_input_tokens": 0,
            "cache_write_input_tokens": 0,
            "output_tokens": 0,
            "reasoning_output_tokens": 0,
            "cost_usd": 0.0018,
        }
        assert (second["turn"], second["thread_id"], second["cost_usd"]) == (2, "th-1", 0.002)

    @pytest.mark.parametrize("role", ["stranger", "staff"])
    def test_non_members_get_a_404(self, api_client_for, user_for_role, task_with_runs, role):
        response = api_client_for(user_for_role[role]).get(f"/tasks/{task_with_runs.pk}/runs")

        assert response.status_code == 404

    def test_anonymous_callers_get_a_401(self, api_client_for, task_with_runs):
        assert api_client_for(None).get(f"/tasks/{task_with_runs.pk}/runs").status_code == 401

    @pytest.mark.parametrize("task_id", ["999999", "abc", "-1", "99999999999999999999999"])
    def test_an_unknown_task_is_a_404(self, api_client_for, alice, task_id):
        assert api_client_for(alice).get(f"/tasks/{task_id}/runs").status_code == 404

    def test_a_task_that_never_ran_has_no_runs(self, api_client_for, project, alice, task_factory):
        task = task_factory(project, alice)

        body = api_client_for(alice).get(f"/tasks/{task.pk}/runs").json()

        assert (body["count"], body["results"]) == (0, [])

    def test_the_task_cost_is_the_sum_of_its_runs(self, api_client_for, alice, task_with_runs):
        client = api_client_for(alice)

        runs = client.get(f"/tasks/{task_with_runs.pk}/runs").json()["results"]
        detail = client.get(f"/tasks/{task_with_runs.pk}").json()

        assert detail["cost_usd"] == pytest.approx(sum(row["cost_usd"] for row in runs))
        assert detail["cost_usd"] == 0.0038

    def test_the_schema_documents_the_runs_endpoint(self, client):
        schema = client.get("/api/schema", HTTP_ACCEPT="application/json").json()

        operation = schema["paths"]["/tasks/{task_id}/runs"]["get"]
        assert operation["operationId"] == "tasks_runs_list"


# --- Admin -------------------------------------------------------------------------------------


@pytest.fixture
def admin_client(client, user_factory):
    root = user_factory("root", is_staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    return client


def test_the_task_admin_shows_its_runs(admin_client, project, alice, task_factory):
    task = task_factory(project, alice)
    run(task, "0.75", model="gpt-runs-model", input_tokens=4321)

    page = admin_client.get(f"/admin/controlplane/task/{task.pk}/change/").content.decode()

    assert "Runs (usage ledger)" in page
    assert "gpt-runs-model" in page
    assert "4321" in page


def test_the_ledger_and_monthly_admin_pages_are_read_only(
    admin_client, project, alice, task_factory
):
    record = run(task_factory(project, alice), "0.75", model="gpt-runs-model")
    month = MonthlySpend.objects.get()

    assert "gpt-runs-model" in admin_client.get("/admin/controlplane/usagerecord/").content.decode()
    assert admin_client.get("/admin/controlplane/monthlyspend/").status_code == 200
    assert admin_client.get("/admin/controlplane/usagerecord/add/").status_code == 403
    delete = admin_client.post(
        f"/admin/controlplane/usagerecord/{record.pk}/delete/", {"post": "yes"}
    )
    change = admin_client.post(
        f"/admin/controlplane/monthlyspend/{month.pk}/change/", {"total_usd": "0"}
    )
    assert (delete.status_code, change.status_code) == (403, 403)
    assert UsageRecord.objects.filter(pk=record.pk).exists()
    assert MonthlySpend.objects.get().total_usd == Decimal("0.75")


# --- Concurrency (PostgreSQL) ------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_recorders_never_lose_an_addition(project, alice, task_factory):
    """Eight threads record 25 runs each for one user, half in a new month: the monthly totals
    equal the ledger's sums and every task's cost equals its runs."""
    tasks = [task_factory(project, alice) for _ in range(4)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def record(n: int) -> None:
        try:
            barrier.wait()
            for i in range(25):
                task = tasks[(n + i) % len(tasks)]
                finished_at = APRIL if i % 2 else MARCH
                usage_record(
                    user_id=alice.pk,
                    task_id=task.pk,
                    cost_usd=Decimal("0.000125") * (n + 1),
                    finished_at=finished_at,
                )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=record, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert UsageRecord.objects.count() == 200
    assert monthly_spend_verify() == []
    total = sum(months_of(alice)[month][0] for month in months_of(alice))
    assert total == Decimal("0.000125") * 25 * sum(range(1, 9))
    for task in tasks:
        task.refresh_from_db()
        ledger = sum(UsageRecord.objects.filter(task=task).values_list("cost_usd", flat=True))
        assert task.cost_usd == ledger
