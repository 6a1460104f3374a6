"""Subject aliases over time: chains resolve, a cycle is refused where it is added, spellings
match folded, and the history reads back from its lines; a key's evidence split by the subject
each piece belongs to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.admission.intake import admit
from streams.core.keys.belief import basis_now
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.steward_log import Standing
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.records.contracts import Claim, Resolution
from streams.core.records.errors import AliasError
from streams.core.timeline.aliases import (
    AliasChange,
    AliasHistory,
    Moved,
    alias_key,
    change_line,
    gathered,
    history_from_lines,
    left_for,
    moved_from,
    moved_record,
    regroup_keys,
    regrouped,
)
from tests.support.builders import POLICY

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
T1, T2, T3 = (T0 + timedelta(minutes=n) for n in (1, 2, 3))


def test_a_chain_resolves_to_its_last_subject_and_only_from_its_instant() -> None:
    history = AliasHistory(
        [AliasChange("ACME-2231", "Acme Corp", T2), AliasChange("Acme Corp", "acme", T1)]
    )
    assert history.canonical("ACME-2231", T0) == "ACME-2231"
    assert history.canonical("ACME-2231", T1) == "ACME-2231"
    assert history.canonical("Acme Corp", T1) == "acme"
    assert history.canonical("ACME-2231", T2) == "acme"
    assert history.canonical("acme", T2) == "acme"


def test_spellings_match_folded_and_a_retraction_ends_the_alias() -> None:
    history = AliasHistory(
        [AliasChange("Acme  Corp", "acme", T1), AliasChange("ACME corp", None, T2)]
    )
    assert alias_key("ACME  Corp") == "acme corp"
    assert history.canonical("acme CORP", T1) == "acme"
    assert history.canonical("Acme Corp", T2) == "Acme Corp"
    assert history.in_force(T0) == {}
    assert dict(history.in_force(T1)) == {"acme corp": "acme"}


def test_changes_at_one_instant_apply_in_the_order_given() -> None:
    history = AliasHistory([AliasChange("a", "b", T1), AliasChange("a", "c", T1)])
    assert history.canonical("a", T1) == "c"
    assert history.instants(T3) == [T1]


@pytest.mark.parametrize(
    ("changes", "closing"),
    [
        ([AliasChange("a", "b", T1), AliasChange("b", "a", T2)], "'b' -> 'a'"),
        (
            [AliasChange("a", "b", T1), AliasChange("b", "c", T1), AliasChange("C", "A", T3)],
            "'C' -> 'A'",
        ),
    ],
)
def test_a_change_closing_a_cycle_is_refused_naming_it(
    changes: list[AliasChange], closing: str
) -> None:
    with pytest.raises(AliasError, match="closes a cycle") as refused:
        AliasHistory(changes)
    assert closing in str(refused.value)


def test_a_cycle_broken_first_by_a_retraction_is_no_cycle() -> None:
    history = AliasHistory(
        [AliasChange("a", "b", T1), AliasChange("a", None, T2), AliasChange("b", "a", T2)]
    )
    assert history.canonical("b", T2) == "a"
    assert history.canonical("a", T1) == "b"


@pytest.mark.parametrize(
    ("alias", "canonical", "at", "problem"),
    [
        ("", "acme", T1, "needs a spelling"),
        ("Acme", " ", T1, "is empty"),
        ("Acme", "ACME", T1, "names itself"),
        ("Acme", "acme-0", datetime(2026, 12, 4), "needs a UTC offset"),
    ],
)
def test_a_change_that_cannot_be_is_refused(
    alias: str, canonical: str, at: datetime, problem: str
) -> None:
    with pytest.raises(AliasError, match=problem):
        AliasChange(alias, canonical, at)


_SPELLINGS = st.sampled_from(["Acme Corp", "acme", "ACME-2231", "Initech", "initech-1"])
_CHANGES = (
    st.tuples(
        _SPELLINGS,
        st.one_of(st.none(), _SPELLINGS),
        st.integers(0, 5).map(lambda n: T0 + timedelta(minutes=n)),
        st.sampled_from(["", "ana", "bo"]),
    )
    .filter(lambda parts: parts[1] is None or alias_key(parts[0]) != alias_key(parts[1]))
    .map(lambda parts: AliasChange(*parts))
)


@given(st.lists(_CHANGES, max_size=6))
def test_a_history_reads_back_from_its_lines_or_is_refused_alike(
    changes: list[AliasChange],
) -> None:
    lines = [change_line(change) for change in changes]
    try:
        history = AliasHistory(changes)
    except AliasError:
        with pytest.raises(AliasError):
            history_from_lines(lines)
        return
    again = history_from_lines(["", *lines])
    for minute in range(7):
        at = T0 + timedelta(minutes=minute)
        assert again.in_force(at) == history.in_force(at)


def test_changes_given_in_any_order_make_one_history() -> None:
    changes = [AliasChange("a", "b", T1), AliasChange("c", "b", T2), AliasChange("a", None, T3)]
    for order in (changes, changes[::-1], changes[1:] + changes[:1]):
        history = AliasHistory(order)
        assert [history.canonical(s, T3) for s in "abc"] == ["a", "b", "b"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("[1]", "a line is a JSON object"),
        ('{"alias": "a", "canonical": "b"}', "at: give the RFC 3339 instant"),
        ('{"at": "yesterday", "alias": "a", "canonical": "b"}', "is not an RFC 3339 instant"),
        ('{"at": "2026-12-04T12:00:00Z", "alias": 1, "canonical": "b"}', "alias: give"),
        ('{"at": "2026-12-04T12:00:00Z", "alias": "a", "canonical": 2}', "canonical: the"),
        ('{"at": "2026-12-04T12:00:00Z", "alias": "a", "canonical": "A"}', "names itself"),
        ("{", "not JSON"),
    ],
)
def test_a_bad_line_is_refused_naming_its_origin_and_number(line: str, problem: str) -> None:
    with pytest.raises(AliasError, match=problem) as refused:
        history_from_lines(["", line], "aliases.jsonl")
    assert str(refused.value).startswith("aliases.jsonl:2: ")


def _kept(n: int, subject: str, source: str, value: int) -> Claim:
    return Claim.model_validate(
        {
            "claim_id": f"c{n}",
            "subject": subject,
            "field": "contract.seats",
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": T0 + timedelta(seconds=n),
        }
    )


def test_a_keys_evidence_splits_by_the_subject_each_piece_was_sent_about() -> None:
    claims = tuple(
        admit(claim, POLICY, T1)
        for claim in [
            _kept(1, "acme-0", "order-form", 25),
            _kept(2, "Acme Corp 0", "crm", 40),
            _kept(3, "ACME-2231", "crm", 40),
        ]
    )
    state = KeyState(subject="acme-0", field="contract.seats", claims=claims)
    table = AliasHistory([AliasChange("ACME-2231", "Acme Corp 0", T1)]).in_force(T1)
    stays, away = regrouped(state, table)
    assert stays == Moved(claims[:1])
    assert away == {"Acme Corp 0": Moved(claims[1:])}
    assert left_for(away) == "merged into 'Acme Corp 0'"
    assert regrouped(state, {"acme corp 0": "acme-0", "acme-2231": "acme-0"}) == (
        Moved(claims),
        {},
    )


def test_gathered_evidence_is_the_same_whatever_order_the_moves_come_in() -> None:
    one, two, three = (
        admit(claim, POLICY, T1)
        for claim in [
            _kept(1, "acme-0", "order-form", 25),
            _kept(2, "Acme Corp 0", "crm", 40),
            _kept(1, "ACME", "crm", 41),  # c1 again, saying something else: disputed
        ]
    )
    moves = [Moved((one,)), Moved((two,)), Moved((three,))]
    first = gathered(moves[0], moves[1:])
    assert first == gathered(moves[2], moves[:2]) == gathered(moves[1], moves[::2])
    assert first == (Moved((two,)), frozenset({"c1"}))


def test_a_retraction_a_later_merge_of_the_same_spelling_undoes_is_superseded_by_it() -> None:
    merge = AliasChange("Acme Corp", "acme", T0, "ana")
    split = AliasChange("ACME CORP", None, T0 + timedelta(hours=1), "bo")
    other = AliasChange("Initech", "initech-1", T0 + timedelta(hours=2), "bo")
    again = AliasChange("acme corp", "acme-2231", T0 + timedelta(hours=3), "ana")
    history = AliasHistory([merge, split, other, again])
    assert history.superseded_by(split) == again
    assert history.superseded_by(merge) is None  # a merge is not a split
    assert AliasHistory([merge, split, other]).superseded_by(split) is None
    resplit = AliasChange("Acme Corp", None, T0 + timedelta(hours=4), "bo")
    twice = AliasHistory([merge, split, AliasChange("Acme Corp", None, again.at), resplit])
    assert twice.superseded_by(split) is None  # the next change of it splits again


def test_a_merge_moves_a_keys_stewards_statements_and_its_proposal_is_approved_there() -> None:
    review = POLICY.defaults.review.model_copy(update={"approvals": 1})
    policy = POLICY.model_copy(
        update={"defaults": POLICY.defaults.model_copy(update={"review": review})}
    )
    rules = policy.rules_for("contract.seats")
    assert rules is not None
    state: KeyState | None = None
    for claim in (_kept(1, "ACME-2231", "crm", 40), _kept(2, "ACME-2231", "order-form", 25)):
        admitted = admit(claim, policy, T1)
        state = add_claim(state, admitted, rules, policy.version, T1).state
    assert state is not None
    proposal = Resolution(
        resolution_id="r1",
        subject="ACME-2231",
        field="contract.seats",
        value=40,
        decided_by="ann",
        decided_at=T1,
    )
    state = add_resolution(state, proposal, rules, policy.version, T1).state
    table = AliasHistory([AliasChange("ACME-2231", "acme", T2)]).in_force(T2)
    stays, away = regrouped(state, table)
    assert not stays
    assert [s.statement.resolution_id for s in away["acme"].steward_log] == ["r1"]
    sent = moved_from(moved_record("ACME-2231", "contract.seats", away["acme"]), "acme")
    assert sent.steward_log == away["acme"].steward_log  # as the rekeyed topic carries it

    ((_, left), (_, merged)) = regroup_keys(
        {("ACME-2231", "contract.seats"): state}, table, policy, T2, Limits()
    )
    assert left.state.steward_log == ()
    assert [s.standing for s in merged.state.steward_log] == [Standing.PENDING]
    basis = basis_now(merged.state, rules, policy.version, T3)
    assert basis is not None
    approval = Resolution.model_validate(
        {
            "resolution_id": "a1",
            "subject": "acme",
            "field": "contract.seats",
            "decided_by": "bo",
            "decided_at": T3,
            "act": "approve",
            "target_id": "r1",
            "resolves_decision_id": basis[0],
            "basis_digest": basis[1],
        }
    )
    approved = add_resolution(merged.state, approval, rules, policy.version, T3)
    assert approved.emitted is not None
    assert approved.emitted.decision.resolution_id == "r1"
