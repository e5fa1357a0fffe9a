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
