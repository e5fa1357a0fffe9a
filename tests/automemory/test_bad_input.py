"""Bad input to the auto memory endpoints never produces a 500 and never writes anything."""

import pytest

from automemory.models import AutoMemoryLog, AutoMemorySettings, TaskAutoMemoryFlags
from automemory.services.preferences import SETTINGS_FIELDS
from tests.controlplane.helpers import post_raw
from tests.controlplane.test_bad_input import BAD_BODIES


def every_field(value: str) -> str:
    return "{" + ", ".join(f'"{field}": {value}' for field in SETTINGS_FIELDS) + "}"


# The host's malformed bodies (an empty body is a valid "change nothing" here), plus values
# aimed at these endpoints' own fields.
BODIES = {name: body for name, body in BAD_BODIES.items() if name != "empty"} | {
    "NaN settings": every_field("NaN"),
    "Infinity settings": every_field("-Infinity"),
    "string booleans": every_field('"true"'),
    "huge integers": every_field("1" + "0" * 40),
    "NUL model name": '{"extract_model": "a\\u0000b"}',
    "surrogate model name": '{"extract_model": "\\ud800"}',
    "null flags and unknown key": '{"use_memories": null, "bogus": 1}',
    "force as string": '{"force": "true"}',
    "force as object": '{"force": {"a": 1}}',
}
WRITES = [
    ("put", "/users/me/auto-memory-settings"),
    ("patch", "/users/me/auto-memory-settings"),
    ("post", "/tasks/{task}/auto-memory-flags"),
    ("post", "/users/me/auto-memory/run"),
]


def state():
    return (
        list(AutoMemorySettings.objects.values()),
        list(TaskAutoMemoryFlags.objects.values()),
        AutoMemoryLog.objects.count(),
    )


@pytest.mark.parametrize(("method", "path"), WRITES)
@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_bad_bodies_get_a_4xx_and_write_nothing(
    api_client_for, alice, project, task_factory, auto_memory_on, method, path, body
):
    auto_memory_on(alice)
    task = task_factory(project, alice, completed=True)
    before = state()
    response = post_raw(api_client_for(alice), path.format(task=task.pk), body, method)
    assert response.status_code in (400, 413), response.content[:300]
    assert state() == before


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("?outcome=", "outcome"),
        ("?outcome=bogus", "outcome"),
        ("?reason=", "reason"),
        ("?reason=AAA", "reason"),
        ("?page=0", "page"),
        ("?page_size=abc", "page_size"),
    ],
)
def test_bad_log_filters_are_400_with_a_message_per_parameter(
    api_client_for, alice, query, parameter
):
    response = api_client_for(alice).get("/users/me/auto-memory-log" + query)

    assert response.status_code == 400
    assert list(response.json()) == [parameter]


def test_unknown_fields_of_a_settings_body_are_400(api_client_for, alice):
    response = api_client_for(alice).patch(
        "/users/me/auto-memory-settings", {"use_memories": 1, "colour": "red"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"colour": ["Unknown field."]}
    assert not AutoMemorySettings.objects.filter(user=alice, use_memories=True).exists()
