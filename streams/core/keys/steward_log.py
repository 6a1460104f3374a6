"""What a key keeps of its stewards' statements besides the resolutions in force (`KeyState.
steward_log`): proposals waiting for review, the reviews, undos, and resolutions that no longer
count, each with its standing. Data only; stewardship.py says how a statement changes them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from streams.core.records.contracts import Resolution


class Standing(StrEnum):
    """Where a kept statement stands."""

    PENDING = "pending"
    """A resolution (or an agent's proposal) or an undo waiting for its approvals: visible,
    not applied."""
    APPLIED = "applied"
    """An undo in force (a resolution in force is in `KeyState.resolutions`)."""
    UNDONE = "undone"
    """A resolution an undo took back: kept as evidence, no longer counting."""
    REJECTED = "rejected"
    SENT_BACK = "sent_back"
    """Returned to its author: by a reviewer, or because the key was decided again (`why`)."""
    RECORDED = "recorded"
    """A review (approve, reject, send back) or a task's assignment, kept for the history."""


@dataclass(frozen=True, slots=True)
class StewardStep:
    """One kept statement: `needs`, the approvals a proposal needed when it was made (the policy
    in force then); `why`, what the worker said when it closed it (a stale basis)."""

    statement: Resolution
    standing: Standing
    needs: int = 0
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        """The statement as the web API and the CLI show it, with where it stands."""
        return self.statement.model_dump(mode="json") | {
            "standing": self.standing.value,
            "needs": self.needs,
            "why": self.why,
        }
