"""The echo path for real: the worker loop runs a quoting agent through the `command` executor.

Alice's private memory is injected into her task; the agent script echoes its stdin; the
round's sweep writes a project memory; Bob, who shares the project, reads it and runs a task of
his own with it. Nothing of Alice's memory reaches him.
"""

import json
import shlex
import sys
import textwrap

import pytest
from django.core.management import call_command

from automemory.models import AutoMemoryLog
from controlplane.models import AuditEvent
from controlplane.textnorm import text_as_read

PRIVATE = "Alice keeps the zanzibar pager rotation notes in the blue notebook under her desk"

AGENTS = {
    "prefix": """
        import sys
        prompt = sys.stdin.read()
        print("Result for: " + prompt)
        print("Done: the session check now compares expiry in UTC.")
    """,
    "quote-every-line": """
        import sys
        prompt = sys.stdin.read()
        print("You wrote:")
        print("\\n".join("> " + line for line in prompt.splitlines()))
        print("Done: the session check now compares expiry in UTC.")
    """,
    # Zero-width characters between the letters of every word it echoes.
    "zero-width-echo": """
        import re, sys
        prompt = sys.stdin.read()
        print("Result for: " + re.sub(r"(?<=\\w)(?=\\w)", "\\u200b\\u2063", prompt))
        print("Done: the session check now compares expiry in UTC.")
    """,
}


@pytest.mark.parametrize("agent", AGENTS, ids=list(AGENTS))
@pytest.mark.django_db(transaction=True)
def test_a_quoting_agent_never_carries_a_private_memory_to_another_member(
    agent, api_client_for, alice, bob, project, settings, tmp_path
):
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(AGENTS[agent]))
    settings.WORKER_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    gates = {"idle_seconds": 0, "min_duration_seconds": 0, "min_result_chars": 20}
    for user in (alice, bob):
        # Alice consents to sharing what her tasks learn while holding her own notes; the
        # private text must still never reach Bob.
        body = {
            "generate_memories": True,
            "use_memories": True,
            "share_private_derived": user == alice,
            **gates,
        }
        response = api_client_for(user).put("/users/me/auto-memory-settings", body, format="json")
        assert response.status_code == 200
    alice_api, bob_api = api_client_for(alice), api_client_for(bob)
    remembered = alice_api.post("/users/me/memories", {"content": PRIVATE}, format="json")
    assert remembered.status_code == 201
    tasks = f"/projects/{project.pk}/tasks"

    created = alice_api.post(tasks, {"prompt": "Fix the login bug"}, format="json").json()
    call_command("run_worker", "--once", "--executor", "command", "--worker-id", "e2e")

    detail = alice_api.get(f"/tasks/{created['id']}").json()
    assert detail["status"] == "completed"
    assert "zanzibar" in text_as_read(detail["result_text"]), "the agent echoed the memory"
    log = AutoMemoryLog.objects.get(task_id=created["id"])
    assert log.outcome == "extracted", log.detail
    memories = bob_api.get(f"/projects/{project.pk}/memories").json()["results"]
    assert len(memories) == 1
    assert "session check now compares expiry" in memories[0]["content"]

    own = bob_api.post(tasks, {"prompt": "Add a login test"}, format="json").json()
    call_command("run_worker", "--once", "--executor", "command", "--worker-id", "e2e")
    bob_result = bob_api.get(f"/tasks/{own['id']}").json()["result_text"]
    assert "session check now compares expiry" in bob_result, "Bob's task got the memory"

    readable = text_as_read(
        json.dumps(
            [
                bob_api.get(f"/projects/{project.pk}/memories").json(),
                bob_result,
                bob_api.get("/users/me/auto-memory-log").json(),
                list(AutoMemoryLog.objects.values("detail")),
                list(AuditEvent.objects.values("data")),
            ],
            ensure_ascii=False,
        )
    ).casefold()
    for part in ("zanzibar", "pager rotation", "blue notebook"):
        assert part not in readable
