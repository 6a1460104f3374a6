"""Tool outputs as claims: what an agent's tool returned, with its envelope (which tool, when,
which call), as a `Claim` the worker can arbitrate. It sits at the agent's edge, before
`record_observation` or `ClaimPublisher.publish`.

The rules are the contract's: a failed call is never evidence of absence (an MCP `isError`
result is status `error`, or `not_found` / `forbidden` / `unavailable` when the result says so
in its structured content, each kept distinct), an empty result is refused rather than read as a
value, and a bare boolean is refused unless the field itself is a boolean (`True` from an
"exists?" tool says neither what exists nor its value: return the value, or `not_found`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from streams.core.records.contracts import Claim, ClaimStatus
from streams.core.records.errors import ClaimstreamError, validation_problems

FAILURES = {
    ClaimStatus.NOT_FOUND.value,
    ClaimStatus.FORBIDDEN.value,
    ClaimStatus.UNAVAILABLE.value,
    ClaimStatus.ERROR.value,
}
STATUSES = {status.value for status in ClaimStatus}
MAX_ERROR_TEXT = 500


@runtime_checkable
class ToolResultLike(Protocol):
    """An MCP `CallToolResult` (the SDK's own type fits; this module does not need the SDK)."""

    is_error: bool
    structured_content: Any
    content: Sequence[Any]


def _text(result: ToolResultLike) -> str:
    return "\n".join(str(getattr(block, "text", "")) for block in result.content).strip()


def _payload(result: ToolResultLike) -> Any:
    """A successful result's value: its structured content, else its text (JSON if it parses)."""
    structured = result.structured_content
    if isinstance(structured, Mapping) and set(structured) == {"result"}:
        return structured["result"]  # the SDK wraps a tool's non-object return like this
    if structured is not None:
        return structured
    text = _text(result)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _status_and_value(payload: Any, boolean_field: bool) -> tuple[str, Any, str | None]:
    if isinstance(payload, Mapping):
        status = payload.get("status")
        if status in STATUSES and status != ClaimStatus.PRESENT.value:
            return str(status), None, None
        if "value" in payload:
            value, unit = payload["value"], payload.get("unit")
            return _status_and_value(value, boolean_field)[0], value, unit
        if {"amount_minor", "currency"} <= set(payload):
            return ClaimStatus.PRESENT.value, dict(payload), None
        if status is not None:
            payload = None  # present, but with no value
    if payload is None or payload in ("", {}, []):
        raise ClaimstreamError(
            "the tool returned nothing: a tool that found nothing says status not_found, one "
            "that failed says status error (an empty value is never evidence)"
        )
    if isinstance(payload, bool) and not boolean_field:
        raise ClaimstreamError(
            "a bare boolean is not a claim: return the value found (status present) or status "
            "not_found; true/false is a value only for a boolean field (boolean_field=True)"
        )
    if isinstance(payload, Mapping | list):
        raise ClaimstreamError(
            "cannot tell the value in the tool's result: return {'value': ...} (with 'unit' if "
            "any) or {'status': 'not_found' | 'forbidden' | 'unavailable' | 'error'}"
        )
    return ClaimStatus.PRESENT.value, payload, None


def claim_from_tool_output(
    output: ToolResultLike | Any,
    *,
    subject: str,
    field: str,
    source: str,
    observed_at: datetime | None = None,
    claim_id: str | None = None,
    unit: str | None = None,
    trace_id: str | None = None,
    producer: str | None = None,
    boolean_field: bool = False,
) -> Claim:
    """`output` (an MCP `CallToolResult`, a `{'value'|'status': ...}` mapping or a bare value) as
    a claim by `source` about `subject` and `field`. Raises ClaimstreamError saying what a tool
    should return instead when the output cannot be a claim."""
    attributes: dict[str, str] = {}
    if isinstance(output, ToolResultLike) and output.is_error:
        structured = output.structured_content
        said = structured.get("status") if isinstance(structured, Mapping) else None
        status, value = (said if said in FAILURES else ClaimStatus.ERROR.value), None
        attributes["tool_error"] = _text(output)[:MAX_ERROR_TEXT]
    else:
        payload = _payload(output) if isinstance(output, ToolResultLike) else output
        status, value, said_unit = _status_and_value(payload, boolean_field)
        unit = unit or said_unit
    body = {
        "claim_id": claim_id or f"tool-{uuid.uuid4().hex}",
        "subject": subject,
        "field": field,
        "status": status,
        "value": value,
        "unit": unit,
        "source": source,
        "observed_at": observed_at or datetime.now(UTC),
        "trace_id": trace_id,
        "producer": producer,
        "attributes": attributes,
    }
    try:
        return Claim.model_validate(body)
    except ValidationError as exc:
        raise ClaimstreamError(validation_problems(exc.errors(), f"{source} output")) from exc
