"""The enum members and contract constants the hot path reads on every decision, bound once as
module constants.

Where it sits: beside `contracts.py` and `policy.py`, which define the enums. Its importers,
all compiled: `intake`, `engine`, `arbitration` and the shortcuts (`fused`, `incremental`) read
these rather than `Outcome.RESOLVED` and the like per decision: on Python 3.11 the enums'
metaclass defines `__getattr__`, which sends every attribute read off an enum class through
Python's slow attribute hook, about twenty times the cost of reading a module constant (measured
with timeit).
Compiled, each `Final` here is read by the compiled rooms as a C static; a name they import from
an interpreted module (`contracts.py` defines models, so stays interpreted) is a dictionary
lookup on every read.
"""

from __future__ import annotations

from typing import Final

from streams.core.records import contracts
from streams.core.records.contracts import ClaimStatus, ConflictKind, EvidenceRole, Outcome
from streams.core.records.policy import OnConflict

RESOLVED: Final = Outcome.RESOLVED
CONFLICT: Final = Outcome.CONFLICT
INSUFFICIENT: Final = Outcome.INSUFFICIENT
QUARANTINED: Final = Outcome.QUARANTINED

WINNER: Final = EvidenceRole.WINNER
CORROBORATING: Final = EvidenceRole.CORROBORATING
CONTESTED: Final = EvidenceRole.CONTESTED
SUPERSEDED: Final = EvidenceRole.SUPERSEDED
STALE: Final = EvidenceRole.STALE
EXCLUDED: Final = EvidenceRole.EXCLUDED

EXISTENCE_CONFLICT: Final = ConflictKind.EXISTENCE
VALUE_CONFLICT: Final = ConflictKind.VALUE

PRESENT: Final = ClaimStatus.PRESENT

MOST_RECENT: Final = OnConflict.MOST_RECENT

ASSERTED_RANK: Final = contracts.ASSERTED_RANK
NO_EVIDENCE_STATUSES: Final = contracts.NO_EVIDENCE_STATUSES
