"""An agent's story, with no model in it: two tools disagree about an invoice, and the plan waits.

The script plays an agent host. It starts `claimstream mcp --allow-writes` over stdio with the
MCP SDK's own client, reports what its tools returned as claims (`claim_from_tool_output`, then
`record_observation`), and asks `check_plan` before each step:

1. billing-api says invoice paid, billing-export says overdue (two systems of record): the
   refund step is blocked (then=stop);
2. crm and order-form disagree whether the customer's email is verified, a field whose
   conflicts degrade: the summary step may run without it (then=degrade);
3. billing-export is observed again and now says paid: the conflict is resolved and the refund
   runs.

Run it beside a worker (`claimstream dev` prints the broker address; its web API is the default):

    python examples/agent_story.py --broker 127.0.0.1:40123 [--api http://127.0.0.1:6066]

It exits 0 when the story went as told, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from streams.agents.tool_claims import claim_from_tool_output
from streams.core.records.contracts import Claim

PAYMENT = "order.payment_status"
EMAIL = "customer.email_verified"


def tool_argument(claim: Claim) -> dict[str, Any]:
    """A claim as record_observation takes it (lineage and authority are the policy's)."""
    return claim.model_dump(mode="json", exclude_none=True, exclude={"source_class", "producer"})


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")  # type: ignore[union-attr]
    answer: dict[str, Any] = result.structured_content
    return answer


async def story(api: str | None, broker: str | None) -> bool:
    run = uuid.uuid4().hex[:8]
    invoice, customer = f"invoice:story-{run}", f"customer:story-{run}"
    command = [sys.executable, "-m", "streams.cli", "mcp", "--allow-writes"]
    command += ["--api", api] if api else []
    command += ["--broker", broker] if broker else []
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        # What the tools returned, as an MCP host receives it.
        outputs = [
            ("billing-api", invoice, PAYMENT, CallToolResult(content=[], structured_content={"value": "paid"})),
            ("billing-export", invoice, PAYMENT, CallToolResult(content=[TextContent(type="text", text='"overdue"')])),
            ("crm", customer, EMAIL, CallToolResult(content=[], structured_content={"result": True})),
            ("order-form", customer, EMAIL, CallToolResult(content=[], structured_content={"result": False})),
        ]  # fmt: skip
        for source, subject, field, output in outputs:
            claim = claim_from_tool_output(
                output, subject=subject, field=field, source=source, boolean_field=field == EMAIL
            )
            recorded = await call(
                session, "record_observation", claim=tool_argument(claim), wait_s=30
            )
            print(f"{source}: claim {claim.claim_id} placed={recorded['placed']}")

        plan = [
            {"name": "refund", "reads": [f"{invoice}|{PAYMENT}"]},
            {"name": "summary", "reads": [f"{customer}|{EMAIL}"]},
            {"name": "greet", "reads": []},
        ]
        before = await call(session, "check_plan", steps=plan)
        print("plan:", json.dumps(before))
        fact = await call(session, "get_fact", subject=invoice, field=PAYMENT)
        print("warning:", fact["warning"])

        # The system of record is observed again and now agrees: the conflict resolves.
        claim = claim_from_tool_output(
            {"value": "paid"}, subject=invoice, field=PAYMENT, source="billing-export"
        )
        await call(session, "record_observation", claim=tool_argument(claim), wait_s=30)
        after = await call(session, "check_plan", steps=plan)
        print("plan:", json.dumps(after))

    then = {step["name"]: step["then"] for step in before["blocked"]}
    told = (
        then == {"refund": "stop", "summary": "degrade"}
        and before["runnable"] == ["greet"]
        and fact["outcome"] == "conflict"
        and "refund" in after["runnable"]
    )
    print("the refund runs" if told else "the story did not go as told")
    return told


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", help="a worker's web API (default: from settings)")
    parser.add_argument("--broker", help="the broker (default: from settings)")
    args = parser.parse_args()
    return 0 if asyncio.run(story(args.api, args.broker)) else 1


if __name__ == "__main__":
    sys.exit(main())
