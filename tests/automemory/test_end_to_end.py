"""The whole loop over HTTP: settings on, tasks run by the echo worker, memory, injection."""

import pytest
from django.core.management import call_command

from automemory.services.provenance import HEADER
from controlplane.models import IdentityMemory

SECRET = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"


def run_worker():
    call_command("run_worker", "--once", "--executor", "echo", "--worker-id", "e2e")


@pytest.mark.django_db(transaction=True)
def test_the_auto_memory_loop(api_client_for, alice, project):
    client = api_client_for(alice)
    response = client.put(
        "/users/me/auto-memory-settings",
        {
            "generate_memories": True,
            "use_memories": True,
            "idle_seconds": 0,
            "min_duration_seconds": 0,
            "min_result_chars": 20,
        },
        format="json",
    )
    assert response.status_code == 200, response.content

    tasks = f"/projects/{project.pk}/tasks"
    long_prompt = (
        f"Document the deploy steps\nUse OPENAI_API_KEY={SECRET} for the smoke test. "
        + "Then describe each step of the release checklist in detail. " * 3
    )
    documented = client.post(tasks, {"prompt": long_prompt}, format="json").json()
    short = client.post(tasks, {"prompt": "ok"}, format="json").json()
    messaged = client.post(tasks, {"prompt": "Answer the other task " * 5}, format="json").json()
    assert (
        client.post(
            f"/tasks/{messaged['id']}/followups", {"message": "context"}, format="json"
        ).status_code
        == 201
    )

    run_worker()

    for task in (documented, short, messaged):
        assert client.get(f"/tasks/{task['id']}").json()["status"] == "completed"
    log = {row["task_id"]: row for row in client.get("/users/me/auto-memory-log").json()["results"]}
    assert log[documented["id"]]["outcome"] == "extracted"
    assert log[short["id"]]["reason"] == "result_too_short"
    assert log[messaged["id"]]["reason"] == "external_context"

    memories = client.get(f"/projects/{project.pk}/memories").json()["results"]
    assert len(memories) == 1
    memory = memories[0]
    assert memory["source"] == "auto"
    assert memory["source_thread_id"] == documented["id"]
    assert memory["content"].startswith("Document the deploy steps\n")
    assert SECRET not in memory["content"] and "[REDACTED]" in memory["content"]
    assert log[documented["id"]]["memory_id"] == memory["id"]
    assert not IdentityMemory.objects.filter(scope="user").exists()

    follow_up = client.post(tasks, {"prompt": "Release version 2"}, format="json").json()
    run_worker()
    detail = client.get(f"/tasks/{follow_up['id']}").json()
    assert detail["prompt"] == "Release version 2", "the stored prompt is unchanged"
    assert detail["result_text"].startswith(HEADER)
    assert "Document the deploy steps" in detail["result_text"]
    assert detail["result_text"].endswith("Release version 2")
    assert detail["injected_memory_ids"] == [memory["id"]]

    continued = client.post(
        f"/tasks/{follow_up['id']}/continue", {"prompt": "Now tag it"}, format="json"
    )
    assert continued.status_code in (200, 201, 202), continued.content
    run_worker()
    detail = client.get(f"/tasks/{follow_up['id']}").json()
    assert detail["turn"] == 2
    assert detail["result_text"] == "Now tag it", "a continuation gets no memories"
