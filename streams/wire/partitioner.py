"""Kafka's default partitioner's hash: murmur2, as the Java client computes it.

Where it sits: `pipeline.rekey.partition_of` hashes every record's key with it, in and out (is
an input on the partition that owns its key; which partition an output goes to). aiokafka's
murmur2 is pure Python; this one is compiled with mypyc, its arithmetic on native 64-bit
integers (every product of a 32-bit value and the 31-bit mixing constant fits), and gives the
same values interpreted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # compiled code needs no import for it, nor does interpreted code
    from mypy_extensions import i64

_SEED: Final = 0x9747B28C
_MIX: Final = 0x5BD1E995
_WORD: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The Java client's `Utils.murmur2` of `data`, as an unsigned 32-bit value."""
    length: i64 = len(data)
    hashed: i64 = (_SEED ^ length) & _WORD
    whole: i64 = length & ~3
    start: i64 = 0
    while start < whole:
        word: i64 = (
            data[start] | (data[start + 1] << 8) | (data[start + 2] << 16) | (data[start + 3] << 24)
        )
        word = (word * _MIX) & _WORD
        word ^= word >> 24
        hashed = ((hashed * _MIX) & _WORD) ^ ((word * _MIX) & _WORD)
        start += 4
    tail = length - whole
    if tail >= 3:
        hashed ^= data[whole + 2] << 16
    if tail >= 2:
        hashed ^= data[whole + 1] << 8
    if tail >= 1:
        hashed = ((hashed ^ data[whole]) * _MIX) & _WORD
    hashed ^= hashed >> 13
    hashed = (hashed * _MIX) & _WORD
    return hashed ^ (hashed >> 15)
