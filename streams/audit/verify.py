"""`claimstream audit verify DIR [--replay]`: an export checked against its manifest, and with
`--replay` exported again from its snapshot token and compared byte for byte."""

from __future__ import annotations

import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from streams import __version__
from streams.audit.export import Progress, export
from streams.audit.files import sha256_of
from streams.audit.manifest import canonical, problems, read_manifest
from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings


async def verify(
    settings: Settings,
    folder: Path,
    keys: dict[str, Ed25519PublicKey],
    replay: bool = False,
    progress: Progress | None = None,
) -> list[str]:
    """What does not hold of the export in `folder` (empty: all of it holds)."""
    found = problems(folder, keys)
    if not replay:
        return found
    manifest = read_manifest(folder)
    if manifest.get("product_version") != __version__:
        return [
            *found,
            f"exported by claimstream {manifest.get('product_version')}, replayed by "
            f"{__version__}: a replay is byte-identical on the release that exported it",
        ]
    parquet = any(entry["name"].endswith(".parquet") for entry in manifest["files"])
    with tempfile.TemporaryDirectory(prefix="claimstream-audit-verify-") as scratch:
        again = Path(scratch) / "export"
        try:
            redone = await export(
                settings,
                again,
                token=manifest["token"],
                fmt="parquet" if parquet else "jsonl",
                progress=progress,
            )
        except ClaimstreamError as exc:
            return [*found, f"exported again from its token: {exc}"]
        if canonical(redone) != canonical(manifest):
            found.append("exported again from its token, the manifest differs")
        for entry in manifest["files"]:
            name = entry["name"]
            ours, theirs = folder / name, again / name
            if ours.is_file() and sha256_of(ours) != sha256_of(theirs):
                found.append(f"{name}: exported again from its token, its bytes differ")
    return found
