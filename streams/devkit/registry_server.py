"""A minimal Confluent-compatible schema registry over a schema folder, for machines without one.

`python -m streams.devkit.registry_server --port 8081` serves the schemas/ folder; `serve_registry`
runs one in a thread (tests). Ids are content-derived, the same as a `FolderRegistry`'s.
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
from urllib.parse import unquote, urlsplit

import fastavro

from streams.core.errors import CodecError
from streams.registry import CONTENT_TYPE, FolderRegistry, RegistryError, schema_id

__all__ = ["RegistryServer", "serve_registry"]

log = logging.getLogger(__name__)

_MAX_REQUEST_BYTES = 1 << 20


class _Store:
    """Folder schemas plus schemas registered at runtime; content-derived ids for both, so a
    schema gets the same id here as in a FolderRegistry."""

    def __init__(self, folder: FolderRegistry) -> None:
        self.folder = folder
        self.extra: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.lock = threading.Lock()

    def schema(self, sid: int) -> dict[str, Any] | None:
        with self.lock:
            if sid in self.extra:
                return self.extra[sid]
        try:
            return self.folder.schema_for_id(sid)
        except CodecError:
            return None

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        sid = self.folder.lookup(schema)
        with self.lock:
            if sid is None:
                sid = schema_id(schema)
                clash = self.extra.get(sid)
                if (clash is not None and clash != schema) or self._in_folder(sid):
                    raise RegistryError(f"schema id collision on {sid}", HTTPStatus.CONFLICT)
                self.extra[sid] = schema
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return sid

    def _in_folder(self, sid: int) -> bool:
        try:
            self.folder.schema_for_id(sid)
        except CodecError:
            return False
        return True


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


class _ApiError(Exception):
    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


class _Handler(BaseHTTPRequestHandler):
    server: RegistryServer
    server_version = "claimstream-registry/0.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        try:
            status, body = self._route(method, parts)
        except _ApiError as exc:
            status, body = exc.status, {"error_code": exc.error_code, "message": exc.message}
        except RegistryError as exc:
            status = exc.status or HTTPStatus.INTERNAL_SERVER_ERROR
            body = {"error_code": status * 100 + 1, "message": str(exc)}
        self._reply(status, body)

    def _route(self, method: str, parts: list[str]) -> tuple[int, Any]:
        store = self.server.store
        match method, parts:
            case "GET", ["subjects"]:
                with store.lock:
                    return HTTPStatus.OK, sorted(store.subjects)
            case "GET", ["schemas", "ids", raw_id]:
                schema = store.schema(_parse_id(raw_id))
                if schema is None:
                    raise _ApiError(HTTPStatus.NOT_FOUND, 40403, f"Schema {raw_id} not found")
                return HTTPStatus.OK, {"schema": json.dumps(schema, sort_keys=True)}
            case "GET", ["subjects", subject, "versions"]:
                return HTTPStatus.OK, list(range(1, len(self._versions(subject)) + 1))
            case "GET", ["subjects", subject, "versions", "latest"]:
                versions = self._versions(subject)
                sid = versions[-1]
                schema = store.schema(sid)
                return HTTPStatus.OK, {
                    "subject": subject,
                    "version": len(versions),
                    "id": sid,
                    "schema": json.dumps(schema, sort_keys=True),
                }
            case "POST", ["subjects", subject, "versions"]:
                return HTTPStatus.OK, {"id": store.register(subject, self._posted_schema())}
        raise _ApiError(HTTPStatus.NOT_FOUND, 404, "HTTP 404 Not Found")

    def _versions(self, subject: str) -> list[int]:
        with self.server.store.lock:
            versions = list(self.server.store.subjects.get(subject, []))
        if not versions:
            raise _ApiError(HTTPStatus.NOT_FOUND, 40401, f"Subject '{subject}' not found.")
        return versions

    def _posted_schema(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= _MAX_REQUEST_BYTES:
            raise _ApiError(HTTPStatus.BAD_REQUEST, 400, "missing or oversized request body")
        try:
            request = json.loads(self.rfile.read(length))
            schema = json.loads(request["schema"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise _ApiError(
                HTTPStatus.UNPROCESSABLE_ENTITY, 42201, f"Invalid schema: {exc}"
            ) from exc
        if request.get("schemaType", "AVRO") != "AVRO" or request.get("references"):
            raise _ApiError(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                42201,
                "only self-contained AVRO schemas are supported (no schemaType, no references)",
            )
        if not isinstance(schema, dict):
            raise _ApiError(
                HTTPStatus.UNPROCESSABLE_ENTITY, 42201, "Invalid schema: not a named Avro type"
            )
        try:
            fastavro.parse_schema(schema)
        except Exception as exc:  # fastavro raises several unrelated types
            raise _ApiError(
                HTTPStatus.UNPROCESSABLE_ENTITY, 42201, f"Invalid schema: {exc}"
            ) from exc
        return schema

    def _reply(self, status: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _parse_id(raw: str) -> int:
    if not raw.isdigit():
        raise _ApiError(HTTPStatus.NOT_FOUND, 40403, f"Schema {raw} not found")
    return int(raw)


def serve_registry(
    host: str, port: int, registry: FolderRegistry
) -> tuple[RegistryServer, threading.Thread]:
    """Start a Confluent-compatible registry in a daemon thread (port 0 picks a free one; read
    `server.url`). Stop it with `server.shutdown(); server.server_close(); thread.join()`."""
    server = RegistryServer((host, port), _Store(registry))
    thread = threading.Thread(target=server.serve_forever, name="schema-registry", daemon=True)
    thread.start()
    return server, thread


def main(argv: list[str] | None = None) -> None:
    """`python -m streams.devkit.registry_server --port 8081`: a registry for machines without Confluent."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--schemas", type=Path, default=None, help="schema folder (default: ours)")
    args = parser.parse_args(argv)
    server, thread = serve_registry(args.host, args.port, FolderRegistry(args.schemas))
    print(f"schema registry on {server.url}", flush=True)
    try:
        thread.join()
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
