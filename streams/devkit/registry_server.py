"""A Confluent-compatible schema registry over a schema folder, for machines without one.

`python -m streams.devkit.registry_server --port 8081` serves the schemas/ folder and keeps what
clients register in a JSON file (`--store`), so ids keep resolving across restarts;
`serve_registry` runs one in a thread (tests). Ids are content-derived, the same as a
`FolderRegistry`'s, so records framed with the folder and with this server carry the same ids.

It answers the part of Confluent's REST API that serializers, deserializers and CI tooling call,
with Confluent's status codes, bodies and `error_code` values: registration checked against the
subject's compatibility level (BACKWARD unless configured), lookup, compatibility tests, config,
mode (READWRITE, or READONLY as production registries often are) and schema types. Avro only,
without schema references. The state and the compatibility rules are `registry_store`'s; this
module is the HTTP face: routes, request bodies, Confluent's answers.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import avro.schema
import fastavro

from streams.devkit.registry_store import (
    ApiError,
    SchemaStore,
    check_compatibility,
    compatibility_level,
    invalid_schema,
    parse_id,
    parse_version,
    registry_mode,
    schema_not_found,
)
from streams.wire.registry import CONTENT_TYPE, FolderRegistry, RegistryError, canonical_json

__all__ = ["RegistryServer", "serve_registry"]

log = logging.getLogger(__name__)

_MAX_REQUEST_BYTES = 1 << 20


class RegistryServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: SchemaStore) -> None:
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
        except ApiError as exc:
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
                mode = registry_mode(self._body().get("mode"))
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
                    raise ApiError(
                        HTTPStatus.NOT_FOUND,
                        40408,
                        f"Subject '{subject}' does not have subject-level compatibility configured",
                    )
                return ok, {"compatibilityLevel": level}
            case "PUT", ["config"] | ["config", _]:
                level = compatibility_level(self._body().get("compatibility"))
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
                sid = parse_id(raw_id)
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
                    raise ApiError(HTTPStatus.NOT_FOUND, 404, "HTTP 404 Not Found")
                problems = self._compatibility(subject, version[0] if version else None)
                answer: dict[str, Any] = {"is_compatible": not problems}
                if query.get("verbose", "").lower() == "true":
                    answer["messages"] = problems
                return ok, answer
        raise ApiError(HTTPStatus.NOT_FOUND, 404, "HTTP 404 Not Found")

    def _schema_by_id(self, raw_id: str) -> dict[str, Any]:
        schema = self.server.store.schema(parse_id(raw_id))
        if schema is None:
            raise schema_not_found(raw_id)
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
        raise schema_not_found()

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
        if parse_version(raw_version) is None and not store.subjects.get(subject):
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
            raise ApiError(HTTPStatus.BAD_REQUEST, 400, "missing or oversized request body")
        try:
            body = json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, 400, f"request body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError(HTTPStatus.BAD_REQUEST, 400, "request body is not a JSON object")
        return body

    def _posted_schema(self) -> dict[str, Any]:
        request = self._body()
        if request.get("schemaType", "AVRO") != "AVRO" or request.get("references"):
            raise invalid_schema(
                "only self-contained AVRO schemas are supported (no schemaType, no references)"
            )
        try:
            schema = json.loads(request["schema"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise invalid_schema(exc) from exc
        if not isinstance(schema, dict):
            raise invalid_schema("not a named Avro type")
        try:
            fastavro.parse_schema(schema)
            avro.schema.parse(json.dumps(schema))  # what the compatibility checks will read
        except Exception as exc:  # both libraries raise several unrelated types
            raise invalid_schema(exc) from exc
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
    server = RegistryServer((host, port), SchemaStore(registry, store))
    thread = threading.Thread(target=server.serve_forever, name="schema-registry", daemon=True)
    thread.start()
    return server, thread


def main(argv: list[str] | None = None) -> None:
    """`python -m streams.devkit.registry_server --port 8081`: a registry for machines
    without Confluent."""
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
