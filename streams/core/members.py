"""The enum members the hot path reads on every decision, bound once as module constants.

Where it sits: beside `contracts.py`, which defines the enums. The engine's rooms (`fused.py`,
`engine.py`, `arbitration.py`, `incremental.py`, `intake.py`) import these rather than reading
`Outcome.RESOLVED` and the like per decision: on Python 3.11 the enums' metaclass defines
`__getattr__`, which sends every attribute read off an enum class through Python's slow
attribute hook, about twenty times the cost of reading a module constant (measured with timeit).
"""

from __future__ import annotations

from streams.core.contracts import ClaimStatus, ConflictKind, EvidenceRole, Outcome
from streams.core.policy import OnConflict

RESOLVED = Outcome.RESOLVED
CONFLICT = Outcome.CONFLICT
INSUFFICIENT = Outcome.INSUFFICIENT
QUARANTINED = Outcome.QUARANTINED

WINNER = EvidenceRole.WINNER
CORROBORATING = EvidenceRole.CORROBORATING
CONTESTED = EvidenceRole.CONTESTED
SUPERSEDED = EvidenceRole.SUPERSEDED
STALE = EvidenceRole.STALE
EXCLUDED = EvidenceRole.EXCLUDED

EXISTENCE_CONFLICT = ConflictKind.EXISTENCE
VALUE_CONFLICT = ConflictKind.VALUE

PRESENT = ClaimStatus.PRESENT

MOST_RECENT = OnConflict.MOST_RECENT
