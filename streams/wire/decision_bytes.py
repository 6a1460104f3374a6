"""Decision records as the decisions topic carries them, assembled from parts written once.

Where it sits: the pipeline's last room (`Outputs.emit`) sends each emitted Arbitration's decision
through a `DecisionWriter` instead of building the Decision and its Evidence models and writing
them back through `WireCodec.encode`, which stays the reference: tests/wire/test_decision_bytes.py
holds the two byte-equal for generated arbitrations.

A decision record is the framing (magic byte and schema id), the header fields (decision_id to
resolution_id), the evidence array, then decided_at and supersedes. Every decision of a key sends
each of its claims again with only the role changed, and role is the last field of Evidence, so a
claim's Evidence up to its role is written once (kept as `AdmittedClaim.evidence_avro`) and each
decision adds one role symbol per claim. The field writers are the ones `compile_writer` compiles
from the same schema; the writer checks the schema's field order when it is made, so a schema
whose fields move stops the worker at start rather than corrupting what it sends.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.arbitration import Arbitration
from streams.core.decision.side_records import evidence_facts
from streams.core.records.contracts import EvidenceRole, RejectReason
from streams.core.records.errors import ClaimstreamError, CodecError
from streams.wire.avro_writer import Fields, long_bytes, record_fields
from streams.wire.codec import expanded_schema, to_avro

DECISION = "claimstream.Decision"
EVIDENCE = "claimstream.Evidence"
HEADER_FIELDS = (
    "decision_id",
    "subject",
    "field",
    "outcome",
    "conflict_kind",
    "status",
    "value",
    "unit",
    "action",
    "policy_version",
    "reason",
    "tiebreak",
    "resolution_id",
)
DECISION_FIELDS = (*HEADER_FIELDS, "evidence", "decided_at", "supersedes")
"""The order `DecisionWriter` writes a decision's fields in: the schema's, checked at start."""
ROLE = "role"


class SchemaLayoutError(ClaimstreamError):
    """The Decision schema's fields are not in the order the writer assembles them in."""


class DecisionWriter:
    """`writer(arbitration)`: the framed Avro Decision record of an arbitration, the bytes
    `WireCodec.encode(topic, arbitration.decision)` writes, without building the Decision."""

    def __init__(self, framing: Callable[[], bytes], schema: Any = None) -> None:
        """`framing` gives the record's header (looked up on each record: the registry is only
        asked once it is needed); `schema`, the expanded Decision schema, is the packaged one
        unless given."""
        decision, evidence = _laid_out(
            record_fields(expanded_schema("Decision") if schema is None else schema)
        )
        writers = {name: write for name, _, write in decision}
        self._framing = framing
        self._framed: bytes | None = None  # the framing, once asked (a topic's never changes)
        self._header = tuple(writers[name] for name in HEADER_FIELDS)
        self._decided_at, self._supersedes = writers["decided_at"], writers["supersedes"]
        self._claim_fields = evidence[:-1]
        write_role = evidence[-1][2]
        self._roles: dict[EvidenceRole, bytes] = {}
        for role in EvidenceRole:
            written = bytearray()
            write_role(written, role)
            self._roles[role] = bytes(written)

    def __call__(self, arbitration: Arbitration) -> bytes:
        try:
            return self._written(arbitration)
        except (ValueError, TypeError, OverflowError, AttributeError, struct.error) as exc:
            raise CodecError(RejectReason.MALFORMED, f"cannot encode Decision: {exc}") from exc

    def _written(self, a: Arbitration) -> bytes:
        verdict = a.verdict
        framed = self._framed
        if framed is None:
            framed = self._framed = self._framing()
        out = bytearray(framed)
        (
            decision_id,
            subject,
            field,
            outcome,
            conflict_kind,
            status,
            value,
            unit,
            action,
            policy_version,
            reason,
            tiebreak,
            resolution_id,
        ) = self._header
        decision_id(out, a.decision_id)
        subject(out, a.subject)
        field(out, a.field)
        outcome(out, verdict.outcome)
        conflict_kind(out, verdict.kind)
        status(out, verdict.status)
        value(out, _avro_value(verdict.value))
        unit(out, a.unit)
        action(out, a.action)
        policy_version(out, a.policy_version)
        reason(out, verdict.reason)
        tiebreak(out, verdict.tiebreak)
        resolution_id(out, verdict.resolution_id)
        claims, roles, role_bytes = a.claims, a.roles, self._roles
        if claims:
            out += long_bytes(len(claims))
            for admitted in claims:
                out += admitted.evidence_avro or self._claim_part(admitted, a.subject)
                out += role_bytes[roles[admitted.claim.claim_id]]
        out += b"\x00"
        self._decided_at(out, a.decided_at)
        self._supersedes(out, a.supersedes)
        return bytes(out)

    def _claim_part(self, admitted: AdmittedClaim, subject: str) -> bytes:
        """The claim's Evidence before its role in a decision about `subject`, written and kept
        on the claim (one moved to another key's arrives as a claim of its own: `aliases`)."""
        datum = evidence_facts(admitted, subject)
        datum["value"] = _avro_value(datum["value"])
        # The instants as the microseconds the claim holds them in: what the writer would
        # compute from datetimes, at 2 µs a time.
        datum["observed_at"] = admitted.observed_us
        datum["valid_from"] = admitted.valid_from_us
        datum["valid_to"] = admitted.valid_to_us
        out = bytearray()
        for name, default, write in self._claim_fields:
            write(out, datum.get(name, default))
        part = bytes(out)
        admitted.evidence_avro = part
        return part


_PLAIN = frozenset({type(None), bool, int, float, str})


def _avro_value(value: object) -> object:
    """A value as the writer takes it: a Money model as its fields. (isinstance on a model
    class costs a Python call; the plain types are told apart first.)"""
    if type(value) not in _PLAIN and isinstance(value, BaseModel):
        return to_avro(value)
    return value


def _laid_out(records: dict[str, Fields]) -> tuple[Fields, Fields]:
    """The Decision's and the Evidence's fields, once checked to be in the order assumed."""
    decision, evidence = records.get(DECISION, []), records.get(EVIDENCE, [])
    found = tuple(name for name, _, _ in decision)
    if found != DECISION_FIELDS:
        raise SchemaLayoutError(
            f"the Decision schema's fields are {list(found)}; decision records are assembled "
            f"as {list(DECISION_FIELDS)}: change streams/wire/decision_bytes.py with the schema"
        )
    last = evidence[-1][0] if evidence else None
    if last != ROLE:
        raise SchemaLayoutError(
            f"the Evidence schema's last field is {last!r}; decision records are assembled with "
            f"{ROLE!r} last (a claim's evidence up to its role is written once): change "
            "streams/wire/decision_bytes.py with the schema"
        )
    return decision, evidence
