"""The records the pipeline reads and writes: an `Incoming` Kafka record in, `Outgoing` records and
the key's new state out (`Handled`). Plain frozen slots dataclasses: one is built per input record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.core.arbitration import Arbitration
from streams.core.keystate import KeyState

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Incoming:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: float | None = None  # the record's Kafka timestamp, seconds

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:  # a loop: a generator costs more than most headers
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Outgoing:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    partition: int | None = None  # None: the key's partition under the default partitioner


@dataclass(slots=True)
class Handled:
    key: bytes | None = None
    state: KeyState | None = None
    outputs: list[Outgoing] = field(default_factory=list)
    emitted: list[Arbitration] = field(default_factory=list)
    """The decisions sent, as decided: their Decision models are built only where read."""
    opened: KeyState | None = None
    """The key as it stood before, when its decision was open: what a settlement judges."""
