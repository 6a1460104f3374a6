"""A policy history as JSON lines: one line per policy version, the instant it takes effect and
its YAML text, `{"since": "2026-12-01T00:00:00Z", "policy": "version: ..."}`.

The shape of the policy topic's records and of `claimstream replay --clock --policy-history`'s
file. Other keys on a line (`version`, `published_by`, ...) are the publisher's and are ignored:
what a policy is comes from its text alone. Pure: lines in, a `PolicyHistory` out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from streams.core.records.contracts import parse_instant
from streams.core.records.errors import PolicyError
from streams.core.records.policy import Policy, policy_from_text
from streams.core.timeline.rollout import InForce, PolicyHistory


def history_line(since: datetime, policy_text: str) -> str:
    """The line saying the policy of `policy_text` takes effect at `since` (an aware instant),
    or PolicyError if the text is not a valid policy: every line written reads back."""
    if since.tzinfo is None:
        raise PolicyError(f"since {since.isoformat()} needs a UTC offset")
    policy_from_text(policy_text, "policy")
    moment = since.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"since": moment, "policy": policy_text}, ensure_ascii=False)


def history_from_lines(lines: Iterable[str], origin: str = "policy history") -> PolicyHistory:
    """The history the lines record (blank lines skipped, in any order: a later line with the
    same `since` wins), or PolicyError naming `origin`, the line number and the problem: a line
    that is not such a JSON object, a `since` that is not an RFC 3339 instant with an offset, a
    policy the policy loader refuses, a version given to two different policies."""
    entries: list[InForce] = []
    seen: dict[str, tuple[int, Policy]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{origin}:{number}"
        since, text = _fields(line, where)
        policy = policy_from_text(text, f"{where}: policy")
        earlier = seen.setdefault(policy.version, (number, policy))
        if earlier[1] != policy:
            raise PolicyError(
                f"{where}: policy version {policy.version!r} is also line {earlier[0]}'s, with "
                "other content: each version of a policy needs its own version string"
            )
        entries.append(InForce(since, policy))
    if not entries:
        raise PolicyError(f"{origin}: holds no policy (one JSON line per policy version)")
    return PolicyHistory(entries)


def _fields(line: str, where: str) -> tuple[datetime, str]:
    """A line's `since` and `policy`, or PolicyError."""
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{where}: not JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: a line is a JSON object with `since` and `policy`")
    since, text = data.get("since"), data.get("policy")
    if not isinstance(since, str):
        raise PolicyError(f"{where}: since: give the RFC 3339 instant the policy takes effect")
    if not isinstance(text, str):
        raise PolicyError(f"{where}: policy: give the policy's YAML text, as a string")
    try:
        return parse_instant(since), text
    except ValueError as exc:
        raise PolicyError(f"{where}: since: {since!r} is not an RFC 3339 instant: {exc}") from exc
