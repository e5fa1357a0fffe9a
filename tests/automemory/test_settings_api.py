import pytest

from automemory.models import AutoMemorySettings

URL = "/users/me/auto-memory-settings"

DEFAULTS = {
    "generate_memories": False,
    "use_memories": False,
    "disable_on_external_context": True,
    "min_rate_limit_remaining_percent": 20,
    "idle_seconds": 900,
    "min_duration_seconds": 30,
    "min_result_chars": 200,
    "extract_model": None,
    "consolidation_model": None,
    "internal_mcp_servers": [],
}


def test_it_returns_the_defaults_for_a_new_user(api_client_for, alice):
    response = api_client_for(alice).get(URL)
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in DEFAULTS} == DEFAULTS
    assert not AutoMemorySettings.objects.exists()


def test_anonymous_callers_are_refused(api_client_for, db):
    assert api_client_for(None).get(URL).status_code in (401, 403)
    assert api_client_for(None).put(URL, {}, format="json").status_code in (401, 403)


@pytest.mark.parametrize("method", ["put", "patch"])
def test_it_saves_only_the_fields_sent(api_client_for, alice, method):
    client = api_client_for(alice)
    response = getattr(client, method)(
        URL,
        {"generate_memories": True, "idle_seconds": 60, "extract_model": "gpt-x"},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = client.get(URL).json()
    assert body["generate_memories"] is True
    assert body["idle_seconds"] == 60
    assert body["extract_model"] == "gpt-x"
    assert body["use_memories"] is False
    assert body["min_result_chars"] == 200


def test_booleans_accept_0_and_1(api_client_for, alice):
    client = api_client_for(alice)
    response = client.put(URL, {"generate_memories": 1, "use_memories": 0}, format="json")
    assert response.status_code == 200
    assert response.json()["generate_memories"] is True
    assert response.json()["use_memories"] is False


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("generate_memories", "true"),
        ("generate_memories", "yes"),
        ("generate_memories", 2),
        ("use_memories", None),
        ("min_rate_limit_remaining_percent", 101),
        ("min_rate_limit_remaining_percent", -1),
        ("min_rate_limit_remaining_percent", "20"),
        ("min_rate_limit_remaining_percent", True),
        ("idle_seconds", 1.5),
        ("idle_seconds", -5),
        ("idle_seconds", 10**12),
        ("min_duration_seconds", []),
        ("min_result_chars", {"a": 1}),
        ("extract_model", 5),
        ("extract_model", "x" * 201),
        ("consolidation_model", "bad\x00name"),
    ],
)
def test_bad_values_get_a_400_naming_the_field_and_nothing_is_saved(
    api_client_for, alice, field, value
):
    client = api_client_for(alice)
    response = client.put(URL, {"use_memories": True, field: value}, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert client.get(URL).json()["use_memories"] is False


def test_unknown_fields_are_refused(api_client_for, alice):
    response = api_client_for(alice).put(URL, {"generate_memory": True}, format="json")
    assert response.status_code == 400
    assert response.json() == {"generate_memory": ["Unknown field."]}


@pytest.mark.parametrize("body", ["[1, 2]", '"text"', "{not json", "null"])
def test_malformed_bodies_get_a_400(api_client_for, alice, body):
    response = api_client_for(alice).put(URL, body, content_type="application/json")
    assert response.status_code == 400


def test_the_get_body_can_be_sent_back_unchanged(api_client_for, alice):
    client = api_client_for(alice)
    body = client.get(URL).json()
    body["use_memories"] = True
    response = client.put(URL, body, format="json")
    assert response.status_code == 200
    assert response.json()["use_memories"] is True


def test_settings_are_per_user(api_client_for, alice, bob):
    api_client_for(alice).put(URL, {"generate_memories": True}, format="json")
    assert api_client_for(bob).get(URL).json()["generate_memories"] is False
