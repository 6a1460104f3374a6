"""The erasure commands of the `claimstream` command line, on the erasures topic
(`streams.worker.erasure_log`, imported when one runs):

- `erase SUBJECT --reason TEXT [--by STEWARD]`: request that a data subject be erased, from a
  lead time on (`policy_lead_s`) or `--at`; where the policy asks for approvals it waits for
  them. Signed as `--by` with `--key-id` where the policy's `stewards` section asks, as
  `alias add` is.
- `erase approve ID --by STEWARD`: approve a request.
- `erase status ID`: where a request stands, its receipt once in effect, and a check made now
  that the subject's sealed values on the claims and decisions topics no longer open.
- `erase history`: the erasures in effect, one JSON line each (for `replay --erasures`).
- `erase keygen`: a new deployment key, which wraps the data subjects' keys.
`streams.cli.main` adds them to its parser.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from streams.cli.commands import _client_logs_quiet, settings_from
from streams.cli.signing import steward_signer
from streams.core.keys.state import split_key
from streams.core.records.contracts import Decision, Outcome
from streams.core.records.errors import ErasureError
from streams.core.records.policy import load_policy
from streams.core.timeline.aliases import alias_key
from streams.core.timeline.erasures import (
    APPROVE,
    REQUEST,
    Erasure,
    ErasureHistory,
    ErasureStatement,
    erasure_line,
)
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.worker.erasure_log import ErasureLog


def add_erase_commands(
    commands: Any, connection: argparse.ArgumentParser, instant: Callable[[str], datetime]
) -> None:
    """Add `erase` (`connection`: the --settings, --broker parent; `instant`: how the command
    line reads an RFC 3339 argument)."""
    erase = commands.add_parser(
        "erase",
        parents=[connection],
        help="erase a data subject's data on request: `erase SUBJECT --reason TEXT`, "
        "`erase approve ID`, `erase status ID`, `erase history`, `erase keygen`",
    )
    erase.add_argument(
        "words",
        nargs="+",
        metavar="WORD",
        help="the subject to erase (with --reason), or approve or status and a request's id, "
        "or history, or keygen",
    )
    erase.add_argument("--reason", help="why the subject is erased (no personal value)")
    erase.add_argument("--by", default="", metavar="STEWARD", help="who requests or approves")
    erase.add_argument(
        "--key-id",
        metavar="ID",
        help="sign as --by with this key of the stewards section of the policy in force",
    )
    erase.add_argument(
        "--key-env", metavar="VAR", help="the environment variable holding the key's secret"
    )
    erase.add_argument(
        "--at",
        type=instant,
        metavar="RFC3339",
        help="take effect at this instant (default: the setting policy_lead_s from now)",
    )
    erase.set_defaults(handler=cmd_erase, policy=None)


def cmd_erase(args: argparse.Namespace) -> int:
    words = args.words
    if words == ["keygen"]:
        return _keygen()
    _client_logs_quiet()
    settings = settings_from(args)
    at = args.at or datetime.now(UTC) + timedelta(seconds=settings.policy_lead_s)
    if words == ["history"]:
        for erasure in asyncio.run(_in_effect(settings)):
            print(erasure_line(erasure))
        return 0
    if len(words) == 2 and words[0] in ("approve", "status"):
        if words[0] == "status":
            print(json.dumps(asyncio.run(status(settings, words[1])), indent=2))
            return 0
        approval = ErasureStatement(words[1], APPROVE, args.by, at)
        said = {"erasure_id": words[1], "approved_by": args.by}
        return _publish(args, settings, approval, said)
    if len(words) != 1:
        raise ErasureError("erase SUBJECT --reason TEXT, erase approve ID, erase status ID")
    request = ErasureStatement(uuid.uuid4().hex, REQUEST, args.by, at, words[0], args.reason or "")
    needs = load_policy(settings.policy).defaults.review.approvals
    return _publish(
        args,
        settings,
        request,
        {"erasure_id": request.erasure_id, "subject": request.subject, "needs": needs},
    )


def _publish(
    args: argparse.Namespace,
    settings: Settings,
    statement: ErasureStatement,
    said: dict[str, Any],
) -> int:
    from streams.client import publish_erasure

    signer = steward_signer(args, settings) if args.key_id else None
    asyncio.run(publish_erasure(settings, statement, signer))
    print(json.dumps({**said, "at": statement.at.isoformat()}))
    return 0


def _keygen() -> int:
    from streams.wire.personal import DeploymentKey

    key_id, secret = DeploymentKey.generate()
    print(json.dumps({"key_id": key_id, "secret": secret, "setting": f"{key_id}:VARIABLE"}))
    return 0  # the secret: into a secret store, never a file in git


async def status(settings: Settings, erasure_id: str) -> dict[str, Any]:
    """Where request `erasure_id` stands, its receipt once in effect, and the check that the
    subject's sealed values no longer open (`decryption_check`)."""
    from streams.worker.erasure_receipts import ReceiptLog

    published, erasures = await _published(settings)
    said = published.find(erasure_id)
    if not said:
        raise ErasureError(
            f"no erasure request {erasure_id} proven on {settings.topics.erasures}"
            + "".join(f"; {unread['record']}: {unread['error']}" for unread in published.unread)
        )
    erasure = next((e for e in erasures if e.erasure_id == erasure_id), None)
    if erasure is None:
        waiting = next(p for p in published.waiting if p.request.erasure_id == erasure_id)
        return {
            "erasure_id": erasure_id,
            "state": "waiting",
            "subject": waiting.request.subject,
            "needs": waiting.needs,
            "approved_by": list(waiting.approvals),
        }
    spellings = ErasureHistory([erasure], await _aliases(settings)).erasures[0].spellings
    if erasure.at > datetime.now(UTC):
        return {"erasure_id": erasure_id, "state": "scheduled", "erased_at": erasure.at.isoformat()}
    receipts = ReceiptLog(settings)
    await receipts.start()
    try:
        await receipts.read()
    finally:
        await receipts.stop()
    found = await subject_records(settings, spellings, erasure_id)
    return {
        "erasure_id": erasure_id,
        "state": "erased",
        "receipt": receipts.receipts.get(erasure_id),
        "keys_erased": sorted(found.erased_keys),
        "decryption_check": await decryption_check(settings, spellings, found.sealed),
    }


async def _published(settings: Settings) -> tuple[ErasureLog, list[Erasure]]:
    """The erasures topic read as a worker reads it (each record proven where the policy's
    stewards sign), and the erasures in effect, reviewed as the policy asks."""
    from streams.pipeline.authentication import Authentication
    from streams.worker.erasure_log import published_erasures

    policy = load_policy(settings.policy)
    published = await published_erasures(settings, Authentication(settings, policy).check_erasure)
    return published, published.in_effect(lambda _: policy.defaults.review)


async def _in_effect(settings: Settings) -> list[Erasure]:
    return (await _published(settings))[1]


async def _aliases(settings: Settings) -> Any:
    from streams.worker.alias_log import published_history

    review = load_policy(settings.policy).defaults.review
    return (await published_history(settings)).history(lambda _: review)


@dataclass
class SubjectRecords:
    """What the claims and decisions topics hold about an erased subject: its sealed values
    (field, value), and the keys that said the erasure erased them."""

    sealed: set[tuple[str, str]] = field(default_factory=set)
    erased_keys: set[str] = field(default_factory=set)


async def subject_records(
    settings: Settings, spellings: frozenset[str], erasure_id: str
) -> SubjectRecords:
    """Every record about `spellings` on the claims and decisions topics, read whole: the sealed
    values they hold, found without decoding (`sealed_in`), and the keys whose `erased`
    decision names `erasure_id`."""
    from streams.wire.history_topic import HistoryTopic
    from streams.wire.personal import sealed_in
    from streams.wire.registry import WireCodec, registry_for

    topics, codec, found = settings.topics, WireCodec(registry_for(settings)), SubjectRecords()

    class About(HistoryTopic):
        def take(self, record: Any) -> bool:
            key = (record.key or b"").decode("utf-8", "replace")
            subject, field_name = split_key(key)
            if alias_key(subject) not in spellings or not record.value:
                return False
            found.sealed.update((field_name, sealed) for sealed in sealed_in(record.value))
            if self.topic == topics.decisions:
                said = codec.decode(Decision, record.value)
                if said.outcome is Outcome.ERASED and said.resolution_id == erasure_id:
                    found.erased_keys.add(key)
            return False

    for topic in (topics.claims, topics.user_claims, topics.decisions):
        reader = About(settings, topic)
        await reader.start()
        try:
            await reader.read()
        finally:
            await reader.stop()
    return found


async def decryption_check(
    settings: Settings, spellings: frozenset[str], sealed: set[tuple[str, str]]
) -> dict[str, Any]:
    """The subject's `sealed` values (field, value) tried against the subject keys still on
    their topic: how many were found, how many still open (with the deployment key, where set),
    and the keys left. It fails to decrypt where none opens and no key of the subject is
    left."""
    from streams.wire.personal import SealError, key_id_of, open_sealed
    from streams.wire.subject_keys import SubjectKeys, subject_keys_for

    keys = subject_keys_for(settings, os.environ) if settings.deployment_key else None
    keys = keys or SubjectKeys(settings, None)
    await keys.start()
    try:
        remaining = sorted(k for spelling in spellings for k in keys.keys_of(spelling))
        opened = 0
        if settings.deployment_key:
            for field_name, value in sealed:
                key = keys.find(key_id_of(value))
                if key is None:
                    continue
                try:
                    open_sealed(value, key, field_name)
                except SealError:
                    continue
                opened += 1
    finally:
        await keys.stop()
    return {
        "sealed_values_found": len(sealed),
        "still_open": opened,
        "keys_remaining": remaining,
        "checked_with_deployment_key": bool(settings.deployment_key),
        "decryption_fails": opened == 0 and not remaining,
    }
