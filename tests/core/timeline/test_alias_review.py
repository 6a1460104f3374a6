"""Alias changes reviewed where the policy asks: a change counts once other stewards have made
the same change, from the last approval's instant; another change of the alias takes the
waiting one's place; an author's own approval counts only where the policy says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.core.records.policy import Review
from streams.core.timeline.alias_review import reviewed
from streams.core.timeline.aliases import AliasChange

T0 = datetime(2026, 12, 7, 9, tzinfo=UTC)
T1, T2, T3, T4 = (T0 + timedelta(minutes=n) for n in (1, 2, 3, 4))
FOUR_EYES = Review(approvals=1)


def merge(at: datetime, by: str, subject: str | None = "acme") -> AliasChange:
    return AliasChange("Acme Corp", subject, at, by)


def test_without_review_every_change_counts_at_its_instant() -> None:
    changes = [merge(T0, "ann"), merge(T1, "bo", None)]
    assert reviewed(changes, lambda _: Review()) == (changes, [])


def test_a_change_counts_once_another_steward_makes_it_from_that_instant() -> None:
    applied, waiting = reviewed([merge(T0, "ann")], lambda _: FOUR_EYES)
    assert applied == []
    assert [(w.change.by, w.needs, w.approvals) for w in waiting] == [("ann", 1, ())]
    applied, waiting = reviewed([merge(T0, "ann"), merge(T2, "bo")], lambda _: FOUR_EYES)
    assert applied == [merge(T2, "ann")]  # ann's change, from bo's approval on
    assert waiting == []


def test_its_authors_own_approval_and_an_anonymous_one_count_for_nothing() -> None:
    changes = [merge(T0, "ann"), merge(T1, "ann"), merge(T2, "")]
    applied, waiting = reviewed(changes, lambda _: FOUR_EYES)
    assert applied == []
    assert waiting[0].approvals == ()
    own = Review(approvals=1, author_may_approve=True)
    assert reviewed(changes, lambda _: own)[0] == [merge(T1, "ann")]


def test_another_change_of_the_alias_takes_the_waiting_ones_place() -> None:
    changes = [merge(T0, "ann"), merge(T1, "cy", "acme-2"), merge(T2, "bo")]
    applied, waiting = reviewed(changes, lambda _: FOUR_EYES)
    assert applied == []  # bo approved a change no longer waiting: it is a proposal of its own
    assert [(w.change.canonical, w.change.by) for w in waiting] == [("acme", "bo")]
    two = Review(approvals=2)
    changes = [merge(T0, "ann"), merge(T1, "bo"), merge(T3, "cy"), merge(T4, "dee", None)]
    applied, waiting = reviewed(changes, lambda _: two)
    assert applied == [merge(T3, "ann")]
    assert [w.change.canonical for w in waiting] == [None]


def test_the_review_is_the_one_in_force_at_the_changes_instant() -> None:
    def review_at(at: datetime) -> Review:
        return FOUR_EYES if at >= T2 else Review()

    applied, waiting = reviewed([merge(T0, "ann"), merge(T3, "bo", None)], review_at)
    assert applied == [merge(T0, "ann")]
    assert [w.change.by for w in waiting] == ["bo"]
