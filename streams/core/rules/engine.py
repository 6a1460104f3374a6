"""The arbitration engine: a pure function of (one key's claims, the field's rules, now).

Where it sits: a key's transitions hand it a key's admitted claims (after trying the shortcut in
`shortcuts/incremental.py`); the verdict and roles found here become an `Arbitration`
(`arbitration.py`). Read top-down: the table (`_rules`: the README's "How a decision is made",
same names and order, held by a test; its `Rule`s, the `Context` the steps share and their
`StepResult` are in `rulebook.py`), `arbitrate` (which hands plain keys to the table's single
pass, `shortcuts/fused.py`), `run_rules`, then the steps in table order. A step takes the claims
still in play and returns the roles it gave and, once the belief is known, the verdict; what else
it leaves for later steps it writes to the `Context` fields its rule names in `sets`. The last two
steps revise a verdict. The result depends only on the set of claims. How claims agree and count
as independent is in `agreement.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import values_agree
from streams.core.decision.agreement import (
    agrees,
    clusters,
    confirmed,
    distinct,
    independent,
    newest_claim,
    newest_group,
    newest_in_lineages,
    same_statements,
)
from streams.core.decision.arbitration import Arbitration, Verdict, resolved_by
from streams.core.decision.side_records import EpochShift, Roles
from streams.core.records.contracts import (
    Authority,
    ConflictKind,
    EvidenceRole,
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
    QUARANTINED,
    RESOLVED,
    STALE,
    SUPERSEDED,
    VALUE_CONFLICT,
    WINNER,
)
from streams.core.records.policy import EpochChangeRule, FieldRules, freshness_us
from streams.core.rules.rulebook import Context, Rule, StepResult
from streams.core.rules.shortcuts.fused import applies, arbitrate_plain, check_follows
from streams.core.rules.shortcuts.incremental import extensible_belief


def _rules() -> tuple[Rule, ...]:
    """The table, in order. A function so that it reads here, ahead of the steps it names;
    `RULES` is built from it once they are defined. `plain=False`: the step has nothing to look
    at when no claim carries an epoch, a period or a scope (`Context.plain`), and `run_rules`
    skips it then (unanchored's claims are only ever set aside by missing_epoch)."""
    return (
        Rule("duplicates", _duplicates, sets=("evidence", "plain")),
        Rule("no_evidence", _no_evidence),
        Rule("later_periods", _later_periods, plain=False),
        Rule("freshness", _freshness),
        Rule("missing_epoch", _missing_epoch, sets=("unanchored", "weaker"), plain=False),
        Rule("newest_epoch", _newest_epoch, sets=("shift",), plain=False),
        Rule("authority", _authority, sets=("weaker",)),
        Rule("lineage", _lineage),
        Rule("scope", _scope, plain=False),
        Rule("existence", _existence),
        Rule("value", _value, sets=("tiebreak",)),
        Rule("corroboration", _corroboration, sets=("winner",)),
        Rule("unanchored", _unanchored, revises=True, plain=False),
        Rule("resolution", _resolution, revises=True),
    )


def arbitrate(
    subject: str,
    field: str,
    claims: Iterable[AdmittedClaim],
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    resolutions: Iterable[Resolution] = (),
    supersedes: str | None = None,
    previous: Arbitration | None = None,
) -> Arbitration:
    """Decide what is believed about `field` of `subject` at `now`: by the rules' single pass
    (`shortcuts/fused.py`) where every claim is plain and no resolution is in play, else by
    running `RULES` in order; both decide alike. `previous`, the key's last arbitration, lends its
    id to a verdict that did not change."""
    # A list, whatever was passed: the steps index and iterate it natively.
    said = claims if isinstance(claims, list) else list(claims)
    resolutions = resolutions if isinstance(resolutions, tuple) else tuple(resolutions)
    if applies(said, resolutions):
        return arbitrate_plain(
            subject, field, said, rules, policy_version, now, supersedes, previous
        )
    return run_rules(
        subject, field, said, rules, policy_version, now, resolutions, supersedes, previous
    )


def run_rules(
    subject: str,
    field: str,
    claims: Iterable[AdmittedClaim],
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    resolutions: Sequence[Resolution] = (),
    supersedes: str | None = None,
    previous: Arbitration | None = None,
) -> Arbitration:
    """`RULES` in order, step by step: the specification every faster path is held equal to."""
    context = Context(rules, now, resolutions)
    remaining = list(claims)
    for rule in _DECIDING:
        if context.plain and not rule.plain:
            continue  # nothing for it to look at, as its row says
        result = rule.apply(remaining, context)
        if result is not None:
            if result.roles:
                context.roles.update(result.roles)
            remaining = result.remaining
            if result.verdict is not None:
                context.verdict = result.verdict
                break
    for rule in _REVISING:
        if context.plain and not rule.plain:
            continue
        result = rule.apply(remaining, context)
        if result is not None:
            context.roles.update(result.roles)
            if result.verdict is not None:
                context.verdict = result.verdict
    verdict = context.verdict
    assert verdict is not None, "the last deciding rule always reaches a verdict"
    return Arbitration(
        subject=subject,
        field=field,
        claims=context.evidence,
        roles=context.roles,
        verdict=verdict,
        rules=rules,
        policy_version=policy_version,
        decided_at=now,
        supersedes=supersedes,
        shift=context.shift,
        belief=extensible_belief(context, verdict, policy_version),
        previous=previous,
    )


# --- The steps, in the table's order --------------------------------------------------------


def _duplicates(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """A claim_id counts once; one reused for different content counts for nothing."""
    kept, _ = distinct(claims)
    context.evidence = kept
    context.plain = all(a.plain for a in kept)
    if not kept:
        return StepResult(kept, verdict=Verdict(INSUFFICIENT, "no_claims"))
    return StepResult(kept)


def _no_evidence(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """forbidden / unavailable / error say nothing about existence; a period that starts after
    now says nothing about now."""
    now, kept, roles = micros(context.now), [], {}
    for admitted in claims:
        start = admitted.valid_from_us
        if admitted.status in NO_EVIDENCE_STATUSES or (start is not None and start > now):
            roles[admitted.claim_id] = EXCLUDED
        else:
            kept.append(admitted)
    return StepResult(kept, roles) if roles else None


def _later_periods(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """A statement about a later period describes a change, and closes for good every earlier
    statement of equal or weaker authority that does not explicitly reach into it, whether or not
    either period has ended."""
    latest_start: dict[int, int] = {}
    for admitted in claims:
        start = admitted.valid_from_us
        if start is not None and start > latest_start.get(admitted.rank, start - 1):
            latest_start[admitted.rank] = start
    if not latest_start:
        return None
    # The latest start among claims at least as strong as each rank.
    closing: dict[int, int] = {}
    running: int | None = None
    for rank in range(len(Authority)):
        start = latest_start.get(rank)
        if start is not None and (running is None or start > running):
            running = start
        if running is not None:
            closing[rank] = running
    kept, roles = [], {}
    for admitted in claims:
        closed_at = closing.get(admitted.rank)
        start, end = admitted.valid_from_us, admitted.valid_to_us
        begins = admitted.observed_us if start is None else start
        if closed_at is not None and begins < closed_at and (end is None or end <= closed_at):
            roles[admitted.claim_id] = SUPERSEDED
        else:
            kept.append(admitted)
    return StepResult(kept, roles) if roles else None


def _freshness(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """Older than the field's freshness budget, or past its period's end: stale. A claim
    exactly as old as the budget is still fresh. Nothing fresh: insufficient, never the
    least-stale guess."""
    now, budget = micros(context.now), freshness_us(context.rules)
    too_old = now - budget if budget is not None else None
    kept, roles = [], {}
    for admitted in claims:
        end = admitted.valid_to_us
        aged = too_old is not None and admitted.observed_us < too_old
        if aged or (end is not None and end <= now):
            roles[admitted.claim_id] = STALE
        else:
            kept.append(admitted)
    if kept:
        return StepResult(kept, roles) if roles else None
    # Every claim taken out before this step was excluded, or superseded by one stale here.
    reason = "no_fresh_claims" if roles else "no_usable_claims"
    return StepResult(kept, roles, Verdict(INSUFFICIENT, reason))


def _missing_epoch(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """Where some claims carry an epoch, an observation without one lacks provenance:
    quarantined. An assertion without one is only evidence: it is judged with the weaker claims."""
    anchored = len([a for a in claims if a.claim.epoch is not None])
    if anchored == 0 or anchored == len(claims):
        return None
    kept, roles = [], {}
    for admitted in claims:
        if admitted.claim.epoch is not None:
            kept.append(admitted)
        elif admitted.observes:
            roles[admitted.claim_id] = EvidenceRole.QUARANTINED
            context.unanchored.append(admitted)
        else:
            context.weaker.append(admitted)
    return StepResult(kept, roles)


def _newest_epoch(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """Only the newest epoch decides. A value that changed across the boundary (by the field's
    own equality) is quarantined until re-observed, unless the field accepts epoch changes."""
    found = {a.claim.epoch for a in claims}  # all set or all None, after missing_epoch
    if len(found) < 2:
        return None
    epochs = sorted(epoch for epoch in found if epoch is not None)
    rules = context.rules
    newest, previous = epochs[-1], epochs[-2]
    current = [a for a in claims if a.claim.epoch == newest]
    before = [a for a in claims if a.claim.epoch == previous]
    older = [a for a in claims if a.claim.epoch != newest]
    if not same_statements(current, before, rules.tolerance):
        context.shift = EpochShift(
            from_epoch=previous,
            to_epoch=newest,
            previous_value=newest_claim(before).value,
            new_value=newest_claim(current).value,
            claim_ids=[a.claim_id for a in before + current],
        )
        if rules.epoch_change is EpochChangeRule.REOBSERVE and not confirmed(
            current, rules.tolerance
        ):
            roles = {a.claim_id: EvidenceRole.QUARANTINED for a in current + older}
            roles.update(_all_contested(context.weaker))
            verdict = Verdict(QUARANTINED, "cross_epoch_change", ConflictKind.CROSS_EPOCH)
            return StepResult(current, roles, verdict)
    return StepResult(current, {a.claim_id: SUPERSEDED for a in older})


def _authority(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """The strongest authority present decides; nothing falls through to a weaker class.
    Assertions and inferences are evidence, never proof of state."""
    ranks = [a.rank for a in claims]
    top_rank = min(ranks)
    if top_rank >= ASSERTED_RANK:
        roles = _all_contested(claims + context.weaker)
        return StepResult(claims, roles, Verdict(INSUFFICIENT, "no_authoritative_claims"))
    if ranks.count(top_rank) == len(ranks):
        return None
    context.weaker = [a for a in claims if a.rank != top_rank] + context.weaker
    return StepResult([a for a in claims if a.rank == top_rank])


def _lineage(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """Within one lineage a newer observation replaces an older one that says otherwise."""
    split = newest_in_lineages(claims, context.rules.tolerance)
    if split is None:
        return None  # one claim per lineage: nothing to supersede
    kept, superseded = split
    return StepResult(kept, {a.claim_id: SUPERSEDED for a in superseded})


def _scope(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """Different declared scopes (compared normalized) at the top are a semantic conflict."""
    scopes = {a.scope_key for a in claims if a.scope_key is not None}
    if len(scopes) > 1:
        return _conflict(claims, context, ConflictKind.SEMANTIC, "scope_conflict")
    return None


def _existence(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """present against not_found at the top is an existence conflict, never "prefer present"."""
    first = claims[0].status
    if any(a.status is not first for a in claims):
        return _conflict(claims, context, EXISTENCE_CONFLICT, "existence_conflict")
    return None


def _value(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """Two values at the top are a conflict, unless the field breaks ties by recency and the
    newest observations agree."""
    groups = clusters(claims, context.rules.tolerance)
    if len(groups) == 1:
        return None
    kept = newest_group(groups) if context.rules.on_conflict is MOST_RECENT else None
    if kept is None:
        return _conflict(claims, context, VALUE_CONFLICT, "authority_conflict")
    kept_ids = {a.claim_id for a in kept}
    roles = {a.claim_id: CONTESTED for a in claims if a.claim_id not in kept_ids}
    context.tiebreak = MOST_RECENT.value
    return StepResult(kept, roles)


def _corroboration(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """The newest of the agreeing claims wins; the others, and weaker claims that agree,
    corroborate it. Fewer independent observations than the field requires: insufficient.
    Claims of one lineage, or of one source, are one observation; assertions are none."""
    winner = newest_claim(claims)
    tolerance = context.rules.tolerance
    roles = dict.fromkeys([a.claim_id for a in claims], CORROBORATING)
    roles[winner.claim_id] = WINNER
    context.winner = winner
    agreeing_weaker = []
    for admitted in context.weaker:
        if agrees(admitted, winner, tolerance):
            roles[admitted.claim_id] = CORROBORATING
            agreeing_weaker.append(admitted)
        else:
            roles[admitted.claim_id] = CONTESTED
    required = context.rules.min_independent_sources
    if required > 1 and independent(claims + agreeing_weaker) < required:
        roles[winner.claim_id] = CORROBORATING
        return StepResult(claims, roles, Verdict(INSUFFICIENT, "too_few_independent_sources"))
    return StepResult(claims, roles, resolved_by(winner, context.tiebreak))


def _unanchored(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """An observation without an epoch cannot take part in resolving: if it disagrees with the
    result, the key is quarantined for missing provenance."""
    verdict = context.verdict
    assert verdict is not None
    if (
        not context.unanchored
        or verdict.outcome is not RESOLVED
        or all(
            a.status == verdict.status
            and values_agree(a.value, verdict.value, context.rules.tolerance)
            for a in context.unanchored
        )
    ):
        return None
    return StepResult(
        claims, verdict=Verdict(QUARANTINED, "missing_epoch", ConflictKind.PROVENANCE)
    )


def _resolution(claims: list[AdmittedClaim], context: Context) -> StepResult | None:
    """A person's latest Resolution closes a conflict or quarantine. It covers the claims observed
    at or before its decided_at; a later observation that agrees with it keeps it closed, one that
    disagrees reopens it."""
    verdict = context.verdict
    assert verdict is not None
    if verdict.outcome not in (CONFLICT, QUARANTINED) or not context.resolutions:
        return None
    chosen = max(context.resolutions, key=lambda r: (r.decided_at, r.resolution_id))
    tolerance = context.rules.tolerance
    in_play = claims + context.weaker + context.unanchored

    def settled(admitted: AdmittedClaim) -> bool:
        return admitted.status == chosen.status and values_agree(
            admitted.value, chosen.value, tolerance
        )

    if any(
        a.observes and a.claim.observed_at > chosen.decided_at and not settled(a) for a in in_play
    ):
        return None
    roles = {a.claim_id: CORROBORATING if settled(a) else CONTESTED for a in in_play}
    manual = Verdict(
        RESOLVED,
        "manual",
        status=chosen.status,
        value=chosen.value,
        resolution_id=chosen.resolution_id,
    )
    return StepResult(claims, roles, manual)


RULES: tuple[Rule, ...] = _rules()
check_follows(RULES)  # the single pass encodes the rows that run on plain keys, and only them
_DECIDING: tuple[Rule, ...] = tuple(rule for rule in RULES if not rule.revises)
_REVISING: tuple[Rule, ...] = tuple(rule for rule in RULES if rule.revises)


def _conflict(
    claims: list[AdmittedClaim], context: Context, kind: ConflictKind, reason: str
) -> StepResult:
    roles = _all_contested(claims + context.weaker)
    return StepResult(claims, roles, Verdict(CONFLICT, reason, kind))


def _all_contested(claims: Iterable[AdmittedClaim]) -> Roles:
    return {a.claim_id: CONTESTED for a in claims}
