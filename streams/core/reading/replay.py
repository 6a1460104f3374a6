"""Offline replay: the engine over recorded claims, as a policy owner tries a policy change.

Pure: takes lines of JSON and returns decisions and rejections, in a canonical order so the output
is byte-identical whatever order the input lines came in. Two readings:
- `replay`: each key's final decision at `now`, from all its claims and resolutions at once.
- `replay_with_clock`: what the stream emits, in order: each key's claims and resolutions taken
  through its transitions (`keys.transitions`) at their own instants (a claim's `observed_at`, a
  resolution's `decided_at`), and every time-driven re-decision (freshness running out, an
  escalation, a quarantine's end) at the instant its timer comes due, up to `now`, as a worker's
  ticks make them; given a policy history (`rollout.PolicyHistory`), each claim and resolution
  admitted and applied under the policy in force at its instant, and each key moved to every
  policy taking effect, at its instant (`rollout.catch_up`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution, parse_claim
from streams.core.decision.agreement import distinct
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import Transition, add_claim, add_resolution
from streams.core.records.contracts import Decision, RejectReason, Resolution
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy
from streams.core.rules.engine import arbitrate
from streams.core.timeline.rollout import PolicyHistory, catch_up


@dataclass(frozen=True, slots=True)
class ReplayRejection:
    claim_id: str | None
    reason: RejectReason
    detail: str
    claim: Any

    def to_json(self) -> str:
        return json.dumps(
            {
                "claim_id": self.claim_id,
                "reason": self.reason.value,
                "detail": self.detail,
                "claim": self.claim,
            },
            sort_keys=True,
            ensure_ascii=False,
        )


@dataclass(frozen=True, slots=True)
class ReplayResult:
    decisions: list[Decision]
    rejections: list[ReplayRejection]
    rejected_resolutions: list[str]
    """One line per unusable resolution: where it is (file:line), the reason and the problem."""


def replay(
    lines: Iterable[str],
    policy: Policy,
    now: datetime,
    resolution_lines: Iterable[str] = (),
    resolutions_origin: str = "resolutions",
) -> ReplayResult:
    """Final decisions for recorded claims and resolutions at `now`, as a worker would reach.

    A claim_id identifies a claim within its subject and field, as in the stream: a key's
    versions of one id that say different things are all rejected (`conflicting_duplicate`), and
    none of them counts. A resolution line that cannot be used is rejected on its own, naming
    `resolutions_origin` and its line number."""
    history = PolicyHistory.of(policy)
    by_key, rejections = _claims(lines, history, now)
    resolutions, refused = _resolutions(resolution_lines, history, now, resolutions_origin)
    decisions = []
    for subject, field in sorted(by_key):
        received = by_key[(subject, field)]
        kept, disputed = distinct(admitted for admitted, _ in received)
        rejections += (
            ReplayRejection(
                admitted.claim.claim_id,
                RejectReason.CONFLICTING_DUPLICATE,
                "claim_id used for claims that say different things; no version counts",
                data,
            )
            for admitted, data in received
            if admitted.claim.claim_id in disputed
        )
        rules = policy.rules_for(field)
        assert rules is not None  # admit() refused claims for unknown fields
        arbitration = arbitrate(
            subject,
            field,
            kept,
            rules,
            policy.version,
            now,
            resolutions.get((subject, field), ()),
        )
        decisions.append(arbitration.decision)
    rejections.sort(key=lambda r: (r.claim_id or "", r.reason.value, r.to_json()))
    return ReplayResult(decisions=decisions, rejections=rejections, rejected_resolutions=refused)


Received = list[tuple[AdmittedClaim, Any]]
"""A key's admitted claims, in the order read, each with the data it was read from."""


def _claims(
    lines: Iterable[str], history: PolicyHistory, now: datetime
) -> tuple[dict[tuple[str, str], Received], list[ReplayRejection]]:
    """The admitted claims of each key (subject, field), each by the policy in force at its
    instant (its `observed_at`, or `now` if later), and the lines refused."""
    rejections: list[ReplayRejection] = []
    by_key: dict[tuple[str, str], Received] = defaultdict(list)
    for line in lines:
        if not line.strip():
            continue
        data: Any = line
        try:
            data = json.loads(line)
            claim = parse_claim(data)
            admitted = admit(claim, history.in_force(min(claim.observed_at, now)), now)
        except json.JSONDecodeError as exc:
            rejections.append(
                ReplayRejection(None, RejectReason.MALFORMED, f"not JSON: {exc.msg}", line)
            )
        except ContractError as exc:
            claim_id = data.get("claim_id") if isinstance(data, dict) else None
            rejections.append(
                ReplayRejection(
                    claim_id if isinstance(claim_id, str) else None, exc.reason, exc.detail, data
                )
            )
        else:
            by_key[(claim.subject, claim.field)].append((admitted, data))

    return by_key, rejections


def _resolutions(
    lines: Iterable[str], history: PolicyHistory, now: datetime, origin: str
) -> tuple[dict[tuple[str, str], list[Resolution]], list[str]]:
    """The admitted resolutions of each key, each by the policy in force at its `decided_at`
    (or `now` if later), and a line for each one refused."""
    found: dict[tuple[str, str], list[Resolution]] = defaultdict(list)
    refused: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            said = Resolution.model_validate_json(line)
            policy = history.in_force(min(said.decided_at, now))
            resolution = admit_resolution(said, policy, now)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(resolution)'}: {e['msg']}"
                for e in exc.errors()
            )
            refused.append(f"{origin}:{number}: {RejectReason.MALFORMED.value}: {problems}")
        except ContractError as exc:
            refused.append(f"{origin}:{number}: {exc.reason.value}: {exc.detail}")
        else:
            found[(resolution.subject, resolution.field)].append(resolution)
    return found, refused


@dataclass(frozen=True, slots=True)
class Emitted:
    """One record the stream sends for a key: a decision, or an escalation (`escalation`)."""

    at: datetime
    decision: Decision
    escalation: bool = False


@dataclass(frozen=True, slots=True)
class TimedReplay:
    emitted: list[Emitted]
    """In the order of their instants (a key's in the order it made them)."""
    rejections: list[ReplayRejection]
    rejected_resolutions: list[str]


def replay_with_clock(
    lines: Iterable[str],
    policy: Policy | PolicyHistory,
    now: datetime,
    resolution_lines: Iterable[str] = (),
    resolutions_origin: str = "resolutions",
    limits: Limits | None = None,
) -> TimedReplay:
    """Every decision and escalation the stream emits for recorded claims and resolutions, each
    taken at its own instant (none later than `now`), and the key's timers fired as they come
    due, up to `now`. A claim_id reused for a different statement is refused as in the stream
    (the later version, `conflicting_duplicate`), not every version as in `replay`.

    `policy` is one policy, or the policies in force over time: then each claim and resolution
    is admitted and applied under the one in force at its instant (one that refuses it rejects
    it), and each key moves to every policy taking effect by `now`, at its `since`, its kept
    claims admitted afresh (`rollout.catch_up`): a move is a decision like the others."""
    limits = limits or Limits()
    history = policy if isinstance(policy, PolicyHistory) else PolicyHistory.of(policy)
    by_key, rejections = _claims(lines, history, now)
    resolutions, refused = _resolutions(resolution_lines, history, now, resolutions_origin)
    emitted: list[tuple[datetime, tuple[str, str], int, Emitted]] = []
    for key in sorted(by_key.keys() | resolutions.keys()):
        events: list[tuple[datetime, int, AdmittedClaim | Resolution, Any]] = [
            (min(admitted.claim.observed_at, now), n, admitted, data)
            for n, (admitted, data) in enumerate(by_key.get(key, []))
        ]
        events += [
            (min(r.decided_at, now), len(events) + n, r, None)
            for n, r in enumerate(resolutions.get(key, []))
        ]
        events.sort(key=lambda event: (event[0], event[1]))
        for n, (at, record, transition) in enumerate(
            _key_timeline(key[1], events, history, now, limits)
        ):
            if transition.refused is not None:
                claim = record if isinstance(record, AdmittedClaim) else None
                rejections.append(_refused(claim, transition, events))
            if transition.emitted is not None:
                emitted.append((at, key, 2 * n, Emitted(at, transition.emitted.decision)))
            if transition.escalation is not None:
                emitted.append((at, key, 2 * n + 1, Emitted(at, transition.escalation, True)))
    emitted.sort(key=lambda entry: entry[:3])
    rejections.sort(key=lambda r: (r.claim_id or "", r.reason.value, r.to_json()))
    return TimedReplay([entry[3] for entry in emitted], rejections, refused)


def _key_timeline(
    field: str,
    events: list[tuple[datetime, int, AdmittedClaim | Resolution, Any]],
    history: PolicyHistory,
    now: datetime,
    limits: Limits,
) -> Iterable[tuple[datetime, AdmittedClaim | Resolution | None, Transition]]:
    """One key's transitions in time order: before each event (and before `now`), the timers
    that came due and the policies that took effect, each at its own instant (`catch_up`); then
    the event, under the policy in force at its instant (which admitted it)."""
    state: KeyState | None = None
    for at, _, record, _ in [*events, (now, -1, None, None)]:
        for due, step in catch_up(state, history, at, limits):
            yield due, None, step
            state = step.state
        if record is None:
            continue
        policy = history.in_force(at)
        rules = policy.rules_for(field)
        assert rules is not None  # admission refused claims and resolutions for unknown fields
        if isinstance(record, AdmittedClaim):
            step = add_claim(state, record, rules, policy.version, at, limits)
        else:
            step = add_resolution(state, record, rules, policy.version, at, limits)
        yield at, record, step
        state = step.state


def _refused(
    claim: AdmittedClaim | None,
    transition: Transition,
    events: list[tuple[datetime, int, AdmittedClaim | Resolution, Any]],
) -> ReplayRejection:
    refused = transition.refused
    assert refused is not None
    data = next((d for _, _, record, d in events if record is claim), None)
    claim_id = claim.claim.claim_id if claim is not None else None
    return ReplayRejection(claim_id, refused.reason, refused.detail, data)
