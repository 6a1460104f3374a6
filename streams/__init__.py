"""claimstream: deterministic, auditable reconciliation of conflicting claims on Kafka."""

from streams.build_info import choose_sources

__version__ = "0.1.0"

choose_sources()  # before any other module of the package is imported
