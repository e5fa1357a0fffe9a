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
