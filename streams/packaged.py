"""Files that ship inside the package: the Avro schemas and the examples (policy, its JSON
Schema, claims, resolutions). The wheel is the product, so nothing is looked up relative to a
checkout.

In the repository, `streams/schemas` and `streams/examples` are links to the top-level `schemas/`
and `examples/` folders (the one copy of each); a built wheel holds the files themselves.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from streams.core.records.errors import ClaimstreamError

# The policy schema travels with the policy: its first line names it, for editors.
EXAMPLE_FILES = ("policy.yaml", "policy.schema.json", "claims.jsonl", "resolutions.jsonl")
EXAMPLES_NOW = "2026-11-29T12:00:00Z"
"""The evaluation time the example claims were recorded for (`replay --now`)."""


def packaged_path(*parts: str) -> Path:
    """A file or folder shipped in the package, as a path on disk."""
    resource = files(__package__ or "streams")
    for part in parts:
        resource = resource / part
    if not isinstance(resource, Path):
        # fastavro resolves named types from sibling files, and settings name the policy by path.
        raise ClaimstreamError(f"claimstream must be installed unpacked; {resource} is no file")
    return resource


def schema_dir() -> Path:
    """The Avro schemas (`claimstream.<Name>.avsc`, older versions under `history/`)."""
    return packaged_path("schemas")


def example_path(name: str) -> Path:
    """One of EXAMPLE_FILES."""
    return packaged_path("examples", name)
