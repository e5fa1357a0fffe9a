"""How a model server is asked for a JSON answer of a schema, and what each server takes.

OpenAI-compatible servers differ in how they take a schema. `AUTOMEMORY_MODEL_SCHEMA_MODE`
names the form, or `auto` (the default) finds it per server and model:

- `json_schema`: `response_format` `{"type": "json_schema", "json_schema": {...}}` (strict),
  what OpenAI, vLLM, Ollama and llama.cpp's own `llama-server` take;
- `json_object_schema`: `response_format` `{"type": "json_object", "schema": {...}}`, what
  llama-cpp-python's server takes (it refuses the first form);
- `grammar`: a GBNF grammar of the schema in the request's `grammar` field (llama.cpp
  servers), for servers that take a grammar but no schema.

In `auto`, the forms are tried in that order; a server that refuses one (an HTTP 4xx or 500
whose error names `response_format`, the schema or the grammar) gets the next, and the form
it took is remembered for the process. A server that refuses the configured form, or every
form, raises `SchemaFormRefused`: an error the sweep logs, never a transient
`model_unavailable` that would keep the task waiting forever. A server that refuses the
`temperature` (OpenAI's reasoning models take only their default) is asked again without
it, and that is remembered too. Whatever the server promises, the caller validates every
answer against its own schema (`llm.schema_problem`).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import openai

logger = logging.getLogger(__name__)

AUTO = "auto"
JSON_SCHEMA = "json_schema"
JSON_OBJECT_SCHEMA = "json_object_schema"
GRAMMAR = "grammar"
SCHEMA_FORMS = (JSON_SCHEMA, JSON_OBJECT_SCHEMA, GRAMMAR)
SCHEMA_MODES = (AUTO, *SCHEMA_FORMS)

# Statuses a server answers an unsupported request field with (llama-cpp-python's server
# answers a validation error with 500). 401/403/404/408/409/429 mean something else.
_REFUSAL_STATUSES = frozenset({400, 415, 422, 500}) | frozenset(range(405, 408)) | {410, 413}
# Words in an error that show it is about how the schema was asked for.
_SCHEMA_WORDS = ("response_format", "json_schema", "json_object", "grammar", "schema")


class SchemaFormRefused(RuntimeError):
    """The server refused the configured schema form, or every form (not transient)."""


@dataclass
class ServerForms:
    """What one (server, model) was found to take: its schema form (None: not known yet)
    and whether it takes a temperature."""

    schema_form: str | None = None
    temperature: bool = True
    refused: set[str] = field(default_factory=set)


_known: dict[tuple[str, str], ServerForms] = {}
_known_lock = threading.Lock()


def server_forms(base_url: str, model: str) -> ServerForms:
    """The remembered forms of (`base_url`, `model`), for this process."""
    with _known_lock:
        return _known.setdefault((base_url, model), ServerForms())


def server_forms_forget() -> None:
    """Forget every server's forms (tests, and a changed configuration)."""
    with _known_lock:
        _known.clear()


def error_text(exc: openai.APIStatusError) -> str:
    """The server's error message and body, lower-cased (for the refusal checks only)."""
    body = exc.body
    try:
        body_text = json.dumps(body) if not isinstance(body, str) else body
    except (TypeError, ValueError):
        body_text = str(body)
    return f"{exc.message} {body_text}".lower()


def refuses_schema_form(exc: openai.APIStatusError) -> bool:
    """The server refused how the schema was asked for (not the call as a whole)."""
    if exc.status_code not in _REFUSAL_STATUSES:
        return False
    text = error_text(exc)
    return any(word in text for word in _SCHEMA_WORDS)


def refuses_temperature(exc: openai.APIStatusError) -> bool:
    return exc.status_code in _REFUSAL_STATUSES and "temperature" in error_text(exc)


def request_fields(form: str, *, schema_name: str, schema: dict) -> dict[str, Any]:
    """The SDK keyword arguments that ask for a JSON answer of `schema` in `form`."""
    if form == JSON_SCHEMA:
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            }
        }
    if form == JSON_OBJECT_SCHEMA:
        return {"response_format": {"type": "json_object", "schema": schema}}
    if form == GRAMMAR:
        return {"extra_body": {"grammar": schema_gbnf(schema)}}
    raise ValueError(f"unknown schema form {form!r}")


def forms_to_try(mode: str, known: ServerForms) -> list[str]:
    """The schema forms to try, in order, for `mode` and what is known of the server."""
    if mode != AUTO:
        return [mode]
    if known.schema_form is not None:
        return [known.schema_form] + [
            form for form in SCHEMA_FORMS if form != known.schema_form and form not in known.refused
        ]
    return [form for form in SCHEMA_FORMS if form not in known.refused] or list(SCHEMA_FORMS)


# --- JSON Schema as a GBNF grammar ------------------------------------------------------------
# The subset of JSON Schema the memory schemas use (what `llm.schema_problem` checks): objects
# whose properties are all required and no others, strings, booleans, integers, null, arrays,
# `enum`, `anyOf` and type lists. No well-kept library converts a schema to GBNF outside the
# servers themselves (llama.cpp's converter ships inside them), and this subset is small.

_GBNF_BASE = r"""
ws ::= [ \t\n]{0,8}
string ::= "\"" char{0,4000} "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
boolean ::= "true" | "false"
integer ::= "-"? ([0-9] | [1-9] [0-9]{1,15})
number ::= integer ("." [0-9]{1,16})?
null ::= "null"
"""


def _literal(value: Any) -> str:
    """A GBNF literal matching `value` written as JSON."""
    text = json.dumps(value, ensure_ascii=False)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Grammar:
    def __init__(self):
        self.rules: list[str] = []

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules.append(f"{name} ::= {body}")
        return name

    def value(self, schema: dict) -> str:
        if "enum" in schema:
            return self.rule(" | ".join(_literal(value) for value in schema["enum"]))
        if "anyOf" in schema:
            return self.rule(" | ".join(self.value(option) for option in schema["anyOf"]))
        types = schema.get("type")
        if isinstance(types, list):
            return self.rule(" | ".join(self.value({**schema, "type": name}) for name in types))
        if types == "object":
            return self.object(schema)
        if types == "array":
            item = self.value(schema.get("items", {"type": "string"}))
            return self.rule(f'"[" ws ({item} ("," ws {item})*)? ws "]"')
        if types in ("string", "boolean", "integer", "number", "null"):
            return types
        raise ValueError(f"no grammar for schema type {types!r}")

    def object(self, schema: dict) -> str:
        properties = schema.get("properties", {})
        if set(schema.get("required", [])) != set(properties):
            raise ValueError("the grammar form needs every property required")
        parts = []
        for index, (name, sub) in enumerate(properties.items()):
            separator = '"," ws ' if index else ""
            parts.append(f'{separator}{_literal(name)} ws ":" ws {self.value(sub)} ws')
        return self.rule('"{" ws ' + " ".join(parts) + ' "}"')


def schema_gbnf(schema: dict) -> str:
    """A GBNF grammar whose sentences are the JSON documents of `schema` (see above)."""
    grammar = _Grammar()
    top = grammar.value(schema)
    return "\n".join([f"root ::= {top}", *grammar.rules]) + _GBNF_BASE
