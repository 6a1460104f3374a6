"""What an agent reads: a decision as a fact with a warning in words, and a plan's verdict.

These are the MCP tools' typed inputs and outputs (their JSON schemas are what a model sees);
they are built from the web API's answers (`streams.client.FactsClient`) and from the gate's rule
(`streams.client.judge`), so a tool says exactly what `DecisionFeed.gate` would.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from streams.client import GateVerdict
from streams.core.keys.state import split_key, state_key
from streams.core.records.contracts import (
    Action,
    ClaimStatus,
    Decision,
    EvidenceRole,
    Money,
    Outcome,
    Value,
)
from streams.core.records.errors import ClaimstreamError, SubjectErased
from streams.core.timeline.erasures import Erasure, erased_decision

SIDES = (EvidenceRole.WINNER, EvidenceRole.CONTESTED, EvidenceRole.QUARANTINED)


class EvidenceItem(BaseModel):
    claim_id: str
    source: str
    status: ClaimStatus
    value: Value = None
    authority: str = Field(description="the source's authority class, assigned by the policy")
    observed_at: datetime
    role: EvidenceRole = Field(description="what the claim counted for in this decision")


class Fact(BaseModel):
    key: str = Field(description="subject|field after alias resolution")
    subject: str
    field: str
    outcome: Outcome = Field(description="resolved, conflict, insufficient, quarantined or erased")
    status: ClaimStatus | None = None
    value: Value = None
    unit: str | None = None
    action: Action = Field(description="continue, degrade (go on without it) or block (stop)")
    reason: str
    conflict_kind: str | None = None
    decided_at: datetime
    policy_version: str
    decision_id: str
    evidence: list[EvidenceItem]
    warning: str | None = Field(
        default=None, description="set whenever the outcome is not resolved: read it first"
    )
    erasure_id: str | None = Field(
        default=None,
        description="set when the subject's data was erased (outcome erased): the erasure "
        "request's id; decided_at is its instant, and no value or evidence is kept",
    )


def fact_from_decision(decision: Decision) -> Fact:
    return Fact(
        key=state_key(decision.subject, decision.field),
        subject=decision.subject,
        field=decision.field,
        outcome=decision.outcome,
        status=decision.status,
        value=decision.value,
        unit=decision.unit,
        action=decision.action,
        reason=decision.reason,
        conflict_kind=decision.conflict_kind.value if decision.conflict_kind else None,
        decided_at=decision.decided_at,
        policy_version=decision.policy_version,
        decision_id=decision.decision_id,
        evidence=[
            EvidenceItem(
                claim_id=e.claim_id,
                source=e.source,
                status=e.status,
                value=e.value,
                authority=e.authority.value,
                observed_at=e.observed_at,
                role=e.role,
            )
            for e in decision.evidence
        ],
        warning=warning_for(decision),
        erasure_id=decision.resolution_id if decision.outcome is Outcome.ERASED else None,
    )


def erased_fact_decision(erased: SubjectErased, policy_version: str) -> Decision:
    """The decision the key's owner emitted when the subject was erased, as a read of it
    answers it (`SubjectErased`): erased by which request and when, with no value and no
    evidence, its action block."""
    subject, field = split_key(erased.key)
    # Only the erasure's id and instant make the decision; what else it says is not told.
    erasure = Erasure(erased.erasure_id, subject, erased.erased_at, erased.erased_at, "", "")
    return erased_decision(subject, field, erasure, policy_version)


def erased_words(decision: Decision) -> str:
    """An erased fact in a sentence for a model: by which request, when, and what not to do."""
    return (
        f"{decision.subject} {decision.field} was erased by request {decision.resolution_id} "
        f"at {decision.decided_at.isoformat()} (a data subject's erasure): no value of it is "
        "kept. Treat it as unknown: do not state, guess or restore any value it had, and do "
        "not run a step that reads it."
    )


def value_text(value: Value, status: ClaimStatus | None = ClaimStatus.PRESENT) -> str:
    if status is not None and status is not ClaimStatus.PRESENT:
        return status.value.replace("_", " ")
    if isinstance(value, Money):
        return f"{value.amount_minor / 100:.2f} {value.currency}"
    return repr(value) if isinstance(value, str) else str(value)


_WHAT_TO_DO = {
    Action.BLOCK: "Do not run a step that reads it and do not state any of these values as "
    "fact; ask a person to resolve it, or observe it again at a system of record.",
    Action.DEGRADE: "Go on without it (degrade): do not rely on any of these values, and say "
    "the fact is unsettled.",
    Action.CONTINUE: "Every side stands; if you use it, say that it is disputed and by whom.",
}


def warning_for(decision: Decision) -> str | None:
    """A sentence for a model: what is disputed, by whom, and what not to do with it."""
    if decision.outcome is Outcome.RESOLVED:
        return None
    if decision.outcome is Outcome.ERASED:
        return erased_words(decision)
    what = f"{decision.subject} {decision.field}"
    sides = "; ".join(
        f"{e.source} ({e.authority.value}) says {value_text(e.value, e.status)}"
        for e in decision.evidence
        if e.role in SIDES
    )
    if decision.outcome is Outcome.CONFLICT:
        kind = decision.conflict_kind.value if decision.conflict_kind else "value"
        head = f"{what} is disputed ({kind} conflict): {sides or 'see the evidence'}."
    elif decision.outcome is Outcome.QUARANTINED:
        head = (
            f"{what} is quarantined ({decision.reason}): its value changed across an epoch or "
            f"its provenance is missing{': ' + sides if sides else ''}."
        )
    else:
        head = (
            f"Not enough is known about {what} ({decision.reason}): there is no fresh, "
            "independent observation. Do not assume a value."
        )
    return f"{head} {_WHAT_TO_DO[decision.action]}"


def parse_read(read: str) -> tuple[str, str]:
    """A plan step's read, `subject|field`, as its subject and field."""
    subject, field = split_key(read)
    if not subject.strip() or not field.strip():
        raise ClaimstreamError(
            f"{read!r} is not a fact key: write 'subject|field', "
            "e.g. 'invoice:42|order.payment_status'"
        )
    return subject, field


class PlanStep(BaseModel):
    name: str = Field(min_length=1, description="the step's name, as your plan calls it")
    reads: list[str] = Field(
        default_factory=list, description="the facts it reads, each 'subject|field'"
    )


class BlockingFact(BaseModel):
    key: str
    outcome: Outcome | None = Field(description="None: no decision about it yet")
    action: Action | None
    reason: str


class BlockedStep(BaseModel):
    name: str
    then: Literal["degrade", "stop"] = Field(
        description="degrade: every blocking fact degrades, run the step without them; "
        "stop: do not run it"
    )
    facts: list[BlockingFact]


class PlanCheck(BaseModel):
    runnable: list[str] = Field(description="steps that may run now")
    blocked: list[BlockedStep]


def blocked_step(
    name: str, verdict: GateVerdict, decisions: dict[str, Decision | None]
) -> BlockedStep:
    facts = []
    for read, why in verdict.blocked_by.items():
        decision = decisions[read]
        facts.append(
            BlockingFact(
                key=read,
                outcome=decision.outcome if decision else None,
                action=verdict.actions[read],
                reason=decision.reason if decision else why,
            )
        )
    return BlockedStep(name=name, then="degrade" if verdict.degraded else "stop", facts=facts)


class ConflictList(BaseModel):
    open_conflicts: list[dict[str, Any]] = Field(
        description="open conflicts and quarantines, oldest first"
    )
    counts_per_field: dict[str, int]
    unanswered: list[str] = Field(description="workers that did not answer: the list may be short")


class Explanation(BaseModel):
    key: str
    text: str


class Recorded(BaseModel):
    claim_id: str
    key: str
    topic: str
    placed: bool | None = Field(
        description="True: the key's decision now counts the claim; False: not within wait_s "
        "(the worker dead-letters a claim its policy refuses); None: not waited for"
    )
    fact: Fact | None = None


class Proposed(BaseModel):
    resolution_id: str
    key: str
    proposed_by: str = Field(description="the steward identity it was sent as: agent:<name>")
    on_decision: str = Field(description="the key's decision it proposes to settle")
    waits_for: str = Field(
        default="a steward's approval",
        description="a proposal changes nothing until a steward approves it in the console or "
        "with `claimstream review approve`",
    )
