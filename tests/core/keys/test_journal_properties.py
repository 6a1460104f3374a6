"""The journal against its format, for states of every shape: generated key states (claims with
every field, money, floats and integers of any magnitude, text in any script, epochs, periods,
scopes, resolutions, decision histories, disputed ids) read back equal, and encode to the bytes
the version 4 format defines (`written` in tests/support/journal.py, the reference: the version
3 record, as json writes it, in MessagePack, integers past 64 bits as their digits). Earlier
forms of the same states (versions 1 to 3, JSON) read back equal too.

The golden test holds the bytes of fixed states; these properties hold them for any state, for
states encoded fresh and for states read back (whose stored forms the decoder keeps).
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from hypothesis import example, given, settings

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState
from streams.core.records.contracts import Claim, Money
from streams.core.records.lean import LEAN_FIELDS, NO_ATTRIBUTES, LeanClaim
from tests.support.journal import written
from tests.support.strategies import key_states

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _copy(state: KeyState) -> KeyState:
    """An equal state whose claims and summaries carry no stored form yet."""
    return KeyState(
        state.subject,
        state.field,
        tuple(AdmittedClaim(a.claim, a.authority, a.value, a.lineage) for a in state.claims),
        state.resolutions,
        tuple(
            DecisionSummary(
                s.decision_id,
                s.outcome,
                s.conflict_kind,
                s.value,
                s.reason,
                s.decided_at,
                s.supersedes,
            )
            for s in state.history
        ),
        state.conflict_since,
        state.escalated,
        state.next_check_at,
        state.disputed,
    )


@settings(max_examples=300, deadline=None)
@given(state=key_states())
@example(state=KeyState("", "", conflict_since=_EPOCH, next_check_at=_EPOCH))  # times of 0 µs
def test_any_state_reads_back_equal_and_as_the_format_writes_it(state: KeyState) -> None:
    data = encode_state(state)
    assert _canonical(data) == written(state)
    assert encode_state(state) == data  # again, from the stored forms kept
    read = decode_state(data)
    assert read == state
    assert encode_state(read) == data  # from the stored forms read
    assert encode_state(_copy(read)) == data  # and from none


@settings(max_examples=150, deadline=None)
@given(state=key_states())
@example(state=KeyState("", "", conflict_since=_EPOCH, next_check_at=_EPOCH))
def test_the_earlier_forms_of_any_state_read_back_equal(state: KeyState) -> None:
    for version in (1, 2, 3):
        read = decode_state(written(state, version))
        assert read == state
        assert _canonical(encode_state(read)) == written(state)


def _canonical(data: bytes) -> bytes:
    """MessagePack written again from what it decodes to: msgspec writes a Struct's map under a
    16-bit length, where a dict's as small as it fits."""
    return msgspec.msgpack.encode(msgspec.msgpack.decode(data))


@settings(max_examples=150, deadline=None)
@given(state=key_states())
def test_a_claim_read_back_is_the_lean_claim_and_admission_its_claim_makes(
    state: KeyState,
) -> None:
    """The journal builds each claim read from its stored fields, without a dict of them (and
    the admitted claim around it without re-admitting it): every field as `LeanClaim.of` fills
    it; the claims without attributes share one empty map, and equal amounts one Money."""
    read = decode_state(encode_state(state))
    for admitted, again in zip(state.claims, read.claims, strict=True):
        assert isinstance(admitted.claim, Claim)
        lean = LeanClaim.of(admitted.claim)
        assert [getattr(again.claim, name) for name in LEAN_FIELDS] == [
            getattr(lean, name) for name in LEAN_FIELDS
        ]
        assert [getattr(again, name) for name in _ORDERINGS] == [
            getattr(admitted, name) for name in _ORDERINGS
        ]
        assert (again.claim.attributes is NO_ATTRIBUTES) == (not lean.attributes)
    amounts = [
        value
        for value in (
            *(a.claim.value for a in read.claims),
            *(a.value for a in read.claims),
            *(summary.value for summary in read.history),
            *(resolution.value for resolution in read.resolutions),
        )
        if isinstance(value, Money)
    ]
    shared = {(money.amount_minor, money.currency): money for money in amounts}
    assert all(money is shared[money.amount_minor, money.currency] for money in amounts)


_ORDERINGS = (
    "authority",
    "value",
    "lineage",
    "rank",
    "recency",
    "statement",
    "observes",
    "scope_key",
    "plain",
    "observed_us",
    "valid_from_us",
    "valid_to_us",
)
