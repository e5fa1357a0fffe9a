import pytest


@pytest.fixture
def fake_openai(settings):
    """A fake OpenAI-compatible server on 127.0.0.1 (tests/automemory/fake_openai.py) that
    auto memory's model client talks to, with a 2 s timeout and no SDK retries."""
    from automemory.services.model_requests import server_forms_forget
    from tests.automemory.fake_openai import FakeOpenAI

    server_forms_forget()
    server = FakeOpenAI().start()
    settings.AUTOMEMORY_OPENAI_BASE_URL = server.base_url
    settings.AUTOMEMORY_OPENAI_API_KEY = "test-key"
    settings.AUTOMEMORY_MODEL_TIMEOUT_SECONDS = 2.0
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    yield server
    server.stop()


@pytest.fixture
def on(auto_memory_on, alice):
    """Auto memory on for alice (generate and use), with the default settings."""
    return auto_memory_on(alice)


CLIENT_PY = "".join(f"def step_{i}():\n    return {i}\n" for i in range(1, 41))  # 80 lines


@pytest.fixture
def code_remote(tmp_path, settings):
    """A real bare repository over file:// whose `main` holds a Python file of 80 lines,
    a path with a space, one with non-ASCII letters, a binary file and a symlink pointing
    out of the tree, with this test's own repository cache."""
    from tests.git_remotes import bare_remote, git

    settings.REPOSITORY_FILE_ROOTS = [str(tmp_path / "remotes")]
    settings.WORKER_REPO_CACHE = str(tmp_path / "cache")
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
    (tmp_path / "remotes").mkdir()
    remote = bare_remote(
        tmp_path / "remotes",
        {
            "api/client.py": CLIENT_PY,
            "docs/how to deploy.md": "# Deploy\n\nRun make deploy.\nTag first.\n",
            "src/café/naïve.py": "VALUE = 'é'\nOTHER = 2\n",
            "img/logo.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)),
        },
    )
    (remote.work / "passwd").symlink_to("/etc/passwd")
    git("add", "passwd", cwd=remote.work)
    git("commit", "-q", "-m", "a link out of the tree", cwd=remote.work)
    git("push", "-q", "origin", "HEAD:refs/heads/main", cwd=remote.work)
    return remote


@pytest.fixture
def code_project(project, alice, code_remote):
    """`project` with `code_remote` as its repository (default branch `main`)."""
    from controlplane.services.repositories import repository_set

    repository_set(actor=alice, project=project, url=code_remote.url, default_branch="main")
    return project
