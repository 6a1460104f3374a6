"""Erased subjects in the console: what a read of an erased subject answers, the erasures listed
for stewards, and a steward's request or approval as the erasures topic takes it.

The rule (`core.timeline.erasures`): once an erasure of a subject is in effect, nothing served
shows a value of the subject from before it: not the current decision, not the history, not a
belief as of an instant before it. Such a read answers `ERASED_STATUS` with the erasure (its
request's id and instant, `erased_answer`), never a value nor evidence. A key held again since
the erasure (a state decided after it) holds only data sent after it, and is answered as any.

A statement a steward makes here takes effect `policy_lead_s` after it is made, as one made with
`claimstream erase` does, so that every worker has read it before its instant.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from streams.core.keys.state import KeyState
from streams.core.records.errors import ErasureError
from streams.core.records.policy import Review
from streams.core.timeline.aliases import alias_key
from streams.core.timeline.erasures import (
    APPROVE,
    REQUEST,
    Erasure,
    ErasureHistory,
    ErasureStatement,
    Pending,
    erased_answer,
)

ERASED_STATUS = 410  # Gone: the data was there and is not kept
MAX_REASON = 2000
BODY_SHAPES = '{"subject": S, "reason": R} to request an erasure, or {"approve": ID} to approve one'


def erased_as_of(
    history: ErasureHistory, subject: str, as_of: datetime, now: datetime
) -> Erasure | None:
    """The erasure in effect by `now` that erased what was believed about `subject` at `as_of`
    (the first covering it to take effect after `as_of`); decided without the key's state, so
    any worker answers it before forwarding. None: the key's owner answers."""
    found = history.erasing(subject, as_of)
    return found if found is not None and found.at <= now else None


def erased_key(
    history: ErasureHistory, subject: str, state: KeyState | None, now: datetime
) -> Erasure | None:
    """The erasure a key answers in place of its state now: with no state, the last covering
    its subject in effect; with a state decided before an erasure in effect, that erasure (the
    key is being dropped). A state decided since holds only data sent after it: None."""
    if state is None:
        return history.last_of(subject, now)
    return history.dropping(state, now)


def erased_body(key: str, erasure: Erasure) -> dict[str, Any]:
    """What a read of an erased key answers: which request erased it, and when; no value."""
    return {"key": key, **erased_answer(erasure)}


def listing(
    history: ErasureHistory,
    waiting: Iterable[Pending],
    now: datetime,
    subjects: Iterable[str] | None = None,
) -> dict[str, Any]:
    """`GET /api/erasures`: the approved erasures (each saying whether it is in effect yet) and
    the requests waiting for approvals; with `subjects` (spellings of one subject), only theirs."""
    if subjects is None:
        erasures: Iterable[Erasure] = history.erasures
        waits = list(waiting)
    else:
        wanted = {alias_key(subject) for subject in subjects}
        found = {e.erasure_id: e for spelling in wanted for e in history.of(spelling)}
        erasures = sorted(found.values(), key=lambda e: (e.at, e.erasure_id))
        waits = [p for p in waiting if alias_key(p.request.subject) in wanted]
    return {
        "at": _moment(now),
        "erasures": [_erasure_json(erasure, now) for erasure in erasures],
        "waiting": [_pending_json(pending) for pending in waits],
    }


def _erasure_json(erasure: Erasure, now: datetime) -> dict[str, Any]:
    return {
        "erasure_id": erasure.erasure_id,
        "subject": erasure.subject,
        "at": _moment(erasure.at),
        "in_effect": erasure.at <= now,
        "requested_at": _moment(erasure.requested_at),
        "by": erasure.by,
        "reason": erasure.reason,
        "approvals": list(erasure.approvals),
        "spellings": sorted(erasure.spellings),
    }


def _pending_json(pending: Pending) -> dict[str, Any]:
    request = pending.request
    return {
        "erasure_id": request.erasure_id,
        "subject": request.subject,
        "requested_at": _moment(request.at),
        "by": request.by,
        "reason": request.reason,
        "needs": pending.needs,
        "approvals": list(pending.approvals),
    }


def statement_from_body(body: dict[str, Any], steward: str, at: datetime) -> ErasureStatement:
    """The statement a `POST /api/erasures` body asks for, made by `steward` taking effect at
    `at`: a request under a fresh id, or an approval; ErasureError for a body that is neither."""
    if "approve" in body:
        erasure_id = body["approve"]
        if set(body) != {"approve"} or not isinstance(erasure_id, str) or not erasure_id.strip():
            raise ErasureError(f"give {BODY_SHAPES}")
        return ErasureStatement(erasure_id.strip(), APPROVE, steward, at)
    subject, reason = body.get("subject"), body.get("reason")
    if set(body) != {"subject", "reason"} or not isinstance(subject, str):
        raise ErasureError(f"give {BODY_SHAPES}")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ErasureError(f"the reason is text of at most {MAX_REASON} characters")
    return ErasureStatement(uuid.uuid4().hex, REQUEST, steward, at, subject.strip(), reason.strip())


def approval_refused(
    approval: ErasureStatement,
    waiting: Iterable[Pending],
    review_at: Callable[[datetime], Review],
) -> str | None:
    """Why `approval` would approve nothing (the erasures topic passes over such a one
    silently, `timeline.erasures.reviewed`), so the steward is told now; None: it counts."""
    held = next((p for p in waiting if p.request.erasure_id == approval.erasure_id), None)
    if held is None:
        return f"no erasure request {approval.erasure_id} waits for approvals here"
    if approval.by in held.approvals:
        return f"{approval.by} approved erasure request {approval.erasure_id} already"
    if approval.by == held.request.by and not review_at(held.request.at).author_may_approve:
        return f"{approval.by} made erasure request {approval.erasure_id}; its author's approval "
        "does not count (review.author_may_approve)"
    return None


def _moment(at: datetime) -> str:
    """An instant as the erasures topic and `erased_answer` write it: UTC, with a Z."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
