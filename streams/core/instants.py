"""Instants as integer microseconds since the epoch (Avro's timestamp-micros), and back.

Where it sits: `contracts.py` re-exports these for the rest of the core. Apart from it because
the contracts define pydantic models and so stay interpreted, while these run several times a
claim (admission, the key's clock, the freshness rule) and compile.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """An aware instant as integer microseconds since the epoch (Avro's timestamp-micros):
    `(moment - EPOCH) // timedelta(microseconds=1)`, from the difference's parts, which compiled
    code adds as machine integers where the division converts both durations to Python ints."""
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def instant(us: int) -> datetime:
    """Integer microseconds since the epoch as an aware UTC datetime, as fastavro reads
    timestamp-micros (OverflowError beyond datetime's years 1-9999). Positional: a keyword costs
    timedelta half again as much."""
    return EPOCH + timedelta(0, 0, us)
