"""claimstream: deterministic, auditable reconciliation of conflicting claims on Kafka."""

from streams.build_info import honour_interpreted_switch

__version__ = "0.1.0"

honour_interpreted_switch()  # before any other module of the package is imported
