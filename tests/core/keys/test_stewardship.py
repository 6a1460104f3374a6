"""A steward's word reviewed where the policy asks: proposals, approvals with the basis each
saw, rejection, sending back, undo, and what a key keeps of them (stewardship.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from streams.core.admission.intake import admit
from streams.core.keys.belief import current_decision
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.steward_log import Standing
from streams.core.keys.stewardship import basis_digest, task_of
from streams.core.keys.stored import holds_steward_log
from streams.core.keys.transitions import Transition, add_claim, add_resolution
from streams.core.records.contracts import RejectReason, Resolution, StewardAct
from streams.core.records.policy import Policy, Review, load_policy
from tests.support.builders import NOW, REPO, claim

FIELD = "order.payment_status"
PLAIN: Policy = load_policy(REPO / "examples" / "policy.yaml")


def reviewed(approvals: int = 1, author_may_approve: bool = False) -> Policy:
    review = Review(approvals=approvals, author_may_approve=author_may_approve)
    return PLAIN.model_copy(
        update={"defaults": PLAIN.defaults.model_copy(update={"review": review})}
    )


def conflicted(policy: Policy) -> KeyState:
    rules = policy.rules_for(FIELD)
    assert rules is not None
    state: KeyState | None = None
    for c in (claim(1), claim(2, source="crm"), claim(3, source="billing-export", value="overdue")):
        state = add_claim(state, admit(c, policy, NOW), rules, policy.version, NOW).state
    assert state is not None
    assert state.current is not None
    assert state.current.outcome == "conflict"
    return state


def said(statement_id: str, by: str, seconds: int, **fields: Any) -> Resolution:
    data: dict[str, Any] = {
        "resolution_id": statement_id,
        "subject": "invoice:42",
        "field": FIELD,
        "decided_by": by,
        "decided_at": NOW + timedelta(seconds=seconds),
    }
    return Resolution.model_validate(data | fields)


class Key:
    """One key taken through statements under one policy, each at its own second."""

    def __init__(self, policy: Policy, limits: Limits = Limits()) -> None:
        self.policy, self.limits = policy, limits
        self.state = conflicted(policy)
        rules = policy.rules_for(FIELD)
        assert rules is not None
        self.rules = rules

    def take(self, statement: Resolution) -> Transition:
        at = statement.decided_at
        step = add_resolution(
            self.state, statement, self.rules, self.policy.version, at, self.limits
        )
        self.state = step.state
        return step

    def basis(self, seconds: int) -> dict[str, str]:
        decision = current_decision(
            self.state, self.rules, self.policy.version, NOW + timedelta(seconds=seconds)
        )
        return {
            "resolves_decision_id": decision.decision_id,
            "basis_digest": basis_digest(decision),
        }

    def propose(self, statement_id: str, by: str, seconds: int, value: str = "paid") -> Transition:
        return self.take(said(statement_id, by, seconds, value=value, **self.basis(seconds)))

    def approve(self, target: str, by: str, seconds: int) -> Transition:
        return self.take(
            said(
                f"a-{by}-{target}",
                by,
                seconds,
                act="approve",
                target_id=target,
                **self.basis(seconds),
            )
        )

    def standing(self, statement_id: str) -> Standing | None:
        if any(r.resolution_id == statement_id for r in self.state.resolutions):
            return None  # in force
        found = [s for s in self.state.steward_log if s.statement.resolution_id == statement_id]
        assert len(found) == 1, f"{statement_id} is kept once"
        return found[0].standing


def test_without_review_a_resolution_counts_at_once() -> None:
    key = Key(PLAIN)
    step = key.propose("r1", "alice", 5)
    assert step.emitted is not None
    assert step.emitted.decision.resolution_id == "r1"
    assert key.state.steward_log == ()


def test_a_proposal_is_kept_and_not_applied_until_another_steward_approves_it() -> None:
    key = Key(reviewed())
    before = key.state.current
    step = key.propose("r1", "alice", 5)
    assert step.refused is None
    assert step.emitted is None
    assert key.state.current == before
    assert key.state.resolutions == ()
    assert key.standing("r1") is Standing.PENDING

    step = key.approve("r1", "bob", 8)
    assert step.refused is None
    assert step.emitted is not None
    assert step.emitted.decision.outcome == "resolved"
    assert step.emitted.decision.resolution_id == "r1"
    assert key.standing("r1") is None
    assert key.standing("a-bob-r1") is Standing.RECORDED


def test_its_authors_own_approval_is_refused_unless_the_policy_allows_it() -> None:
    key = Key(reviewed())
    key.propose("r1", "alice", 5)
    step = key.approve("r1", "alice", 6)
    assert step.refused is not None
    assert step.refused.reason is RejectReason.REVIEW_REFUSED
    assert "author" in step.refused.detail
    assert key.standing("r1") is Standing.PENDING

    allowed = Key(reviewed(author_may_approve=True))
    allowed.propose("r1", "alice", 5)
    assert allowed.approve("r1", "alice", 6).emitted is not None


def test_two_approvals_need_two_stewards() -> None:
    key = Key(reviewed(approvals=2))
    key.propose("r1", "alice", 5)
    assert key.approve("r1", "bob", 6).emitted is None
    basis = key.basis(7)
    again = key.take(said("a2", "bob", 7, act="approve", target_id="r1", **basis))
    assert again.refused is not None
    assert "already" in again.refused.detail
    assert key.approve("r1", "carol", 8).emitted is not None
    assert key.standing("r1") is None


def test_an_approval_of_evidence_that_moved_is_stale_and_sends_the_proposal_back() -> None:
    key = Key(reviewed())
    key.propose("r1", "alice", 5)
    seen = key.basis(6)
    rules = key.rules
    fresh = admit(claim(4, source="billing-api", value="overdue"), key.policy, NOW)
    key.state = add_claim(
        key.state, fresh, rules, key.policy.version, NOW + timedelta(seconds=7)
    ).state
    step = key.take(said("a1", "bob", 8, act="approve", target_id="r1", **seen))
    assert step.refused is not None
    assert step.refused.reason is RejectReason.STALE_DECISION
    assert key.standing("r1") is Standing.SENT_BACK
    back = next(s for s in key.state.steward_log if s.statement.resolution_id == "r1")
    assert key.state.current is not None
    assert key.state.current.decision_id in back.why
    assert key.state.resolutions == ()


def test_reject_and_send_back_close_a_proposal_with_the_reviewers_note() -> None:
    key = Key(reviewed())
    key.propose("r1", "alice", 5)
    key.propose("r2", "alice", 6)
    key.take(said("x1", "bob", 7, act="reject", target_id="r1", note="the ledger says overdue"))
    key.take(said("x2", "bob", 8, act="send_back", target_id="r2", note="attach the receipt"))
    assert key.standing("r1") is Standing.REJECTED
    assert key.standing("r2") is Standing.SENT_BACK
    late = key.approve("r1", "carol", 9)
    assert late.refused is not None
    assert "rejected" in late.refused.detail
    assert key.state.resolutions == ()


def test_an_undo_returns_the_key_to_the_policys_own_decision_and_keeps_the_undone() -> None:
    key = Key(PLAIN)
    own = key.state.current
    key.propose("r1", "alice", 5)
    step = key.take(said("u1", "bob", 8, act="undo", target_id="r1"))
    assert step.emitted is not None
    assert own is not None
    assert step.emitted.decision.outcome == own.outcome == "conflict"
    assert step.emitted.decision.decision_id == own.decision_id  # the policy's own, again
    assert key.state.resolutions == ()
    assert key.standing("r1") is Standing.UNDONE
    assert key.standing("u1") is Standing.APPLIED


def test_an_undo_is_reviewed_like_a_resolution() -> None:
    key = Key(reviewed())
    key.propose("r1", "alice", 5)
    key.approve("r1", "bob", 6)
    assert key.take(said("u1", "alice", 8, act="undo", target_id="r1")).emitted is None
    assert key.standing("u1") is Standing.PENDING
    step = key.approve("u1", "bob", 9)
    assert step.emitted is not None
    assert step.emitted.decision.outcome == "conflict"
    assert key.standing("r1") is Standing.UNDONE


def test_an_undo_of_nothing_in_force_is_refused() -> None:
    step = Key(PLAIN).take(said("u1", "bob", 8, act="undo", target_id="r9"))
    assert step.refused is not None
    assert step.refused.reason is RejectReason.REVIEW_REFUSED


def test_proposals_wait_up_to_half_the_kept_statements_and_the_kept_are_bounded() -> None:
    key = Key(reviewed(), Limits(max_resolutions=4))
    assert key.propose("r1", "alice", 5).refused is None
    assert key.propose("r2", "alice", 6).refused is None
    step = key.propose("r3", "alice", 7)
    assert step.refused is not None
    assert "review them first" in step.refused.detail
    for n in range(8):
        key.take(said(f"x{n}", "bob", 10 + n, act="send_back", target_id="r1" if n == 0 else "r2"))
    kept = len(key.state.resolutions) + len(key.state.steward_log)
    assert kept <= 4


def test_a_steward_log_survives_the_journal_and_is_written_as_version_5() -> None:
    key = Key(reviewed())
    plain = encode_state(key.state)
    assert decode_state(plain) == key.state
    key.propose("r1", "alice", 5)
    key.approve("r1", "bob", 6)
    key.take(said("u1", "alice", 8, act="undo", target_id="r1"))
    encoded = encode_state(key.state)
    read = decode_state(encoded)
    assert read.steward_log == key.state.steward_log
    assert read.resolutions == key.state.resolutions
    assert holds_steward_log(encoded)
    assert not holds_steward_log(plain)


@pytest.mark.parametrize(
    "fields",
    [
        {"act": "approve", "target_id": "r1"},  # no basis
        {"act": "undo"},  # no target
        {"act": "reject", "target_id": "r1", "value": "paid"},  # a review with a value
        {"target_id": "r1", "value": "paid"},  # a resolution with a target
    ],
)
def test_a_statement_that_lacks_what_its_act_needs_is_refused_by_the_contract(
    fields: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        said("s1", "bob", 1, **fields)


def test_the_act_defaults_to_resolve() -> None:
    assert said("r1", "alice", 1, value="paid").act is StewardAct.RESOLVE


def assign(statement_id: str, by: str, seconds: int, to: str | None) -> Resolution:
    return said(statement_id, by, seconds, act="assign", assignee=to)


def test_a_task_is_taken_handed_on_and_released_only_by_its_holder() -> None:
    key = Key(PLAIN)
    assert task_of(key.state, key.rules, NOW).assignee is None
    assert key.take(assign("t1", "alice", 5, "alice")).refused is None
    taken = task_of(key.state, key.rules, NOW + timedelta(seconds=6))
    assert taken.assignee == "alice"
    assert taken.lease_until == NOW + timedelta(seconds=5) + key.rules.review.lease
    grab = key.take(assign("t2", "bob", 7, "bob"))
    assert grab.refused is not None
    assert "alice's until" in grab.refused.detail
    assert key.take(assign("t3", "alice", 8, "bob")).refused is None  # handed on
    assert task_of(key.state, key.rules, NOW + timedelta(seconds=9)).assignee == "bob"
    assert key.take(assign("t4", "bob", 10, None)).refused is None  # released
    assert task_of(key.state, key.rules, NOW + timedelta(seconds=11)).assignee is None


def test_a_lease_lapses_when_its_holder_goes_quiet_and_renews_with_each_statement() -> None:
    key = Key(reviewed())
    lease = key.rules.review.lease
    key.take(assign("t1", "alice", 5, "alice"))
    key.propose("r1", "alice", 65)  # a statement renews the lease
    renewed = NOW + timedelta(seconds=65) + lease
    assert task_of(key.state, key.rules, renewed - timedelta(seconds=1)).assignee == "alice"
    lapsed = task_of(key.state, key.rules, renewed)
    assert lapsed.assignee is None
    assert lapsed.waiting_for_review == 1
    later = int((renewed - NOW).total_seconds()) + 1
    assert key.take(assign("t2", "bob", later, "bob")).refused is None


def test_a_key_with_nothing_open_has_no_task_to_assign() -> None:
    key = Key(PLAIN)
    key.propose("r1", "alice", 5)  # resolved: nothing left for a steward
    step = key.take(assign("t1", "bob", 6, "bob"))
    assert step.refused is not None
    assert "no open task" in step.refused.detail


def test_a_proposal_waits_for_an_approval_even_where_the_policy_asks_for_none() -> None:
    key = Key(PLAIN)
    basis = key.basis(5)
    step = key.take(said("p1", "agent:billing", 5, act="propose", value="paid", **basis))
    assert step.emitted is None
    assert key.standing("p1") is Standing.PENDING
    approved = key.approve("p1", "alice", 6)
    assert approved.emitted is not None
    assert approved.emitted.decision.resolution_id == "p1"
