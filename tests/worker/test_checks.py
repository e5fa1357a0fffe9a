from django.test import override_settings

from worker.checks import worker_settings_check


def ids():
    return [problem.id for problem in worker_settings_check()]


def test_the_default_settings_pass(settings):
    assert ids() == []


def test_an_unknown_executor_is_reported(settings):
    settings.WORKER_EXECUTOR = "bogus"
    assert ids() == ["worker.W001"]


def test_the_command_executor_needs_a_command(settings):
    settings.WORKER_EXECUTOR = "command"
    settings.WORKER_COMMAND = ""
    assert ids() == ["worker.W002"]
    settings.WORKER_COMMAND = "agent 'unterminated"
    assert ids() == ["worker.W002"]
    settings.WORKER_COMMAND = "my-agent --fast"
    assert ids() == []


def test_a_stale_threshold_too_close_to_the_heartbeat_is_reported(settings):
    settings.WORKER_HEARTBEAT_SECONDS = 10
    settings.WORKER_STALE_AFTER_SECONDS = 15
    assert ids() == ["worker.W003"]


def test_a_finish_retry_shorter_than_the_stale_threshold_is_reported(settings):
    settings.WORKER_STALE_AFTER_SECONDS = 60
    settings.WORKER_FINISH_RETRY_SECONDS = 30
    assert ids() == ["worker.W006"]
    settings.WORKER_FINISH_RETRY_SECONDS = -1
    assert ids() == ["worker.W006"]
    settings.WORKER_FINISH_RETRY_SECONDS = 60
    assert ids() == []


# --- The agent's world --------------------------------------------------------------------


def sandbox_ids():
    from worker.checks import worker_isolation_deploy_check, worker_sandbox_check

    return [p.id for p in [*worker_sandbox_check(), *worker_isolation_deploy_check()]]


def test_an_unknown_sandbox_mode_and_secret_names_for_agents_are_reported(settings):
    settings.WORKER_SANDBOX = "docker"
    settings.WORKER_AGENT_ENV = ["OPENAI_API_KEY", "DATABASE_URL"]
    found = sandbox_ids()
    assert "worker.W007" in found and "worker.W008" in found
    settings.WORKER_SANDBOX = "auto"
    settings.WORKER_AGENT_ENV = ["OPENAI_API_KEY"]
    assert not {"worker.W007", "worker.W008"} & set(sandbox_ids())


def test_showing_agents_the_control_plane_s_folders_is_reported(settings, tmp_path):
    for shown in (settings.BASE_DIR, settings.VAR_DIR / "tasks", "/"):
        settings.WORKER_SANDBOX_READ_ONLY = [str(shown)]
        assert "worker.W009" in sandbox_ids(), shown
    settings.WORKER_SANDBOX_READ_ONLY = [str(tmp_path)]
    assert "worker.W009" not in sandbox_ids()


def test_the_deploy_check_warns_when_agents_run_unsandboxed(settings):
    settings.WORKER_SANDBOX = "none"
    assert "worker.W010" in sandbox_ids()
    settings.WORKER_SANDBOX = "auto"
    settings.WORKER_SANDBOX_BINARY = "no-such-bwrap"
    assert "worker.W010" in sandbox_ids()


def test_the_deploy_check_warns_about_a_database_reached_without_a_password(settings):
    settings.WORKER_SANDBOX_NETWORK = "host"
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "cp", "USER": "postgres"}
    settings.DATABASES = {"default": {**database, "HOST": "127.0.0.1", "PASSWORD": ""}}
    assert "worker.W011" in sandbox_ids()
    settings.DATABASES = {"default": {**database, "HOST": "127.0.0.1", "PASSWORD": "s3cret"}}
    assert "worker.W011" not in sandbox_ids()
    settings.DATABASES = {"default": {**database, "HOST": "/var/run/postgresql"}}
    assert "worker.W011" not in sandbox_ids()  # the socket is not shown to sandboxed agents


def test_a_worker_asked_for_bubblewrap_that_cannot_run_it_refuses_to_start(settings):
    import pytest
    from django.core.management import CommandError, call_command

    settings.WORKER_SANDBOX = "bwrap"
    settings.WORKER_SANDBOX_BINARY = "no-such-bwrap"
    with pytest.raises(CommandError, match="no-such-bwrap"):
        call_command("run_worker", "--once", "--executor", "command")


def test_agents_on_the_host_s_network_are_reported_and_isolated_ones_are_not(settings):
    from worker.sandbox import sandbox_mode

    settings.WORKER_SANDBOX = "bwrap"
    if sandbox_mode() != "bwrap":
        return  # without bubblewrap, W010 says it all (tested above)
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "cp", "USER": "postgres"}
    settings.DATABASES = {"default": {**database, "HOST": "127.0.0.1", "PASSWORD": ""}}
    settings.WORKER_SANDBOX_NETWORK = "host"
    assert {"worker.W015", "worker.W011"} <= set(sandbox_ids())
    settings.WORKER_SANDBOX_NETWORK = "isolated"
    # The database is out of an isolated agent's reach, password or not.
    assert not {"worker.W015", "worker.W011"} & set(sandbox_ids())


def test_a_bad_network_mode_or_egress_entry_is_reported(settings):
    settings.WORKER_SANDBOX_NETWORK = "bridge"
    settings.WORKER_AGENT_EGRESS = ["api.openai.com:443", "no-port", "http://x:1"]
    found = sandbox_ids()
    assert "worker.W012" in found
    assert found.count("worker.W013") == 2


def test_egress_to_the_control_plane_s_own_database_or_cache_is_reported(settings):
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "cp", "USER": "postgres"}
    settings.DATABASES = {"default": {**database, "HOST": "db.internal", "PORT": "6432"}}
    cache = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://:pw@cache.internal/0",
    }
    # (only around the check: the tests' own cache must be back before their clean-up)
    with override_settings(CACHES={"default": cache}):
        settings.WORKER_AGENT_EGRESS = ["api.openai.com:443"]
        assert "worker.W014" not in sandbox_ids()
        for entry in ("db.internal:6432", "DB.internal:6432", "cache.internal:6379"):
            settings.WORKER_AGENT_EGRESS = ["api.openai.com:443", entry]
            assert sandbox_ids().count("worker.W014") == 1, entry
