"""One error tree for the whole project; the I/O edges translate foreign errors into it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.core.records.contracts import RejectReason


class ClaimstreamError(Exception):
    """Base of every error claimstream raises on purpose."""


class PolicyError(ClaimstreamError):
    """An unreadable or invalid policy file; the message names the file, the key and the problem."""


class AliasError(ClaimstreamError):
    """An alias change that cannot be (no spelling, one naming itself, an instant without an
    offset, a cycle) or an unreadable alias history; the message names the line and the problem."""


class ErasureError(ClaimstreamError):
    """An erasure record that cannot be (no id, no subject or reason, an instant without an
    offset) or an erasure request that cannot be made; the message names the request."""


class SubjectErased(ClaimstreamError):
    """A read of an erased subject (the web API's 410): `key` was erased by request
    `erasure_id` at `erased_at`, and no value of it from before is kept."""

    def __init__(self, key: str, erasure_id: str, erased_at: datetime) -> None:
        at = erased_at.isoformat()
        super().__init__(f"{key} was erased by request {erasure_id} at {at}: no value is kept")
        self.key, self.erasure_id, self.erased_at = key, erasure_id, erased_at

    @classmethod
    def from_answer(cls, body: Any) -> SubjectErased | None:
        """The erasure a 410 answer names (`erased_answer`); None for one that names none."""
        try:
            if body["erased"] is True:
                at = datetime.fromisoformat(body["erased_at"])
                return cls(body["key"], body["erasure_id"], at)
        except (KeyError, TypeError, AttributeError, ValueError):
            pass
        return None


class RejectedInput(ClaimstreamError):
    """Input that cannot be accepted; its reason code goes to the dead-letter topic with it."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class ContractError(RejectedInput):
    """A decoded claim or resolution breaks the contract or the policy (type, unit, source...)."""


class CodecError(RejectedInput):
    """Bytes on a topic could not be decoded with a registered schema."""


def validation_problems(errors: Iterable[Mapping[str, Any]], origin: str) -> str:
    """pydantic's `ValidationError.errors()` for people: one `origin: key: problem` line each,
    without pydantic's type prefixes ("Value error, ") or its validator names in the key."""
    lines = []
    for error in errors:
        key = ".".join(str(part) for part in error["loc"] if not str(part).startswith("function-"))
        message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        lines.append(f"{origin}: {key or '(top)'}: {message}")
    return "\n".join(lines)
