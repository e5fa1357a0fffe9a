"""The model side of auto memory: set from the environment, refused at start-up when malformed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from automemory.checks import automemory_settings_check

BASE_DIR = Path(__file__).resolve().parents[2]
VALID_PRICES = {
    "default": {"input": "1.25", "cached_input": "0.125", "output": "10.00"},
    "small": {"input": 0.1, "output": 0},
}


def problems() -> list[tuple[str, str]]:
    return [(problem.id, problem.msg) for problem in automemory_settings_check()]


def test_a_valid_price_table_passes(settings):
    settings.AUTOMEMORY_MODEL_PRICES = VALID_PRICES
    assert problems() == []


@pytest.mark.parametrize(
    ("prices", "expected"),
    [
        ([["default", 1]], "must be a mapping of model name"),
        ("gpt-5=1.25", "must be a mapping of model name"),
        (None, "must be a mapping of model name"),
        ({"gpt-5": {"input": 1, "output": 2}}, "needs a 'default' entry"),
        ({"default": 1.25}, "AUTOMEMORY_MODEL_PRICES['default'] must be a mapping"),
        ({"default": {"input": 1}}, "AUTOMEMORY_MODEL_PRICES['default'] lacks output"),
        ({"default": {"input": -1, "output": 2}}, "['input'] must be a non-negative number"),
        ({"default": {"input": "cheap", "output": 2}}, "not 'cheap'"),
        ({"default": {"input": True, "output": 2}}, "['input'] must be a non-negative number"),
        ({"default": {"input": "NaN", "output": 2}}, "['input'] must be a non-negative number"),
        ({"default": {"input": 1, "output": 2, "cache_input": 1}}, "unknown rate(s) cache_input"),
        ({"default": {"input": 1, "output": None}}, "['output'] must be a non-negative number"),
    ],
)
def test_a_malformed_price_table_is_refused_with_a_clear_message(settings, prices, expected):
    settings.AUTOMEMORY_MODEL_PRICES = prices

    found = problems()

    assert found, "a malformed price table must be refused"
    assert {problem_id for problem_id, _ in found} == {"automemory.E004"}
    assert any(expected in message for _, message in found), found


def test_every_problem_of_a_table_is_reported(settings):
    settings.AUTOMEMORY_MODEL_PRICES = {"gpt-5": {"input": -1}, "mini": "free"}
    messages = [message for _, message in problems()]
    assert len(messages) == 4, messages  # no default, gpt-5 lacks output and input < 0, mini


@pytest.mark.parametrize("timeout", [0, -1, "30", None, True])
def test_the_model_timeout_must_be_a_positive_number(settings, timeout):
    settings.AUTOMEMORY_MODEL_TIMEOUT_SECONDS = timeout
    assert [problem_id for problem_id, _ in problems()] == ["automemory.E005"]


@pytest.mark.parametrize("name", ["MODEL_MAX_RETRIES", "MODEL_CALLS_PER_SWEEP"])
@pytest.mark.parametrize("value", [-1, 1.5, "3", None])
def test_retries_and_the_sweep_call_cap_must_be_non_negative_integers(settings, name, value):
    setattr(settings, f"AUTOMEMORY_{name}", value)
    assert [problem_id for problem_id, _ in problems()] == ["automemory.E006"]


def test_zero_retries_and_zero_calls_are_allowed(settings):
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = 0
    assert problems() == []


def run_in_fresh_process(code: str, **environment: str) -> subprocess.CompletedProcess:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AUTOMEMORY_") and key != "DJANGO_SETTINGS_MODULE"
    }
    env.update(environment, DJANGO_SETTINGS_MODULE="controlplane.settings", DEBUG="1")
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


READ_MODEL_SETTINGS = (
    "import django, json; django.setup(); from automemory import conf; "
    "print(json.dumps({name: conf.get(name) for name in ("
    "'MODEL_PRICES', 'MODEL_TIMEOUT_SECONDS', 'MODEL_MAX_RETRIES', 'MODEL_CALLS_PER_SWEEP')}))"
)


def test_the_model_settings_come_from_the_environment():
    result = run_in_fresh_process(
        READ_MODEL_SETTINGS,
        AUTOMEMORY_MODEL_PRICES=json.dumps(VALID_PRICES),
        AUTOMEMORY_MODEL_TIMEOUT_SECONDS="7.5",
        AUTOMEMORY_MODEL_MAX_RETRIES="3",
        AUTOMEMORY_MODEL_CALLS_PER_SWEEP="12",
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "MODEL_PRICES": VALID_PRICES,
        "MODEL_TIMEOUT_SECONDS": 7.5,
        "MODEL_MAX_RETRIES": 3,
        "MODEL_CALLS_PER_SWEEP": 12,
    }


def test_without_the_variables_the_app_defaults_apply():
    from automemory.conf import DEFAULTS

    result = run_in_fresh_process(READ_MODEL_SETTINGS)

    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout.strip().splitlines()[-1])
    assert values["MODEL_PRICES"] == DEFAULTS["MODEL_PRICES"]
    assert values["MODEL_CALLS_PER_SWEEP"] == DEFAULTS["MODEL_CALLS_PER_SWEEP"]


def test_manage_py_check_refuses_a_price_table_without_default_from_the_environment():
    result = run_in_fresh_process(
        "from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'check'])",
        AUTOMEMORY_MODEL_PRICES=json.dumps({"gpt-5": {"input": 1, "output": 2}}),
    )

    assert result.returncode != 0
    assert "automemory.E004" in result.stderr
    assert "needs a 'default' entry" in result.stderr


def test_a_price_table_that_is_not_json_stops_the_process_naming_the_variable():
    result = run_in_fresh_process(
        "import django; django.setup()", AUTOMEMORY_MODEL_PRICES="{default: 1}"
    )

    assert result.returncode != 0
    assert "ImproperlyConfigured: AUTOMEMORY_MODEL_PRICES=" in result.stderr


def test_the_sweep_lease_must_outlast_one_tasks_model_calls_after_a_renewal(settings):
    # 4 calls x 30 s x (1 retry + 1) = 240 s of model time for one task at worst.
    settings.AUTOMEMORY_MODEL_TIMEOUT_SECONDS = 30
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 1
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = 480  # renewed at 240 s left: not enough
    [(problem_id, message)] = problems()
    assert problem_id == "automemory.E007"
    assert "240s" in message
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = 481
    assert problems() == []


def test_the_memory_model_endpoint_key_schema_mode_and_temperature_come_from_the_environment():
    result = run_in_fresh_process(
        "import django, json; django.setup(); from automemory import conf; "
        "from automemory.services import llm; client = llm.model_client(); "
        "print(json.dumps({'base_url': str(client.base_url), 'api_key': client.api_key, "
        "'mode': conf.get('MODEL_SCHEMA_MODE'), 'temperature': conf.get('MODEL_TEMPERATURE'), "
        "'lease': conf.get('SWEEP_LEASE_SECONDS')}))",
        AUTOMEMORY_OPENAI_BASE_URL="http://127.0.0.1:8081/v1",
        AUTOMEMORY_OPENAI_API_KEY="memory-model-key",
        AUTOMEMORY_MODEL_SCHEMA_MODE="json_object_schema",
        AUTOMEMORY_MODEL_TEMPERATURE="0.4",
        AUTOMEMORY_SWEEP_LEASE_SECONDS="1200",
        # The SDK's own variables (which agents may read) lose to the memory model's.
        OPENAI_BASE_URL="https://api.openai.com/v1",
        OPENAI_API_KEY="sk-agents-key",
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "base_url": "http://127.0.0.1:8081/v1/",
        "api_key": "memory-model-key",
        "mode": "json_object_schema",
        "temperature": 0.4,
        "lease": 1200,
    }


def test_an_unknown_schema_mode_or_a_temperature_out_of_range_is_refused(settings):
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "json"
    settings.AUTOMEMORY_MODEL_TEMPERATURE = 3
    found = dict(problems())
    assert "json_schema, json_object_schema, grammar" in found["automemory.E008"]
    assert "from 0 to 2" in found["automemory.E009"]
    settings.AUTOMEMORY_MODEL_SCHEMA_MODE = "grammar"
    settings.AUTOMEMORY_MODEL_TEMPERATURE = None
    assert problems() == []


def test_manage_py_check_refuses_an_unknown_schema_mode_from_the_environment():
    result = run_in_fresh_process(
        "from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'check'])",
        AUTOMEMORY_MODEL_SCHEMA_MODE="json_schema_strict",
    )

    assert result.returncode != 0
    assert "automemory.E008" in result.stderr
