"""Tool outputs as claims: MCP results (the SDK's own type) and plain values, the failures kept
distinct, empty results and bare booleans refused."""

from __future__ import annotations

import pytest
from mcp.types import CallToolResult, TextContent

from streams.agents.tool_claims import claim_from_tool_output
from streams.core.records.contracts import ClaimStatus, Money
from streams.core.records.errors import ClaimstreamError

WHERE = {"subject": "invoice:42", "field": "order.payment_status", "source": "billing-api"}


def result(text: str = "", structured: object = None, error: bool = False) -> CallToolResult:
    content = [TextContent(type="text", text=text)] if text else []
    return CallToolResult(content=content, structured_content=structured, is_error=error)


def test_an_error_result_is_status_error_with_its_text_never_a_value() -> None:
    claim = claim_from_tool_output(result("upstream timed out", error=True), **WHERE)
    assert (claim.status, claim.value) == (ClaimStatus.ERROR, None)
    assert claim.attributes["tool_error"] == "upstream timed out"


@pytest.mark.parametrize("status", ["not_found", "forbidden", "unavailable"])
def test_an_error_result_that_names_its_failure_keeps_it(status: str) -> None:
    claim = claim_from_tool_output(result("no", {"status": status}, error=True), **WHERE)
    assert claim.status == ClaimStatus(status)


def test_values_from_structured_content_text_and_plain_outputs() -> None:
    assert claim_from_tool_output(result(structured={"value": "paid"}), **WHERE).value == "paid"
    assert claim_from_tool_output(result('"overdue"'), **WHERE).value == "overdue"
    assert claim_from_tool_output(result(structured={"result": 12}), **WHERE).value == 12
    money = claim_from_tool_output({"amount_minor": 1250, "currency": "USD"}, **WHERE)
    assert money.value == Money(amount_minor=1250, currency="USD")
    absent = claim_from_tool_output({"status": "not_found"}, **WHERE, trace_id="t-1")
    assert (absent.status, absent.trace_id) == (ClaimStatus.NOT_FOUND, "t-1")
    timed = claim_from_tool_output({"value": 5000, "unit": "ms"}, **WHERE)
    assert (timed.value, timed.unit) == (5000, "ms")


@pytest.mark.parametrize("output", [None, "", {}, [], result(), result(structured={"result": ""})])
def test_an_empty_result_is_refused(output: object) -> None:
    with pytest.raises(ClaimstreamError, match="returned nothing"):
        claim_from_tool_output(output, **WHERE)


def test_a_bare_boolean_is_refused_unless_the_field_is_boolean() -> None:
    with pytest.raises(ClaimstreamError, match="bare boolean"):
        claim_from_tool_output(result(structured={"result": True}), **WHERE)
    claim = claim_from_tool_output(True, **WHERE, boolean_field=True)
    assert claim.value is True


def test_an_output_whose_value_cannot_be_told_is_refused() -> None:
    with pytest.raises(ClaimstreamError, match="cannot tell the value"):
        claim_from_tool_output({"paid": True, "when": "today"}, **WHERE)
    with pytest.raises(ClaimstreamError, match="returned nothing"):
        claim_from_tool_output({"status": "present"}, **WHERE)
    with pytest.raises(ClaimstreamError, match="returned nothing"):
        claim_from_tool_output({"value": None}, **WHERE)
    with pytest.raises(ClaimstreamError, match="bare boolean"):
        claim_from_tool_output({"value": False}, **WHERE)
