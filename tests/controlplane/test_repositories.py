"""A project's repository through the API: who may attach, read and detach it, which URLs
are refused (and why, under `url`), the write-only credential, a task's branch, and the
diff endpoint."""

from __future__ import annotations

import io
import os

import pytest
from django.core.management import call_command

from controlplane.credentials import credential_decrypt
from controlplane.models import AuditEvent, Repository, TaskDiff
from tests.controlplane.helpers import post_json

TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


@pytest.fixture
def file_root(tmp_path, settings):
    root = tmp_path / "repos"
    (root / "app.git").mkdir(parents=True)
    settings.REPOSITORY_FILE_ROOTS = [str(root)]
    return root


def put(client, project, body):
    return post_json(client, f"/projects/{project.pk}/repository", body, method="put")


@pytest.mark.django_db
class TestAccess:
    def test_the_owner_attaches_changes_and_detaches_it(self, api_client_for, project, alice):
        client = api_client_for(alice)
        url = "https://git.example.com/team/app.git"
        created = put(client, project, {"url": url, "default_branch": "main"})
        assert created.status_code == 201, created.json()
        assert created.json()["url"] == url
        assert created.json()["remote_status"] == "unchecked"
        changed = put(client, project, {"url": url, "default_branch": "trunk"})
        assert (changed.status_code, changed.json()["default_branch"]) == (200, "trunk")
        assert client.delete(f"/projects/{project.pk}/repository").status_code == 204
        assert client.get(f"/projects/{project.pk}/repository").status_code == 404
        actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
        assert actions == ["repository_created", "repository_changed", "repository_deleted"]

    @pytest.mark.parametrize(
        ("role", "read", "write"),
        [
            ("owner", 200, 200),
            ("member", 200, 403),
            ("viewer", 200, 403),
            ("stranger", 404, 404),
            ("staff", 404, 404),
            ("anonymous", 401, 401),
        ],
    )
    def test_members_read_owners_write(
        self, api_client_for, project, alice, user_for_role, role, read, write
    ):
        put(api_client_for(alice), project, {"url": "git@example.com:app.git"})
        client = api_client_for(user_for_role[role])
        assert client.get(f"/projects/{project.pk}/repository").status_code == read
        assert put(client, project, {"url": "git@example.com:b.git"}).status_code == write
        assert client.delete(f"/projects/{project.pk}/repository").status_code in (
            write if write != 200 else 204,
        )


@pytest.mark.django_db
class TestUrls:
    @pytest.mark.parametrize(
        "url",
        [
            "https://github.com/org/app.git",
            "https://deploy@git.example.com:8443/org/app",
            "ssh://git@github.com/org/app.git",
            "ssh://git@[2001:db8::1]:2222/srv/app.git",
            "git@github.com:org/app.git",
            "github.com:org/app.git",
        ],
    )
    def test_accepted(self, api_client_for, project, alice, url):
        response = put(api_client_for(alice), project, {"url": url})
        assert response.status_code == 201, response.json()
        assert response.json()["default_branch"] == "main"

    @pytest.mark.parametrize(
        "url",
        [
            "http://github.com/org/app.git",
            "git://github.com/org/app.git",
            "ext::sh -c touch% /tmp/pwned",
            "fd::17",
            "/srv/repos/app.git",
            "./app.git",
            "https://user:secret@github.com/org/app.git",
            "https://github.com/org/app.git?token=x",
            "https://-oProxyCommand=x/app",
            "ssh://-oProxyCommand=touch%20x/app",
            "-oProxyCommand=x:app",
            "git@-oProxyCommand=x:app",
            "git@host:-u evil",
            "https://github.com",
            "https://exa mple.com/a",
            "https://github.com/org/app\n.git",
            "https://" + "a" * 2100 + ".com/x",
            "file:///etc",
            "file://[x/a.git",
            "https://[::1/a.git",
            "https://host:99999/a.git",
            "",
        ],
    )
    def test_refused_naming_the_field(self, api_client_for, project, alice, url, snapshot):
        before = snapshot()
        response = put(api_client_for(alice), project, {"url": url})
        assert response.status_code == 400
        assert list(response.json()) == ["url"]
        assert snapshot() == before

    def test_a_file_url_only_inside_a_root(self, api_client_for, project, alice, file_root):
        client = api_client_for(alice)
        assert put(client, project, {"url": f"file://{file_root}/app.git"}).status_code == 201
        outside = put(client, project, {"url": f"file://{file_root.parent}/other.git"})
        assert outside.status_code == 400
        assert "REPOSITORY_FILE_ROOTS" in outside.json()["url"][0]

    def test_a_link_inside_a_root_to_the_control_plane_s_files_is_refused(
        self, api_client_for, project, alice, file_root, settings
    ):
        target = settings.BASE_DIR
        (file_root / "innocent.git").symlink_to(target)
        response = put(api_client_for(alice), project, {"url": f"file://{file_root}/innocent.git"})
        assert response.status_code == 400
        assert "must be inside a folder of REPOSITORY_FILE_ROOTS" in response.json()["url"][0]

    @pytest.mark.parametrize("which", ["base_dir", "task_root", "repo_cache", "around"])
    def test_the_control_plane_s_own_files_are_refused_even_inside_a_root(
        self, api_client_for, project, alice, settings, tmp_path, which
    ):
        own = {
            "base_dir": settings.BASE_DIR,
            "task_root": settings.WORKER_TASK_ROOT,
            "repo_cache": settings.WORKER_REPO_CACHE,
            "around": os.path.dirname(str(settings.BASE_DIR)),
        }[which]
        settings.REPOSITORY_FILE_ROOTS = ["/"]
        response = put(api_client_for(alice), project, {"url": f"file://{own}"})
        assert response.status_code == 400
        assert "control plane's own files" in response.json()["url"][0]

    @pytest.mark.parametrize(
        "url",
        ["https://127.0.0.1:6379/x.git", "ssh://localhost:6379/x.git", "[::1]:x.git"],
    )
    def test_the_control_plane_s_cache_and_database_addresses_are_refused(
        self, api_client_for, project, alice, settings, url
    ):
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "LOCATION": "redis://127.0.0.1:6379/0",
            }
        }
        settings.DATABASES = {
            **settings.DATABASES,
            "other": {"ENGINE": "django.db.backends.postgresql", "HOST": "::1", "PORT": 22},
        }
        response = put(api_client_for(alice), project, {"url": url})
        assert response.status_code == 400, response.json()
        assert "control plane's own database or cache" in response.json()["url"][0]

    @pytest.mark.parametrize(
        "branch",
        [
            "",
            "-x",
            "a..b",
            "a b",
            "a:b",
            "x.lock",
            ".hidden",
            "a//b",
            "@",
            "HEAD",
            "a~1",
            "controlplane/task-3",
            "é" * 300,
        ],
    )
    def test_a_bad_default_branch_is_refused(self, api_client_for, project, alice, branch):
        response = put(
            api_client_for(alice), project, {"url": "git@h.example:a.git", "default_branch": branch}
        )
        assert response.status_code == 400
        assert list(response.json()) == ["default_branch"]


@pytest.mark.django_db
class TestCredential:
    def test_it_is_stored_encrypted_and_never_returned(self, api_client_for, project, alice):
        client = api_client_for(alice)
        body = {"url": "https://git.example.com/app.git", "credential": TOKEN}
        response = put(client, project, body)
        assert response.status_code == 201
        assert response.json()["credential_set"] is True
        assert TOKEN not in response.content.decode()
        assert TOKEN not in client.get(f"/projects/{project.pk}/repository").content.decode()
        stored = Repository.objects.get(project=project).credential_ciphertext
        assert TOKEN not in stored and credential_decrypt(stored) == TOKEN
        assert TOKEN not in str(list(AuditEvent.objects.values_list("data", flat=True)))
        assert AuditEvent.objects.get().data["credential"] == "set"

    def test_kept_without_one_dropped_with_a_new_url_removed_with_null(
        self, api_client_for, project, alice
    ):
        client = api_client_for(alice)
        url = "https://git.example.com/app.git"
        put(client, project, {"url": url, "credential": TOKEN})
        assert put(client, project, {"url": url}).json()["credential_set"] is True
        moved = put(client, project, {"url": "https://elsewhere.example/app.git"})
        assert moved.json()["credential_set"] is False  # never sent to a host it was not for
        put(client, project, {"url": url, "credential": TOKEN})
        assert (
            put(client, project, {"url": url, "credential": None}).json()["credential_set"] is False
        )
        assert [e.data["credential"] for e in AuditEvent.objects.order_by("id")] == [
            "set",
            "kept",
            "dropped_with_url",
            "set",
            "removed",
        ]

    @pytest.mark.parametrize(
        ("url", "credential"),
        [
            ("https://git.example.com/app.git", "two words"),
            ("https://git.example.com/app.git", "line\nbreak"),
            ("https://git.example.com/app.git", ""),
            ("https://git.example.com/app.git", 42),
            ("https://git.example.com/app.git", "x" * 20000),
            ("https://git.example.com/app.git", "nul\x00"),
            ("git@git.example.com:app.git", "not a key"),
        ],
    )
    def test_a_bad_credential_is_a_400_under_its_field(
        self, api_client_for, project, alice, url, credential, snapshot
    ):
        before = snapshot()
        response = put(api_client_for(alice), project, {"url": url, "credential": credential})
        assert response.status_code == 400
        assert list(response.json()) == ["credential"]
        assert snapshot() == before

    def test_a_file_repository_takes_no_credential(self, api_client_for, project, alice, file_root):
        response = put(
            api_client_for(alice),
            project,
            {"url": f"file://{file_root}/app.git", "credential": TOKEN},
        )
        assert (response.status_code, list(response.json())) == (400, ["credential"])

    def test_an_ssh_key_is_accepted(self, api_client_for, project, alice):
        response = put(
            api_client_for(alice),
            project,
            {"url": "git@git.example.com:app.git", "credential": KEY},
        )
        assert response.status_code == 201 and KEY not in response.content.decode()

    def test_keys_rotate(self, api_client_for, project, alice, settings):
        from cryptography.fernet import Fernet

        old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
        settings.REPOSITORY_CREDENTIAL_KEYS = [old]
        put(api_client_for(alice), project, {"url": "https://h.example/a.git", "credential": TOKEN})
        settings.REPOSITORY_CREDENTIAL_KEYS = [new, old]
        out = io.StringIO()
        call_command("repository_credentials_rotate", stdout=out)
        assert out.getvalue().startswith("1 credentials re-encrypted")
        settings.REPOSITORY_CREDENTIAL_KEYS = [new]
        stored = Repository.objects.get(project=project).credential_ciphertext
        assert credential_decrypt(stored) == TOKEN


@pytest.mark.django_db
class TestTasks:
    def test_a_task_takes_the_default_branch_or_one_it_names(self, api_client_for, project, alice):
        client = api_client_for(alice)
        put(client, project, {"url": "git@h.example:a.git", "default_branch": "trunk"})
        default = post_json(client, f"/projects/{project.pk}/tasks", {"prompt": "Fix it"})
        named = post_json(
            client, f"/projects/{project.pk}/tasks", {"prompt": "Fix it", "branch": "feature/x"}
        )
        assert (default.json()["branch"], named.json()["branch"]) == ("trunk", "feature/x")
        assert default.json()["base_commit"] is None and default.json()["changed_files"] == []

    def test_without_a_repository_a_task_is_as_it_was(self, api_client_for, project, alice):
        client = api_client_for(alice)
        body = post_json(client, f"/projects/{project.pk}/tasks", {"prompt": "Fix it"}).json()
        assert (body["branch"], body["head_commit"], body["changed_files"]) == (None, None, [])
        refused = post_json(
            client, f"/projects/{project.pk}/tasks", {"prompt": "Fix it", "branch": "main"}
        )
        assert refused.status_code == 400 and list(refused.json()) == ["branch"]
        assert client.get(f"/tasks/{body['id']}/diff").status_code == 404

    @pytest.mark.parametrize("branch", ["a..b", "controlplane/task-1", "", 7, None])
    def test_a_bad_branch_is_a_400(self, api_client_for, project, alice, branch):
        client = api_client_for(alice)
        put(client, project, {"url": "git@h.example:a.git"})
        response = post_json(
            client, f"/projects/{project.pk}/tasks", {"prompt": "Fix it", "branch": branch}
        )
        assert response.status_code == 400 and list(response.json()) == ["branch"]


@pytest.mark.django_db
class TestDiff:
    def test_members_read_it_as_text_with_its_truncation_said(
        self, api_client_for, project, alice, vera, charlie, task_factory
    ):
        put(api_client_for(alice), project, {"url": "git@h.example:a.git"})
        task = task_factory(project, alice, branch="main")
        empty = api_client_for(vera).get(f"/tasks/{task.pk}/diff")
        assert (empty.status_code, empty.content, empty["X-Diff-Truncated"]) == (200, b"", "false")
        from django.utils import timezone

        TaskDiff.objects.create(
            task=task,
            base_commit="a" * 40,
            head_commit="b" * 40,
            diff="diff --git a/x b/x\n+é\n[diff truncated: ...]\n",
            diff_bytes=10**7,
            truncated=True,
            files_changed=1,
            updated_at=timezone.now(),
        )
        response = api_client_for(vera).get(f"/tasks/{task.pk}/diff", HTTP_ACCEPT="text/x-diff")
        assert response.status_code == 200
        assert response["Content-Type"] == "text/x-diff; charset=utf-8"
        assert response["X-Diff-Truncated"] == "true"
        assert "+é" in response.content.decode()
        stranger = api_client_for(charlie).get(f"/tasks/{task.pk}/diff", HTTP_ACCEPT="text/x-diff")
        assert stranger.status_code == 404 and stranger["Content-Type"] == "application/json"
