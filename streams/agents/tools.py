"""The MCP tools' work, without MCP: ask a worker's web API, judge a plan by the gate's rule,
publish a claim and read it back. `streams.agents.server` exposes these as tools; every problem
is a ClaimstreamError whose text says what is wrong and what would be accepted.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.agents.facts import (
    ConflictList,
    Explanation,
    Fact,
    PlanCheck,
    PlanStep,
    Proposed,
    Recorded,
    blocked_step,
    erased_fact_decision,
    erased_words,
    fact_from_decision,
    parse_read,
)
from streams.client import (
    ClaimPublisher,
    FactsClient,
    build_resolution,
    judge,
    publish_resolutions,
)
from streams.core.keys.state import state_key
from streams.core.reading.explain import explain
from streams.core.records.contracts import (
    OPEN_OUTCOMES,
    Claim,
    ClaimStatus,
    ConflictKind,
    Decision,
    Outcome,
    SourceClass,
    StewardAct,
    Value,
    parse_instant,
)
from streams.core.records.errors import ClaimstreamError, SubjectErased, validation_problems
from streams.settings import Settings

MAX_WAIT_S = 60.0


class ClaimInput(BaseModel):
    """One statement by one source about one subject and field (the claim contract; claim_id
    and observed_at are filled in when left out)."""

    model_config = ConfigDict(extra="forbid")  # lineage and authority are the policy's

    subject: str = Field(min_length=1, description="what it is about, e.g. 'invoice:42'")
    field: str = Field(min_length=1, description="a policy field, e.g. 'order.payment_status'")
    status: ClaimStatus = Field(
        default=ClaimStatus.PRESENT,
        description="present (with a value), not_found (it does not exist), forbidden, "
        "unavailable or error (the tool failed: never evidence of absence)",
    )
    value: Value = Field(default=None, description="the value when present")
    unit: str | None = None
    source: str = Field(min_length=1, description="the tool or system that said it")
    observed_at: datetime | None = Field(default=None, description="RFC 3339; default now")
    claim_id: str | None = Field(default=None, description="default: a fresh id")
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    epoch: int | None = None
    scope: str | None = None
    trace_id: str | None = None
    attributes: dict[str, str] = Field(default_factory=dict)

    def claim(self, source_class: SourceClass, producer: str) -> Claim:
        body = self.model_dump(exclude_none=True)
        body.setdefault("claim_id", f"mcp-{uuid.uuid4().hex}")
        body.setdefault("observed_at", datetime.now(UTC))
        try:
            return Claim.model_validate(
                {**body, "source_class": source_class, "producer": producer}
            )
        except ValidationError as exc:
            raise ClaimstreamError(validation_problems(exc.errors(), "claim")) from exc


class FactTools:
    """The tools' implementations over one worker's web API and (for writes) the broker."""

    def __init__(self, facts: FactsClient, settings: Settings, *, allow_writes: bool) -> None:
        self.facts = facts
        self.settings = settings
        self.allow_writes = allow_writes

    async def _decision(self, subject: str, field: str) -> Decision | None:
        """The key's current decision, or None; an erased subject's is the erased decision (no
        value, no evidence, action block)."""
        try:
            return await self.facts.get_fact(subject, field)
        except SubjectErased as erased:
            return await self._erased(erased)

    async def _erased(self, erased: SubjectErased) -> Decision:
        version = str((await self.facts.vocabulary())["policy_version"])
        return erased_fact_decision(erased, version)

    async def get_fact(self, subject: str, field: str) -> Fact:
        decision = await self._decision(subject, field)
        if decision is None:
            raise ClaimstreamError(_nothing_known(subject, field))
        return fact_from_decision(decision)

    async def get_fact_as_of(self, subject: str, field: str, at: str) -> Fact:
        try:
            instant = parse_instant(at)
        except ValueError as exc:
            raise ClaimstreamError(
                f"at: {exc}; write an RFC 3339 instant with an offset, e.g. 2026-11-29T12:00:00Z"
            ) from exc
        try:
            found = await self.facts.answer(subject, field, as_of=instant)
        except SubjectErased as erased:  # what was believed then was erased since
            return fact_from_decision(await self._erased(erased))
        if found is None:
            raise ClaimstreamError(f"no belief about {subject} {field} was in force at {at}")
        if found.get("decision") is None:
            raise ClaimstreamError(
                f"the claims behind the belief about {subject} {field} at {at} are no longer "
                f"retained; the belief then was {found['belief']}"
            )
        return fact_from_decision(Decision.model_validate(found["decision"]))

    async def check_plan(self, steps: list[PlanStep]) -> PlanCheck:
        reads = {read for step in steps for read in step.reads}
        for read in reads:
            parse_read(read)
        keys = sorted(reads)
        found = await asyncio.gather(*(self._decision(*parse_read(k)) for k in keys))
        decisions = dict(zip(keys, found, strict=True))
        check = PlanCheck(runnable=[], blocked=[])
        for step in steps:
            verdict = judge((read, decisions[read]) for read in step.reads)
            if verdict.runnable:
                check.runnable.append(step.name)
            else:
                check.blocked.append(blocked_step(step.name, verdict, decisions))
        return check

    async def list_conflicts(
        self, field: str | None = None, kind: str | None = None, min_age_s: float | None = None
    ) -> ConflictList:
        filters: dict[str, str | int] = {}
        if field is not None:
            await self.facts.check_field(field)
            filters["field"] = field
        if kind is not None:
            kinds = [k.value for k in ConflictKind]
            if kind not in kinds:
                raise ClaimstreamError(f"unknown conflict kind {kind!r}; kinds: {', '.join(kinds)}")
            filters["kind"] = kind
        if min_age_s is not None:
            filters["min_age_s"] = int(min_age_s)
        answer = await self.facts.conflicts(**filters)
        return ConflictList(
            open_conflicts=answer["open_conflicts"],
            counts_per_field=answer["counts_per_field"],
            unanswered=answer["unanswered"],
        )

    async def explain_fact(self, subject: str, field: str) -> Explanation:
        decision = await self._decision(subject, field)
        if decision is None:
            raise ClaimstreamError(_nothing_known(subject, field))
        erased = decision.outcome is Outcome.ERASED
        text = erased_words(decision) if erased else explain(decision)
        return Explanation(key=state_key(decision.subject, decision.field), text=text)

    async def propose(
        self, subject: str, field: str, value: object, note: str, proposed_by: str
    ) -> Proposed:
        """A resolution of the key's current decision, sent as a proposal (act `propose`): it
        waits for a steward's approval whatever the policy asks, and an agent has no tool to
        approve it."""
        self._writes_on()
        decision = await self.facts.get_fact(subject, field)
        if decision is None:
            raise ClaimstreamError(_nothing_known(subject, field))
        if decision.outcome not in OPEN_OUTCOMES:
            raise ClaimstreamError(
                f"{subject} {field} is {decision.outcome.value}, not in dispute: there is "
                "nothing for a person to settle"
            )
        statement = build_resolution(
            None,
            decision.subject,
            field,
            decided_by=f"agent:{proposed_by.strip()}",
            decided_at=datetime.now(UTC),
            value=cast(Value, value),  # validated as the contract's value by build_resolution
            note=note,
            resolves_decision_id=decision.decision_id,
            act=StewardAct.PROPOSE,
            origin="proposal",
        )
        await publish_resolutions(self.settings, [statement])
        return Proposed(
            resolution_id=statement.resolution_id,
            key=state_key(decision.subject, field),
            proposed_by=statement.decided_by,
            on_decision=decision.decision_id,
        )

    def _writes_on(self) -> None:
        if not self.allow_writes:
            raise ClaimstreamError(
                "writes are off: this MCP server was started without --allow-writes, so it "
                "only reads facts (get_fact, check_plan, list_conflicts, explain_fact)"
            )

    async def record(
        self, claim: ClaimInput, wait_s: float | None, *, user_assertion: bool
    ) -> Recorded:
        self._writes_on()
        if wait_s is not None and not 0 <= wait_s <= MAX_WAIT_S:
            raise ClaimstreamError(f"wait_s is {wait_s}; give 0 to {MAX_WAIT_S:g} seconds")
        source_class = SourceClass.USER if user_assertion else SourceClass.OBSERVATION
        model = claim.claim(source_class, producer="claimstream-mcp")
        await self.facts.check_field(model.field)
        async with ClaimPublisher(self.settings, user_assertions=user_assertion) as publisher:
            topic = publisher.topic
            if wait_s is None:
                await (await publisher.publish(model))
                decision = None
            else:
                decision = await publisher.publish_and_wait(model, self.facts, wait_s)
        return Recorded(
            claim_id=model.claim_id,
            key=state_key(model.subject, model.field),
            topic=topic,
            placed=None if wait_s is None else decision is not None,
            fact=fact_from_decision(decision) if decision is not None else None,
        )


def _nothing_known(subject: str, field: str) -> str:
    return (
        f"nothing is known about {subject} {field}: no claims about it have been placed. "
        "Do not assume a value; observe it (record_observation) or ask."
    )
