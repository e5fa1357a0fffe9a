"""Two sweeping processes consolidating at once on PostgreSQL keep the memory invariants.

The consolidation model is a fake OpenAI-compatible server on 127.0.0.1 that answers each
request from what it is shown: the new memory's text names the action wanted (`add`,
`update`, `supersede` or `noop`), applied to the first candidate memory shown.
"""

import json
import subprocess
from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from automemory.models import AutoMemoryLog, AutoMemorySettings, MemorySourceTask
from controlplane.models import (
    IdentityMemory,
    Membership,
    Project,
    Role,
    Task,
    TaskStatus,
    UsageKind,
    UsageRecord,
)
from tests.automemory.fake_openai import COMPLETIONS_PATH, FakeOpenAI, RecordedRequest, answer
from tests.automemory.processes import sweeping_process_start

MODEL = "fake-consolidator"
ACTIONS = ("add", "update", "supersede", "noop")
SWEEPS = (
    "from automemory.services.extraction.sweep import process_auto_memories;"
    "[process_auto_memories() for _ in range(4)]"
)


class DecidingOpenAI(FakeOpenAI):
    """The fake server, answering each consolidation request from its own content."""

    def _handler_class(self):
        base = super()._handler_class()
        fake = self

        class Handler(base):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with fake._lock:
                    fake.requests.append(RecordedRequest(self.path, dict(self.headers), body))
                reply = decide(body) if self.path == COMPLETIONS_PATH else None
                payload = json.dumps(reply.body if reply else {}).encode()
                self.send_response(reply.status if reply else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


def decide(body):
    data = json.loads(body["messages"][-1]["content"])
    text = data["new_memory"]["text"]
    action = next(a for a in ACTIONS if f"ACTION-{a}" in text)
    first = data["existing_memories"][0]["id"]
    return answer(
        {
            "action": action,
            "memory_id": first if action in ("update", "noop") else None,
            "memory_ids": [first] if action == "supersede" else [],
            "text": f"The deploy pipeline needs the staging flag (merged into {first})"
            if action == "update"
            else "",
            "reason": "scripted",
        }
    )


def start_sweeps(base_url: str) -> subprocess.Popen:
    return sweeping_process_start(base_url, SWEEPS)


@pytest.fixture
def deciding_server():
    server = DecidingOpenAI().start()
    yield server
    server.stop()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_consolidating_sweeps_keep_one_memory_per_task_and_one_active_per_goal(
    user_factory, deciding_server
):
    users = [user_factory(f"consolidator{i}") for i in range(2)]
    project = Project.objects.create(name="shared", created_by=users[0])
    for user in users:
        Membership.objects.create(
            project=project, user=user, role=Role.OWNER if user == users[0] else Role.MEMBER
        )
        AutoMemorySettings.objects.create(
            user=user,
            generate_memories=True,
            consolidation_model=MODEL,
            monthly_memory_budget_usd=100,
        )
    now = timezone.now()
    tasks = []
    for i in range(48):
        finished = now - timedelta(hours=2, seconds=i)
        action = "add" if i < 6 else ACTIONS[i % 4]
        tasks.append(
            Task(
                project=project,
                user=users[i % 2],
                prompt=f"Deploy pipeline step {i % 9}\nbody",
                status=TaskStatus.COMPLETED,
                started_at=finished - timedelta(minutes=3),
                finished_at=finished,
                result_text=f"The deploy pipeline needs the staging flag ACTION-{action} {i}. " * 6,
            )
        )
    Task.objects.bulk_create(tasks)

    processes = [start_sweeps(deciding_server.base_url) for _ in range(2)]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]

    logs = {row.task_id: row for row in AutoMemoryLog.objects.all()}
    # No lost task: every task has its final answer, none an error or left waiting.
    assert len(logs) == len(tasks)
    outcomes = Counter((row.outcome, row.reason) for row in logs.values())
    assert set(outcomes) <= {
        ("extracted", "new"),
        ("extracted", "superseded"),
        ("extracted", "superseded_on_write"),
        ("extracted", "merged"),
        ("skipped", "already_known"),
    }, outcomes
    # Each task ends as its scripted answer says, or (when the other sweep retired the memory
    # the answer names in between) as a new memory whose detail says the answer was not
    # applied. Which of the two happens depends on timing; the invariants below do not.
    scripted = {
        task.pk: next(a for a in ACTIONS if f"ACTION-{a} " in task.result_text) for task in tasks
    }
    applied = {
        "add": {"new", "superseded", "superseded_on_write"},
        "supersede": {"superseded", "superseded_on_write"},
        "update": {"merged"},
        "noop": {"already_known"},
    }
    for task_id, row in logs.items():
        action = scripted[task_id]
        if row.reason not in applied[action]:
            assert "not applied" in row.detail, (action, row.reason, row.detail)
    reasons = {reason for _, reason in outcomes}
    assert {"merged", "already_known"} <= reasons, outcomes
    assert reasons & {"superseded", "superseded_on_write"}, outcomes

    auto = IdentityMemory.objects.filter(source="auto")
    # One memory per task: a task made one memory, or was merged into one, or neither (noop).
    per_task = Counter(auto.values_list("source_task_id", flat=True))
    assert set(per_task.values()) == {1}
    links = {link.task_id: link for link in MemorySourceTask.objects.all()}
    for task_id, row in logs.items():
        link = links.get(task_id)
        if row.outcome == "skipped":
            assert link is None and task_id not in per_task
            assert row.memory_id is not None
            continue
        assert link is not None, row
        assert row.memory_id == link.memory_id
        assert link.merged == (row.reason == "merged")
        assert (task_id in per_task) == (not link.merged)
    # One active auto memory per goal.
    active = Counter(
        auto.filter(status="active").values_list("project_id", "auto_memory_goal__goal_key")
    )
    assert set(active.values()) == {1}
    for memory in auto.filter(status="superseded"):
        assert memory.superseded_by_id is not None
    # A `supersede` answer that was applied retired a memory of another goal (the same-goal
    # rule never does).
    if any(scripted[t] == "supersede" and r.reason == "superseded" for t, r in logs.items()):
        assert (
            auto.filter(status="superseded")
            .exclude(auto_memory_goal__goal_key=F("superseded_by__auto_memory_goal__goal_key"))
            .exists()
        )
    # Every consolidation call is one ledger row, charged to the task's user.
    ledger = UsageRecord.objects.filter(kind=UsageKind.MEMORY_CONSOLIDATION)
    assert ledger.count() == len(deciding_server.completion_requests) > 0
    owners = {task.pk: task.user_id for task in Task.objects.all()}
    assert all(owners[row.task_id] == row.user_id for row in ledger)
