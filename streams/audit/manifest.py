"""An export's `manifest.json`: what was exported, from which records, and its signature.

The manifest names the cut (the snapshot token and, readable, its offsets), the instant, the
schema ids the records were written with, the policy versions in force and their digests, the
product version, the records read and refused by reason, and each file's rows, size and SHA-256.
It is signed with the deployment's Ed25519 key (`audit_signing_key`): the signature covers the
manifest's canonical JSON without the signature itself, so a verifier holding the public key
(`audit_verify_keys`, `--public-key`) knows the files are the ones the deployment wrote. No
clock or host goes in: an export run again from its token writes the same manifest.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from streams import __version__
from streams.audit.cut import Cut
from streams.audit.files import sha256_of
from streams.core.reading.audit_rows import policy_rows
from streams.core.records.errors import ClaimstreamError

MANIFEST = "manifest.json"
FORMAT = "claimstream-audit/1"
SIGNATURE = "signature"


def unsigned_manifest(
    cut: Cut,
    schema_ids: dict[str, list[int]],
    policy_lines: list[str],
    read: int,
    refused: Counter[str],
    files: list[dict[str, Any]],
) -> dict[str, Any]:
    """The manifest of an export of `cut`: `read` claims and statements, `refused` of them by
    reason (as a worker refuses them: their bytes, their proof, the policy, or the key's
    transition), the rest applied; `files`, each file's name, table, rows, bytes and SHA-256."""
    return {
        "format": FORMAT,
        "as_of": cut.as_of.isoformat().replace("+00:00", "Z"),
        "token": cut.token(),
        "cut": {
            topic: [{"partition": s.partition, "start": s.start, "end": s.end} for s in spans]
            for topic, spans in sorted(cut.topics.items())
        },
        "complete_history": all(s.start == 0 for spans in cut.topics.values() for s in spans),
        "product_version": __version__,
        "schema_ids": schema_ids,
        "policies": [
            {"version": row["version"], "since_us": row["since"], "sha256": row["digest"]}
            for row in policy_rows(policy_lines)
        ],
        "records": {
            "read": read,
            "applied": read - sum(refused.values()),
            "refused": dict(sorted(refused.items())),
        },
        "files": files,
    }


def canonical(manifest: dict[str, Any]) -> bytes:
    """The bytes a signature covers: the manifest without its signature, keys sorted."""
    body = {k: v for k, v in manifest.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    path = folder / MANIFEST
    text = json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ClaimstreamError(f"{path}: no readable manifest: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ClaimstreamError(f"{path}: not a claimstream audit manifest ({FORMAT})")
    return manifest


class Signer:
    """Signs manifests with one Ed25519 key, named `key_id`."""

    def __init__(self, key_id: str, private_key: Ed25519PrivateKey) -> None:
        self.key_id, self._key = key_id, private_key

    @classmethod
    def from_setting(cls, setting: str) -> Signer:
        """`KEY_ID:VARIABLE`: the key's id, and the environment variable holding its base64 raw
        Ed25519 private key."""
        key_id, _, variable = setting.partition(":")
        material = os.environ.get(variable, "")
        if not key_id or not variable or not material:
            raise ClaimstreamError(
                "audit_signing_key: give KEY_ID:VARIABLE, the variable holding the base64 "
                "Ed25519 private key (`claimstream audit keygen` makes one)"
            )
        try:
            raw = base64.b64decode(material, validate=True)
            return cls(key_id, Ed25519PrivateKey.from_private_bytes(raw))
        except (binascii.Error, ValueError) as exc:
            raise ClaimstreamError(
                f"audit_signing_key: ${variable} is not a base64 raw Ed25519 private key"
            ) from exc

    def signed(self, manifest: dict[str, Any]) -> dict[str, Any]:
        value = base64.b64encode(self._key.sign(canonical(manifest))).decode()
        return manifest | {
            SIGNATURE: {"algorithm": "ed25519", "key_id": self.key_id, "value": value}
        }


def public_keys(entries: list[str]) -> dict[str, Ed25519PublicKey]:
    """`KEY_ID:BASE64` entries (raw Ed25519 public keys) by key id."""
    keys = {}
    for entry in entries:
        key_id, _, encoded = entry.strip().partition(":")
        try:
            keys[key_id] = Ed25519PublicKey.from_public_bytes(base64.b64decode(encoded))
        except (binascii.Error, ValueError) as exc:
            raise ClaimstreamError(
                f"public key {key_id!r}: not KEY_ID:BASE64 of a raw Ed25519 public key"
            ) from exc
    return keys


def problems(folder: Path, keys: dict[str, Ed25519PublicKey]) -> list[str]:
    """What is wrong with the export in `folder`: its signature (by a key of `keys`), each
    file's size and checksum, and files it does not name. Empty: it holds."""
    manifest = read_manifest(folder)
    found = []
    signature = manifest.get(SIGNATURE)
    if not signature:
        found.append("the manifest is not signed")
    elif not isinstance(signature, dict):
        found.append(_FORGED)
    else:
        key = keys.get(str(signature.get("key_id", "")))
        if key is None:
            found.append(
                f"signed with key {signature.get('key_id')!r}, which no public key given names"
            )
        else:
            try:
                key.verify(base64.b64decode(signature.get("value", "")), canonical(manifest))
            except (InvalidSignature, binascii.Error, ValueError, TypeError):
                found.append(_FORGED)
    entries = manifest.get("files", [])
    if not _listed(entries):
        return [*found, "the manifest's files are not a list of its files' name, bytes, sha256"]
    named = {entry["name"] for entry in entries}
    for entry in entries:
        path = folder / entry["name"]
        if not path.is_file():
            found.append(f"{entry['name']}: missing")
        elif path.stat().st_size != entry["bytes"] or sha256_of(path) != entry["sha256"]:
            found.append(f"{entry['name']}: its SHA-256 is not the manifest's: it was changed")
    extra = sorted(p.name for p in folder.iterdir() if p.name not in named | {MANIFEST})
    found += [f"{name}: not named in the manifest" for name in extra]
    return found


_FORGED = "the manifest's signature does not hold: it was changed or forged"


def _listed(entries: Any) -> bool:
    """Whether a manifest's `files` has the shape an export writes (a tampered one may not)."""
    return isinstance(entries, list) and all(
        isinstance(entry, dict)
        and isinstance(entry.get("name"), str)
        and Path(entry["name"]).name == entry["name"]  # a file of the folder, no other path
        and isinstance(entry.get("bytes"), int)
        and isinstance(entry.get("sha256"), str)
        for entry in entries
    )
