"""The policy file's JSON Schema, generated from the policy model (policy.Policy), so that it
cannot say other than the loader does: the same keys (unknown ones refused), types, bounds and
descriptions. Editors read it through the example policy's first line,
`# yaml-language-server: $schema=policy.schema.json`, to validate and complete while typing.

The package ships it as examples/policy.schema.json (a test holds the file equal to this
module's output); after changing the model, write it again with
`claimstream policy schema > examples/policy.schema.json`.

What the schema leaves to `claimstream policy check`: that the sources a field's `authorities`
or a signing key names are the policy's own, and which keys each field type takes (an enum's
`values`, money's `currency`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from streams.core.records.policy import Policy

DIALECT = "https://json-schema.org/draft/2020-12/schema"
TITLE = "claimstream policy"

_UNITS = (
    ("d", timedelta(days=1)),
    ("h", timedelta(hours=1)),
    ("m", timedelta(minutes=1)),
    ("s", timedelta(seconds=1)),
    ("ms", timedelta(milliseconds=1)),
)


def duration_text(value: timedelta) -> str:
    """A duration as a policy file writes it, in its largest whole unit: 5m, 30s, 250ms."""
    for unit, size in _UNITS:
        if value % size == timedelta(0) and value:
            return f"{value // size}{unit}"
    return f"{value / timedelta(seconds=1)}s" if value else "0s"


def _as_written(value: object) -> object:
    # Defaults as the file writes them: durations in the policy's units, not ISO 8601.
    if isinstance(value, BaseModel):
        return {name: _as_written(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, timedelta):
        return duration_text(value)
    if isinstance(value, dict):
        return {key: _as_written(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_written(item) for item in value]
    return value


class _PolicySchema(GenerateJsonSchema):
    def encode_default(self, dft: Any) -> Any:
        return super().encode_default(_as_written(dft))


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a policy file."""
    schema = Policy.model_json_schema(schema_generator=_PolicySchema)
    return {"$schema": DIALECT, **schema, "title": TITLE}


def policy_schema_text() -> str:
    """The schema as the shipped file holds it: indented, keys in the model's order."""
    return json.dumps(policy_json_schema(), indent=2, ensure_ascii=False) + "\n"
