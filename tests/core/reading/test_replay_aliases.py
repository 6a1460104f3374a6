"""Replay with the alias history: an alias merges the evidence held under both spellings at the
instant it takes effect, a retraction splits it back, and the result depends on the claims and
the history alone (not the order they are read in); merge then unmerge leaves every key as if the
alias had never been; aliases in force from the start are claims sent under the canonical subject.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streams.core.reading.replay import TimedReplay, replay_with_clock
from streams.core.records.contracts import Decision, Outcome
from streams.core.records.errors import AliasError
from streams.core.timeline.aliases import AliasChange, AliasHistory
from tests.support.builders import POLICY, WIDE

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SEATS, ADDRESS = "contract.seats", "customer.shipping_address"
NOW = T0 + timedelta(hours=1)


def _line(n: int, subject: str, source: str, value: Any, seconds: float, field: str = SEATS) -> str:
    return json.dumps(
        {
            "claim_id": f"c{n}",
            "subject": subject,
            "field": field,
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": (T0 + timedelta(seconds=seconds)).isoformat(),
        }
    )


def _pairs() -> list[str]:
    """Five companies crm and the order form (both systems of record) spell differently: crm
    says 40 seats of `Acme Corp N`, the order form 25 of `acme-N`."""
    lines = []
    for n in range(5):
        lines.append(_line(2 * n, f"Acme Corp {n}", "crm", 40, n))
        lines.append(_line(2 * n + 1, f"acme-{n}", "order-form", 25, n + 0.5))
    return lines


def _merge(at: datetime) -> list[AliasChange]:
    return [AliasChange(f"Acme Corp {n}", f"acme-{n}", at, "ana") for n in range(5)]


def _latest(timed: TimedReplay) -> dict[tuple[str, str], Decision]:
    return {(e.decision.subject, e.decision.field): e.decision for e in timed.emitted}


def _gist(decision: Decision) -> tuple[Any, ...]:
    return (decision.outcome, decision.conflict_kind, decision.status, decision.value)


def test_two_spellings_conflict_once_merged_and_the_alias_key_says_where_it_went() -> None:
    merged_at = T0 + timedelta(minutes=10)
    aliases = AliasHistory(_merge(merged_at))
    timed = replay_with_clock(_pairs(), POLICY, NOW, aliases=aliases, limits=WIDE)
    at_merge = {
        (e.decision.subject, e.decision.outcome): e.decision
        for e in timed.emitted
        if e.at == merged_at
    }
    assert len(at_merge) == 10
    for n in range(5):
        canonical = at_merge[(f"acme-{n}", Outcome.CONFLICT)]
        assert sorted(e.claim_id for e in canonical.evidence) == [f"c{2 * n}", f"c{2 * n + 1}"]
        left = at_merge[(f"Acme Corp {n}", Outcome.INSUFFICIENT)]
        assert left.reason.endswith(f"merged into 'acme-{n}'")
        assert not left.evidence
    before = [e for e in timed.emitted if e.at < merged_at]
    assert {(e.decision.subject, e.decision.outcome) for e in before} == {
        (subject, Outcome.RESOLVED) for n in range(5) for subject in (f"Acme Corp {n}", f"acme-{n}")
    }


def test_a_retraction_splits_back_every_claim_sent_under_the_alias_even_after_the_merge() -> None:
    merged_at, split_at = T0 + timedelta(minutes=10), T0 + timedelta(minutes=20)
    later = _line(99, "ACME CORP 0", "crm", 41, 15 * 60)  # after the merge, another spelling
    aliases = AliasHistory([*_merge(merged_at), AliasChange("Acme Corp 0", None, split_at, "ana")])
    timed = replay_with_clock([*_pairs(), later], POLICY, NOW, aliases=aliases, limits=WIDE)
    # Under the alias, 41 joins acme-0's conflict (no new belief to emit); split, it has a key.
    assert [e.at for e in timed.emitted if e.decision.subject == "ACME CORP 0"] == [split_at]
    latest = _latest(timed)
    assert _gist(latest[("acme-0", SEATS)]) == (Outcome.RESOLVED, None, "present", 25)
    assert _gist(latest[("Acme Corp 0", SEATS)]) == (Outcome.RESOLVED, None, "present", 40)
    assert _gist(latest[("ACME CORP 0", SEATS)]) == (Outcome.RESOLVED, None, "present", 41)
    assert _gist(latest[("acme-1", SEATS)])[0] is Outcome.CONFLICT  # its alias still stands


def test_without_aliases_replay_is_as_before() -> None:
    assert replay_with_clock(_pairs(), POLICY, NOW) == replay_with_clock(
        _pairs(), POLICY, NOW, aliases=AliasHistory()
    )


_SPELLINGS = ["Acme Corp", "acme", "ACME-2231", "initech"]
_VALUES = {SEATS: [12, 15, 40], ADDRESS: ["1 Main St", "2 High St"]}


@st.composite
def _claims(draw: st.DrawFn) -> list[str]:
    count = draw(st.integers(1, 12))
    seconds = draw(st.lists(st.integers(0, 3000), min_size=count, max_size=count, unique=True))
    lines = []
    for n, at in enumerate(seconds):
        field = draw(st.sampled_from([SEATS, ADDRESS]))
        lines.append(
            _line(
                n,
                draw(st.sampled_from(_SPELLINGS)),
                draw(st.sampled_from(["crm", "order-form", "chat"])),
                draw(st.sampled_from(_VALUES[field])),
                at,
                field,
            )
        )
    return lines


@st.composite
def _aliases(draw: st.DrawFn) -> list[AliasChange]:
    changes: list[AliasChange] = []
    for _ in range(draw(st.integers(0, 4))):
        alias, canonical = draw(st.permutations(_SPELLINGS))[:2]
        at = T0 + timedelta(seconds=draw(st.integers(0, 3600)))
        change = AliasChange(alias, draw(st.sampled_from([canonical, None])), at, "ana")
        try:
            AliasHistory([*changes, change])
        except AliasError:
            continue  # it would close a cycle
        changes.append(change)
    return changes


@settings(max_examples=60, deadline=None)
@given(_claims(), _aliases(), st.randoms(use_true_random=False))
def test_aliases_and_claims_in_any_order_give_the_same_beliefs(
    lines: list[str], changes: list[AliasChange], shuffler: random.Random
) -> None:
    expected = replay_with_clock(lines, POLICY, NOW, aliases=AliasHistory(changes), limits=WIDE)
    shuffled_lines, shuffled_changes = list(lines), list(changes)
    shuffler.shuffle(shuffled_lines)
    if len({change.at for change in changes}) == len(changes):  # one instant: their order counts
        shuffler.shuffle(shuffled_changes)
    again = replay_with_clock(
        shuffled_lines, POLICY, NOW, aliases=AliasHistory(shuffled_changes), limits=WIDE
    )
    assert again == expected


@settings(max_examples=60, deadline=None)
@given(
    _claims(),
    st.permutations(_SPELLINGS),
    st.integers(0, 3000),
    st.integers(1, 600),
)
def test_merge_then_unmerge_leaves_every_key_as_if_the_alias_had_never_been(
    lines: list[str], spellings: list[str], merged_s: int, lasted_s: int
) -> None:
    alias, canonical = spellings[:2]
    merged_at = T0 + timedelta(seconds=merged_s)
    aliases = AliasHistory(
        [
            AliasChange(alias, canonical, merged_at),
            AliasChange(alias, None, merged_at + timedelta(seconds=lasted_s)),
        ]
    )
    never = _latest(replay_with_clock(lines, POLICY, NOW, limits=WIDE))
    merged_and_split = _latest(replay_with_clock(lines, POLICY, NOW, aliases=aliases, limits=WIDE))
    assert merged_and_split.keys() >= never.keys()
    for key, decision in merged_and_split.items():
        if key in never:
            assert _gist(decision) == _gist(never[key]), key
        else:  # a key that only the merge made holds nothing again
            assert not decision.evidence, key


@settings(max_examples=60, deadline=None)
@given(_claims(), _aliases())
def test_aliases_in_force_from_the_start_are_claims_sent_under_the_canonical_subject(
    lines: list[str], changes: list[AliasChange]
) -> None:
    start = T0 - timedelta(seconds=1)
    try:
        aliases = AliasHistory([AliasChange(c.alias, c.canonical, start) for c in changes])
    except AliasError:
        assume(False)  # at one instant, in the order drawn, they close a cycle
    renamed = []
    for line in lines:
        data = json.loads(line)
        data["subject"] = aliases.canonical(data["subject"], start)
        renamed.append(json.dumps(data))
    aliased = replay_with_clock(lines, POLICY, NOW, aliases=aliases, limits=WIDE)
    assert _unspelled(aliased) == replay_with_clock(renamed, POLICY, NOW, limits=WIDE)


def _unspelled(replayed: TimedReplay) -> TimedReplay:
    """The replay without the spelling each claim was sent under (what renaming forgets)."""
    emitted = [
        replace(
            each,
            decision=each.decision.model_copy(
                update={
                    "evidence": tuple(
                        e.model_copy(update={"sent_about": None}) for e in each.decision.evidence
                    )
                }
            ),
        )
        for each in replayed.emitted
    ]
    return replace(replayed, emitted=emitted)
