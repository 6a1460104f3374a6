"""A data subject's data erased from an instant on: the erasure requests that took effect, and
what each one reaches.

A data-protection officer asks that a subject be erased (`claimstream erase`): an `Erasure`,
reviewed as an alias change is (`defaults.review.approvals` other stewards make the same
request, by its id) and published ahead on the erasures topic, which every worker reads whole.
It covers the subject and every spelling the aliases in force at its instant make name the
same subject (`ErasureHistory.spellings`).

One rule, wherever records are read (a worker, a restart or rebalance, replay, an audit export):
a claim or resolution about a covered spelling stamped before the erasure's instant is about
the erased data and never counts (`ErasureHistory.erasing`); one stamped after it is new data.
At the instant, each key that held the subject's data says so once, with no value and no
evidence (`erased_decision`), and is dropped. So an erasure is a fact kept for ever, and what
it erased is never read back, whatever reads it and whenever.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from streams.core.keys.state import KeyState
from streams.core.records.contracts import Action, Decision, Outcome, parse_instant
from streams.core.records.errors import ErasureError
from streams.core.records.policy import Review
from streams.core.timeline.aliases import AliasHistory, alias_key, belongs_to

REQUEST = "request"
APPROVE = "approve"


@dataclass(frozen=True, slots=True)
class ErasureStatement:
    """One record of the erasures topic: a request to erase `subject` (`action` REQUEST) or a
    steward's approval of the request `erasure_id` (APPROVE), made by `by` at `at`."""

    erasure_id: str
    action: str
    by: str
    at: datetime
    subject: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.erasure_id.strip():
            raise ErasureError("an erasure record needs the request's id")
        if self.action not in (REQUEST, APPROVE):
            raise ErasureError(f"erasure {self.erasure_id}: action is request or approve")
        if self.action == REQUEST and not self.subject.strip():
            raise ErasureError(f"erasure {self.erasure_id}: a request names the subject")
        if self.action == REQUEST and not self.reason.strip():
            raise ErasureError(f"erasure {self.erasure_id}: a request gives its reason")
        if self.at.tzinfo is None:
            raise ErasureError(f"erasure {self.erasure_id}: at needs a UTC offset")

    def as_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {"action": self.action, "by": self.by, "at": _moment(self.at)}
        if self.action == REQUEST:
            line |= {"subject": self.subject, "reason": self.reason}
        return line

    def record(self) -> tuple[bytes, bytes]:
        """The key and value of the erasures topic's record that publishes it."""
        return self.erasure_id.encode(), json.dumps(self.as_json()).encode()

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None) -> ErasureStatement:
        """The statement a record of the erasures topic says, or ErasureError."""
        if not key or not value:
            raise ErasureError("an erasure record is keyed by its request's id and has a value")
        try:
            erasure_id, data = key.decode(), json.loads(value)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ErasureError(f"an erasure record that does not read: {exc}") from exc
        return cls.from_json(erasure_id, data)

    @classmethod
    def from_json(cls, erasure_id: str, data: Any) -> ErasureStatement:
        """The statement a record's JSON value says, or ErasureError."""
        if not isinstance(data, dict):
            raise ErasureError(f"erasure {erasure_id}: a record's value is a JSON object")
        try:
            return cls(
                erasure_id,
                str(data.get("action", "")),
                str(data.get("by", "")),
                parse_instant(str(data.get("at", ""))),
                str(data.get("subject", "")),
                str(data.get("reason", "")),
            )
        except ValueError as exc:
            raise ErasureError(f"erasure {erasure_id}: at is not an RFC 3339 instant") from exc


@dataclass(frozen=True, slots=True)
class Erasure:
    """A request in effect: `subject` erased from `at` (the later of the request's instant and
    its last approval's), requested by `by` at `requested_at`, approved by `approvals`."""

    erasure_id: str
    subject: str
    at: datetime
    requested_at: datetime
    by: str
    reason: str
    approvals: tuple[str, ...] = ()
    spellings: frozenset[str] = field(default=frozenset(), compare=False)
    """`alias_key` of every spelling it covers (filled in by `ErasureHistory`)."""


@dataclass(frozen=True, slots=True)
class Pending:
    """A request waiting for stewards' approvals, of `needs`."""

    request: ErasureStatement
    needs: int
    approvals: tuple[str, ...] = ()


def reviewed(
    statements: Iterable[ErasureStatement], review_at: Callable[[datetime], Review]
) -> tuple[list[Erasure], list[Pending]]:
    """The requests in effect (in the order of their instants) and those still waiting, from
    the statements in the order they were published. A request counts once the policy in force
    at its instant has as many approvals as it asks, by stewards other than its author (the
    author's own where `author_may_approve`); an approval of an unknown or settled request, or a
    second by one steward, approves nothing."""
    waiting: dict[str, Pending] = {}
    done: dict[str, Erasure] = {}
    for said in statements:
        if said.action == REQUEST:
            if said.erasure_id in done or said.erasure_id in waiting:
                continue  # the first request under an id stands
            waiting[said.erasure_id] = Pending(said, review_at(said.at).approvals)
        else:
            held = waiting.get(said.erasure_id)
            if held is None or not _approves(held, said, review_at(held.request.at)):
                continue
            waiting[said.erasure_id] = replace(held, approvals=(*held.approvals, said.by))
        held = waiting[said.erasure_id]
        if len(held.approvals) >= held.needs:
            request = held.request
            done[said.erasure_id] = Erasure(
                request.erasure_id,
                request.subject,
                max(request.at, said.at),
                request.at,
                request.by,
                request.reason,
                held.approvals,
            )
            del waiting[said.erasure_id]
    erasures = sorted(done.values(), key=lambda e: (e.at, e.erasure_id))
    return erasures, list(waiting.values())


def _approves(held: Pending, said: ErasureStatement, review: Review) -> bool:
    by = said.by
    if not by or by in held.approvals:
        return False
    return by != held.request.by or review.author_may_approve


class ErasureHistory:
    """The erasures in effect, each with the spellings it covers: its subject and every
    spelling that names the same subject under the aliases in force at its instant."""

    __slots__ = ("_by_spelling", "_instants", "erasures")

    def __init__(self, erasures: Iterable[Erasure] = (), aliases: AliasHistory | None = None):
        aliases = aliases or AliasHistory()
        covered = [replace(e, spellings=self.spellings(e, aliases)) for e in erasures]
        self.erasures: tuple[Erasure, ...] = tuple(sorted(covered, key=lambda e: e.at))
        self._instants = [e.at for e in self.erasures]
        self._by_spelling: dict[str, list[Erasure]] = {}
        for erasure in self.erasures:
            for spelling in erasure.spellings:
                self._by_spelling.setdefault(spelling, []).append(erasure)

    @staticmethod
    def spellings(erasure: Erasure, aliases: AliasHistory) -> frozenset[str]:
        """`alias_key` of every spelling `erasure` covers."""
        table = aliases.in_force(erasure.at)
        subject = alias_key(belongs_to(erasure.subject, table))
        named = {
            spelling for spelling in table if alias_key(belongs_to(spelling, table)) == subject
        }
        return frozenset({alias_key(erasure.subject), subject, *named})

    def __bool__(self) -> bool:
        return bool(self.erasures)

    def of(self, spelling: str) -> list[Erasure]:
        """The erasures covering `spelling`, oldest first."""
        return self._by_spelling.get(alias_key(spelling), []) if self.erasures else []

    def erasing(self, spelling: str, at: datetime) -> Erasure | None:
        """The erasure a record about `spelling` stamped at `at` was erased by: the first
        covering it that took effect after `at`. None: the record counts."""
        return next((e for e in self.of(spelling) if e.at > at), None)

    def due(self, spelling: str, since: datetime | None, until: datetime) -> Erasure | None:
        """The last erasure covering `spelling` that took effect after `since` (None: any) and
        by `until`: what a key last decided at `since` is dropped for, by `until`."""
        found = None
        for erasure in self.of(spelling):
            if erasure.at > until:
                break
            if since is None or erasure.at > since:
                found = erasure
        return found

    def dropping(self, state: KeyState, until: datetime) -> Erasure | None:
        """The erasure that drops a key by `until`: one of its subject that took effect after
        the key was last decided (a key decided since holds only data sent after it)."""
        last = state.current
        return self.due(state.subject, None if last is None else last.decided_at, until)

    def last_of(self, spelling: str, until: datetime) -> Erasure | None:
        """The last erasure covering `spelling` in effect by `until`."""
        return self.due(spelling, None, until)

    def last_by(self, until: datetime) -> datetime | None:
        """The instant of the last erasure in effect by `until`, if any."""
        position = bisect_right(self._instants, until) - 1
        return self._instants[position] if position >= 0 else None

    def instants(self, until: datetime) -> list[datetime]:
        """The instants an erasure took effect by `until`, oldest first, each once."""
        return sorted(set(self._instants[: bisect_right(self._instants, until)]))


def erased_decision(subject: str, field_name: str, erasure: Erasure, policy: str) -> Decision:
    """What a key that held the subject's data says once, at the erasure's instant: erased, by
    which request, with no value and no evidence (consumers delete their copies)."""
    digest = hashlib.sha256(
        json.dumps(["erased", subject, field_name, erasure.erasure_id]).encode()
    ).hexdigest()
    return Decision(
        decision_id=digest[:32],
        subject=subject,
        field=field_name,
        outcome=Outcome.ERASED,
        action=Action.BLOCK,
        policy_version=policy,
        reason=f"erased by request {erasure.erasure_id}",
        resolution_id=erasure.erasure_id,
        decided_at=erasure.at,
    )


def erased_answer(erasure: Erasure) -> dict[str, Any]:
    """What a reader is told of an erased subject, in place of any value."""
    return {
        "erased": True,
        "erasure_id": erasure.erasure_id,
        "erased_at": _moment(erasure.at),
    }


def erasure_line(erasure: Erasure) -> str:
    """An erasure in effect as the line `claimstream erase history` prints and `replay
    --erasures` reads: `{"erasure_id": ..., "subject": ..., "at": ..., "requested_at": ...,
    "by": ..., "reason": ..., "approvals": [...]}`."""
    return json.dumps(
        {
            "erasure_id": erasure.erasure_id,
            "subject": erasure.subject,
            "at": _moment(erasure.at),
            "requested_at": _moment(erasure.requested_at),
            "by": erasure.by,
            "reason": erasure.reason,
            "approvals": list(erasure.approvals),
        },
        ensure_ascii=False,
    )


def erasures_from_lines(lines: Iterable[str], origin: str = "erasures") -> list[Erasure]:
    """The erasures the lines record (`erasure_line`; blank lines skipped), or ErasureError
    naming `origin`, the line number and the problem."""
    found = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            at = parse_instant(data["at"])
            found.append(
                Erasure(
                    str(data["erasure_id"]),
                    str(data["subject"]),
                    at,
                    parse_instant(data.get("requested_at") or data["at"]),
                    str(data.get("by", "")),
                    str(data.get("reason", "")),
                    tuple(data.get("approvals") or ()),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ErasureError(
                f"{origin}:{number}: an erasure line is a JSON object with erasure_id, subject "
                f"and an RFC 3339 `at`: {exc}"
            ) from exc
    return found


def _moment(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
