"""A steward's signature on what the command line publishes (`--by`, `--key-id`, `--key-env`).

The key is read from the environment and checked when the command starts, so that a key the
policy would refuse is a clear error before anything is sent.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import load_policy
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.client import Signer


def steward_signer(args: argparse.Namespace, settings: Settings) -> Signer:
    """Signs as the policy's steward key `--key-id` (which must be bound to `--by`)."""
    from streams.core.admission import authenticity

    policy = load_policy(args.policy or settings.policy)
    key = next((k for k in policy.stewards.keys if k.key_id == args.key_id), None)
    if key is None or args.by not in key.sources:
        raise ClaimstreamError(
            f"--key-id {args.key_id!r}: not a key of the policy's stewards section bound to "
            f"--by {args.by!r}"
        )
    variable = args.key_env or key.secret_env
    material = os.environ.get(variable or "")
    if not material:
        raise ClaimstreamError(
            f"--key-id {args.key_id!r}: set --key-env to a variable with its key"
        )
    try:
        return authenticity.steward_signer(policy.stewards, args.by, args.key_id, material)
    except ValueError as exc:
        raise ClaimstreamError(f"--key-id {args.key_id!r}: the key in ${variable}: {exc}") from exc
