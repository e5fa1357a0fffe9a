"""The test suite never talks to a real model endpoint."""

from urllib.parse import urlsplit

from automemory.services import llm


def test_model_client_points_at_a_closed_local_port_by_default(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-looking-key")

    client = llm.model_client()

    url = urlsplit(str(client.base_url))
    assert (url.hostname, url.port) == ("127.0.0.1", 9)
    assert client.api_key == "tests-dummy-key"


def test_fake_openai_fixture_overrides_the_test_endpoint(fake_openai):
    client = llm.model_client()

    assert str(client.base_url).rstrip("/") == fake_openai.base_url.rstrip("/")
    assert client.api_key == "test-key"
