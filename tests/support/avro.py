"""Avro bodies written by fastavro: the reference the codec's own readers are held to."""

from __future__ import annotations

import io
from typing import Any

import fastavro

from streams.wire.codec import parsed_schema


def avro_body(data: dict[str, Any]) -> bytes:
    """A Claim record's Avro body (no framing), as fastavro writes it."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed_schema("Claim"), data)
    return buffer.getvalue()
