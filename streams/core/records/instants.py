"""Instants as integer microseconds since the epoch (Avro's timestamp-micros), and back.

Where it sits: `contracts.py` re-exports these for the rest of the core. Apart from it because
the contracts define pydantic models and so stay interpreted, while these run several times a
claim (admission, the key's clock, the freshness rule) and compile.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # compiled code needs no import for it, nor does interpreted code
    from mypy_extensions import i64

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
EARLIEST_US: Final = -62_135_596_800_000_000
LATEST_US: Final = 253_402_300_799_999_999
"""datetime's first and last instants (0001-01-01, 9999-12-31T23:59:59.999999, UTC) in
microseconds since the epoch: what `instant` can build."""


def micros(moment: datetime) -> int:
    """An aware instant as integer microseconds since the epoch (Avro's timestamp-micros):
    `(moment - EPOCH) // timedelta(microseconds=1)`, from the difference's parts, which compiled
    code multiplies and adds as 64-bit machine integers (datetime's years 1-9999 lie within
    ±2**58 µs of the epoch), where the division converts both durations to Python ints and a
    plain `int` product past 2**30 takes the arbitrary-precision path."""
    delta = moment - EPOCH
    days: i64 = delta.days
    seconds: i64 = delta.seconds
    fraction: i64 = delta.microseconds
    return (days * 86_400 + seconds) * 1_000_000 + fraction


def micros_from_seconds(seconds: float) -> int:
    """POSIX seconds as integer microseconds, rounded as `datetime.fromtimestamp` rounds them
    (the fraction's microseconds, half to even), without building the datetime. Here, compiled,
    rather than beside the contracts: the processor reads a record's timestamp and the wall
    clock with it on every claim."""
    whole = int(seconds // 1)
    return whole * 1_000_000 + round((seconds - whole) * 1e6)


def instant(us: int) -> datetime:
    """Integer microseconds since the epoch as an aware UTC datetime, as fastavro reads
    timestamp-micros (OverflowError beyond datetime's years 1-9999). Positional: a keyword costs
    timedelta half again as much."""
    return EPOCH + timedelta(0, 0, us)


def checked_micros(us: int) -> int:
    """`us` if `instant` can build it (OverflowError if not, as `instant` would raise): a
    claim keeps its instants as microseconds and builds the datetime only where one is read,
    so its reader refuses the instants no datetime holds when it reads them."""
    if EARLIEST_US <= us <= LATEST_US:
        return us
    raise OverflowError(f"{us} µs since the epoch is outside datetime's years 1-9999")
