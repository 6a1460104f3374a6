"""The names of the topics claimstream reads and writes (`Settings.topics`): each a setting,
`CLAIMSTREAM_TOPIC_<NAME>` in the environment."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Topics(BaseModel):
    # A field's docstring is its description (the generated settings reference shows it).
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    claims: str = "claims.tools"
    """tools' claims"""
    user_claims: str = "claims.users"
    """users' assertions (authority class asserted, whatever the payload says)"""
    resolutions: str = "claims.resolutions"
    """stewards' resolutions"""
    aliases: str = "claims.subject-aliases"
    """subject aliases (alias -> canonical subject) and the instant each takes effect"""
    decisions: str = "claims.decisions"
    """the decisions, compacted by subject|field"""
    dead_letters: str = "claims.dead-letters"
    """refused records, with the reason in headers"""
    epoch_changes: str = "claims.epoch-changes"
    """values that changed across an epoch boundary"""
    reobserve: str = "claims.reobserve-requests"
    """requests to observe a value again"""
    escalations: str = "claims.escalations"
    """conflicts open longer than their field's escalate_after"""
    policies: str = "claims.policies"
    """the policy versions and the instant each takes effect"""
    rekeyed: str = "claimstream-rekeyed"
    """internal: claims and resolutions sent on to their key's partition, and timer ticks"""
    outcomes: str = "claimstream-outcomes"
    """internal: decision counts per field and outcome, for the windowed field-outcomes table"""
    erasures: str = "claims.erasures"
    """erasure requests and their approvals: a data subject's data erased from an instant on"""
    erasure_receipts: str = "claims.erasure-receipts"
    """what each erasure erased and where copies remain until when, naming no personal value"""
    subject_keys: str = "claims.subject-keys"
    """each data subject's keys for personal fields, wrapped by the deployment key; compacted"""

    def inputs(self) -> list[str]:
        """Topics the arbiter consumes; all share one partition count (co-partitioned)."""
        return [self.claims, self.user_claims, self.rekeyed, self.resolutions]

    def histories(self) -> tuple[str, ...]:
        """Topics read whole, in published order: one partition each."""
        return (
            self.policies,
            self.aliases,
            self.erasures,
            self.erasure_receipts,
            self.subject_keys,
        )
