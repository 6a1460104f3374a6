"""The rules in one pass, for a key whose claims are all plain: the engine's fast room.

Where it sits: `engine.arbitrate` hands a key here when no claim carries an epoch, a period or a
scope and no resolution is in play (then the rows declared `plain=False`, and resolution, have
nothing to look at). One pass sorts the claims into excluded, stale, the top authority and the
weaker ones; lineage and agreement then run over the top group only, and the result is the
`Arbitration` the rules (`engine.RULES`, the specification) reach, roles included. It is a second
encoding of those rules: it names the rows it encodes (`FOLLOWS`), which the engine checks against
the table as it builds it, and `tests/core/rules/test_shortcuts.py` holds its decisions equal to the
table's for generated plain keys, so a change to the rules that this pass does not follow fails at
import or there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.agreement import (
    agrees,
    clusters,
    distinct,
    independent,
    newest_claim,
    newest_group,
    newest_in_lineages,
)
from streams.core.decision.arbitration import Arbitration, Verdict, resolved_by
from streams.core.decision.side_records import Roles
from streams.core.records.contracts import (
    Resolution,
)
from streams.core.records.instants import micros
from streams.core.records.members import (
    ASSERTED_RANK,
    CONFLICT,
    CONTESTED,
    CORROBORATING,
    EXCLUDED,
    EXISTENCE_CONFLICT,
    INSUFFICIENT,
    MOST_RECENT,
    NO_EVIDENCE_STATUSES,
    STALE,
    SUPERSEDED,
    VALUE_CONFLICT,
    WINNER,
)
from streams.core.records.policy import FieldRules, freshness_us
from streams.core.rules.rulebook import Rule
from streams.core.rules.shortcuts.incremental import plain_belief

FOLLOWS: tuple[str, ...] = (
    "duplicates",
    "no_evidence",
    "freshness",
    "authority",
    "lineage",
    "existence",
    "value",
    "corroboration",
    "resolution",  # nothing to do here: `applies` leaves a resolution in play to the table
)
"""The table's rows this pass encodes, in the table's order: each row that runs on plain keys
(`Rule.plain`)."""


def check_follows(table: Sequence[Rule]) -> None:
    """Raise unless `FOLLOWS` names exactly the rows of `table` that run on plain keys, in order.
    The engine calls it as it builds `RULES`: a change to the table this pass does not follow
    stops the import, rather than waiting for a generated key to tell the two apart."""
    plain_rows = tuple(rule.name for rule in table if rule.plain)
    if plain_rows != FOLLOWS:
        raise RuntimeError(
            "the fused pass (streams/core/rules/shortcuts/fused.py) encodes the rows"
            f" {list(FOLLOWS)},"
            f" but the table's rows that run on plain keys are {list(plain_rows)}: change"
            " arbitrate_plain and FOLLOWS with the table (or declare a row that has nothing to do"
            " on plain keys plain=False)"
        )


def applies(claims: list[AdmittedClaim], resolutions: Sequence[Resolution]) -> bool:
    """Whether a key may be decided here: plain claims and no resolution in play."""
    return not resolutions and all(admitted.plain for admitted in claims)


def arbitrate_plain(
    subject: str,
    field: str,
    claims: list[AdmittedClaim],
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    supersedes: str | None = None,
    previous: Arbitration | None = None,
) -> Arbitration:
    """What `engine.arbitrate` decides over plain `claims` with no resolutions (the caller
    checks `applies`), row by row of `FOLLOWS`."""
    kept, _ = distinct(claims)
    roles: Roles = {}
    budget = freshness_us(rules)
    too_old = micros(now) - budget if budget is not None else None
    live: list[AdmittedClaim] = []
    top_rank, any_stale = ASSERTED_RANK, False
    for admitted in kept:
        if admitted.status in NO_EVIDENCE_STATUSES:
            roles[admitted.claim_id] = EXCLUDED
        elif too_old is not None and admitted.observed_us < too_old:
            roles[admitted.claim_id] = STALE
            any_stale = True
        else:
            live.append(admitted)
            if admitted.rank < top_rank:
                top_rank = admitted.rank
    winner: AdmittedClaim | None = None
    conflict_rank: int | None = None
    if not kept:
        verdict = Verdict(INSUFFICIENT, "no_claims")
    elif not live:
        reason = "no_fresh_claims" if any_stale else "no_usable_claims"
        verdict = Verdict(INSUFFICIENT, reason)
    elif top_rank >= ASSERTED_RANK:
        _contest(live, roles)
        verdict = Verdict(INSUFFICIENT, "no_authoritative_claims")
    else:
        top = [a for a in live if a.rank == top_rank]
        weaker = [a for a in live if a.rank != top_rank] if len(top) < len(live) else []
        verdict, winner = _decide_top(top, weaker, rules, roles)
        if verdict.outcome is CONFLICT:
            conflict_rank = top_rank
    return Arbitration(
        subject=subject,
        field=field,
        claims=kept,
        roles=roles,
        verdict=verdict,
        rules=rules,
        policy_version=policy_version,
        decided_at=now,
        supersedes=supersedes,
        belief=plain_belief(verdict, winner, conflict_rank, rules, policy_version),
        previous=previous,
    )


def _decide_top(
    top: list[AdmittedClaim], weaker: list[AdmittedClaim], rules: FieldRules, roles: Roles
) -> tuple[Verdict, AdmittedClaim | None]:
    """The verdict of the top authority's claims (roles written into `roles`), and the winner
    where corroboration chose one."""
    tolerance = rules.tolerance
    tiebreak = None
    if len(top) > 1:
        split = newest_in_lineages(top, tolerance)
        if split is not None:
            top, superseded = split
            for admitted in superseded:
                roles[admitted.claim_id] = SUPERSEDED
        first = top[0].status
        for admitted in top:
            if admitted.status is not first:
                _contest(top, roles)
                _contest(weaker, roles)
                return Verdict(CONFLICT, "existence_conflict", EXISTENCE_CONFLICT), None
        groups = clusters(top, tolerance)
        if len(groups) > 1:
            newest = newest_group(groups) if rules.on_conflict is MOST_RECENT else None
            if newest is None:
                _contest(top, roles)
                _contest(weaker, roles)
                return Verdict(CONFLICT, "authority_conflict", VALUE_CONFLICT), None
            _contest(top, roles)
            top = newest
            tiebreak = MOST_RECENT.value
    winner = newest_claim(top)
    for admitted in top:
        roles[admitted.claim_id] = CORROBORATING
    roles[winner.claim_id] = WINNER
    agreeing_weaker = []
    for admitted in weaker:
        if agrees(admitted, winner, tolerance):
            roles[admitted.claim_id] = CORROBORATING
            agreeing_weaker.append(admitted)
        else:
            roles[admitted.claim_id] = CONTESTED
    required = rules.min_independent_sources
    if required > 1 and independent(top + agreeing_weaker) < required:
        roles[winner.claim_id] = CORROBORATING
        return Verdict(INSUFFICIENT, "too_few_independent_sources"), winner
    return resolved_by(winner, tiebreak), winner


def _contest(claims: list[AdmittedClaim], roles: Roles) -> None:
    for admitted in claims:
        roles[admitted.claim_id] = CONTESTED
