"""The console's writes: a steward's statements (a resolution, an undo, a review, a task's
assignment), one at a time or many at once, published to the resolutions topic as the steward
the request's token names, and signed as that steward where the policy asks.

Where this worker owns the key, a statement is first taken on a copy of the key's state, as the
owner will take it (`transitions.add_resolution`): one the owner would refuse (made against a
decision no longer current, an author approving their own proposal, a task someone else holds)
is refused here, where the steward sees it; but an approval that saw the key as it is, of a
proposal made before the key was decided again, is published, for the owner to send the
proposal back to its author. The owner checks again when it applies a statement, as the key
may change in between; what it refuses then goes to the dead-letter topic.

An erasure request or approval (`POST /api/erasures`) goes to the erasures topic instead, made
by the token's steward (`streams.console.erasures` reads its body and publishes it).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from aiokafka.errors import KafkaError
from faust.web import Request, Response, View

from streams.client import build_resolution, publish_erasure, publish_resolutions
from streams.console.api import Console, Route
from streams.console.erasures import approval_refused, statement_from_body
from streams.console.stewards import Refusal
from streams.core.keys.belief import basis_now
from streams.core.keys.state import split_key, state_key
from streams.core.keys.transitions import add_resolution
from streams.core.records.contracts import ClaimStatus, RejectReason, Resolution, StewardAct
from streams.core.records.errors import ClaimstreamError, ErasureError
from streams.core.records.policy import Review
from streams.core.timeline.erasures import APPROVE, ErasureStatement
from streams.pipeline.rekey import canonical_key

log = logging.getLogger(__name__)

MAX_NOTE = 2000
MAX_BATCH = 500


class Refused(Exception):
    """A statement the console will not publish: why (a metric label), the HTTP status, and
    what to tell the steward."""

    def __init__(self, refusal: Refusal, status: int, message: str) -> None:
        super().__init__(message)
        self.refusal, self.status = refusal, status


async def resolve(console: Console, web: View, request: Request) -> Response:
    """One statement (a resolution by default; `act`: undo, approve, reject, send_back,
    assign), published as the token's steward."""
    try:
        steward = _steward(console, request)
        body = await _body(request)
        statement = _statement(console, steward, body)
        signer = _signer(console, steward)
    except Refused as refused:
        return _refused(console, web, refused)
    try:
        personal = console.policy.personal_fields
        await publish_resolutions(console.settings, [statement], signer, personal)
    except (KafkaError, ClaimstreamError) as exc:
        return web.json({"error": f"could not publish the statement: {exc}"}, status=503)
    _published(console, statement)
    key = state_key(statement.subject, statement.field)
    return web.json({"key": key, "resolution": statement.model_dump(mode="json")}, status=202)


async def resolve_many(console: Console, web: View, request: Request) -> Response:
    """Many statements at once (`{"statements": [...]}`, at most MAX_BATCH), answered one by one:
    each accepted one is published (all in one producer session), each refused one says why."""
    try:
        steward = _steward(console, request)
        body = await _body(request)
        items = body.get("statements")
        if not isinstance(items, list) or not 0 < len(items) <= MAX_BATCH:
            raise Refused(
                Refusal.INVALID, 400, f"give 1 to {MAX_BATCH} statements as a list `statements`"
            )
        signer = _signer(console, steward)
    except Refused as refused:
        return _refused(console, web, refused)
    results: list[dict[str, Any]] = []
    accepted: list[Resolution] = []
    for index, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise Refused(Refusal.INVALID, 400, "a statement is a JSON object")
            statement = _statement(console, steward, item)
        except Refused as refused:
            console.metrics.console_writes_refused.labels(refused.refusal.value).inc()
            results.append(
                {"index": index, "status": refused.status, "refused": refused.refusal.value}
                | {"error": str(refused)}
            )
            continue
        accepted.append(statement)
        results.append(
            {"index": index, "status": 202, "resolution": statement.model_dump(mode="json")}
        )
    if accepted:
        try:
            personal = console.policy.personal_fields
            await publish_resolutions(console.settings, accepted, signer, personal)
        except (KafkaError, ClaimstreamError) as exc:
            return web.json({"error": f"could not publish the statements: {exc}"}, status=503)
    for statement in accepted:
        _published(console, statement)
    return web.json(
        {"accepted": len(accepted), "refused": len(items) - len(accepted), "results": results}
    )


async def erase(console: Console, web: View, request: Request) -> Response:
    """A steward's erasure request (`{"subject", "reason"}`, under a fresh id) or approval of a
    waiting one (`{"approve": id}`), published to the erasures topic as the token's steward,
    taking effect `policy_lead_s` from now; an approval that would count for nothing (an
    unknown or settled request, a second one, the author's own where the policy says no) is
    refused here, where the erasures topic would pass over it silently."""
    try:
        steward = _steward(console, request)
        body = await _body(request)
        at = console.clock() + timedelta(seconds=console.settings.policy_lead_s)
        statement = _erasure_statement(console, body, steward, at)
        signer = _signer(console, steward)
    except Refused as refused:
        return _refused(console, web, refused)
    try:
        await publish_erasure(console.settings, statement, signer)
    except KafkaError as exc:
        return web.json({"error": f"could not publish the erasure statement: {exc}"}, status=503)
    log.info("console: erasure %s %s published", statement.action, statement.erasure_id)
    said = statement.as_json()
    return web.json(
        {"erasure_id": statement.erasure_id, "at": said["at"], "action": statement.action}
        | {"by": statement.by},
        status=202,
    )


def _erasure_statement(
    console: Console, body: dict[str, Any], steward: str, at: datetime
) -> ErasureStatement:
    try:
        statement = statement_from_body(body, steward, at)
    except ErasureError as exc:
        raise Refused(Refusal.INVALID, 400, str(exc)) from exc

    def review_at(instant: datetime) -> Review:
        """The review the policy in force at `instant` asks of an erasure (its defaults')."""
        return console.policies().in_force(instant).defaults.review

    if statement.action == APPROVE:
        why = approval_refused(statement, console.waiting_erasures(), review_at)
        if why is not None:
            raise Refused(Refusal.REVIEW_REFUSED, 409, why)
    return statement


def _steward(console: Console, request: Request) -> str:
    steward = console.stewards.steward(request.headers.get("Authorization"))
    if steward is Refusal.WRITES_DISABLED:
        raise Refused(steward, 403, "writes are disabled: no steward token is configured")
    if steward is Refusal.MISSING_TOKEN:
        raise Refused(steward, 401, "a steward token is required (Authorization: Bearer ...)")
    if isinstance(steward, Refusal):
        raise Refused(steward, 403, "this steward token is not accepted")
    return steward


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise Refused(Refusal.INVALID, 400, f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise Refused(Refusal.INVALID, 400, "the body must be a JSON object")
    return body


def _signer(console: Console, steward: str) -> Any:
    signer = console.stewards.signer(steward, console.policy.stewards)
    if isinstance(signer, Refusal):
        raise Refused(
            signer,
            403,
            f"the policy asks for steward signatures and no key signs for {steward} here "
            "(steward_signing_keys)",
        )
    return signer


def _statement(console: Console, steward: str, body: dict[str, Any]) -> Resolution:
    """The statement `body` asks for, made by `steward` now; Refused if it cannot be made or
    this worker, owning its key, sees its owner would refuse it."""
    try:
        subject, field = _subject_and_field(body)
        note = str(body.get("note") or "")
        if len(note) > MAX_NOTE:
            raise ClaimstreamError(f"the note is longer than {MAX_NOTE} characters")
        statement = build_resolution(
            console.policy,
            subject,
            field,
            decided_by=steward,  # the token's steward, never what the request says
            decided_at=console.clock(),
            status=ClaimStatus(body.get("status") or ClaimStatus.PRESENT),
            value=body.get("value"),
            note=note,
            resolves_decision_id=body.get("resolves_decision_id") or None,
            act=StewardAct(body.get("act") or StewardAct.RESOLVE),
            target_id=body.get("target_id") or None,
            basis_digest=body.get("basis_digest") or None,
            assignee=body.get("assignee") or None,
        )
    except (ClaimstreamError, ValueError) as exc:
        raise Refused(Refusal.INVALID, 400, str(exc)) from exc
    _taken_here(console, statement)
    return statement


def _taken_here(console: Console, statement: Resolution) -> None:
    """Refused if this worker owns the key and its owner would refuse the statement now."""
    key = canonical_key(state_key(statement.subject, statement.field), console.alias_of)
    if not console.ownership.owner_of(key.encode()).here:
        return
    state = console.ownership.state_of(key.encode())
    policy = console.policy
    rules = policy.rules_for(statement.field)
    if state is None or rules is None:
        return
    now = console.clock()
    refusal = add_resolution(state, statement, rules, policy.version, now).refused
    if refusal is None:
        return
    if refusal.reason is RejectReason.STALE_DECISION:
        seen = (statement.resolves_decision_id, statement.basis_digest)
        if statement.act is StewardAct.APPROVE and seen == basis_now(
            state, rules, policy.version, now
        ):
            return  # it saw the key as it is, its proposal did not: the owner sends that back
        raise Refused(Refusal.STALE_DECISION, 409, refusal.detail)
    raise Refused(Refusal.REVIEW_REFUSED, 409, refusal.detail)


def _subject_and_field(body: dict[str, Any]) -> tuple[str, str]:
    if body.get("key"):
        subject, field = split_key(str(body["key"]))
    else:
        subject, field = str(body.get("subject") or ""), str(body.get("field") or "")
    if not subject or not field:
        raise ClaimstreamError("name the key (subject|field), or its subject and field")
    return subject, field


def _refused(console: Console, web: View, refused: Refused) -> Response:
    console.metrics.console_writes_refused.labels(refused.refusal.value).inc()
    return web.json(
        {"error": str(refused), "refused": refused.refusal.value}, status=refused.status
    )


def _published(console: Console, statement: Resolution) -> None:
    field = statement.field
    console.metrics.console_resolutions.labels(console.metrics.field_label(field)).inc()
    log.info(
        "console: %s %s published for field %s",
        statement.act.value,
        statement.resolution_id,
        field,
    )


WRITE_ROUTES = (
    Route("post", "/api/resolutions", "resolutions", resolve),
    Route("post", "/api/resolutions/batch", "resolutions_batch", resolve_many),
    Route("post", "/api/erasures", "erasures_write", erase),
)
