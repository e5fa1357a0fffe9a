"""Bad input never produces a 500 and never writes anything.

Malformed JSON, bodies that are not objects, wrong types, NUL characters, lone surrogates,
huge bodies, deep nesting, odd ids in paths and trailing slashes, on every write endpoint.
"""

import json

import pytest

from .helpers import post_raw

pytestmark = pytest.mark.django_db

WRITES = [
    ("post", "/projects"),
    ("post", "/projects/{project}/members"),
    ("post", "/projects/{project}/tasks"),
    ("post", "/tasks/{task}/continue"),
    ("post", "/tasks/{task}/followups"),
    ("post", "/users/me/memories"),
    ("post", "/projects/{project}/memories"),
    ("put", "/users/alice/quota"),
]

FIELDS = ("name", "prompt", "goal", "message", "content", "username", "monthly_limit_usd")


def every_field(value) -> str:
    """A JSON object giving `value` (JSON text) to every field any endpoint reads."""
    return "{" + ", ".join(f'"{field}": {value}' for field in FIELDS) + ', "role": "member"}'


BAD_BODIES = {
    "empty": "",
    "not json": "hello",
    "truncated": '{"prompt": "x"',
    "trailing garbage": '{"prompt": "x"} }',
    "invalid utf-8": b'{"prompt": "\xff\xfe"}',
    "utf-8 encoded surrogate": b'{"prompt": "\xed\xa0\x80"}',
    "array": "[]",
    "string": '"prompt"',
    "number": "42",
    "null": "null",
    "NaN": every_field("NaN"),
    "Infinity": every_field("Infinity"),
    "escaped NUL": every_field('"a\\u0000b"'),
    "lone high surrogate": every_field('"a\\ud800b"'),
    "lone low surrogate": every_field('"\\udfff"'),
    "reversed surrogate pair": every_field('"\\udc00\\ud800"'),
    "nested object": every_field('{"a": 1}'),
    "array value": every_field("[1, 2]"),
    "boolean": every_field("true"),
    "too many digits": every_field("1" * 5000),
    "deep nesting": '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "huge body": json.dumps({"prompt": "x" * (2 * 1024 * 1024)}),
}


@pytest.mark.parametrize(("method", "path"), WRITES)
@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_bad_bodies_get_a_4xx_and_write_nothing(
    api_client_for, staff, alice, project, task_factory, snapshot, method, path, body
):
    task = task_factory(project, completed=True)
    user = staff if path.startswith("/users/alice") else alice
    client = api_client_for(user)
    before = snapshot()

    response = post_raw(client, path.format(project=project.pk, task=task.pk), body, method)

    assert response.status_code in (400, 413), response.content[:300]
    assert snapshot() == before


def test_a_huge_body_is_413(api_client_for, alice, project):
    body = json.dumps({"prompt": "x" * (2 * 1024 * 1024)})

    response = post_raw(api_client_for(alice), f"/projects/{project.pk}/tasks", body)

    assert response.status_code == 413


@pytest.mark.parametrize("body", ["", "null", "{}"])
def test_an_empty_or_null_body_reports_the_missing_field(api_client_for, alice, project, body):
    response = post_raw(api_client_for(alice), f"/projects/{project.pk}/tasks", body)

    assert response.status_code == 400


def test_a_form_body_is_415(api_client_for, alice, project, snapshot):
    before = snapshot()

    response = api_client_for(alice).post(f"/projects/{project.pk}/tasks", {"prompt": "go"})

    assert response.status_code == 415
    assert snapshot() == before


def test_field_errors_are_named_per_field(api_client_for, alice, project):
    response = post_raw(
        api_client_for(alice),
        f"/projects/{project.pk}/tasks",
        '{"prompt": "a\\u0000b", "goal": "\\ud800", "kind": 7, "parent_task_id": "x"}',
    )

    assert response.status_code == 400
    assert set(response.json()) == {"prompt", "goal", "kind", "parent_task_id"}


def test_odd_but_valid_unicode_is_stored_as_sent(api_client_for, alice, project):
    prompt = "emoji 🧠, RTL \u202eabc, zero width \u200b, combining e\u0301, 中文"

    response = post_raw(
        api_client_for(alice), f"/projects/{project.pk}/tasks", json.dumps({"prompt": prompt})
    )

    assert response.status_code == 201
    assert api_client_for(alice).get(f"/tasks/{response.json()['id']}").json()["prompt"] == prompt


ODD_IDS = [
    "0",
    "-1",
    "abc",
    "1.0",
    "1e3",
    "%00",
    "%ED%A0%80",
    "%EF%BC%91",  # a full-width digit one
    "99999999999999999999999999",
    "9223372036854775808",
    "+1",
    "%201",
]
ID_PATHS = [
    ("get", "/projects/{id}"),
    ("get", "/projects/{id}/tasks"),
    ("post", "/projects/{id}/tasks"),
    ("get", "/projects/{id}/memories"),
    ("post", "/projects/{id}/members"),
    ("get", "/tasks/{id}"),
    ("post", "/tasks/{id}/continue"),
    ("post", "/tasks/{id}/followups"),
    ("delete", "/memories/{id}"),
]


@pytest.mark.parametrize(("method", "path"), ID_PATHS)
@pytest.mark.parametrize("odd_id", ODD_IDS)
def test_odd_ids_in_paths_are_404(api_client_for, alice, project, snapshot, method, path, odd_id):
    before = snapshot()
    client = api_client_for(alice)
    url = path.format(id=odd_id)

    if method in ("post",):
        response = client.post(url, data='{"prompt": "x"}', content_type="application/json")
    else:
        response = getattr(client, method)(url)

    assert response.status_code == 404
    assert snapshot() == before


@pytest.mark.parametrize(
    "path",
    [
        "/projects/",
        "/projects/{project}/",
        "/projects/{project}/tasks/",
        "/tasks/{task}/",
        "/tasks/{task}/continue/",
        "/users/me/quota/",
        "/users/me/memories/",
    ],
)
def test_trailing_slash_paths_do_not_exist(
    api_client_for, alice, project, task_factory, snapshot, path
):
    task = task_factory(project, completed=True)
    before = snapshot()
    url = path.format(project=project.pk, task=task.pk)

    client = api_client_for(alice)
    assert client.get(url).status_code == 404
    assert (
        client.post(url, data='{"prompt": "x"}', content_type="application/json").status_code == 404
    )
    assert snapshot() == before


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("?page=abc", "page"),
        ("?page=0", "page"),
        ("?page=-1", "page"),
        ("?page=", "page"),
        ("?page=2", "page"),  # past the last page
        ("?page=99999999999999999999", "page"),
        ("?page_size=-1", "page_size"),
        ("?page_size=0", "page_size"),
        ("?page_size=abc", "page_size"),
        ("?page_size=201", "page_size"),
        ("?page=0&page_size=abc", "page"),
    ],
)
@pytest.mark.parametrize("path", ["/projects/{id}/tasks", "/projects", "/users/me/tokens"])
def test_bad_paging_parameters_are_400_with_a_message_per_parameter(
    api_client_for, alice, project, query, parameter, path
):
    response = api_client_for(alice).get(path.format(id=project.pk) + query)

    assert response.status_code == 400
    assert response.json()[parameter], response.json()


def test_good_paging_parameters_page_through(api_client_for, alice, project_factory):
    for number in range(3):
        project_factory(alice, f"p{number}")
    client = api_client_for(alice)

    first = client.get("/projects?page_size=2").json()
    second = client.get("/projects?page=2&page_size=2").json()

    assert first["count"] == 3 and len(first["results"]) == 2 and first["next"]
    assert len(second["results"]) == 1 and second["next"] is None


@pytest.mark.parametrize("query", ["?status=", "?status=bogus", "?status=QUEUED"])
def test_an_empty_or_unknown_task_filter_is_400(api_client_for, alice, project, query):
    response = api_client_for(alice).get(f"/projects/{project.pk}/tasks{query}")

    assert response.status_code == 400
    assert response.json()["status"]


@pytest.mark.parametrize("query", ["?status=", "?source=bogus"])
def test_an_empty_or_unknown_memory_filter_is_400(api_client_for, alice, query):
    response = api_client_for(alice).get(f"/users/me/memories{query}")

    assert response.status_code == 400
    assert set(response.json()) == {query[1:].split("=")[0]}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/projects", {"name": "x"}),
        ("post", "/projects/{id}/tasks", {"prompt": "Fix it."}),
        ("post", "/projects/{id}/members", {"username": "bob", "role": "member"}),
        ("post", "/projects/{id}/memories", {"content": "Uses ruff."}),
        ("post", "/users/me/memories", {"content": "Likes tests."}),
        ("post", "/users/me/tokens", {"name": "ci"}),
    ],
)
def test_unknown_fields_are_400_on_every_write_and_nothing_is_saved(
    api_client_for, alice, project, bob, snapshot, method, path, body
):
    before = snapshot()

    response = getattr(api_client_for(alice), method)(
        path.format(id=project.pk), {**body, "priority": 1}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"priority": ["Unknown field."]}
    assert snapshot() == before


def test_a_task_body_that_is_not_an_object_is_400(api_client_for, alice, project):
    response = api_client_for(alice).post(
        f"/projects/{project.pk}/tasks", ["prompt"], format="json"
    )

    assert response.status_code == 400


def test_a_bad_token_is_401(project, client):
    response = client.get("/projects", HTTP_AUTHORIZATION="Token nope\x00")

    assert response.status_code == 401


@pytest.mark.parametrize(
    "cookie", ["abc\x00defghijklmnop", "\xff\xfe" * 10, "x" * 5000, "%00" * 20]
)
def test_a_bad_session_cookie_is_ignored(project, client, cookie):
    client.cookies["sessionid"] = cookie

    response = client.get("/projects")

    assert response.status_code in (401, 403)
