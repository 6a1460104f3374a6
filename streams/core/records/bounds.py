"""How large a claim may be, and how many bytes a key's records take: the bounds that keep every
decision and changelog record under the topics' record limit (Kafka's `max.message.bytes`).

Where it sits: intake checks each claim and resolution against the field bounds (`check_claim`,
`check_resolution`: `too_large` past one); upkeep weighs a key's kept claims (`claim_bytes`)
against the key's budget, which `claims_budget` derives from the record limit less what the rest
of the key's records can take at most (`state_reserve`, `decision_reserve`). Lengths are
counted in characters, as a producer writes them; bytes are counted in UTF-8, at most four a
character, so each figure here is an upper bound on what the Avro and MessagePack writers write.
"""

from __future__ import annotations

from streams.core.records.contracts import ClaimFields, Money, RejectReason, Resolution, Value
from streams.core.records.errors import ContractError

ID_CHARS = 256
"""claim_id, field, source, replica, lineage, scope, unit, trace_id, producer; a resolution's
resolution_id, decided_by and resolves_decision_id; the policy's version, units and lineages."""
SUBJECT_CHARS = 1024
"""A subject: an id, or a URL or path naming the entity."""
VALUE_CHARS = 4096
"""A string value, as sent and once normalized (case folding can lengthen a string)."""
ATTRIBUTES = 32
ATTRIBUTE_KEY_CHARS = 256
ATTRIBUTE_VALUE_CHARS = 1024
NOTE_CHARS = 1024
"""A resolution's note; and each note a decision's reason carries (the kept claims a policy
refuses, the claims dropped for size) is cut to it."""
REFUSAL_CHARS = 200
"""Why a policy refuses a kept claim, as a key's state keeps it and its decision names it."""
RECORD_BYTES = 1_048_576
"""The default record limit: Kafka's `max.message.bytes` (1 MiB and 12 bytes) and its clients'
`max.request.size` (1 MiB)."""

_UTF8 = 4  # bytes a character takes at most
_ID = ID_CHARS * _UTF8
_VALUE_OVERHEAD = 48  # a value's tags and lengths: a Money map with its field names, at most
_CLAIM_OVERHEAD = 256  # a stored claim's field names, tags, lengths, numbers and enums, at most
_ATTRIBUTE_OVERHEAD = 10  # an attribute's two string lengths
_RECORD_OVERHEAD = 512  # a Kafka record's batch header, lengths and timestamps, at most
_KEY = (SUBJECT_CHARS + 1 + ID_CHARS) * _UTF8  # subject|field
_VALUE = _VALUE_OVERHEAD + VALUE_CHARS * _UTF8
REASON_BYTES = (64 + 2 * (NOTE_CHARS + 2)) * _UTF8
"""A decision's reason at most: its code, then at most two notes."""
# A steward's statement (a resolution in force, or one of the steward log's: its standing and
# why, the worker's words, under 512 bytes); a key keeps `resolutions_per_key` of them in all.
_RESOLUTION = 64 + 7 * _ID + _VALUE + NOTE_CHARS * _UTF8 + 3 * 10 + 512
_SUMMARY = 64 + 2 * 40 + _VALUE + REASON_BYTES + 10
_REFUSAL = 16 + REFUSAL_CHARS * _UTF8
_INT64 = (-(2**63), 2**64 - 1)  # what a stored integer holds as a number, not as its digits

MAX_CLAIM_BYTES = (
    _CLAIM_OVERHEAD
    + 9 * _ID  # claim_id, unit, source, replica, lineage, scope, trace_id, producer, scope_key
    + _ID
    + 16  # the lineage it was admitted with: the policy's, its own or source:<source>
    + 2 * _VALUE  # as sent and as normalized
    + ATTRIBUTES * (_ATTRIBUTE_OVERHEAD + (ATTRIBUTE_KEY_CHARS + ATTRIBUTE_VALUE_CHARS) * _UTF8)
)
"""The most `claim_bytes` gives a claim within the bounds."""

_TEXT_BOUNDS = (
    ("claim_id", ID_CHARS),
    ("subject", SUBJECT_CHARS),
    ("field", ID_CHARS),
    ("unit", ID_CHARS),
    ("source", ID_CHARS),
    ("replica", ID_CHARS),
    ("lineage", ID_CHARS),
    ("scope", ID_CHARS),
    ("trace_id", ID_CHARS),
    ("producer", ID_CHARS),
)


def too_large(what: str, size: int, most: int, unit: str = "characters") -> ContractError:
    return ContractError(
        RejectReason.TOO_LARGE, f"{what} is {size:,} {unit}; the contract allows {most:,}"
    )


def _longer(text: str | None, most: int) -> bool:
    return text is not None and len(text) > most


def check_claim(claim: ClaimFields) -> None:
    """Raise ContractError(TOO_LARGE) naming the first of the claim's fields past its bound (its
    value's is normalize's to check, once it is known to be a string value)."""
    attributes = claim.attributes
    unit, replica, lineage = claim.unit, claim.replica, claim.lineage
    scope, trace_id, producer = claim.scope, claim.trace_id, claim.producer
    if (  # inline: once per claim, on the hot path
        len(claim.claim_id) > ID_CHARS
        or len(claim.subject) > SUBJECT_CHARS
        or len(claim.field) > ID_CHARS
        or len(claim.source) > ID_CHARS
        or (unit is not None and len(unit) > ID_CHARS)
        or (replica is not None and len(replica) > ID_CHARS)
        or (lineage is not None and len(lineage) > ID_CHARS)
        or (scope is not None and len(scope) > ID_CHARS)
        or (trace_id is not None and len(trace_id) > ID_CHARS)
        or (producer is not None and len(producer) > ID_CHARS)
    ):
        for name, most in _TEXT_BOUNDS:
            text = getattr(claim, name)
            if _longer(text, most):
                raise too_large(name, len(text), most)
    if not attributes:
        return
    if len(attributes) > ATTRIBUTES:
        raise too_large("attributes", len(attributes), ATTRIBUTES, "entries")
    for key, text in attributes.items():
        if len(key) > ATTRIBUTE_KEY_CHARS:
            raise too_large(f"an attribute's key ({key[:40]!r}...)", len(key), ATTRIBUTE_KEY_CHARS)
        if len(text) > ATTRIBUTE_VALUE_CHARS:
            raise too_large(f"attribute {key[:40]!r}", len(text), ATTRIBUTE_VALUE_CHARS)


def check_resolution(resolution: Resolution) -> None:
    """Raise ContractError(TOO_LARGE) naming the first of a resolution's texts past its bound."""
    for name, text, most in (
        ("resolution_id", resolution.resolution_id, ID_CHARS),
        ("subject", resolution.subject, SUBJECT_CHARS),
        ("field", resolution.field, ID_CHARS),
        ("unit", resolution.unit, ID_CHARS),
        ("decided_by", resolution.decided_by, ID_CHARS),
        ("note", resolution.note, NOTE_CHARS),
        ("resolves_decision_id", resolution.resolves_decision_id, ID_CHARS),
        ("target_id", resolution.target_id, ID_CHARS),
        ("basis_digest", resolution.basis_digest, ID_CHARS),
        ("assignee", resolution.assignee, ID_CHARS),
    ):
        if _longer(text, most):
            assert text is not None
            raise too_large(name, len(text), most)


def cut(text: str, most: int) -> str:
    """`text`, or its first characters and an ellipsis: `most` characters in all."""
    return text if len(text) <= most else text[: most - 3] + "..."


def utf8_bytes(text: str | None) -> int:
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode())


def value_bytes(value: Value) -> int:
    """What a value takes in a stored claim or an Evidence record, at most."""
    if isinstance(value, str):
        return _VALUE_OVERHEAD + utf8_bytes(value)
    if isinstance(value, Money):
        return _VALUE_OVERHEAD + utf8_bytes(value.currency)
    if type(value) is int and not _INT64[0] <= value <= _INT64[1]:
        return _VALUE_OVERHEAD + len(str(value))  # stored as its digits
    return _VALUE_OVERHEAD


def claim_bytes(claim: ClaimFields, value: Value, lineage: str, scope_key: str | None) -> int:
    """What one kept claim adds to its key's changelog record (its stored form: the claim as
    sent, with the value and lineage it was admitted with) and to a decision (its Evidence, a
    part of that), at most. Worked out once per claim: its texts' lengths, in UTF-8 where one
    is not ASCII (`isascii` is a flag on the string, not a scan)."""
    total = _CLAIM_OVERHEAD + value_bytes(claim.value) + value_bytes(value)
    for text in (
        claim.claim_id,
        claim.subject,  # kept and shown with the claim where an alias moves it to another key
        claim.unit,
        claim.source,
        claim.replica,
        claim.lineage,
        claim.scope,
        claim.trace_id,
        claim.producer,
        scope_key,
        lineage,
    ):
        if text is not None:
            total += len(text) if text.isascii() else len(text.encode())
    for key, text in claim.attributes.items():
        total += _ATTRIBUTE_OVERHEAD + utf8_bytes(key) + utf8_bytes(text)
    return total


def state_reserve(
    max_claims: int, max_history: int, max_disputed: int, max_resolutions: int
) -> int:
    """What a key's changelog record takes besides its kept claims, at most: the record's
    overhead and key, the subject and field, its stewards' statements, decision summaries,
    disputed ids and why the policy refuses each refused claim."""
    return (
        _RECORD_OVERHEAD
        + 2 * _KEY
        + 2 * _ID  # the policy version and the state's field names
        + max_resolutions * _RESOLUTION
        + max_history * _SUMMARY
        + max_disputed * (_ID + 5)
        + max_claims * _REFUSAL
    )


def decision_reserve() -> int:
    """What a decision record takes besides its evidence, at most: the record's overhead and
    key, the framing, and every field of the decision but the evidence."""
    return _RECORD_OVERHEAD + 2 * _KEY + _VALUE + 4 * _ID + REASON_BYTES + 256


def reserve(max_claims: int, max_history: int, max_disputed: int, max_resolutions: int) -> int:
    """What a key's records take besides its kept claims, at most: its changelog record's or a
    decision's reserve, whichever is larger."""
    return max(
        state_reserve(max_claims, max_history, max_disputed, max_resolutions), decision_reserve()
    )
