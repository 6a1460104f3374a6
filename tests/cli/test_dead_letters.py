"""Which dead letters a replay chooses, and what it says it did (the broker part: tests/stream)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from streams.cli.dead_letters import Choice, Replayed

T = datetime(2026, 12, 1, 9, tzinfo=UTC)


def test_dead_letters_are_chosen_by_reason_and_rejection_time() -> None:
    letter = {"reason": "unknown_field", "rejected_at": T.isoformat()}
    assert Choice().takes(letter)
    assert Choice({"unknown_field"}).takes(letter)
    assert not Choice({"processing_failed"}).takes(letter)
    assert Choice(since=T).takes(letter)
    assert not Choice(since=T + timedelta(seconds=1)).takes(letter)
    assert not Choice(until=T).takes(letter)
    assert Choice(until=T + timedelta(seconds=1)).takes(letter)
    assert not Choice(since=T).takes({"reason": "unknown_field"})  # no time: not in a window


def test_the_summary_says_what_was_not_sent_and_why() -> None:
    replayed = Replayed(Counter({"claims.tools": 2, "claims.users": 1}), expired=1, unchosen=4)
    assert replayed.summary(timedelta(minutes=5), dry_run=False) == (
        "replay-dead-letters: sent 3 (claims.tools: 2, claims.users: 1); 1 signed past max_age "
        "300s not sent (the worker would refuse them as replayed: their sources must sign and "
        "publish them again); 4 not chosen"
    )
    assert Replayed().summary(timedelta(minutes=5), dry_run=True) == (
        "replay-dead-letters: would send 0; 0 not chosen"
    )
