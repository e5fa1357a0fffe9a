"""The model client of auto memory: one JSON-schema call to an OpenAI-compatible server.

`model_json_call` is what extraction and consolidation use. It checks the user's monthly
memory budget, makes a Chat Completions call asking for a JSON answer of a schema, in the
form the server takes (`model_requests`), through the official `openai` SDK, writes one
usage-ledger row per HTTP call that returned usage (priced with `AUTOMEMORY_MODEL_PRICES`),
validates the answer against the schema, repairs once, and turns every failure into one of
the exceptions the sweep knows how to log: `ModelUnavailable` (transient),
`ModelOutputInvalid` and `SchemaFormRefused` (errors) and `MemoryBudgetExhausted`
(transient until next month). A sweep's cap on model calls is a
`SweepModelCalls`; when it is used up the call raises `ModelCallCapReached` before any
HTTP request, and the caller leaves the task for the next sweep.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import openai
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from automemory import conf
from automemory.models import AutoMemorySettings
from automemory.services.model_requests import (
    AUTO,
    SchemaFormRefused,
    ServerForms,
    forms_to_try,
    refuses_schema_form,
    refuses_temperature,
    request_fields,
    server_forms,
)
from controlplane.models import UsageKind, UsageRecord
from controlplane.months import month_start, next_month_start
from controlplane.pricing import PriceTable
from controlplane.services.usage import usage_record

logger = logging.getLogger(__name__)

# The ledger kinds that are auto memory's model calls (what the memory budget counts).
MEMORY_USAGE_KINDS = (UsageKind.MEMORY_EXTRACTION, UsageKind.MEMORY_CONSOLIDATION)
# Local OpenAI-compatible servers ignore the key, but the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"
# HTTP statuses that say the request itself is wrong (not worth retrying the same way).
_REQUEST_REJECTED_STATUSES = (400, 413, 422)


class ModelUnavailable(Exception):
    """The model could not answer: timeout, connection error, 429, 5xx (after the SDK's
    bounded retries), or the server refused the credentials or the model name."""


class ModelOutputInvalid(Exception):
    """The answer did not parse or did not match the schema, even after one repair retry.

    `raw_chars` is the size of the last raw answer; its text is never kept (it may quote the
    task)."""

    def __init__(self, message: str, *, raw_chars: int):
        super().__init__(message)
        self.raw_chars = raw_chars


class MemoryBudgetExhausted(Exception):
    """The user's monthly memory budget is used up; `retry_after` is the next month's start."""

    def __init__(self, message: str, *, retry_after: datetime):
        super().__init__(message)
        self.retry_after = retry_after


class ModelCallCapReached(Exception):
    """This sweep has made its `AUTOMEMORY_MODEL_CALLS_PER_SWEEP` calls: no request was sent."""


class SweepModelCalls:
    """The per-sweep cap on model calls: `take()` claims one call, False once `limit` are used.

    It also remembers, by model name, why a model was unavailable earlier in the sweep: the
    client does not call that model again in the same sweep (`unavailable`), so a model that
    hangs costs the sweep one timeout, not one per task.
    """

    def __init__(self, limit: int | None = None):
        self.limit = conf.get("MODEL_CALLS_PER_SWEEP") if limit is None else limit
        self.used = 0
        self.unavailable: dict[str, str] = {}

    def take(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit


# --- Money ------------------------------------------------------------------------------------


def memory_spend_get(*, user_id: int, now: datetime | None = None) -> Decimal:
    """What auto memory's model calls cost the user so far in `now`'s UTC month.

    Reads the user's ledger rows of the month (the `(user, finished_at)` index), so the cost
    grows with the user's usage in one month, not with history.
    """
    now = now or timezone.now()
    total = UsageRecord.objects.filter(
        user_id=user_id,
        finished_at__gte=month_start(now),
        finished_at__lt=next_month_start(now),
        kind__in=MEMORY_USAGE_KINDS,
    ).aggregate(total=Sum("cost_usd"))["total"]
    return total or Decimal("0")


def memory_budget_check(*, user_id: int, now: datetime | None = None) -> None:
    """Raise `MemoryBudgetExhausted` when the user's memory spend this month reached the budget.

    Checked once per `model_json_call` (not before its repair retry), so the last question
    of the month, and those running at the same moment elsewhere, may pass it a little.
    """
    now = now or timezone.now()
    budget = (
        AutoMemorySettings.objects.filter(user_id=user_id)
        .values_list("monthly_memory_budget_usd", flat=True)
        .first()
    )
    if budget is None:
        budget = AutoMemorySettings._meta.get_field("monthly_memory_budget_usd").default
    spent = memory_spend_get(user_id=user_id, now=now)
    if spent >= budget:
        raise MemoryBudgetExhausted(
            f"memory spend ${spent:.4f} of the ${budget:.2f} monthly budget",
            retry_after=next_month_start(now),
        )


def model_price(*, model: str, input_tokens: int, cached_input_tokens: int, output_tokens: int):
    """USD for one call at `AUTOMEMORY_MODEL_PRICES` (`controlplane.pricing.PriceTable`)."""
    return PriceTable(conf.get("MODEL_PRICES"), name="AUTOMEMORY_MODEL_PRICES").cost_usd(
        model=model,
        input_tokens=input_tokens,
        cached_input_tokens=cached_input_tokens,
        output_tokens=output_tokens,
    )


# --- The client -------------------------------------------------------------------------------


def _endpoint() -> tuple[str | None, str]:
    base_url = conf.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or None
    api_key = conf.get("OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY
    return base_url, api_key


@functools.lru_cache(maxsize=8)
def _client(base_url: str | None, api_key: str, timeout: float, max_retries: int) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
    )


def model_client() -> openai.OpenAI:
    """The SDK client for the configured endpoint, timeout and retries (one per configuration)."""
    base_url, api_key = _endpoint()
    return _client(
        base_url,
        api_key,
        float(conf.get("MODEL_TIMEOUT_SECONDS")),
        int(conf.get("MODEL_MAX_RETRIES")),
    )


@dataclass(frozen=True)
class StructuredCall:
    """What one kind of JSON-schema call asks for and how it is charged: the answer's schema,
    by its name, and the usage-ledger kind of the call's rows."""

    schema_name: str
    schema: dict
    kind: UsageKind


@dataclass(frozen=True)
class _Answer:
    raw: str
    problem: str | None
    data: dict | None
    response: Any = None


def model_json_call(
    *,
    user,
    task,
    spec: StructuredCall,
    model: str,
    system_prompt: str,
    user_content: str,
    calls: SweepModelCalls | None = None,
    keep_answer: Callable[[dict], None] | None = None,
) -> dict:
    """Ask `model` for a JSON object matching `spec.schema`; return it.

    Chat Completions with the schema in the form the server takes (`model_requests`: a
    server that refuses every form raises `SchemaFormRefused`). The user's monthly memory
    budget is checked first (`MemoryBudgetExhausted`); each HTTP call takes one of the sweep's
    `calls` (`ModelCallCapReached` when none is left) and, when it returned usage, writes one
    ledger row of `spec.kind` charged to `user` and `task`. An answer that does not parse or
    match is sent back once with what is wrong; a second bad answer raises `ModelOutputInvalid`.
    Transport failures, 429 and 5xx raise `ModelUnavailable`. Never call it inside a
    database transaction: it waits on the network.

    `keep_answer(data)` is run in the transaction that writes the ledger row of the call
    whose answer is returned, so what the caller keeps of a paid answer (a draft) is stored
    exactly when its payment is, and a crash cannot leave one without the other.
    """
    memory_budget_check(user_id=user.pk)
    messages: list[dict[str, str]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": user_content},
    ]
    answer = _call(user=user, task=task, spec=spec, model=model, messages=messages, calls=calls)
    if answer.problem is None:
        return _accepted(
            answer, user=user, task=task, kind=spec.kind, model=model, keep=keep_answer
        )
    logger.info(
        "memory model %r answered %d characters that %s; asking once more",
        model,
        len(answer.raw),
        answer.problem,
    )
    messages += [
        {"role": "assistant", "content": answer.raw},
        {
            "role": "user",
            "content": (
                f"Your answer {answer.problem}. Answer again with only one JSON object that "
                f"matches the {spec.schema_name} schema."
            ),
        },
    ]
    repaired = _call(user=user, task=task, spec=spec, model=model, messages=messages, calls=calls)
    if repaired.problem is None:
        return _accepted(
            repaired, user=user, task=task, kind=spec.kind, model=model, keep=keep_answer
        )
    raise ModelOutputInvalid(
        f"the model's answer {repaired.problem} ({len(repaired.raw)} characters), "
        "also after one repair retry",
        raw_chars=len(repaired.raw),
    )


def _accepted(answer: _Answer, *, user, task, kind, model: str, keep) -> dict:
    """Record the accepted answer's call in the ledger, with what the caller keeps of it.

    When keeping fails, the call is still recorded (it was paid for) and the failure raised.
    """
    try:
        with transaction.atomic():
            _record_usage(user=user, task=task, kind=kind, model=model, response=answer.response)
            if keep is not None:
                keep(answer.data)
    except Exception:
        if keep is None:
            raise
        _record_usage(user=user, task=task, kind=kind, model=model, response=answer.response)
        raise
    return answer.data


def _call(*, user, task, spec: StructuredCall, model, messages, calls) -> _Answer:
    """One HTTP call and its answer checked; its ledger row is written here unless the answer
    is usable (then by `_accepted`, with what the caller keeps of it)."""
    if calls is not None and model in calls.unavailable:
        raise ModelUnavailable(f"{calls.unavailable[model]} (earlier in this sweep; not retried)")
    if calls is not None and not calls.take():
        raise ModelCallCapReached(f"this sweep's {calls.limit} model calls are used")
    try:
        response = _request(model=model, messages=messages, spec=spec)
    except ModelUnavailable as exc:
        if calls is not None:
            calls.unavailable[model] = str(exc)
        raise
    raw = _answer_text(response)
    try:
        data = json.loads(raw)
    except ValueError:
        data, problem = None, "is not valid JSON"
    else:
        problem = schema_problem(data, spec.schema)
        if problem is not None:
            problem = f"does not match the schema ({problem})"
    if problem is not None:
        _record_usage(user=user, task=task, kind=spec.kind, model=model, response=response)
        return _Answer(raw, problem, None)
    return _Answer(raw, None, data, response)


def _request(*, model, messages, spec: StructuredCall):
    """One Chat Completions request in the schema form the server takes (with the SDK's
    bounded retries); failures translated. See `model_requests` for the forms and how a
    refused form or temperature is asked again."""
    base_url, _ = _endpoint()
    known = server_forms(base_url or "", model)
    mode = conf.get("MODEL_SCHEMA_MODE")
    forms = forms_to_try(mode, known)
    refused: list[str] = []
    for form in forms:
        try:
            fields = request_fields(form, schema_name=spec.schema_name, schema=spec.schema)
            response = _create(model=model, messages=messages, known=known, fields=fields)
        except openai.APIStatusError as exc:
            if not refuses_schema_form(exc):
                raise _translated(exc) from exc
            refused.append(f"{form} (HTTP {exc.status_code})")
            known.refused.add(form)
            if known.schema_form == form:
                known.schema_form = None
            logger.warning(
                "memory model %r at %s refused the %s schema form (HTTP %s)",
                model, base_url or "the default endpoint", form, exc.status_code,
            )  # fmt: skip
            continue
        except openai.OpenAIError as exc:
            raise _translated(exc) from exc
        if known.schema_form != form:
            logger.info("memory model %r takes the %s schema form", model, form)
            known.schema_form = form
        return response
    hint = (
        "set AUTOMEMORY_MODEL_SCHEMA_MODE to auto or to another form"
        if mode != AUTO
        else "it takes none of the forms auto memory can ask in"
    )
    raise SchemaFormRefused(
        f"the model server refused the schema form {', '.join(refused)}: {hint}"
    )


def _create(*, model, messages, known: ServerForms, fields: dict):
    """The SDK call; a refused temperature is dropped (and remembered) and the call repeated."""
    temperature = conf.get("MODEL_TEMPERATURE")
    if temperature is not None and known.temperature:
        try:
            return model_client().chat.completions.create(
                model=model, messages=messages, temperature=float(temperature), **fields
            )
        except openai.APIStatusError as exc:
            if not refuses_temperature(exc) or refuses_schema_form(exc):
                raise
            logger.info("memory model %r takes no temperature: asked without it", model)
            known.temperature = False
    return model_client().chat.completions.create(model=model, messages=messages, **fields)


def _translated(exc: openai.OpenAIError) -> Exception:
    """The model client's exception for an SDK failure."""
    if isinstance(exc, openai.APITimeoutError):
        return ModelUnavailable("the model did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        return ModelUnavailable("the model server could not be reached")
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in _REQUEST_REJECTED_STATUSES:
            return RuntimeError(f"the model server rejected the request (HTTP {exc.status_code})")
        return ModelUnavailable(f"the model server answered HTTP {exc.status_code}")
    return ModelUnavailable(f"the model call failed ({type(exc).__name__})")


def _answer_text(response) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _token_count(value) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _record_usage(*, user, task, kind, model: str, response) -> None:
    """One ledger row for one HTTP call that reported its usage (none when it did not)."""
    usage = getattr(response, "usage", None)
    if usage is None:
        logger.warning("memory model %r reported no usage: the call is not in the ledger", model)
        return
    input_tokens = _token_count(getattr(usage, "prompt_tokens", 0))
    output_tokens = _token_count(getattr(usage, "completion_tokens", 0))
    cached = _token_count(
        getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0)
    )
    reasoning = _token_count(
        getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0)
    )
    usage_record(
        user_id=user.pk,
        cost_usd=model_price(
            model=model,
            input_tokens=input_tokens,
            cached_input_tokens=cached,
            output_tokens=output_tokens,
        ),
        finished_at=timezone.now(),
        kind=kind,
        task_id=task.pk if task is not None else None,
        project_id=getattr(task, "project_id", None),
        model=model,
        input_tokens=input_tokens,
        cached_input_tokens=min(cached, input_tokens),
        output_tokens=output_tokens,
        reasoning_output_tokens=min(reasoning, output_tokens),
    )


# --- Schema check -----------------------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "null": (type(None),),
}

# The bounds a schema may set, per kind of value: the keywords of the lower and the upper one,
# what is measured, and what a value out of them is.
_BOUNDS: tuple[tuple[Any, Callable[[Any], Any], str, str, str, str], ...] = (
    (str, len, "minLength", "maxLength", "is too short", "is too long"),
    (
        int | float,
        lambda number: number,
        "minimum",
        "maximum",
        "is below the minimum",
        "is above the maximum",
    ),
    (list, len, "minItems", "maxItems", "has too few items", "has too many items"),
)


def schema_problem(value: Any, schema: dict, path: str = "$") -> str | None:
    """What makes `value` not match `schema`, or None. The subset strict structured outputs
    use: `type` (a name or a list), `properties`, `required`, `additionalProperties: false`,
    `items`, `enum`, `minLength`/`maxLength`, `minItems`/`maxItems`, `minimum`/`maximum`,
    `anyOf`. The message names the path, never the value."""
    if "anyOf" in schema:
        if all(schema_problem(value, option, path) for option in schema["anyOf"]):
            return f"{path} matches none of the allowed forms"
        return None
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, name) for name in names):
            return f"{path} is not of type {'/'.join(names)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} is not one of the allowed values"
    if isinstance(value, bool):
        return None
    for kind, measure, low, high, too_low, too_high in _BOUNDS:
        if isinstance(value, kind):
            size = measure(value)
            if low in schema and size < schema[low]:
                return f"{path} {too_low}"
            if high in schema and size > schema[high]:
                return f"{path} {too_high}"
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            problem = schema_problem(item, schema["items"], f"{path}[{index}]")
            if problem:
                return problem
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{path}.{name} is missing"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                return f"{path} has {len(extra)} unexpected field(s)"
        for name, sub in properties.items():
            if name in value:
                problem = schema_problem(value[name], sub, f"{path}.{name}")
                if problem:
                    return problem
    return None


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(name, ()))
