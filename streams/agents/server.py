"""`claimstream mcp`: the MCP server an agent host starts (stdio) or connects to (streamable HTTP).

It sits beside the cluster like any client: reads go to a worker's web API (any worker; it
forwards to the key's owner), writes go to the broker's claim topics. The tools' descriptions are
written for a model to read; the work is in `streams.agents.tools`. A tool's problem, bad input or
an unreachable worker, is an `isError` result with the reason; the server itself never stops on
one.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from streams import __version__
from streams.agents.facts import (
    ConflictList,
    Explanation,
    Fact,
    PlanCheck,
    PlanStep,
    Proposed,
    Recorded,
)
from streams.agents.tools import MAX_WAIT_S, ClaimInput, FactTools
from streams.core.records.errors import ClaimstreamError

INSTRUCTIONS = """\
claimstream reconciles what tools, services and users claim about the same fact and decides by
a fixed policy. Before acting on a fact, ask get_fact; before running a plan, ask check_plan and
run only the steps it calls runnable (a blocked step with then=degrade may run without the facts
that block it; then=stop must not run). Report what your tools return as claims with
record_observation, and what a user tells you with record_user_assertion: a user's statement is
never more than an assertion. Never present a disputed fact as settled: read its warning. An
erased fact (outcome erased: a person's data erased on request) has no value: never state or
guess one."""

Result = TypeVar("Result")
Subject = Annotated[str, Field(description="what the fact is about, e.g. 'invoice:42' or an alias")]
FieldName = Annotated[str, Field(description="a policy field, e.g. 'order.payment_status'")]
WaitS = Annotated[
    float | None,
    Field(
        description=f"seconds (0 to {MAX_WAIT_S:g}) to wait for the fact's decision to count the "
        "claim, returned as `fact`; omit to return once the broker has it"
    ),
]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)


async def _answer(work: Awaitable[Result]) -> Result:
    try:
        return await work
    except ClaimstreamError as exc:
        raise ToolError(str(exc)) from exc


def build_server(tools: FactTools) -> MCPServer:
    server: MCPServer = MCPServer(
        "claimstream", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool(annotations=READ_ONLY)
    async def get_fact(subject: Subject, field: FieldName) -> Fact:
        """What is believed now about one subject's field, after alias resolution: the outcome
        (resolved, conflict, insufficient, quarantined), the value and unit, the action
        (continue; degrade: go on without it; block: stop), the reason, and every claim's source,
        value, authority, observation time and role. When the outcome is not resolved, `warning`
        says what is disputed, by whom, and what not to do with it: read it before answering.
        Outcome `erased`: the subject's data was erased (`erasure_id`, at `decided_at`); there is
        no value, and none may be stated or guessed."""
        return await _answer(tools.get_fact(subject, field))

    @server.tool(annotations=READ_ONLY)
    async def get_fact_as_of(
        subject: Subject,
        field: FieldName,
        at: Annotated[str, Field(description="an RFC 3339 instant, e.g. 2026-11-29T12:00:00Z")],
    ) -> Fact:
        """What was believed about one subject's field at an earlier instant (the decision in
        force then, with the evidence it had): for audits and for "what did we know when".
        Outcome `erased`: what was believed then was erased since; no value is kept."""
        return await _answer(tools.get_fact_as_of(subject, field, at))

    @server.tool(annotations=READ_ONLY)
    async def check_plan(
        steps: Annotated[
            list[PlanStep], Field(description="the plan's steps, each with the facts it reads")
        ],
    ) -> PlanCheck:
        """Which steps of a plan may run now. A step is runnable when every fact it reads is
        resolved and not blocked; otherwise it is listed under `blocked` with each blocking fact's
        outcome, action and reason, and `then`: `degrade` (run it without those facts, saying
        so) or `stop` (do not run it). A fact nobody has claimed yet blocks too, and so does an
        erased one (stop)."""
        return await _answer(tools.check_plan(steps))

    @server.tool(annotations=READ_ONLY)
    async def list_conflicts(
        field: Annotated[str | None, Field(description="only this policy field")] = None,
        kind: Annotated[
            str | None,
            Field(description="value, existence, semantic, cross_epoch or provenance"),
        ] = None,
        min_age_s: Annotated[float | None, Field(description="open at least this long")] = None,
    ) -> ConflictList:
        """The open conflicts and quarantines across the cluster, oldest first: facts that must
        not be acted on until a person resolves them or a system of record is observed again."""
        return await _answer(tools.list_conflicts(field, kind, min_age_s))

    @server.tool(annotations=READ_ONLY)
    async def explain_fact(subject: Subject, field: FieldName) -> Explanation:
        """The current decision about one subject's field in plain sentences, for a person."""
        return await _answer(tools.explain_fact(subject, field))

    @server.tool(annotations=WRITES)
    async def record_observation(claim: ClaimInput, wait_s: WaitS = None) -> Recorded:
        """Report what a tool or system returned as a claim, with its source (the tool's name as
        the policy knows it). A failed call is status `error`, `unavailable` or `forbidden`, never
        an empty value; "it does not exist" is `not_found`. The policy, not the claim, decides its
        authority. With wait_s, returns the fact once its decision counts the claim."""
        return await _answer(tools.record(claim, wait_s, user_assertion=False))

    @server.tool(annotations=WRITES)
    async def record_user_assertion(claim: ClaimInput, wait_s: WaitS = None) -> Recorded:
        """Report what a user told you ("I paid yesterday") as a claim; `source` names the
        channel (e.g. 'chat'). It counts as an assertion, the weakest authority: it never
        outweighs a system's observation, and never settles a fact alone."""
        return await _answer(tools.record(claim, wait_s, user_assertion=True))

    @server.tool(annotations=WRITES)
    async def propose_resolution(
        subject: Subject,
        field: FieldName,
        value: Annotated[
            str | int | float | bool | dict[str, object],
            Field(description="the value you propose, as the field's type (money: an object)"),
        ],
        note: Annotated[str, Field(description="why, citing the evidence you relied on")],
        proposed_by: Annotated[str, Field(description="your name, e.g. 'billing-agent'")],
    ) -> Proposed:
        """Ask a person to settle a disputed fact with the value you propose. It changes nothing
        until a steward approves it: the fact stays disputed meanwhile, and there is no tool to
        approve it. Propose only on a conflict or quarantine, and say in `note` why."""
        return await _answer(tools.propose(subject, field, value, note, proposed_by))

    return server
