import pytest

from automemory.models import TaskAutoMemoryFlags
from controlplane.models import Task


def url(task_id):
    return f"/tasks/{task_id}/auto-memory-flags"


@pytest.fixture
def task(task_factory, project, alice):
    return task_factory(project, alice)


@pytest.mark.parametrize(
    ("who", "get_status", "post_status"),
    [
        ("alice", 200, 200),  # owner
        ("bob", 200, 200),  # member
        ("vera", 200, 403),  # viewer
        ("charlie", 404, 404),  # stranger
    ],
)
def test_permissions(request, api_client_for, task, who, get_status, post_status):
    client = api_client_for(request.getfixturevalue(who))
    assert client.get(url(task.pk)).status_code == get_status
    response = client.post(url(task.pk), {"use_memories": False}, format="json")
    assert response.status_code == post_status
    assert TaskAutoMemoryFlags.objects.exists() == (post_status == 200)


def test_anonymous_is_refused(api_client_for, task):
    assert api_client_for(None).post(url(task.pk), {}, format="json").status_code in (401, 403)


def test_flags_default_to_following_the_user(api_client_for, alice, task, auto_memory_on):
    auto_memory_on(alice, generate_memories=True, use_memories=False)
    body = api_client_for(alice).get(url(task.pk)).json()
    assert body["use_memories"] is None
    assert body["generate_memories"] is None
    assert body["effective_generate_memories"] is True
    assert body["effective_use_memories"] is False


def test_setting_and_clearing_a_flag(api_client_for, alice, task):
    client = api_client_for(alice)
    body = client.post(
        url(task.pk), {"use_memories": True, "generate_memories": False}, format="json"
    ).json()
    assert body["use_memories"] is True
    assert body["effective_use_memories"] is True
    assert body["generate_memories"] is False
    body = client.post(url(task.pk), {"use_memories": None}, format="json").json()
    assert body["use_memories"] is None
    assert body["effective_use_memories"] is False
    assert body["generate_memories"] is False, "a field not sent keeps its value"


def test_flags_do_not_change_the_task_row(api_client_for, alice, task):
    before = Task.objects.filter(pk=task.pk).values().get()
    api_client_for(alice).post(url(task.pk), {"use_memories": True}, format="json")
    after = Task.objects.filter(pk=task.pk).values().get()
    assert before == after


@pytest.mark.parametrize(
    "body", [{"use_memories": "yes"}, {"generate_memories": 3}, {"other": True}]
)
def test_bad_flags_get_a_400(api_client_for, alice, task, body):
    response = api_client_for(alice).post(url(task.pk), body, format="json")
    assert response.status_code == 400
    assert set(response.json()) == set(body)
    assert not TaskAutoMemoryFlags.objects.exists()


@pytest.mark.parametrize("task_id", ["999999", "abc", "-1", "99999999999999999999999"])
def test_unknown_tasks_are_404(api_client_for, alice, task_id, db):
    client = api_client_for(alice)
    assert client.get(url(task_id)).status_code == 404
    assert client.post(url(task_id), {"use_memories": True}, format="json").status_code == 404
