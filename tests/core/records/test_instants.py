"""`micros` adds up the parts of an instant's distance from the epoch: it equals the division
of that distance by a microsecond, and `instant` inverts it, over datetime's whole range and in
any offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.records.instants import (
    EARLIEST_US,
    EPOCH,
    LATEST_US,
    checked_micros,
    instant,
    micros,
    micros_from_seconds,
)

_OFFSETS = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@given(moment=st.datetimes(timezones=st.just(UTC) | _OFFSETS))
def test_micros_is_the_distance_from_the_epoch_in_microseconds(moment: datetime) -> None:
    assert micros(moment) == (moment - EPOCH) // timedelta(microseconds=1)


@given(moment=st.datetimes(timezones=st.just(UTC)))
def test_instant_inverts_micros(moment: datetime) -> None:
    assert instant(micros(moment)) == moment


@given(seconds=st.floats(min_value=0, max_value=2**34, allow_nan=False))
def test_micros_from_seconds_rounds_as_fromtimestamp(seconds: float) -> None:
    assert instant(micros_from_seconds(seconds)) == datetime.fromtimestamp(seconds, UTC)


def test_checked_micros_passes_what_instant_builds_and_refuses_the_rest() -> None:
    assert instant(checked_micros(EARLIEST_US)) == datetime.min.replace(tzinfo=UTC)
    assert instant(checked_micros(LATEST_US)) == datetime.max.replace(tzinfo=UTC)
    for beyond in (EARLIEST_US - 1, LATEST_US + 1):
        with pytest.raises(OverflowError):
            instant(beyond)
        with pytest.raises(OverflowError):
            checked_micros(beyond)
