"""claimstream: deterministic, auditable reconciliation of conflicting claims on Kafka."""

__version__ = "0.1.0"
