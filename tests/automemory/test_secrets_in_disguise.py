"""Secrets written in disguise are refused as manual memories and redacted from auto
memories: full-width forms, a zero-width space inside a token,
percent-encoding, HTML entities and base64 text."""

from __future__ import annotations

import base64

import pytest

from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.redactor import REDACTED, redact, secret_kinds
from controlplane.models import IdentityMemory, MemorySource
from tests.controlplane.helpers import post_json

TOKEN = "ghp_" + "Q7r2K5m3P4h6N8d9J1w0Zq7r2K5m3P4h6N8d"
PASSWORD = "Vx9-kT3#pLq2"


def _wide(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) for c in s)


# (content, what must not survive in any form)
DISGUISED = {
    "full-width token": (f"CI pushes with {_wide(TOKEN)}", [_wide(TOKEN), TOKEN]),
    "zero-width space in a token": (
        f"CI pushes with {TOKEN[:12]}\u200b{TOKEN[12:]}",
        [TOKEN[12:], TOKEN[:12]],
    ),
    "percent-encoded database URL": (
        "DATABASE_URL=postgres%3A%2F%2Fadmin%3A" + "Vx9-kT3%23pLq2" + "%40db.internal%2Fapp",
        ["Vx9-kT3%23pLq2", "kT3"],
    ),
    "password as an HTML entity": (f"the staging password&#61;{PASSWORD}", [PASSWORD]),
    "base64 database URL": (
        "DB_URL_B64="
        + base64.b64encode(f"postgres://admin:{PASSWORD}@db.internal/app".encode()).decode(),
        [base64.b64encode(f"postgres://admin:{PASSWORD}@db.internal/app".encode()).decode()],
    ),
}


@pytest.mark.parametrize("name", DISGUISED)
def test_the_redactor_sees_the_secret_through_its_disguise(name):
    content, hidden = DISGUISED[name]
    out = redact(content)
    assert REDACTED in out
    assert all(piece not in out for piece in hidden), out
    assert secret_kinds(content)


@pytest.mark.django_db
@pytest.mark.parametrize("name", DISGUISED)
def test_a_manual_memory_holding_a_disguised_secret_is_refused(
    api_client_for, project, alice, name
):
    content, hidden = DISGUISED[name]
    client = api_client_for(alice)

    for path in ("/users/me/memories", f"/projects/{project.pk}/memories"):
        response = post_json(client, path, {"content": content})
        assert response.status_code == 400
        message = response.json()["content"][0]
        assert "holds a secret" in message
        assert all(piece not in response.content.decode() for piece in hidden)
    assert not IdentityMemory.objects.exists()


@pytest.mark.django_db
def test_disguised_secrets_do_not_survive_into_an_auto_memory(task_factory, project, alice, on):
    result = " ".join(content for content, _hidden in DISGUISED.values())
    task = task_factory(
        project,
        alice,
        prompt="Summarise the deployment settings",
        completed=True,
        result_text=f"Deployment settings checked. {result} Everything else is unchanged. " * 2,
    )
    process_auto_memories(user=alice)

    content = IdentityMemory.objects.get(source=MemorySource.AUTO).content
    for _content, hidden in DISGUISED.values():
        assert all(piece not in content for piece in hidden), content
    assert content.count(REDACTED) >= len(DISGUISED), content  # each one was kept, redacted
    task.refresh_from_db()
    assert _wide(TOKEN) in task.result_text  # the task's own record stays as it came
