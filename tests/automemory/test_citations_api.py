"""Citations through the memory API: what a memory cites is checked against the project's
repository (a real bare repository over file://) and shown in its output and the list; bad
citations are a 400 naming the field, and nothing is written."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automemory.models import MemoryCitation
from controlplane.models import IdentityMemory
from tests.controlplane.helpers import post_json

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _always_fetch(settings):
    settings.AUTOMEMORY_CITATION_MIRROR_REFRESH_SECONDS = 0


def create(client, project, citations, content="The client retries twice."):
    return post_json(
        client, f"/projects/{project.pk}/memories", {"content": content, "citations": citations}
    )


def patch(client, memory_id, body):
    return post_json(client, f"/memories/{memory_id}", body, method="patch")


def test_a_memory_cites_lines_and_shows_them_with_the_commit_and_state(
    api_client_for, code_project, alice, code_remote
):
    response = create(
        api_client_for(alice),
        code_project,
        [
            {"path": "api/client.py", "start_line": 40, "end_line": 60},
            {"path": "docs/how to deploy.md", "start_line": 3, "end_line": 4},
            {"path": "src/café/naïve.py", "start_line": 1, "end_line": 1},
        ],
    )

    assert response.status_code == 201, response.content
    head = code_remote.head()
    assert response.json()["citations"] == [
        {
            "path": "api/client.py",
            "start_line": 40,
            "end_line": 60,
            "commit": head,
            "state": "fresh",
        },
        {
            "path": "docs/how to deploy.md",
            "start_line": 3,
            "end_line": 4,
            "commit": head,
            "state": "fresh",
        },
        {
            "path": "src/café/naïve.py",
            "start_line": 1,
            "end_line": 1,
            "commit": head,
            "state": "fresh",
        },
    ]
    stored = MemoryCitation.objects.get(path="api/client.py")
    assert stored.branch == "main" and len(stored.content_hash) == 64


def test_the_list_shows_citations_in_its_one_statement(
    api_client_for, code_project, alice, memory_factory
):
    client = api_client_for(alice)
    for i in range(3):
        assert (
            create(
                client,
                code_project,
                [{"path": "api/client.py", "start_line": i + 1, "end_line": i + 2}],
                content=f"fact {i}",
            ).status_code
            == 201
        )
    memory_factory(project=code_project, content="cites nothing")
    client.get(f"/projects/{code_project.pk}/memories")  # the token's first use is recorded once

    with CaptureQueriesContext(connection) as queries:
        body = client.get(f"/projects/{code_project.pk}/memories").json()

    assert len(queries) == 3, [q["sql"] for q in queries]
    cited = {row["content"]: row["citations"] for row in body["results"]}
    assert cited["cites nothing"] == []
    assert [(c["start_line"], c["end_line"]) for c in cited["fact 2"]] == [(3, 4)]


def test_patch_replaces_and_clears_citations(api_client_for, code_project, alice):
    client = api_client_for(alice)
    memory_id = create(
        client, code_project, [{"path": "api/client.py", "start_line": 1, "end_line": 2}]
    ).json()["id"]

    changed = patch(
        client,
        memory_id,
        {"citations": [{"path": "api/client.py", "start_line": 5, "end_line": 9}]},
    )
    assert changed.status_code == 200, changed.content
    assert [(c["start_line"], c["end_line"]) for c in changed.json()["citations"]] == [(5, 9)]

    cleared = patch(client, memory_id, {"citations": []})
    assert cleared.json()["citations"] == []
    assert not MemoryCitation.objects.exists()


ADVERSARIAL = [
    ({"path": "/etc/passwd", "start_line": 1, "end_line": 1}, "citations[0].path", "absolute"),
    ({"path": "../../x", "start_line": 1, "end_line": 1}, "citations[0].path", ".."),
    ({"path": "api/../../x", "start_line": 1, "end_line": 1}, "citations[0].path", ".."),
    ({"path": "passwd", "start_line": 1, "end_line": 1}, "citations[0].path", "symlink"),
    ({"path": "img/logo.png", "start_line": 1, "end_line": 1}, "citations[0].path", "binary"),
    ({"path": "missing.py", "start_line": 1, "end_line": 1}, "citations[0].path", "not a file"),
    ({"path": "api", "start_line": 1, "end_line": 1}, "citations[0].path", "not a file"),
    ({"path": ".git/config", "start_line": 1, "end_line": 1}, "citations[0].path", "git"),
    (
        {"path": "api/client.py", "start_line": 81, "end_line": 81},
        "citations[0].end_line",
        "80 lines",
    ),
    ({"path": "api/client.py", "start_line": 1, "end_line": 10**12}, "citations", ""),
    ({"path": "api/client.py", "start_line": -3, "end_line": 2}, "citations", ""),
    ({"path": "api/client.py", "start_line": 9, "end_line": 2}, "citations", ""),
    ({"path": "api/client.py", "start_line": "1", "end_line": 2}, "citations", ""),
    ({"path": "api/client.py", "start_line": 1}, "citations", ""),
    ({"path": "api/client.py", "start_line": 1, "end_line": 2, "x": 1}, "citations", ""),
]


@pytest.mark.parametrize("citation, field, said", ADVERSARIAL)
@pytest.mark.parametrize("how", ["post", "patch"])
def test_a_bad_citation_is_a_400_naming_the_field_and_writes_nothing(
    api_client_for, code_project, alice, memory_factory, citation, field, said, how
):
    client = api_client_for(alice)
    memory = memory_factory(project=code_project, content="before")
    before = IdentityMemory.objects.count()

    if how == "post":
        response = create(client, code_project, [citation])
    else:
        response = patch(client, memory.pk, {"content": "after", "citations": [citation]})

    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body, body
    if said:
        assert said in str(body[field]), body
    assert IdentityMemory.objects.count() == before
    assert not MemoryCitation.objects.exists()
    memory.refresh_from_db()
    assert memory.content == "before"


def test_ten_thousand_citations_are_refused_unread(api_client_for, code_project, alice):
    citations = [{"path": "api/client.py", "start_line": 1, "end_line": 1}] * 10_000

    response = create(api_client_for(alice), code_project, citations)

    assert response.status_code == 400
    assert "citations" in response.json()
    assert not MemoryCitation.objects.exists()


def test_a_project_without_a_repository_cannot_cite(api_client_for, project, alice):
    response = create(
        api_client_for(alice), project, [{"path": "a.py", "start_line": 1, "end_line": 1}]
    )

    assert response.status_code == 400
    assert "repository" in str(response.json()["citations"])


def test_a_user_level_memory_cannot_cite(api_client_for, alice):
    response = post_json(
        api_client_for(alice),
        "/users/me/memories",
        {"content": "I like tabs.", "citations": [{"path": "a", "start_line": 1, "end_line": 1}]},
    )

    assert response.status_code == 400
    assert "citations" in response.json()


def test_a_stranger_cannot_read_a_foreign_memory_s_citations(
    api_client_for, code_project, alice, charlie
):
    memory_id = create(
        api_client_for(alice),
        code_project,
        [{"path": "api/client.py", "start_line": 1, "end_line": 2}],
    ).json()["id"]
    stranger = api_client_for(charlie)

    assert stranger.get(f"/memories/{memory_id}").status_code == 404
    assert stranger.get(f"/projects/{code_project.pk}/memories").status_code == 404
    refused = patch(
        stranger,
        memory_id,
        {"citations": [{"path": "api/client.py", "start_line": 1, "end_line": 1}]},
    )
    assert refused.status_code == 404


def test_ten_thousand_citations_in_a_patch_are_refused_unread(
    api_client_for, code_project, alice, memory_factory
):
    memory = memory_factory(project=code_project, content="before")
    citations = [{"path": "/etc/passwd", "start_line": 1, "end_line": 1}] * 10_000

    response = patch(api_client_for(alice), memory.pk, {"citations": citations})

    assert response.status_code == 400
    assert "citations" in response.json()
    assert not MemoryCitation.objects.exists()
