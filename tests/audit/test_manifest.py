"""An export's signed manifest (manifest.py): a folder whose files the signed manifest names
holds, and any change shows as a problem (a file edited, missing or added, a manifest field
tampered with, a signature by a key not given, no signature); the signing key is read from the
variable its setting names, and bad key material is refused with a ClaimstreamError."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.audit.files import sha256_of
from streams.audit.manifest import (
    FORMAT,
    MANIFEST,
    SIGNATURE,
    Signer,
    canonical,
    problems,
    public_keys,
    read_manifest,
    write_manifest,
)
from streams.core.records.errors import ClaimstreamError

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _public(key_id: str, key: Ed25519PrivateKey) -> str:
    return f"{key_id}:{_b64(key.public_key().public_bytes_raw())}"


KEYS = public_keys([_public("audit", KEY)])
SIGNER = Signer("audit", KEY)
FORGED = "the manifest's signature does not hold: it was changed or forged"


def _export(folder: Path, signer: Signer | None = SIGNER) -> dict[str, Any]:
    """A folder as an export leaves it: two tables and the manifest naming them."""
    folder.mkdir(exist_ok=True)
    (folder / "beliefs.jsonl").write_text('{"subject":"invoice:42"}\n', encoding="utf-8")
    (folder / "policies.jsonl").write_text('{"version":"v1"}\n', encoding="utf-8")
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "as_of": "2026-12-04T12:00:00Z",
        "records": {"replayed": 2, "refused": {"malformed": 1}},
        "files": [
            {
                "name": path.name,
                "rows": 1,
                "bytes": path.stat().st_size,
                "sha256": sha256_of(path),
            }
            for path in sorted(folder.glob("*.jsonl"))
        ],
    }
    if signer is not None:
        manifest = signer.signed(manifest)
    write_manifest(folder, manifest)
    return manifest


def _rewritten(folder: Path, change: Any) -> None:
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    change(manifest)
    write_manifest(folder, manifest)


def test_a_signed_export_holds(tmp_path: Path) -> None:
    manifest = _export(tmp_path)
    assert manifest[SIGNATURE]["algorithm"] == "ed25519"
    assert manifest[SIGNATURE]["key_id"] == "audit"
    assert read_manifest(tmp_path) == manifest
    assert problems(tmp_path, KEYS) == []


def test_the_signature_covers_the_manifest_without_itself(tmp_path: Path) -> None:
    manifest = _export(tmp_path)
    unsigned = {k: v for k, v in manifest.items() if k != SIGNATURE}
    assert canonical(manifest) == canonical(unsigned)
    assert (
        canonical(unsigned) == json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()
    )
    signature = base64.b64decode(manifest[SIGNATURE]["value"])
    KEY.public_key().verify(signature, canonical(unsigned))  # raises if it does not hold


def test_an_edited_file_is_found(tmp_path: Path) -> None:
    _export(tmp_path)
    (tmp_path / "beliefs.jsonl").write_text('{"subject":"invoice:43"}\n', encoding="utf-8")
    assert problems(tmp_path, KEYS) == [
        "beliefs.jsonl: its SHA-256 is not the manifest's: it was changed"
    ]


def test_a_file_of_other_length_is_found(tmp_path: Path) -> None:
    _export(tmp_path)
    with (tmp_path / "policies.jsonl").open("a", encoding="utf-8") as out:
        out.write('{"version":"v2"}\n')
    assert problems(tmp_path, KEYS) == [
        "policies.jsonl: its SHA-256 is not the manifest's: it was changed"
    ]


def test_a_missing_file_is_found(tmp_path: Path) -> None:
    _export(tmp_path)
    (tmp_path / "policies.jsonl").unlink()
    assert problems(tmp_path, KEYS) == ["policies.jsonl: missing"]


def test_a_file_the_manifest_does_not_name_is_found(tmp_path: Path) -> None:
    _export(tmp_path)
    (tmp_path / "extra.parquet").write_bytes(b"PAR1")
    assert problems(tmp_path, KEYS) == ["extra.parquet: not named in the manifest"]


def test_a_tampered_manifest_field_breaks_the_signature(tmp_path: Path) -> None:
    _export(tmp_path)

    def fewer_refused(manifest: dict[str, Any]) -> None:
        manifest["records"]["refused"] = {}

    _rewritten(tmp_path, fewer_refused)
    assert problems(tmp_path, KEYS) == [FORGED]


def test_a_file_changed_with_its_manifest_entry_breaks_the_signature(tmp_path: Path) -> None:
    """Editing a file and its checksum to match is still found: the checksum is signed."""
    _export(tmp_path)
    path = tmp_path / "beliefs.jsonl"
    path.write_text('{"subject":"invoice:43"}\n', encoding="utf-8")

    def matching(manifest: dict[str, Any]) -> None:
        manifest["files"][0] |= {"bytes": path.stat().st_size, "sha256": sha256_of(path)}

    _rewritten(tmp_path, matching)
    assert problems(tmp_path, KEYS) == [FORGED]


def test_a_signature_by_another_key_of_the_same_id_does_not_hold(tmp_path: Path) -> None:
    _export(tmp_path, Signer("audit", OTHER))
    assert problems(tmp_path, KEYS) == [FORGED]


def test_a_key_id_no_public_key_names_is_found(tmp_path: Path) -> None:
    _export(tmp_path, Signer("rotated", KEY))
    assert problems(tmp_path, KEYS) == [
        "signed with key 'rotated', which no public key given names"
    ]
    assert problems(tmp_path, public_keys([_public("rotated", KEY)])) == []


def test_an_unsigned_manifest_is_found(tmp_path: Path) -> None:
    _export(tmp_path, signer=None)
    assert problems(tmp_path, KEYS) == ["the manifest is not signed"]


def test_a_signature_taken_off_is_found(tmp_path: Path) -> None:
    _export(tmp_path)
    _rewritten(tmp_path, lambda manifest: manifest.pop(SIGNATURE))
    assert problems(tmp_path, KEYS) == ["the manifest is not signed"]


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m[SIGNATURE].pop("value"),
        lambda m: m[SIGNATURE].update(value=5),
        lambda m: m[SIGNATURE].update(value="not base64 at all!"),
        lambda m: m.update({SIGNATURE: "forged"}),
    ],
)
def test_a_malformed_signature_is_found_not_raised(tmp_path: Path, change: Any) -> None:
    _export(tmp_path)
    _rewritten(tmp_path, change)
    assert problems(tmp_path, KEYS) == [FORGED]


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["files"][0].pop("sha256"),
        lambda m: m["files"][0].update(bytes="12"),
        lambda m: m.update(files={"beliefs.jsonl": "..."}),
        lambda m: m.update(files=["beliefs.jsonl"]),
    ],
)
def test_a_malformed_list_of_files_is_found_not_raised(tmp_path: Path, change: Any) -> None:
    _export(tmp_path)
    _rewritten(tmp_path, change)
    assert problems(tmp_path, KEYS) == [
        FORGED,
        "the manifest's files are not a list of its files' name, bytes, sha256",
    ]


def test_a_folder_without_a_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClaimstreamError, match="no readable manifest"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text('{"format": "something-else/1"}', encoding="utf-8")
    with pytest.raises(ClaimstreamError, match="not a claimstream audit manifest"):
        problems(tmp_path, KEYS)


def test_the_same_manifest_is_written_as_the_same_bytes(tmp_path: Path) -> None:
    one = _export(tmp_path / "one")
    other = _export(tmp_path / "other")
    assert one == other  # Ed25519 signs deterministically
    assert (tmp_path / "one" / MANIFEST).read_bytes() == (
        tmp_path / "other" / MANIFEST
    ).read_bytes()


def test_the_signing_key_is_read_from_the_variable_its_setting_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAIMSTREAM_TEST_AUDIT_KEY", _b64(KEY.private_bytes_raw()))
    signer = Signer.from_setting("deploy-2026:CLAIMSTREAM_TEST_AUDIT_KEY")
    assert signer.key_id == "deploy-2026"
    _export(tmp_path, signer)
    assert problems(tmp_path, public_keys([_public("deploy-2026", KEY)])) == []
    assert problems(tmp_path, public_keys([_public("deploy-2026", OTHER)])) != []


@pytest.mark.parametrize(
    ("setting", "material"),
    [
        ("audit:CLAIMSTREAM_TEST_AUDIT_KEY", None),  # the variable is not set
        ("audit:CLAIMSTREAM_TEST_AUDIT_KEY", ""),
        ("audit", "ignored"),  # no variable named
        (":CLAIMSTREAM_TEST_AUDIT_KEY", "ignored"),  # no key id
        ("audit:CLAIMSTREAM_TEST_AUDIT_KEY", "not base64!"),
        ("audit:CLAIMSTREAM_TEST_AUDIT_KEY", _b64(bytes(31))),  # too short for Ed25519
        ("audit:CLAIMSTREAM_TEST_AUDIT_KEY", _b64(bytes(64))),
    ],
)
def test_a_bad_signing_setting_is_refused(
    monkeypatch: pytest.MonkeyPatch, setting: str, material: str | None
) -> None:
    if material is None:
        monkeypatch.delenv("CLAIMSTREAM_TEST_AUDIT_KEY", raising=False)
    else:
        monkeypatch.setenv("CLAIMSTREAM_TEST_AUDIT_KEY", material)
    with pytest.raises(ClaimstreamError, match="audit_signing_key"):
        Signer.from_setting(setting)


def test_public_keys_are_read_by_key_id() -> None:
    keys = public_keys([_public("a", KEY), f"  {_public('b', OTHER)}\n"])
    assert sorted(keys) == ["a", "b"]
    raw = keys["b"].public_bytes_raw()
    assert raw == OTHER.public_key().public_bytes_raw()
    assert public_keys([]) == {}


@pytest.mark.parametrize(
    "entry",
    [
        "a",  # no key
        "a:",
        f"a:{_b64(bytes(31))}",
        "a:%%%%",
    ],
)
def test_a_public_key_that_is_not_one_is_refused(entry: str) -> None:
    with pytest.raises(ClaimstreamError, match="public key 'a'"):
        public_keys([entry])
