"""The registry's state and rules: schemas by content-derived id, subjects' versions,
compatibility levels and mode, saved to a JSON file after every change; Confluent's
compatibility rules (`check_compatibility`) and its error shapes (`ApiError`).

`registry_server` answers HTTP from this; nothing here knows about HTTP but the status codes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from http import HTTPStatus
from pathlib import Path
from typing import Any

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from streams.core.records.errors import CodecError
from streams.wire.registry import FolderRegistry, RegistryError, schema_id

log = logging.getLogger(__name__)

COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_COMPATIBILITY = "BACKWARD"
MODES = ("READWRITE", "READONLY")
_MAX_VERSION = 2**31 - 1


class ApiError(Exception):
    """An answer in Confluent's error shape: HTTP status plus its finer `error_code`."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


def subject_not_found(subject: str) -> ApiError:
    return ApiError(HTTPStatus.NOT_FOUND, 40401, f"Subject '{subject}' not found.")


def schema_not_found(what: object = None) -> ApiError:
    message = "Schema not found" if what is None else f"Schema {what} not found"
    return ApiError(HTTPStatus.NOT_FOUND, 40403, message)


def invalid_schema(detail: object) -> ApiError:
    return ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, 42201, f"Invalid schema: {detail}")


def _incompatibilities(reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty: it can)."""
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
    )
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(sorted(i.value for i in result.incompatibilities or ()))
    details = "; ".join(sorted(result.messages or ()))
    where = ", ".join(sorted(result.locations or ()))
    return [f"{kinds} at {where}: {details}"]


def check_compatibility(
    level: str, new: dict[str, Any], existing: list[dict[str, Any]]
) -> list[str]:
    """Confluent's compatibility rules: what keeps `new` from joining a subject whose versions
    are `existing` (oldest first) under `level`. BACKWARD: the new schema reads the latest
    version's data; FORWARD: the latest version reads the new schema's data; FULL: both;
    *_TRANSITIVE: against every version, not only the latest."""
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    direction = level.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    for old in against:
        if direction in ("BACKWARD", "FULL"):
            problems += [
                f"reading data of an earlier schema: {p}" for p in _incompatibilities(new, old)
            ]
        if direction in ("FORWARD", "FULL"):
            problems += [
                f"an earlier schema reading new data: {p}" for p in _incompatibilities(old, new)
            ]
    return problems


class SchemaStore:
    """Folder schemas plus those registered at runtime (content-derived ids for both), the
    subjects' versions and the compatibility levels; saved to `path` after every change."""

    def __init__(self, folder: FolderRegistry, path: Path | None = None) -> None:
        self.folder = folder
        self.path = path
        self.extra: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.level = DEFAULT_COMPATIBILITY
        self.subject_levels: dict[str, str] = {}
        self.mode = "READWRITE"
        self.lock = threading.RLock()
        if path is not None and path.exists():
            self._load(path)

    # -- persistence ----------------------------------------------------------------------------

    def _load(self, path: Path) -> None:
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            self.level = compatibility_level(saved.get("compatibility", DEFAULT_COMPATIBILITY))
            self.mode = registry_mode(saved.get("mode", "READWRITE"))
            self.subject_levels = {
                s: compatibility_level(v) for s, v in saved["subject_compatibility"].items()
            }
            for schema in saved["schemas"]:
                self.extra[schema_id(schema)] = schema
            self.subjects = {s: [int(i) for i in ids] for s, ids in saved["subjects"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ApiError) as exc:
            raise RegistryError(f"registry store {path} is unreadable: {exc}") from exc
        missing = sorted(
            {sid for ids in self.subjects.values() for sid in ids if self.schema(sid) is None}
        )
        if missing:
            raise RegistryError(f"registry store {path} names unknown schema ids {missing}")
        log.info("registry: %d subjects restored from %s", len(self.subjects), path)

    def _save(self) -> None:
        if self.path is None:
            return
        state = {
            "compatibility": self.level,
            "mode": self.mode,
            "subject_compatibility": self.subject_levels,
            "subjects": self.subjects,
            "schemas": [self.extra[sid] for sid in sorted(self.extra)],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            json.dump(state, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)  # a crash leaves the old file or the new, never half

    # -- reads ----------------------------------------------------------------------------------

    def schema(self, sid: int) -> dict[str, Any] | None:
        with self.lock:
            if sid in self.extra:
                return self.extra[sid]
        try:
            return self.folder.schema_for_id(sid)
        except CodecError:
            return None

    def versions(self, subject: str) -> list[int]:
        with self.lock:
            versions = list(self.subjects.get(subject, []))
        if not versions:
            raise subject_not_found(subject)
        return versions

    def version(self, subject: str, raw: str) -> tuple[int, int]:
        """(version number, schema id) of `raw` ("latest", "-1" or 1..2^31-1) in `subject`."""
        number = parse_version(raw)
        versions = self.versions(subject)
        if number is None:
            return len(versions), versions[-1]
        if number > len(versions):
            raise ApiError(HTTPStatus.NOT_FOUND, 40402, f"Version {number} not found.")
        return number, versions[number - 1]

    def level_of(self, subject: str | None) -> str:
        """The subject's own level, else the global one (`subject=None`: the global one)."""
        with self.lock:
            return self.subject_levels.get(subject or "", self.level)

    # -- writes ---------------------------------------------------------------------------------

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        with self.lock:
            folder_id = self.folder.lookup(schema)
            sid = folder_id
            if sid is None:
                sid = schema_id(schema)
                clash = self.extra.get(sid)
                if (clash is not None and clash != schema) or self._in_folder(sid):
                    raise RegistryError(f"schema id collision on {sid}", HTTPStatus.CONFLICT)
            versions = self.subjects.get(subject, [])
            if sid in versions:
                return sid  # already a version: no new one, no check (as Confluent does)
            if self.mode == "READONLY":
                raise ApiError(
                    HTTPStatus.UNPROCESSABLE_ENTITY,
                    42205,
                    f"Subject {subject} is in read-only mode",
                )
            existing = [self.schema(v) or {} for v in versions]
            problems = check_compatibility(self.level_of(subject), schema, existing)
            if problems:
                raise ApiError(
                    HTTPStatus.CONFLICT,
                    HTTPStatus.CONFLICT,
                    f"Schema being registered is incompatible with an earlier schema for "
                    f'subject "{subject}", details: {problems}',
                )
            if folder_id is None:
                self.extra[sid] = schema
            self.subjects[subject] = [*versions, sid]
            self._save()
            return sid

    def set_mode(self, mode: str) -> None:
        with self.lock:
            self.mode = mode
            self._save()

    def configure(self, subject: str | None, level: str) -> None:
        with self.lock:
            if subject is None:
                self.level = level
            else:
                self.subject_levels[subject] = level
            self._save()

    def _in_folder(self, sid: int) -> bool:
        try:
            self.folder.schema_for_id(sid)
        except CodecError:
            return False
        return True


def compatibility_level(value: object) -> str:
    level = str(value).upper()
    if level not in COMPATIBILITY_LEVELS:
        raise ApiError(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            42203,
            f"Invalid compatibility level. Valid values are {', '.join(COMPATIBILITY_LEVELS)}",
        )
    return level


def registry_mode(value: object) -> str:
    mode = str(value).upper()
    if mode not in MODES:
        raise ApiError(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            42204,
            f"Invalid mode. Valid values are {', '.join(MODES)}",
        )
    return mode


def parse_version(raw: str) -> int | None:
    """None for the latest version, else the number; Confluent's 42202 for anything else."""
    if raw in ("latest", "-1"):
        return None
    if raw.isdigit() and 1 <= int(raw) <= _MAX_VERSION:
        return int(raw)
    raise ApiError(
        HTTPStatus.UNPROCESSABLE_ENTITY,
        42202,
        f"The specified version '{raw}' is not a valid version id. Allowed values are between "
        f'[1, {_MAX_VERSION}] and the string "latest"',
    )


def parse_id(raw: str) -> int:
    if not raw.isdigit():
        raise schema_not_found(raw)
    return int(raw)
