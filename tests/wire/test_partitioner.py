"""The compiled murmur2 against aiokafka's, the Java client's reference port."""

from __future__ import annotations

from aiokafka.partitioner import murmur2 as reference_murmur2
from hypothesis import given
from hypothesis import strategies as st

from streams.pipeline.rekey import partition_of
from streams.wire.partitioner import murmur2


@given(st.binary(max_size=200))
def test_murmur2_equals_the_reference_port_for_any_bytes(data: bytes) -> None:
    assert murmur2(data) == reference_murmur2(data)


def test_murmur2_equals_the_reference_at_every_tail_length_and_extreme_byte() -> None:
    for length in range(13):
        for byte in (0x00, 0x7F, 0x80, 0xFF):
            data = bytes([byte]) * length
            assert murmur2(data) == reference_murmur2(data), (length, byte)


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=256))
def test_a_key_lands_where_the_java_client_would_put_it(key: bytes, partitions: int) -> None:
    expected = (reference_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_of(key, partitions) == expected
