"""How the model client asks each kind of server for a schema, through the sweep, over HTTP
(tests/automemory/fake_openai.py answering as the servers do; the real llama.cpp server is in
test_local_model.py)."""

import pytest

from automemory.models import AutoMemoryLog
from automemory.services.extraction.model import EXTRACTION_SCHEMA
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.model_requests import schema_gbnf
from controlplane.models import IdentityMemory, MemorySource
from tests.automemory.fake_openai import answer, http_error

MODEL = "local-model"
GOOD = {
    "worth_remembering": True,
    "kind": "gotcha",
    "memory": "The API tests need Redis on 127.0.0.1:6379; `.ci/run` starts it when it is down.",
    "keywords": ["redis", "tests"],
    "citations": [],
    "reason": "an environment requirement",
}
# What llama-cpp-python's server answers a `json_schema` response format with (HTTP 500).
LLAMA_CPP_PYTHON_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
    "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}"
)
# What OpenAI answers a temperature its reasoning models do not take with (HTTP 400).
OPENAI_TEMPERATURE_REFUSAL = (
    "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default "
    "(1) value is supported."
)


@pytest.fixture
def tasks(task_factory, project, alice):
    return [
        task_factory(
            project,
            alice,
            prompt=f"Make the API tests pass, part {n}",
            completed=True,
            result_text="The tests failed without Redis. " * 10,
        )
        for n in (1, 2)
    ]


@pytest.fixture
def modelled(auto_memory_on, alice):
    return auto_memory_on(alice, extract_model=MODEL)


def forms(requests) -> list[str]:
    """The schema form of each request."""
    found = []
    for request in requests:
        response_format = request.body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            found.append("json_schema")
        elif response_format.get("type") == "json_object" and "schema" in response_format:
            found.append("json_object_schema")
        elif "grammar" in request.body:
            found.append("grammar")
        else:
            found.append("none")
    return found


def llama_cpp_python(request):
    """Answers as llama-cpp-python's server does: `json_schema` refused with a 500."""
    if forms([request]) == ["json_schema"]:
        return http_error(500, LLAMA_CPP_PYTHON_REFUSAL)
    return answer(GOOD)


def test_auto_finds_the_form_a_llama_cpp_python_server_takes_and_keeps_it(
    fake_openai, modelled, tasks, alice, settings
):
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "auto"
    fake_openai.respond_with(llama_cpp_python)

    summary = process_auto_memories(user=alice)

    assert summary.extracted == 2
    assert IdentityMemory.objects.filter(source=MemorySource.AUTO).count() == 2
    # Refused once, then the next form; the second task is asked in that form at once.
    assert forms(fake_openai.completion_requests) == [
        "json_schema",
        "json_object_schema",
        "json_object_schema",
    ]
    sent = fake_openai.completion_requests[1].body["response_format"]["schema"]
    assert sent == EXTRACTION_SCHEMA
    assert fake_openai.completion_requests[1].body["temperature"] == 0.2


def test_a_configured_form_the_server_refuses_is_an_error_not_a_wait(
    fake_openai, modelled, tasks, alice, settings
):
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "json_schema"
    fake_openai.respond_with(llama_cpp_python)

    summary = process_auto_memories(user=alice)

    assert summary.errors == 2 and summary.extracted == 0
    for task in tasks:
        log = AutoMemoryLog.objects.get(task=task)
        assert (log.outcome, log.reason) == ("error", "error"), "never model_unavailable"
        assert "refused the schema form json_schema (HTTP 500)" in log.detail
        assert "AUTOMEMORY_MODEL_SCHEMA_MODE" in log.detail
        assert log.retry_after is not None
    assert set(forms(fake_openai.completion_requests)) == {"json_schema"}


def test_a_server_that_takes_no_form_is_an_error_after_trying_each(
    fake_openai, modelled, tasks, alice, settings
):
    fake_openai.respond_with(http_error(400, "response_format and grammar are not supported"))

    summary = process_auto_memories(user=alice)

    assert summary.errors == 2
    log = AutoMemoryLog.objects.get(task=tasks[0])
    assert "json_schema (HTTP 400), json_object_schema (HTTP 400), grammar (HTTP 400)" in log.detail
    assert forms(fake_openai.completion_requests)[:3] == [
        "json_schema",
        "json_object_schema",
        "grammar",
    ]


def test_a_server_error_that_names_no_schema_is_still_transient(
    fake_openai, modelled, tasks, alice
):
    fake_openai.respond_with(http_error(500, "CUDA out of memory"))

    process_auto_memories(user=alice)

    log = AutoMemoryLog.objects.get(task=tasks[0])
    assert (log.outcome, log.reason) == ("skipped", "model_unavailable")
    assert forms(fake_openai.completion_requests) == ["json_schema"], "no other form tried"


def test_the_grammar_form_sends_a_grammar_of_the_schema(
    fake_openai, modelled, tasks, alice, settings
):
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "grammar"
    fake_openai.respond_with(answer(GOOD))

    process_auto_memories(user=alice)

    request = fake_openai.completion_requests[0]
    assert "response_format" not in request.body
    assert request.body["grammar"] == schema_gbnf(EXTRACTION_SCHEMA)
    assert request.body["grammar"].startswith("root ::= ")
    assert '\\"worth_remembering\\"' in request.body["grammar"]


def test_a_refused_temperature_is_dropped_and_remembered(fake_openai, modelled, tasks, alice):
    def openai_reasoning_model(request):
        if "temperature" in request.body:
            return http_error(400, OPENAI_TEMPERATURE_REFUSAL)
        return answer(GOOD)

    fake_openai.respond_with(openai_reasoning_model)

    summary = process_auto_memories(user=alice)

    assert summary.extracted == 2
    sent = [("temperature" in r.body) for r in fake_openai.completion_requests]
    assert sent == [True, False, False]
    assert forms(fake_openai.completion_requests) == ["json_schema"] * 3


def test_without_a_temperature_setting_none_is_sent(fake_openai, modelled, tasks, alice, settings):
    settings.AUTOMEMORY_MODEL_TEMPERATURE = None
    fake_openai.respond_with(answer(GOOD))

    process_auto_memories(user=alice)

    assert all("temperature" not in r.body for r in fake_openai.completion_requests)


def test_an_answer_off_the_schema_is_refused_whatever_the_form(
    fake_openai, modelled, tasks, alice, settings
):
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "json_object_schema"
    fake_openai.respond_with(answer({"memory": "no flag, no keywords"}))

    process_auto_memories(user=alice)

    log = AutoMemoryLog.objects.get(task=tasks[0])
    assert (log.outcome, log.reason) == ("error", "model_output_invalid")
    assert not IdentityMemory.objects.filter(source=MemorySource.AUTO).exists()
