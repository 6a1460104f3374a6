"""The audit commands of the `claimstream` command line: `audit export` (everything believed as
of an instant, from a cut of the input topics, as Parquet or JSON Lines with a signed manifest),
`audit verify` (the manifest's signature and checksums; with `--replay`, exported again from its
token and compared) and `audit keygen` (a signing key pair). `streams.audit` does the work,
imported when one runs. `streams.cli.main` adds them to its parser.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from streams.cli.commands import _client_logs_quiet, settings_from
from streams.core.records.errors import ClaimstreamError


def add_audit_commands(
    commands: Any, connection: argparse.ArgumentParser, instant: Callable[[str], datetime]
) -> None:
    """Add `audit` and its subcommands (`connection`: the --settings, --broker parent;
    `instant`: how the command line reads an RFC 3339 argument)."""
    audit_parser = commands.add_parser(
        "audit", help="export everything believed as of an instant, provably; verify an export"
    )
    audit_commands = audit_parser.add_subparsers(dest="audit_command", required=True)
    exporting = audit_commands.add_parser(
        "export",
        parents=[connection],
        help="replay a cut of the input topics as of an instant into Parquet files and a "
        "signed manifest (no worker needed)",
    )
    asked = exporting.add_mutually_exclusive_group(required=True)
    asked.add_argument("--as-of", type=instant, metavar="T", help="the RFC 3339 instant")
    asked.add_argument(
        "--token", metavar="TOKEN", help="the snapshot token of an earlier export: the same cut"
    )
    exporting.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="a new or empty folder"
    )
    exporting.add_argument(
        "--format",
        choices=["parquet", "jsonl"],
        default="parquet",
        help="the tables' format (default parquet; jsonl for small exports)",
    )
    exporting.add_argument(
        "--unsigned",
        action="store_true",
        help="write the manifest unsigned (without the audit_signing_key setting)",
    )
    exporting.set_defaults(handler=cmd_audit_export)
    verifying = audit_commands.add_parser(
        "verify",
        parents=[connection],
        help="check an export's signature and checksums; --replay exports it again and compares",
    )
    verifying.add_argument("folder", type=Path, metavar="DIR", help="the export's folder")
    verifying.add_argument(
        "--replay",
        action="store_true",
        help="export again from the manifest's token (from the broker) and compare byte for byte",
    )
    verifying.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="KEY_ID:BASE64",
        help="a public key to accept the signature from (repeatable; with the setting "
        "audit_verify_keys)",
    )
    verifying.set_defaults(handler=cmd_audit_verify)
    keygen = audit_commands.add_parser(
        "keygen",
        help="print a new Ed25519 key pair for signing manifests: JSON with the base64 private "
        "key and the public key as audit_verify_keys takes it",
    )
    keygen.add_argument("--key-id", default="audit", metavar="ID", help="the key's id")
    keygen.set_defaults(handler=cmd_audit_keygen)


def cmd_audit_export(args: argparse.Namespace) -> int:
    from streams.audit.export import export
    from streams.audit.manifest import Signer

    settings = settings_from(args)
    signer = None
    if settings.audit_signing_key:
        signer = Signer.from_setting(settings.audit_signing_key)
    elif not args.unsigned:
        raise ClaimstreamError(
            "the setting audit_signing_key names no key to sign the manifest with: set it "
            "(KEY_ID:VARIABLE), or export --unsigned"
        )
    _client_logs_quiet()
    manifest = asyncio.run(
        export(
            settings,
            args.out,
            as_of=args.as_of,
            token=args.token,
            fmt=args.format,
            signer=signer,
        )
    )
    print(json.dumps({"token": manifest["token"], "as_of": manifest["as_of"]}))
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from streams.audit.manifest import public_keys
    from streams.audit.verify import verify

    settings = settings_from(args)
    entries = [*(settings.audit_verify_keys or "").split(","), *args.public_key]
    keys = public_keys([entry for entry in entries if entry.strip()])
    _client_logs_quiet()
    found = asyncio.run(verify(settings, args.folder, keys, args.replay))
    for problem in found:
        print(f"audit verify: {problem}", file=sys.stderr)
    what = "signature, checksums" + (" and a byte-identical replay" if args.replay else "")
    print(f"audit verify: {args.folder}: {'FAILED' if found else 'holds'} ({what})")
    return 1 if found else 0


def cmd_audit_keygen(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    raw = serialization.Encoding.Raw
    private = key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    public = key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)
    pair = {
        "key_id": args.key_id,
        "private_key": base64.b64encode(private).decode(),
        "public_key": f"{args.key_id}:{base64.b64encode(public).decode()}",
    }
    print(json.dumps(pair, indent=2))  # the private key: into a secret, never a file in git
    return 0
