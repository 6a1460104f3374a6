"""What a key believes now, read without changing it: its decision at an instant (for the web
API, previews and an approval's basis) and whether a steward's statement was made against a
decision that is no longer the key's.

Where it sits: transitions.py decides and stores; this module only reads a `KeyState` through the
engine, as the web API and the stewards' checks need (`stewardship.py`).
"""

from __future__ import annotations

from datetime import datetime

from streams.core.decision.arbitration import Arbitration
from streams.core.keys import upkeep
from streams.core.keys.state import KeyState
from streams.core.keys.stewardship import basis_digest
from streams.core.records.contracts import Decision, RejectReason, Resolution
from streams.core.records.errors import ContractError
from streams.core.records.policy import FieldRules
from streams.core.rules.engine import arbitrate


def current_decision(
    state: KeyState, rules: FieldRules, policy_version: str, now: datetime
) -> Decision:
    """What the worker believes about this key at `now` (for the web API). When that is the
    belief last emitted, it names what that decision superseded, not itself."""
    arbitration = _arbitrate(state, rules, policy_version, now)
    last = state.current
    if last is not None and arbitration.decision_id == last.decision_id:
        arbitration = arbitration.restated(now, last.supersedes)
    return arbitration.decision


def basis_now(
    state: KeyState, rules: FieldRules, policy_version: str, now: datetime
) -> tuple[str, str] | None:
    """The key's decision at `now` as an approval names the basis it saw: its id and evidence
    digest (`basis_digest`); None while the key holds no claim."""
    if not state.claims:
        return None
    decision = current_decision(state, rules, policy_version, now)
    return decision.decision_id, basis_digest(decision)


def stale_view(
    state: KeyState, resolution: Resolution, rules: FieldRules, policy_version: str, now: datetime
) -> ContractError | None:
    """Why `resolution` no longer applies, if it names a decision that is not the key's current
    one: neither the last emitted nor the one time alone reached by `now` (a view can show that
    before the key's timer fires)."""
    viewed, last = resolution.resolves_decision_id, state.current
    if viewed is None or (last is not None and viewed == last.decision_id):
        return None
    current = _arbitrate(state, rules, policy_version, now) if state.claims else None
    if current is not None and viewed == current.decision_id:
        return None
    now_is = f"{current.decision_id} ({current.outcome.value})" if current is not None else "none"
    return ContractError(
        RejectReason.STALE_DECISION,
        f"resolution {resolution.resolution_id!r} was made against decision {viewed!r}, but the "
        f"key's current decision is {now_is}: the evidence changed since; look again and "
        "resolve the current decision",
    )


def _arbitrate(
    state: KeyState, rules: FieldRules, policy_version: str, now: datetime
) -> Arbitration:
    last = state.current
    arbitration = arbitrate(
        state.subject,
        state.field,
        state.claims,
        rules,
        policy_version,
        now,
        state.resolutions,
        supersedes=last.decision_id if last else None,
        previous=state.arbitration,
    )
    return upkeep.noting_refusals(arbitration, state.refused, policy_version)
