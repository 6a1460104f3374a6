"""A Confluent-compatible schema registry over a schema folder, for machines without one.

`python -m streams.devkit.registry_server --port 8081` serves the schemas/ folder and keeps what
clients register in a JSON file (`--store`), so ids keep resolving across restarts;
`serve_registry` runs one in a thread (tests). Ids are content-derived, the same as a
`FolderRegistry`'s, so records framed with the folder and with this server carry the same ids.

It answers the part of Confluent's REST API that serializers, deserializers and CI tooling call,
with Confluent's status codes, bodies and `error_code` values: registration checked against the
subject's compatibility level (BACKWARD unless configured), lookup, compatibility tests, config,
mode (READWRITE, or READONLY as production registries often are) and schema types. Avro only, without schema references.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from streams.core.errors import CodecError
from streams.registry import CONTENT_TYPE, FolderRegistry, RegistryError, canonical_json, schema_id

__all__ = ["COMPATIBILITY_LEVELS", "RegistryServer", "serve_registry"]

log = logging.getLogger(__name__)

_MAX_REQUEST_BYTES = 1 << 20
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


class _ApiError(Exception):
    """An answer in Confluent's error shape: HTTP status plus its finer `error_code`."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


def _subject_not_found(subject: str) -> _ApiError:
    return _ApiError(HTTPStatus.NOT_FOUND, 40401, f"Subject '{subject}' not found.")


def _schema_not_found(what: object = None) -> _ApiError:
    message = "Schema not found" if what is None else f"Schema {what} not found"
    return _ApiError(HTTPStatus.NOT_FOUND, 40403, message)


def _invalid_schema(detail: object) -> _ApiError:
    return _ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, 42201, f"Invalid schema: {detail}")


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


class _Store:
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
            self.level = _level(saved.get("compatibility", DEFAULT_COMPATIBILITY))
            self.mode = _mode(saved.get("mode", "READWRITE"))
            self.subject_levels = {s: _level(v) for s, v in saved["subject_compatibility"].items()}
            for schema in saved["schemas"]:
                self.extra[schema_id(schema)] = schema
            self.subjects = {s: [int(i) for i in ids] for s, ids in saved["subjects"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, _ApiError) as exc:
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
            raise _subject_not_found(subject)
        return versions

    def version(self, subject: str, raw: str) -> tuple[int, int]:
        """(version number, schema id) of `raw` ("latest", "-1" or 1..2^31-1) in `subject`."""
        number = _parse_version(raw)
        versions = self.versions(subject)
        if number is None:
            return len(versions), versions[-1]
        if number > len(versions):
            raise _ApiError(HTTPStatus.NOT_FOUND, 40402, f"Version {number} not found.")
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
                raise _ApiError(
                    HTTPStatus.UNPROCESSABLE_ENTITY,
                    42205,
                    f"Subject {subject} is in read-only mode",
                )
            existing = [self.schema(v) or {} for v in versions]
            problems = check_compatibility(self.level_of(subject), schema, existing)
            if problems:
                raise _ApiError(
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


def _level(value: object) -> str:
    level = str(value).upper()
    if level not in COMPATIBILITY_LEVELS:
        raise _ApiError(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            42203,
            f"Invalid compatibility level. Valid values are {', '.join(COMPATIBILITY_LEVELS)}",
        )
    return level


def _mode(value: object) -> str:
    mode = str(value).upper()
    if mode not in MODES:
        raise _ApiError(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            42204,
            f"Invalid mode. Valid values are {', '.join(MODES)}",
        )
    return mode


def _parse_version(raw: str) -> int | None:
    """None for the latest version, else the number; Confluent's 42202 for anything else."""
    if raw in ("latest", "-1"):
        return None
    if raw.isdigit() and 1 <= int(raw) <= _MAX_VERSION:
        return int(raw)
    raise _ApiError(
        HTTPStatus.UNPROCESSABLE_ENTITY,
        42202,
        f"The specified version '{raw}' is not a valid version id. Allowed values are between "
        f'[1, {_MAX_VERSION}] and the string "latest"',
    )


def _parse_id(raw: str) -> int:
    if not raw.isdigit():
        raise _schema_not_found(raw)
    return int(raw)


class RegistryServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: _Store) -> None:
        self.store = store
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: RegistryServer
    server_version = "claimstream-registry/0.2"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        # Deleting would let ids stop resolving while records framed with them still exist.
        self._reply(
            HTTPStatus.METHOD_NOT_ALLOWED,
            {
                "error_code": HTTPStatus.METHOD_NOT_ALLOWED,
                "message": "this registry never deletes: schema ids must keep resolving",
            },
        )

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")] if url.path.strip("/") else []
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            status, body = self._route(method, parts, query)
        except _ApiError as exc:
            status, body = exc.status, {"error_code": exc.error_code, "message": exc.message}
        except RegistryError as exc:
            status = exc.status or HTTPStatus.INTERNAL_SERVER_ERROR
            body = {"error_code": status * 100 + 1, "message": str(exc)}
        self._reply(status, body)

    def _route(self, method: str, parts: list[str], query: dict[str, str]) -> tuple[int, Any]:
        store = self.server.store
        ok = HTTPStatus.OK
        match method, parts:
            case "GET", []:
                return ok, {}
            case "GET", ["schemas", "types"]:
                return ok, ["AVRO"]
            case "GET", ["mode"]:
                with store.lock:
                    return ok, {"mode": store.mode}
            case "PUT", ["mode"]:
                mode = _mode(self._body().get("mode"))
                store.set_mode(mode)
                return ok, {"mode": mode}
            case "GET", ["config"]:
                return ok, {"compatibilityLevel": store.level_of(None)}
            case "GET", ["config", subject]:
                with store.lock:
                    level = store.subject_levels.get(subject)
                if level is None and query.get("defaultToGlobal", "").lower() == "true":
                    level = store.level_of(subject)
                if level is None:
                    raise _ApiError(
                        HTTPStatus.NOT_FOUND,
                        40408,
                        f"Subject '{subject}' does not have subject-level compatibility configured",
                    )
                return ok, {"compatibilityLevel": level}
            case "PUT", ["config"] | ["config", _]:
                level = _level(self._body().get("compatibility"))
                store.configure(parts[1] if len(parts) == 2 else None, level)
                return ok, {"compatibility": level}
            case "GET", ["subjects"]:
                with store.lock:
                    return ok, sorted(store.subjects)
            case "GET", ["schemas", "ids", raw_id]:
                return ok, {"schema": canonical_json(self._schema_by_id(raw_id))}
            case "GET", ["schemas", "ids", raw_id, "schema"]:
                return ok, self._schema_by_id(raw_id)
            case "GET", ["schemas", "ids", raw_id, "subjects" | "versions"]:
                sid = _parse_id(raw_id)
                self._schema_by_id(raw_id)
                with store.lock:
                    uses = [
                        (subject, ids.index(sid) + 1)
                        for subject, ids in sorted(store.subjects.items())
                        if sid in ids
                    ]
                if parts[3] == "subjects":
                    return ok, [subject for subject, _ in uses]
                return ok, [{"subject": s, "version": v} for s, v in uses]
            case "GET", ["subjects", subject, "versions"]:
                return ok, list(range(1, len(store.versions(subject)) + 1))
            case "GET", ["subjects", subject, "versions", raw_version]:
                number, sid = store.version(subject, raw_version)
                return ok, self._registered(subject, number, sid)
            case "GET", ["subjects", subject, "versions", raw_version, "schema"]:
                _, sid = store.version(subject, raw_version)
                return ok, store.schema(sid)
            case "POST", ["subjects", subject, "versions"]:
                return ok, {"id": store.register(subject, self._posted_schema())}
            case "POST", ["subjects", subject]:
                return ok, self._lookup(subject, self._posted_schema())
            case "POST", ["compatibility", "subjects", subject, "versions", *version]:
                if len(version) > 1:
                    raise _ApiError(HTTPStatus.NOT_FOUND, 404, "HTTP 404 Not Found")
                problems = self._compatibility(subject, version[0] if version else None)
                answer: dict[str, Any] = {"is_compatible": not problems}
                if query.get("verbose", "").lower() == "true":
                    answer["messages"] = problems
                return ok, answer
        raise _ApiError(HTTPStatus.NOT_FOUND, 404, "HTTP 404 Not Found")

    def _schema_by_id(self, raw_id: str) -> dict[str, Any]:
        schema = self.server.store.schema(_parse_id(raw_id))
        if schema is None:
            raise _schema_not_found(raw_id)
        return schema

    def _registered(self, subject: str, version: int, sid: int) -> dict[str, Any]:
        return {
            "subject": subject,
            "version": version,
            "id": sid,
            "schema": canonical_json(self.server.store.schema(sid)),
        }

    def _lookup(self, subject: str, schema: dict[str, Any]) -> dict[str, Any]:
        """Whether `schema` is already a version of `subject` (what a serializer with
        `auto.register.schemas=false` asks before every first send)."""
        versions = self.server.store.versions(subject)
        wanted = canonical_json(schema)
        for number, sid in enumerate(versions, start=1):
            if canonical_json(self.server.store.schema(sid)) == wanted:
                return self._registered(subject, number, sid)
        raise _schema_not_found()

    def _compatibility(self, subject: str, raw_version: str | None) -> list[str]:
        """What keeps the posted schema from joining `subject`: against one version (the
        level's direction, not transitive) or, without a version, as registering would check."""
        store = self.server.store
        schema = self._posted_schema()
        level = store.level_of(subject)
        if raw_version is None:
            with store.lock:
                existing = [store.schema(sid) or {} for sid in store.subjects.get(subject, [])]
            return check_compatibility(level, schema, existing)
        if _parse_version(raw_version) is None and not store.subjects.get(subject):
            return []  # nothing registered yet: anything is compatible with "latest"
        _, sid = store.version(subject, raw_version)
        return check_compatibility(
            level.removesuffix("_TRANSITIVE"), schema, [store.schema(sid) or {}]
        )

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= _MAX_REQUEST_BYTES:
            raise _ApiError(HTTPStatus.BAD_REQUEST, 400, "missing or oversized request body")
        try:
            body = json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _ApiError(
                HTTPStatus.BAD_REQUEST, 400, f"request body is not JSON: {exc}"
            ) from exc
        if not isinstance(body, dict):
            raise _ApiError(HTTPStatus.BAD_REQUEST, 400, "request body is not a JSON object")
        return body

    def _posted_schema(self) -> dict[str, Any]:
        request = self._body()
        if request.get("schemaType", "AVRO") != "AVRO" or request.get("references"):
            raise _invalid_schema(
                "only self-contained AVRO schemas are supported (no schemaType, no references)"
            )
        try:
            schema = json.loads(request["schema"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise _invalid_schema(exc) from exc
        if not isinstance(schema, dict):
            raise _invalid_schema("not a named Avro type")
        try:
            fastavro.parse_schema(schema)
            avro.schema.parse(json.dumps(schema))  # what the compatibility checks will read
        except Exception as exc:  # both libraries raise several unrelated types
            raise _invalid_schema(exc) from exc
        return schema

    def _reply(self, status: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def serve_registry(
    host: str, port: int, registry: FolderRegistry, store: Path | None = None
) -> tuple[RegistryServer, threading.Thread]:
    """Start a Confluent-compatible registry in a daemon thread (port 0 picks a free one; read
    `server.url`); registrations are kept in `store` (a JSON file) when given. Stop it with
    `server.shutdown(); server.server_close(); thread.join()`."""
    server = RegistryServer((host, port), _Store(registry, store))
    thread = threading.Thread(target=server.serve_forever, name="schema-registry", daemon=True)
    thread.start()
    return server, thread


def main(argv: list[str] | None = None) -> None:
    """`python -m streams.devkit.registry_server --port 8081`: a registry for machines without Confluent."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--schemas", type=Path, default=None, help="schema folder (default: ours)")
    parser.add_argument(
        "--store",
        type=Path,
        default=Path("var/claimstream/schema-registry.json"),
        help="JSON file keeping registered schemas, subjects and levels across restarts",
    )
    args = parser.parse_args(argv)
    server, thread = serve_registry(args.host, args.port, FolderRegistry(args.schemas), args.store)
    print(f"schema registry on {server.url} (registrations kept in {args.store})", flush=True)
    try:
        thread.join()
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
