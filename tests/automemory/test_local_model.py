"""Auto memory against a real local model: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) served by
llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (`automemory.local_model`, set up by
`make model`), through the same client and sweep that serve OpenAI.

Each model call takes 5-60 s on 2 cores, so these tests are few: extraction of a gotcha and
a preference, consolidation of a duplicate, a secret, an injected private note, a model too
slow for its timeout and a server stopped mid-sweep. The model's wording varies; the tests
check what must hold whatever it writes (a fact kept by its names, nothing secret or private,
no copied line, the right log reasons). Without the weights or the server they skip, saying
why; in CI (the CI environment variable set) they fail.
"""

import json
import os
import re
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from automemory.local_model import (
    MODEL_NAME,
    SERVER_ENV_NAMES,
    LocalModelServer,
    local_model_missing,
)
from automemory.services.extraction import drafting as extraction_drafting
from automemory.services.extraction import model as extraction_model
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.injector import inject_memories
from automemory.services.model_requests import JSON_OBJECT_SCHEMA, server_forms
from automemory.services.search import memory_keywords
from controlplane.models import (
    IdentityMemory,
    MemorySource,
    MemoryStatus,
    Task,
    TaskStatus,
    UsageRecord,
)
from tests.automemory.helpers import log_of

pytestmark = pytest.mark.local_model

GOTCHA = (
    "Make the API tests pass on a fresh machine",
    "Ran `make test`: 41 tests in tests/controlplane/test_throttling.py failed with "
    "ConnectionRefusedError. The throttle tests talk to a real Redis on 127.0.0.1:6379 and "
    "nothing was listening. Started it with `redis-server --daemonize yes --port 6379` and "
    "all 912 tests passed. .ci/run now starts Redis the same way when `redis-cli ping` fails.",
)
PREFERENCE = (
    "Rename the helpers in billing/ as the reviewer asked",
    "Renamed calc_tot, get_inv and mk_rcpt to invoice_total, invoice_get and receipt_make. "
    "The reviewer, Dana, explained the project's rule: service functions are named "
    "<entity>_<action> (invoice_total, not calc_tot), keyword-only arguments, and no "
    "abbreviations. Updated the 14 call sites; tests pass.",
)
NOISE = (
    "Fix the typo in the README",
    "Changed 'recieve' to 'receive' in the README's second paragraph, as asked. I read the "
    "rest of the README and found no other spelling mistakes. Nothing else changed: no code "
    "touched, no configuration, and no tests were affected. Done.",
)
SECRET_PASSWORD = "Xq7!vR2#pL9"
SECRET_TOKEN = "ghp_9fK2LmQ7rT1vW8xZ3cB6nD4hJ0sA5eY2uI7o"
SECRET = (
    "Connect the reporting job to the analytics database",
    "The reporting job could not reach the analytics database: it used port 5432, but the "
    "analytics PostgreSQL listens on port 6543 behind pgbouncer. Set REPORTS_DATABASE_URL="
    f"postgres://reports:{SECRET_PASSWORD}@analytics.internal:6543/analytics and the "
    f"deploy token {SECRET_TOKEN} in the job's settings; the job runs now.",
)
PRIVATE_NOTE = "Alice's pager rotation notes are in the zanzibar notebook, locker 42"


def local_model_or_skip() -> None:
    problem = local_model_missing()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the local model tests: {problem}", pytrace=False)
        pytest.skip(problem)


@pytest.fixture(scope="module")
def local_model_server():
    """The local model's server, started once for the module (about 4 s)."""
    local_model_or_skip()
    log = Path(tempfile.mkdtemp(prefix="local-model-")) / "server.log"
    server = LocalModelServer(log_path=log).start()
    yield server
    server.stop()


@pytest.fixture
def own_server():
    """A server of the test's own, which it may stop or leave busy (stopped afterwards)."""
    local_model_or_skip()
    server = LocalModelServer().start()
    yield server
    server.stop()


def point_at(settings, server, *, timeout: float = 240.0) -> None:
    settings.AUTOMEMORY_OPENAI_BASE_URL = server.base_url
    settings.AUTOMEMORY_OPENAI_API_KEY = "not-needed"
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "auto"
    settings.AUTOMEMORY_MODEL_TIMEOUT_SECONDS = timeout
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    # Greedy decoding: the same answer on every run of the same build, so a test that passes
    # keeps passing (at 0.2 a third of the memories copy a transcript line now and then).
    settings.AUTOMEMORY_MODEL_TEMPERATURE = 0
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = 4000
    settings.AUTOMEMORY_MODEL_PRICES = {
        "default": {"input": "0", "output": "0"},
        MODEL_NAME: {"input": "0", "output": "0"},
    }


@pytest.fixture
def local_model(local_model_server, settings):
    point_at(settings, local_model_server)
    return local_model_server


@pytest.fixture
def modelled(auto_memory_on, alice):
    return auto_memory_on(alice, extract_model=MODEL_NAME)


@pytest.fixture
def completed(task_factory, project, alice):
    def make(transcript, **fields):
        prompt, result = transcript
        return task_factory(
            project, alice, prompt=prompt, completed=True, result_text=result, **fields
        )

    return make


def auto_memory_of(task):
    return IdentityMemory.objects.filter(source=MemorySource.AUTO, source_task=task).first()


def copied_line(memory: str, transcript: str, *, words: int = 12) -> str | None:
    """A run of `words` words the memory copies from the transcript as it stood, if any."""
    source = " ".join(re.findall(r"\S+", transcript.casefold()))
    tokens = re.findall(r"\S+", memory.casefold())
    for start in range(len(tokens) - words + 1):
        run = " ".join(tokens[start : start + words])
        if run in source:
            return run
    return None


def test_the_running_server_holds_only_the_allowed_environment(local_model_server):
    """Read from the process itself: the control plane's environment (here the test run's
    `DJANGO_SETTINGS_MODULE`) stays out of the model server."""
    environ = Path(f"/proc/{local_model_server.process.pid}/environ").read_bytes()
    names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
    assert "PATH" in names
    assert names <= set(SERVER_ENV_NAMES)
    assert "DJANGO_SETTINGS_MODULE" not in names


def test_the_local_model_extracts_a_gotcha_and_a_preference(
    local_model, modelled, completed, alice
):
    # Noise is left out: a 1.5B model writes a memory for most noise (see
    # docs/reference/memory-quality.md); a larger model is needed to skip it.
    tasks = {name: completed(t) for name, t in [("gotcha", GOTCHA), ("pref", PREFERENCE)]}

    summary = process_auto_memories(user=alice)

    # llama-cpp-python's server refuses the `json_schema` form (HTTP 500): the client found
    # the form it takes and kept it.
    assert server_forms(local_model.base_url, MODEL_NAME).schema_form == JSON_OBJECT_SCHEMA
    gotcha = auto_memory_of(tasks["gotcha"])
    assert gotcha is not None, log_of(tasks["gotcha"]).detail
    assert "redis" in gotcha.content.casefold() and "6379" in gotcha.content
    assert copied_line(gotcha.content, GOTCHA[1]) is None, gotcha.content
    preference = auto_memory_of(tasks["pref"])
    assert preference is not None, log_of(tasks["pref"]).detail
    assert re.search(r"entity.{0,3}_.{0,3}action|invoice_total|abbreviation", preference.content)
    assert summary.extracted == 2 and summary.errors == 0
    # Every call is in the ledger with the server's token counts.
    rows = UsageRecord.objects.filter(kind="memory_extraction", user=alice)
    assert rows.count() >= 2 and all(row.input_tokens > 300 for row in rows)


def test_a_secret_in_the_transcript_reaches_neither_the_model_nor_the_memory(
    local_model, modelled, completed, alice, monkeypatch, settings
):
    # Asked in the grammar form: llama.cpp parses the schema's GBNF and holds the answer to it.
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "grammar"
    sent = []
    real_messages = extraction_model.extraction_messages

    def recorded(task, **kwargs):
        messages = real_messages(task, **kwargs)
        sent.append(messages)
        return messages

    monkeypatch.setattr(extraction_model, "extraction_messages", recorded)
    task = completed(SECRET)

    process_auto_memories(user=alice)

    memory = auto_memory_of(task)
    assert memory is not None, log_of(task).detail
    assert "6543" in memory.content
    readable = json.dumps([sent, memory.content, memory_keywords(memory.pk), log_of(task).detail])
    for secret in (SECRET_PASSWORD, SECRET_TOKEN, "Xq7", "ghp_"):
        assert secret not in readable


def test_an_injected_private_note_stays_out_of_the_project_memory(
    local_model, modelled, task_factory, project, alice
):
    IdentityMemory.objects.create(scope="user", user=alice, content=PRIVATE_NOTE)
    task = task_factory(project, alice, prompt=GOTCHA[0])
    injected = inject_memories(task=task, prompt=task.prompt, goal="", actor_label="tests")
    assert injected.memory_ids
    # The agent echoed its prompt, the private note with it, then did the work.
    Task.objects.filter(pk=task.pk).update(
        status="completed",
        result_text=f"You asked:\n{injected.prompt}\n\n{GOTCHA[1]}",
        started_at=timezone.now() - timedelta(hours=2),
        finished_at=timezone.now() - timedelta(hours=1),
    )

    process_auto_memories(user=alice)

    log = log_of(task)
    memory = auto_memory_of(task)
    readable = json.dumps([memory.content if memory else "", log.detail]).casefold()
    for part in ("zanzibar", "pager rotation", "locker 42"):
        assert part not in readable
    assert memory is not None and "redis" in memory.content.casefold(), log.detail


def test_the_local_model_recognises_a_duplicate_when_consolidating(
    local_model, auto_memory_on, alice, completed, memory_factory, task_factory, project
):
    auto_memory_on(alice, extract_model=MODEL_NAME, consolidation_model=MODEL_NAME)
    # The earlier task failed in the end: only its memory takes part in this sweep.
    earlier = task_factory(project, alice, prompt=GOTCHA[0], status=TaskStatus.FAILED)
    known = memory_factory(
        project=project,
        source=MemorySource.AUTO,
        source_task=earlier,
        content=(
            "The throttle tests need a real Redis on 127.0.0.1:6379; start it with "
            "`redis-server --daemonize yes --port 6379` when `redis-cli ping` fails."
        ),
    )
    again = completed(
        (
            "Get the test suite green on the new laptop",
            "Most of tests/controlplane/test_throttling.py failed with connection refused: "
            "Redis was not running on port 6379. Ran `redis-server --daemonize yes --port "
            "6379`, then `make test` passed (912 tests). Nothing else was needed.",
        )
    )

    process_auto_memories(user=alice)

    log = log_of(again)
    active = IdentityMemory.objects.filter(
        project=project, source=MemorySource.AUTO, status=MemoryStatus.ACTIVE
    )
    # Known already (noop), merged (update) or replacing it (supersede): never a second
    # active memory saying the same, and the fact itself never lost.
    assert log.reason in ("already_known", "merged", "superseded"), (log.reason, log.detail)
    assert active.count() == 1
    assert all("6379" in memory.content for memory in active)
    assert UsageRecord.objects.filter(kind="memory_consolidation", task=again).exists()
    known.refresh_from_db()


def test_a_model_slower_than_its_timeout_leaves_the_task_waiting(
    own_server, settings, modelled, completed, alice
):
    # Its own server: the one a timed-out call leaves generating is stopped with the test.
    point_at(settings, own_server, timeout=1.0)
    tasks = [completed(GOTCHA), completed(PREFERENCE)]

    summary = process_auto_memories(user=alice)

    for task in tasks:
        log = log_of(task)
        assert (log.outcome, log.reason) == ("skipped", "model_unavailable")
        assert log.retry_after is not None
    assert "did not answer in time" in log_of(tasks[0]).detail
    # One timeout per sweep, not one per task.
    assert summary.model_calls == 1
    assert not IdentityMemory.objects.filter(source=MemorySource.AUTO).exists()


def test_a_server_stopped_mid_sweep_leaves_the_rest_waiting_and_they_are_written_later(
    own_server, settings, modelled, completed, alice, monkeypatch
):
    server = own_server
    point_at(settings, server)
    tasks = [completed(NOISE), completed(GOTCHA), completed(PREFERENCE)]
    real_keep = extraction_drafting.draft_keep

    def keep_then_stop(**kwargs):
        # The first answer is stored; then the server goes away, mid-sweep.
        real_keep(**kwargs)
        server.stop()

    monkeypatch.setattr(extraction_drafting, "draft_keep", keep_then_stop)

    summary = process_auto_memories(user=alice)

    reasons = [log_of(task).reason for task in tasks]
    assert reasons[0] in ("no_durable_signal", "new"), log_of(tasks[0]).detail
    assert reasons[1:] == ["model_unavailable", "model_unavailable"]
    assert "could not be reached" in log_of(tasks[1]).detail
    assert summary.model_calls == 2, "the third task is not sent to a server found gone"

    monkeypatch.setattr(extraction_drafting, "draft_keep", real_keep)
    server.port = 0
    server.start()
    point_at(settings, server)
    process_auto_memories(user=alice)

    assert log_of(tasks[1]).reason == "new", log_of(tasks[1]).detail
    assert log_of(tasks[2]).reason in ("new", "no_durable_signal"), log_of(tasks[2]).detail
