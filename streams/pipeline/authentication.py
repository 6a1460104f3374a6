"""The pipeline's gate: a claim's declared source must be proven before the claim is admitted.

Proof is the principal-only topic the claim arrived on (broker ACLs bind a principal to its topic)
and/or a signature by a key the policy binds to the source, with the keys' secrets read from the
environment once, when the worker starts. `principal_topics` names the per-principal input topics.

Records that change beliefs (resolutions, alias records) are proven the same two ways: the topic
they arrive on (broker ACLs let only steward principals write the resolutions and aliases topics)
and/or a signature by a key the policy's `stewards` section binds to the steward named in them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from streams.core.admission.authenticity import SourceKey, keyring, verify
from streams.core.records.contracts import RejectReason, instant
from streams.core.records.errors import ClaimstreamError, ContractError
from streams.core.records.policy import Policy, Signing
from streams.pipeline.records import Incoming
from streams.settings import Settings


class Authentication:
    def __init__(
        self, settings: Settings, policy: Policy, env: Mapping[str, str] | None = None
    ) -> None:
        self.prefix = settings.principal_topic_prefix
        self.rekeyed = settings.topics.rekeyed
        self.policy = policy
        self.keys = signing_keys(policy.signing, env)
        self.steward_keys = signing_keys(policy.stewards, env)

    def check(self, record: Incoming, source: str, now_us: int) -> None:
        """Raise `ContractError(UNAUTHENTICATED)` unless `record` may carry a claim of `source`:
        by the principal-only topic it arrived on and/or by its signature (checked as of `now_us`,
        microseconds since the epoch)."""
        prefix = self.prefix
        if prefix and record.topic != self.rekeyed:
            source_policy = self.policy.source_policy(source)
            owner = source_policy.principal if source_policy else None
            arrived_as = (
                record.topic.removeprefix(prefix) if record.topic.startswith(prefix) else None
            )
            if owner is not None and arrived_as != owner:
                raise ContractError(
                    RejectReason.UNAUTHENTICATED,
                    f"spoofed source: {source!r} publishes only as principal {owner!r} on "
                    f"{prefix}{owner}, not on {record.topic}",
                )
            if arrived_as is not None and owner != arrived_as:
                raise ContractError(
                    RejectReason.UNAUTHENTICATED,
                    f"spoofed source: principal {arrived_as!r} may not publish claims of "
                    f"{source!r}",
                )
        signing = self.policy.signing
        if signing.keys or signing.required:
            verify(
                record.value or b"",
                record.headers,
                source,
                self.keys,
                instant(now_us),
                signing.max_age,
                signing.required,
            )

    def check_steward(
        self,
        value: bytes,
        headers: Sequence[tuple[str, bytes | None]],
        steward: str,
        now: datetime,
    ) -> None:
        """Raise `ContractError(UNAUTHENTICATED)` unless a record that changes a belief (a
        resolution, an alias) is signed by a key bound to `steward`, where the policy's
        `stewards` section asks for it; else the steward-only topic it arrived on proves it."""
        stewards = self.policy.stewards
        if stewards.keys or stewards.required:
            verify(
                value,
                headers,
                steward,
                self.steward_keys,
                now,
                stewards.max_age,
                stewards.required,
            )

    def check_alias(self, record: Incoming, now: datetime) -> None:
        """Raise `ContractError(UNAUTHENTICATED)` unless an alias record (key: the alias; value:
        the canonical subject, none to remove it) is proven as a steward's, the steward named in
        its `claimstream.steward` header; the signature covers the alias, the subject and the
        instant it takes effect, so a signed change cannot be moved to another alias or time."""
        steward = (record.header(STEWARD_HEADER) or b"").decode("utf-8", "replace")
        at = record.header(EFFECTIVE_AT_HEADER) or b""
        payload = alias_payload(record.key or b"", record.value or b"", at)
        self.check_steward(payload, record.headers, steward, now)

    def check_erasure(self, record: Incoming, steward: str, now: datetime) -> None:
        """Raise `ContractError(UNAUTHENTICATED)` unless an erasure record (key: the request's
        id; value: its statement, naming `steward` and its instant) is proven as `steward`'s;
        the signature covers the key and the whole value, so it cannot be moved to another
        request, subject or time."""
        payload = alias_payload(record.key or b"", record.value or b"")
        self.check_steward(payload, record.headers, steward, now)


STEWARD_HEADER = "claimstream.steward"
EFFECTIVE_AT_HEADER = "claimstream.effective_at"
"""An alias record's instant of effect (RFC 3339); without it, the record's timestamp."""


def alias_payload(alias: bytes, subject: bytes, at: bytes = b"") -> bytes:
    """What an alias record's signature covers: the alias and the subject, length-prefixed (no
    two different pairs serialise alike), then the instant it takes effect where it names one."""
    if not at:
        return len(alias).to_bytes(4, "big") + alias + subject
    return len(alias).to_bytes(4, "big") + alias + len(subject).to_bytes(4, "big") + subject + at


def signing_keys(signing: Signing, env: Mapping[str, str] | None = None) -> dict[str, SourceKey]:
    """A policy section's signing keys with their HMAC secrets read from the environment."""
    env = os.environ if env is None else env
    keys = []
    for key in signing.keys:
        secret = None
        if key.secret_env is not None:
            secret = env.get(key.secret_env)
            if not secret:
                raise ClaimstreamError(
                    f"signing key {key.key_id!r}: environment variable {key.secret_env} is not set"
                )
        keys.append(
            SourceKey(
                key_id=key.key_id,
                algorithm=key.algorithm,
                secret=secret,
                public_key=key.public_key,
                sources=key.sources,
            )
        )
    return keyring(keys)


def principal_topics(policy: Policy, settings: Settings) -> list[str]:
    """One input topic per publishing principal named in the policy (when configured)."""
    prefix = settings.principal_topic_prefix
    if not prefix:
        return []
    principals = {s.principal for s in policy.sources.values() if s.principal}
    return [f"{prefix}{principal}" for principal in sorted(principals)]


def read_record(topic: str, record: Any) -> Incoming:
    """A consumer record of a history topic (aliases, erasures) as the proofs take it."""
    headers = tuple((k, bytes(v or b"")) for k, v in record.headers or ())
    return Incoming(
        topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        headers,
        record.timestamp / 1000,
    )
