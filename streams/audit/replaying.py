"""One bucket of a cut replayed as the workers decided it, and its rows.

A record counts at its broker timestamp, as a worker decides it (`Processor._now_us`): a claim
is admitted under the policy in force then and, like a resolution, taken through its key's
transitions in time order by `core.reading.replay.Timeline`, which brings each key through its
timers, the policy rollouts and the alias changes up to the cut's instant. The records a worker
refuses (bytes that do not decode, a claim the policy refuses) are refused here for the same
reason and counted, never counted as evidence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from streams.audit.buckets import Spilled
from streams.core.admission.intake import AdmittedClaim, admit_micros, admit_resolution
from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState, Limits
from streams.core.reading.audit_rows import Row, belief_row, evidence_rows, statement_rows
from streams.core.reading.replay import TimedRecord, Timeline
from streams.core.records.contracts import (
    Decision,
    Resolution,
    SourceClass,
    instant,
)
from streams.core.records.errors import RejectedInput
from streams.core.timeline.aliases import AliasHistory
from streams.core.timeline.erasures import ErasureHistory
from streams.core.timeline.rollout import PolicyHistory
from streams.wire.registry import WireCodec

CLAIM, USER_CLAIM, RESOLUTION = 0, 1, 2
"""What a spilled record is: a claim (a tools' or a principal's topic), a user's assertion (its
class is the topic's) or a steward's statement."""


@dataclass
class Rows:
    """A bucket's rows, each table's in the order of its keys, and what it refused."""

    beliefs: list[Row] = field(default_factory=list)
    evidence: list[Row] = field(default_factory=list)
    statements: list[Row] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    records: int = 0


class BucketReplay:
    """Replays buckets under one cut's histories."""

    def __init__(
        self,
        policies: PolicyHistory,
        aliases: AliasHistory,
        as_of: datetime,
        limits: Limits,
        codec: WireCodec,
        erasures: ErasureHistory | None = None,
    ) -> None:
        self.policies, self.aliases, self.as_of = policies, aliases, as_of
        self.limits, self.codec = limits, codec
        self.erasures = erasures

    def rows(self, spilled: Iterable[Spilled]) -> Rows:
        """The bucket's rows: every key its records reach, as believed at the cut."""
        rows = Rows()
        timed = []
        for record in spilled:
            rows.records += 1
            try:
                timed.append(self._admitted(record))
            except RejectedInput as exc:
                rows.refused[exc.reason.value] += 1
        timed.sort(key=lambda r: (r.at, r.sent, r.n))
        timeline = Timeline(self.policies, self.aliases, self.as_of, self.limits, self.erasures)
        last: dict[tuple[str, str], Decision] = {}
        for _, key, _, transition in timeline.run(timed):
            if isinstance(transition, Decision):  # the key's subject erased
                last[key] = transition
                continue
            if transition.refused is not None:
                rows.refused[transition.refused.reason.value] += 1
            if transition.emitted is not None:
                last[key] = transition.emitted.decision
        for key in sorted(last.keys() - timeline.states.keys()):  # erased, and nothing since
            rows.beliefs.append(belief_row(last[key], 0))
        for key in sorted(timeline.states):
            state = timeline.states[key]
            decision = last.get(key)
            if decision is not None:
                rows.beliefs.append(belief_row(decision, len(state.claims)))
                rows.evidence += evidence_rows(self._weighed(state, decision))
            rows.statements += statement_rows(state)
        return rows

    def _weighed(self, state: KeyState, decision: Decision) -> Decision:
        """The belief with every claim the key holds at the cut in its evidence: a claim that
        changed nothing (one more source agreeing) sent no decision, so the last one sent does
        not list it; the key's arbitration at the cut does, under the same decision id."""
        policy = self.policies.in_force(self.as_of)
        rules = policy.rules_for(state.field)
        if rules is None or state.policy_version != policy.version:
            return decision
        now = current_decision(state, rules, policy.version, self.as_of)
        return now if now.decision_id == decision.decision_id else decision

    def _admitted(self, record: Spilled) -> TimedRecord:
        """The record decoded and admitted at its instant, or RejectedInput."""
        at = instant(record.at_us)
        policy = self.policies.in_force(at)
        said: AdmittedClaim | Resolution
        if record.kind == RESOLUTION:
            said = admit_resolution(self.codec.decode(Resolution, record.value), policy, at)
            sent = (said.subject, said.field)
        else:
            claim = self.codec.decode_claim(record.value)
            source_class = SourceClass.USER if record.kind == USER_CLAIM else None
            said = admit_micros(claim, policy, record.at_us, source_class)
            sent = (claim.subject, claim.field)
        return TimedRecord(at, sent, record.seq, said, None)
