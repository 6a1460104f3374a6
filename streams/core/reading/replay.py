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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution, parse_claim
from streams.core.decision.agreement import distinct
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.stewardship import in_force_at_once
from streams.core.keys.transitions import Transition, add_resolution, apply_claim
from streams.core.records.contracts import Decision, RejectReason, Resolution
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy
from streams.core.rules.engine import arbitrate
from streams.core.timeline.aliases import AliasHistory, regroup_keys
from streams.core.timeline.erasures import Erasure, ErasureHistory, erased_decision
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
        said = resolutions.get((subject, field), [])
        in_force, refusals = in_force_at_once(subject, field, said, rules, Limits())
        refused += (f"{resolutions_origin}: {r.reason.value}: {r.detail}" for r in refusals)
        arbitration = arbitrate(subject, field, kept, rules, policy.version, now, in_force)
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
    aliases: AliasHistory | None = None,
    erasures: ErasureHistory | None = None,
) -> TimedReplay:
    """Every decision and escalation the stream emits for recorded claims and resolutions, each
    taken at its own instant (none later than `now`), and the key's timers fired as they come
    due, up to `now`. A claim_id reused for a different statement is refused as in the stream
    (the later version, `conflicting_duplicate`), not every version as in `replay`.

    `policy` is one policy, or the policies in force over time: then each claim and resolution
    is admitted and applied under the one in force at its instant (one that refuses it rejects
    it), and each key moves to every policy taking effect by `now`, at its `since`, its kept
    claims admitted afresh (`rollout.catch_up`): a move is a decision like the others.

    `aliases`, the subject aliases over time: each claim and resolution counts on the key of
    its subject's canonical spelling at its instant, keeping the subject it was sent with; at
    each instant an alias takes effect or is retracted, every key's kept evidence regroups
    (`aliases.regrouped`) and each key that gains or loses some is decided again then; a key
    left with nothing says where its evidence went.

    `erasures`, the data subjects erased: a claim or resolution about one, stamped before its
    erasure, never counts, and its key says once, at the erasure's instant, that it was erased
    (`core.timeline.erasures`)."""
    limits = limits or Limits()
    history = policy if isinstance(policy, PolicyHistory) else PolicyHistory.of(policy)
    by_key, rejections = _claims(lines, history, now)
    resolutions, refused = _resolutions(resolution_lines, history, now, resolutions_origin)
    records: list[TimedRecord] = []
    for key in sorted(by_key.keys() | resolutions.keys()):
        read: list[tuple[datetime, AdmittedClaim | Resolution, Any]] = [
            (min(admitted.claim.observed_at, now), admitted, data)
            for admitted, data in by_key.get(key, [])
        ]
        read += [(min(r.decided_at, now), r, None) for r in resolutions.get(key, [])]
        records += [
            TimedRecord(at, key, n, record, data) for n, (at, record, data) in enumerate(read)
        ]
    records.sort(key=lambda record: (record.at, record.sent, record.n))
    timeline = Timeline(history, aliases or AliasHistory(), now, limits, erasures)
    emitted: list[tuple[datetime, tuple[str, str], int, Emitted]] = []
    sequence: dict[tuple[str, str], int] = defaultdict(int)
    for at, key, record, transition in timeline.run(records):
        n = sequence[key]
        sequence[key] += 1
        if isinstance(transition, Decision):  # the key's subject erased
            emitted.append((at, key, 2 * n, Emitted(at, transition)))
            continue
        if transition.refused is not None:
            assert record is not None
            rejections.append(_refused(record, transition))
        if transition.emitted is not None:
            emitted.append((at, key, 2 * n, Emitted(at, transition.emitted.decision)))
        if transition.escalation is not None:
            emitted.append((at, key, 2 * n + 1, Emitted(at, transition.escalation, True)))
    emitted.sort(key=lambda entry: entry[:3])
    rejections.sort(key=lambda r: (r.claim_id or "", r.reason.value, r.to_json()))
    return TimedReplay([entry[3] for entry in emitted], rejections, refused)


@dataclass(frozen=True, slots=True)
class TimedRecord:
    """A recorded claim or resolution at its instant, under the key it was sent about (`sent`:
    its subject as sent, and field) and its place among the records of its instant and key
    (`n`): a `Timeline` takes them sorted by (at, sent, n)."""

    at: datetime
    sent: tuple[str, str]
    n: int
    record: AdmittedClaim | Resolution
    data: Any


class Timeline:
    """The keys' transitions in time order, as the stream makes them: before each record (and
    before `now`), the key's timers that came due and the policies that took effect, each at its
    own instant (`catch_up`); then the record, on the key its subject names then, under the
    policy in force at its instant (which admitted it). At each instant the aliases change,
    every key first caught up to it, then its evidence regrouped. A record about data erased
    since (`ErasureHistory.erasing`) never counts: the key it was about says it was erased, once,
    at the erasure's instant (an `erased_decision` step), and any state the key holds then is
    dropped; where that instant is after `now`, the key says so all the same, after the rest:
    what an erasure erased is told as of no instant. `replay_with_clock` gives it claims at
    their `observed_at`, `claimstream audit export` records at their broker timestamps, as a
    worker takes them. Its keys' states are its
    own: a claim changes its key's state in place (`apply_claim`, as a worker's task does)."""

    def __init__(
        self,
        history: PolicyHistory,
        aliases: AliasHistory,
        now: datetime,
        limits: Limits,
        erasures: ErasureHistory | None = None,
    ) -> None:
        self.history, self.aliases, self.now, self.limits = history, aliases, now, limits
        self.erasures = erasures or ErasureHistory()
        self.states: dict[tuple[str, str], KeyState] = {}
        self._erasing: dict[datetime, dict[tuple[str, str], Erasure]] = {}
        """The keys each erasure's instant drops, found by the erased records they were sent."""

    def run(self, records: list[TimedRecord]) -> Iterator[Step]:
        # At one instant, an alias change (0) before an erasure (1): it covers what they name.
        changes = sorted(
            [(at, 0) for at in self.aliases.instants(self.now)]
            + [(at, 1) for at in self.erasures.instants(self.now)]
        )
        pending = 0
        for record in records:
            while pending < len(changes) and changes[pending][0] <= record.at:
                yield from self._changed(*changes[pending])
                pending += 1
            yield from self._applied(record)
        for at, kind in changes[pending:]:
            yield from self._changed(at, kind)
        for key in sorted(self.states):
            yield from self._caught_up(key, self.now)
        for at in sorted(self._erasing):  # erased after `now`: told erased all the same
            yield from self._erased(at)

    def _changed(self, at: datetime, kind: int) -> Iterator[Step]:
        return self._regrouped(at) if kind == 0 else self._erased(at)

    def _erased(self, at: datetime) -> Iterator[Step]:
        """The keys the erasures of `at` drop: those their erased records were about, and any
        held whose subject they erase, each saying so once."""
        dropping = self._erasing.pop(at, {})
        for key, state in self.states.items() if at <= self.now else ():
            erasure = self.erasures.dropping(state, at)
            if erasure is not None:
                dropping[key] = erasure
        for key in sorted(dropping):
            self.states.pop(key, None)
            policy = self.history.in_force(at).version
            yield at, key, None, erased_decision(key[0], key[1], dropping[key], policy)

    def _caught_up(self, key: tuple[str, str], at: datetime) -> Iterator[Step]:
        state = self.states.get(key)
        latest = self.history.latest
        if state is None or (
            # Nothing is due (most records): as `KeyClock.caught_up` finds it, and as
            # `catch_up` would.
            state.policy_version == latest.policy.version
            and at >= latest.since
            and (state.next_check_at is None or state.next_check_at > at)
        ):
            return
        for due, step in catch_up(state, self.history, at, self.limits):
            yield due, key, None, step
            state = self.states[key] = step.state

    def _applied(self, record: TimedRecord) -> Iterator[Step]:
        at, (subject, field) = record.at, record.sent
        key = (self.aliases.canonical(subject, at), field) if self.aliases.changes else record.sent
        if self.erasures:
            erasure = self.erasures.erasing(subject, at) or self.erasures.erasing(key[0], at)
            if erasure is not None:  # never counts; its key says it was erased, at the instant
                erased_key = (self.aliases.canonical(subject, erasure.at), field)
                self._erasing.setdefault(erasure.at, {})[erased_key] = erasure
                return
        yield from self._caught_up(key, at)
        state = self.states.get(key) or KeyState(subject=key[0], field=field)
        policy = self.history.in_force(at)
        rules = policy.rules_for(field)
        assert rules is not None  # admission refused claims and resolutions for unknown fields
        said = record.record
        if isinstance(said, AdmittedClaim):
            step = apply_claim(state, said, rules, policy.version, at, self.limits)
        else:
            step = add_resolution(state, said, rules, policy.version, at, self.limits)
        yield at, key, record, step
        self.states[key] = step.state

    def _regrouped(self, at: datetime) -> Iterator[Step]:
        for key in sorted(self.states):
            yield from self._caught_up(key, at)
        policy = self.history.in_force(at)
        table = self.aliases.in_force(at)
        for key, step in regroup_keys(self.states, table, policy, at, self.limits):
            yield at, key, None, step
            self.states[key] = step.state


Step = tuple[datetime, tuple[str, str], TimedRecord | None, Transition | Decision]
"""A key's transition: its instant, the key (subject and field), the record it applied (none
for time, a policy, an alias or an erasure) and the transition; for an erasure, the `erased`
decision the key sends as it is dropped."""


def _refused(record: TimedRecord, transition: Transition) -> ReplayRejection:
    refused = transition.refused
    assert refused is not None
    said = record.record
    claim_id = said.claim.claim_id if isinstance(said, AdmittedClaim) else None
    return ReplayRejection(claim_id, refused.reason, refused.detail, record.data)
