"""Single records through a `Processor`, no broker: who owns a key, what a record came to, and
why it was dead-lettered."""

from __future__ import annotations

from datetime import UTC, datetime

from streams.core.keys.state import KeyState
from streams.pipeline import Handled, Incoming, Processor
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.wire.registry import FolderRegistry, WireCodec

SECRET = "s3cret-s3cret-s3cret-s3cret-s3cret!"
CODEC = WireCodec(FolderRegistry())
NOW = datetime.now(UTC)
"""The wall clock when the tests started: the processors' clock, so that claims are fresh."""


def owner(key: bytes) -> int:
    """The partition that owns `key` under the default settings' partition count."""
    return partition_of(key, Settings().partitions)


def run(processor: Processor, incoming: Incoming) -> Handled:
    states: dict[bytes, KeyState] = {}
    return processor.process(incoming, states.get)


def reason(handled: Handled) -> str | None:
    (out,) = [o for o in handled.outputs if o.topic == "claims.dead-letters"] or [None]
    if out is None:
        return None
    return (
        dict(out.headers)["claimstream.error.reason"].decode()
        + ": "
        + dict(out.headers)["claimstream.error.detail"].decode()
    )
