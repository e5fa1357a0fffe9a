import pytest

from automemory.checks import POSITIVE_INTEGERS, automemory_settings_check
from controlplane.models import MemoryStatus


def ids():
    return [problem.id for problem in automemory_settings_check()]


def test_the_default_settings_pass():
    assert ids() == []


def test_a_content_strategy_that_cannot_be_imported_is_an_error(settings):
    settings.AUTOMEMORY_CONTENT_STRATEGY = "automemory.services.nothing.here"
    assert ids() == ["automemory.E001"]


def test_a_content_strategy_must_be_callable(settings):
    settings.AUTOMEMORY_CONTENT_STRATEGY = "automemory.conf.DEFAULTS"
    assert ids() == ["automemory.E002"]


def test_limits_must_be_positive_integers(settings):
    settings.AUTOMEMORY_SWEEP_BATCH_SIZE = 0
    settings.AUTOMEMORY_INJECT_USER_LIMIT = "5"
    assert ids() == ["automemory.E003", "automemory.E003"]


@pytest.mark.parametrize("name", POSITIVE_INTEGERS)
@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10", None])
def test_every_count_and_duration_setting_is_checked(settings, name, bad):
    setattr(settings, f"AUTOMEMORY_{name}", bad)
    problems = automemory_settings_check()
    assert [problem.id for problem in problems] == ["automemory.E003"]
    assert f"AUTOMEMORY_{name}" in problems[0].msg


def summarise(task, *, injected):
    return f"summary of {task.prompt}"


def test_the_configured_strategy_writes_the_memory(
    settings, task_factory, project, alice, auto_memory_on
):
    from automemory.services.extraction.sweep import process_auto_memories
    from controlplane.models import IdentityMemory

    settings.AUTOMEMORY_CONTENT_STRATEGY = "tests.automemory.test_checks.summarise"
    auto_memory_on(alice)
    task_factory(project, alice, prompt="Tidy the docs", completed=True)
    process_auto_memories(user=alice)
    memory = IdentityMemory.objects.get(source="auto")
    assert memory.content == "summary of Tidy the docs"
    assert memory.status == MemoryStatus.ACTIVE
