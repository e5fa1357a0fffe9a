"""The OpenAPI schema, the offline API page and the admin pages."""

import pytest
from django.apps import apps
from django.contrib.admin import site
from django.contrib.staticfiles import finders

from controlplane.models import AuditEvent, MemorySource
from tests.conftest import memory_stored

pytestmark = pytest.mark.django_db

HOST_PATHS = [
    "/projects",
    "/projects/{project_id}",
    "/projects/{project_id}/members",
    "/projects/{project_id}/tasks",
    "/projects/{project_id}/memories",
    "/tasks/{task_id}",
    "/tasks/{task_id}/continue",
    "/tasks/{task_id}/followups",
    "/users/me/memories",
    "/users/me/quota",
    "/users/{username}/quota",
    "/memories/{memory_id}",
]


def test_the_schema_lists_every_host_endpoint(client):
    response = client.get("/api/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    schema = response.json()
    for path in HOST_PATHS:
        assert path in schema["paths"], path
    task_create = schema["paths"]["/projects/{project_id}/tasks"]["post"]
    assert "201" in task_create["responses"]
    assert schema["paths"]["/tasks/{task_id}"]["get"]["parameters"][0]["schema"]["type"] == (
        "integer"
    )


def test_list_endpoints_are_documented_as_pages(client):
    schema = client.get("/api/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    page = schema["components"]["schemas"]["PaginatedTaskSummaryList"]
    assert set(page["properties"]) == {"count", "next", "previous", "results"}


def _schema(client) -> dict:
    return client.get("/api/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()


def test_every_request_body_refuses_unknown_fields_in_the_schema(client):
    components = _schema(client)["components"]["schemas"]
    requests = {name: body for name, body in components.items() if name.endswith("Request")}

    assert "TaskCreateInputRequest" in requests
    assert {name: body.get("additionalProperties") for name, body in requests.items()} == {
        name: False for name in requests
    }


def test_every_list_documents_its_paging_parameters_and_their_400(client):
    schema = _schema(client)
    lists = [
        operation
        for item in schema["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict)
        and "page" in {parameter["name"] for parameter in operation.get("parameters", [])}
    ]

    assert len(lists) >= 9
    for operation in lists:
        parameters = {parameter["name"]: parameter for parameter in operation["parameters"]}
        assert parameters["page"]["schema"]["minimum"] == 1, operation["operationId"]
        assert parameters["page_size"]["schema"]["maximum"] == 200, operation["operationId"]
        assert "400" in operation["responses"], operation["operationId"]


def test_the_log_filters_and_zero_one_booleans_are_in_the_schema(client):
    schema = _schema(client)
    log = schema["paths"]["/users/me/auto-memory-log"]["get"]
    parameters = {parameter["name"]: parameter for parameter in log["parameters"]}
    force = schema["components"]["schemas"]["RunInputRequest"]["properties"]["force"]

    assert parameters["outcome"]["schema"]["enum"] == ["extracted", "skipped", "error"]
    assert "result_too_short" in parameters["reason"]["schema"]["enum"]
    assert "400" in log["responses"]
    assert force["oneOf"] == [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}]


def test_the_api_page_uses_bundled_assets(client):
    response = client.get("/api/docs")

    assert response.status_code == 200
    html = response.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


@pytest.fixture
def admin_client_logged_in(client, user_factory):
    admin = user_factory("root", is_staff=True)
    admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    return client


@pytest.mark.parametrize(
    "model",
    ["project", "membership", "task", "taskfollowup", "taskevent", "quota", "identitymemory"],
)
def test_every_host_model_has_admin_pages(admin_client_logged_in, model):
    assert admin_client_logged_in.get(f"/admin/controlplane/{model}/").status_code == 200
    assert admin_client_logged_in.get(f"/admin/controlplane/{model}/add/").status_code == 200


def test_the_memory_admin_shows_the_source_task_and_filters(
    admin_client_logged_in, project, task_factory
):
    task = task_factory(project, completed=True)
    memory = memory_stored(
        scope="project",
        project=project,
        content="Use the staging DB",
        source=MemorySource.AUTO,
        source_task=task,
        goal_key="g",
    )

    listing = admin_client_logged_in.get(
        "/admin/controlplane/identitymemory/?source__exact=auto&q=staging"
    )
    detail = admin_client_logged_in.get(f"/admin/controlplane/identitymemory/{memory.pk}/change/")

    assert listing.status_code == 200
    assert "Use the staging DB" in listing.content.decode()
    assert f"task {task.pk}" in listing.content.decode()
    assert detail.status_code == 200


def test_the_audit_log_admin_is_read_only(admin_client_logged_in, alice):
    event = AuditEvent.objects.create(action="task_created", actor=alice, target_type="task")

    assert admin_client_logged_in.get("/admin/controlplane/auditevent/").status_code == 200
    assert admin_client_logged_in.get("/admin/controlplane/auditevent/add/").status_code == 403
    change = admin_client_logged_in.post(
        f"/admin/controlplane/auditevent/{event.pk}/change/", {"action": "edited"}
    )
    delete = admin_client_logged_in.post(
        f"/admin/controlplane/auditevent/{event.pk}/delete/", {"post": "yes"}
    )

    assert change.status_code == 403
    assert delete.status_code == 403
    event.refresh_from_db()
    assert event.action == "task_created"


def test_the_root_leads_to_the_api_page(client):
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/api/docs"


@pytest.mark.parametrize(
    "path",
    [
        "/projects",
        "/projects/{project}",
        "/projects/{project}/tasks",
        "/projects/{project}/members",
        "/projects/{project}/memories",
        "/tasks/{task}",
        "/tasks/{task}/followups",
        "/users/me/memories",
        "/users/me/quota",
        "/projects/999999",
    ],
)
def test_the_browsable_api_renders_for_a_logged_in_user(client, alice, project, task_factory, path):
    task = task_factory(project)
    client.force_login(alice)

    response = client.get(path.format(project=project.pk, task=task.pk), HTTP_ACCEPT="text/html")

    assert response.status_code in (200, 404)
    assert response["Content-Type"].startswith("text/html")


def test_a_session_write_without_csrf_token_is_refused(alice, project, snapshot):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    before = snapshot()

    response = client.post(
        f"/projects/{project.pk}/tasks", data='{"prompt": "x"}', content_type="application/json"
    )

    assert response.status_code == 403
    assert snapshot() == before


def test_the_repository_admin_is_read_only_and_never_shows_the_credential(
    admin_client_logged_in, project, alice
):
    from controlplane.services.repositories import repository_set

    token = "ghp_AdminMustNotShowThis0123456789abcdef"
    repository, _ = repository_set(
        actor=alice,
        project=project,
        url="https://h.example/a.git",
        default_branch="main",
        credential=token,
    )
    listing = admin_client_logged_in.get("/admin/controlplane/repository/")
    detail = admin_client_logged_in.get(f"/admin/controlplane/repository/{repository.pk}/change/")
    assert listing.status_code == detail.status_code == 200
    for page in (listing, detail):
        text = page.content.decode()
        assert token not in text and repository.credential_ciphertext not in text
    assert "https://h.example/a.git" in detail.content.decode()
    assert admin_client_logged_in.get("/admin/controlplane/repository/add/").status_code == 403


@pytest.mark.parametrize(
    ("model", "may_delete"),
    [
        ("controlplane.AuditEvent", False),
        ("controlplane.UsageRecord", False),
        ("controlplane.MonthlySpend", False),
        ("controlplane.Repository", False),
        ("controlplane.ApiToken", True),
        ("automemory.AutoMemoryLog", False),
        ("automemory.MemoryState", False),
        ("automemory.SweepState", True),
        ("automemory.ExtractionDraft", True),
        ("worker.WorkerProcess", True),
        ("worker.TaskRun", True),
        ("worker.CodexSession", True),
    ],
)
def test_rows_that_services_write_are_neither_added_nor_changed_in_the_admin(
    rf, django_user_model, model, may_delete
):
    request = rf.get("/admin/")
    request.user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    model_admin = site._registry[apps.get_model(model)]

    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert model_admin.has_delete_permission(request) is may_delete
