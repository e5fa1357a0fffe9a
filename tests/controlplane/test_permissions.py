"""Who may do what: every endpoint against anonymous, stranger, viewer, member, owner, staff.

Non-members (staff included: staff have no rights over projects) get 404, members without
the needed permission 403, anonymous callers 401. A refused write changes no row.
"""

import pytest

from .conftest import ROLES
from .helpers import post_json

pytestmark = pytest.mark.django_db

# (name, method, path template, body, expected status per role in ROLES order)
#                       anonymous stranger viewer member owner staff
READ_PROJECT = (401, 404, 200, 200, 200, 404)
CREATE_TASK = (401, 404, 403, None, None, 404)  # None: the success code of the endpoint
OWNER_ONLY = (401, 404, 403, 403, None, 404)
ANY_USER = (401, None, None, None, None, None)
STAFF_ONLY = (401, 403, 403, 403, 403, None)
# The task's own user (here the owner, who created it); another member gets 403.
TASK_USER_ONLY = (401, 404, 403, 403, None, 404)

ENDPOINTS = [
    ("list projects", "get", "/projects", None, 200, ANY_USER),
    ("create project", "post", "/projects", {"name": "new"}, 201, ANY_USER),
    ("read project", "get", "/projects/{project}", None, 200, READ_PROJECT),
    ("list members", "get", "/projects/{project}/members", None, 200, READ_PROJECT),
    (
        "add member",
        "post",
        "/projects/{project}/members",
        {"username": "zoe", "role": "member"},
        201,
        OWNER_ONLY,
    ),
    ("list tasks", "get", "/projects/{project}/tasks", None, 200, READ_PROJECT),
    ("queue task", "post", "/projects/{project}/tasks", {"prompt": "go"}, 201, CREATE_TASK),
    ("read task", "get", "/tasks/{task}", None, 200, READ_PROJECT),
    (
        "continue task",
        "post",
        "/tasks/{task}/continue",
        {"prompt": "more"},
        200,
        TASK_USER_ONLY,
    ),
    ("list messages", "get", "/tasks/{task}/followups", None, 200, READ_PROJECT),
    ("send message", "post", "/tasks/{task}/followups", {"message": "hi"}, 201, CREATE_TASK),
    ("list project memories", "get", "/projects/{project}/memories", None, 200, READ_PROJECT),
    (
        "add project memory",
        "post",
        "/projects/{project}/memories",
        {"content": "fact"},
        201,
        CREATE_TASK,
    ),
    ("forget project memory", "delete", "/memories/{memory}", None, 204, CREATE_TASK),
    ("list my memories", "get", "/users/me/memories", None, 200, ANY_USER),
    ("add my memory", "post", "/users/me/memories", {"content": "fact"}, 201, ANY_USER),
    ("read my quota", "get", "/users/me/quota", None, 200, ANY_USER),
    ("read a quota", "get", "/users/alice/quota", None, 200, STAFF_ONLY),
    (
        "set a quota",
        "put",
        "/users/alice/quota",
        {"monthly_limit_usd": 3},
        200,
        STAFF_ONLY,
    ),
    ("drop a quota", "delete", "/users/alice/quota", None, 204, STAFF_ONLY),
]

CASES = [
    pytest.param(method, path, body, role, expected[i] or success, id=f"{name}-{role}")
    for name, method, path, body, success, expected in ENDPOINTS
    for i, role in enumerate(ROLES)
]


@pytest.mark.parametrize(("method", "path", "body", "role", "expected"), CASES)
def test_permission_matrix(
    api_client_for,
    user_for_role,
    user_factory,
    project,
    task_factory,
    memory_factory,
    snapshot,
    method,
    path,
    body,
    role,
    expected,
):
    user_factory("zoe")
    task = task_factory(project, completed=True)
    memory = memory_factory(project=project)
    url = path.format(project=project.pk, task=task.pk, memory=memory.pk)
    client = api_client_for(user_for_role[role])
    before = snapshot()

    if body is None:
        response = getattr(client, method)(url)
    else:
        response = post_json(client, url, body, method=method)

    assert response.status_code == expected, response.content
    if expected >= 400:
        assert snapshot() == before
