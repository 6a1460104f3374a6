"""The pipeline's gate: a claim's declared source must be proven before the claim is admitted.

Proof is the principal-only topic the claim arrived on (broker ACLs bind a principal to its topic)
and/or a signature by a key the policy binds to the source, with the keys' secrets read from the
environment once, when the worker starts. `principal_topics` names the per-principal input topics.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime

from streams.core.authenticity import SourceKey, keyring, verify
from streams.core.contracts import RejectReason
from streams.core.errors import ClaimstreamError, ContractError
from streams.core.policy import Policy
from streams.pipeline.records import Incoming
from streams.settings import Settings


class Authentication:
    def __init__(
        self, settings: Settings, policy: Policy, env: Mapping[str, str] | None = None
    ) -> None:
        self.prefix = settings.principal_topic_prefix
        self.rekeyed = settings.topics.rekeyed
        self.policy = policy
        self.keys = signing_keys(policy, env)

    def check(self, record: Incoming, source: str, now: datetime) -> None:
        """Raise `ContractError(UNAUTHENTICATED)` unless `record` may carry a claim of `source`:
        by the principal-only topic it arrived on and/or by its signature."""
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
                now,
                signing.max_age,
                signing.required,
            )


def signing_keys(policy: Policy, env: Mapping[str, str] | None = None) -> dict[str, SourceKey]:
    """The policy's signing keys with their HMAC secrets read from the environment."""
    env = os.environ if env is None else env
    keys = []
    for key in policy.signing.keys:
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
