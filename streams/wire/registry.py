"""Schema ids on the wire: Confluent framing and the schema registries a worker reads.

A record on a topic is `0x00`, a 4-byte big-endian schema id, then the Avro body. The id lets a
consumer decode data written with any published schema version; the registry maps ids to schemas.

Two registries share one protocol: `FolderRegistry` (the schemas/ folder, no server; ids are
derived from content, so every process on every machine agrees on them without coordination) and
`HttpRegistry` (any Confluent-compatible REST registry: Confluent, Karapace, Apicurio's ccompat
API). A minimal server for people without one is in the dev kit (streams.devkit.registry_server).

Every foreign error (urllib, json, fastavro) is translated here: a record that cannot be decoded is
a `CodecError` (dead-letter it), a registry that cannot be reached or refuses us is a
`RegistryError` (not the record's fault: retry or stop, never dead-letter).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import logging
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import fastavro
from pydantic import BaseModel

from streams.core.records.contracts import Claim, RejectReason
from streams.core.records.errors import ClaimstreamError, CodecError
from streams.core.records.lean import LeanClaim
from streams.packaged import schema_dir as packaged_schemas
from streams.settings import Settings
from streams.wire import codec

__all__ = [
    "CONTENT_TYPE",
    "MAGIC_BYTE",
    "FolderRegistry",
    "HttpRegistry",
    "RegistryError",
    "RegistryUnavailable",
    "SchemaRegistry",
    "WireCodec",
    "canonical_json",
    "record_name_strategy",
    "registry_from_url",
    "schema_id",
    "topic_name_strategy",
    "topic_record_name_strategy",
]

log = logging.getLogger(__name__)

MAGIC_BYTE = 0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = f"{CONTENT_TYPE}, application/vnd.schemaregistry+json, application/json"
_HEADER = struct.Struct(">BI")

M = TypeVar("M", bound=BaseModel)


class RegistryError(ClaimstreamError):
    """The registry refused a request or answered nonsense: a deployment problem, not bad input,
    so callers must not dead-letter the record that triggered it."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RegistryUnavailable(RegistryError):
    """The registry could not be reached or failed (5xx, timeout): retrying later may succeed."""


class SchemaRegistry(Protocol):
    """What the wire codec needs from a registry; both calls happen only on cache misses."""

    def register(self, subject: str, schema: dict[str, Any]) -> int: ...

    def schema_for_id(self, schema_id: int) -> dict[str, Any]: ...


# Subject naming strategies, as Confluent's serializers name them.
def topic_name_strategy(topic: str, record_type: type[BaseModel]) -> str:
    """TopicNameStrategy, the default: one schema lineage per topic."""
    return f"{topic}-value"


def record_name_strategy(topic: str, record_type: type[BaseModel]) -> str:
    """RecordNameStrategy: one lineage per record type, whatever topic carries it."""
    return f"{codec.NAMESPACE}.{codec.record_name(record_type)}"


def topic_record_name_strategy(topic: str, record_type: type[BaseModel]) -> str:
    """TopicRecordNameStrategy: several record types on one topic, each with its own lineage."""
    return f"{topic}-{codec.NAMESPACE}.{codec.record_name(record_type)}"


def canonical_json(schema: Any) -> str:
    """Key order and whitespace removed, so equal schemas hash equal wherever they were written."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schema_id(schema: Any) -> int:
    """First 31 bits of the SHA-256 of the canonical JSON: positive in a signed 32-bit int (as
    Confluent clients expect) and the same in every process, so no id allocation is needed."""
    digest = hashlib.sha256(canonical_json(schema).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def _full_name(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


class FolderRegistry:
    """The schemas/ folder as a read-only registry: the default, since it needs no server and the
    folder is the contract. Only schemas present in the folder (current or history) have ids."""

    def __init__(self, schema_dir: Path | None = None) -> None:
        self.schema_dir = Path(schema_dir) if schema_dir is not None else packaged_schemas()
        self._schemas: dict[int, dict[str, Any]] = {}
        self._canonical: dict[int, str] = {}
        self._files: dict[str, int] = {}
        paths = sorted(self.schema_dir.glob("*.avsc")) + sorted(
            (self.schema_dir / "history").glob("*.avsc")
        )
        if not paths:
            raise CodecError(RejectReason.UNKNOWN_SCHEMA, f"no *.avsc schemas in {self.schema_dir}")
        for path in paths:
            self._add(path.relative_to(self.schema_dir).as_posix(), codec.load_expanded(path))

    def _add(self, label: str, schema: dict[str, Any]) -> None:
        text = canonical_json(schema)
        sid = schema_id(schema)
        known = self._canonical.get(sid)
        if known is not None and known != text:
            other = next(name for name, i in self._files.items() if i == sid)
            raise CodecError(
                RejectReason.UNKNOWN_SCHEMA,
                f"schema id collision: {label} and {other} both hash to {sid}; change a doc string",
            )
        self._canonical[sid] = text
        self._schemas[sid] = schema
        self._files[label] = sid

    def files(self) -> dict[str, int]:
        """Schema file (relative to the folder, e.g. history/claimstream.Claim.v1.avsc) -> id."""
        return dict(self._files)

    def lookup(self, schema: dict[str, Any]) -> int | None:
        sid = schema_id(schema)
        return sid if self._canonical.get(sid) == canonical_json(schema) else None

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        sid = self.lookup(schema)
        if sid is None:
            name = _full_name(schema) or "?"
            raise CodecError(
                RejectReason.UNKNOWN_SCHEMA,
                f"schema {name} for subject {subject} is not in {self.schema_dir}; "
                "publish it there (or use a registry server)",
            )
        return sid

    def schema_for_id(self, schema_id: int) -> dict[str, Any]:
        try:
            # A copy: callers may parse or annotate it, and the folder must stay as loaded.
            return copy.deepcopy(self._schemas[schema_id])
        except KeyError:
            raise CodecError(
                RejectReason.UNKNOWN_SCHEMA, f"schema id {schema_id} is not in {self.schema_dir}"
            ) from None

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for sid, schema in self._schemas.items():
            yield sid, copy.deepcopy(schema)


class HttpRegistry:
    """Client of the Confluent REST API (also Karapace and Apicurio's ccompat endpoint).

    Synchronous urllib on purpose: it is called at startup and on cache misses only, and the
    stdlib keeps it free of an HTTP client dependency. Successful lookups are cached forever (ids
    are immutable); unknown ids are remembered for `miss_ttl` seconds so a stream of records with a
    bad id does not turn into a stream of registry requests.
    """

    def __init__(
        self,
        url: str,
        auth: tuple[str, str] | None = None,
        timeout: float = 5,
        *,
        miss_ttl: float = 10.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.miss_ttl = miss_ttl
        self._headers = {"Accept": _ACCEPT, "Content-Type": CONTENT_TYPE}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, dict[str, Any]] = {}
        self._misses: dict[int, float] = {}

    def __repr__(self) -> str:  # never shows credentials
        return f"HttpRegistry({self.url!r})"

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        key = (subject, canonical_json(schema))
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        body = {"schema": json.dumps(schema, sort_keys=True)}
        what = f"schema for subject {subject}"
        path = f"/subjects/{quote(subject, safe='')}"
        try:
            # Looked up first: production registries often refuse writes from applications
            # (read-only mode or permissions) and hold schemas registered by CI instead.
            answer = self._call("POST", path, body, what)
        except CodecError:  # 404: not a version of the subject yet
            answer = self._call("POST", f"{path}/versions", body, what)
        sid = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(sid, int) or isinstance(sid, bool):
            raise RegistryError(f"{self.url}: registering {subject} returned no id: {answer!r}")
        self._ids[key] = sid
        return sid

    def schema_for_id(self, schema_id: int) -> dict[str, Any]:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return copy.deepcopy(cached)
        missed = self._misses.get(schema_id)
        if missed is not None and time.monotonic() - missed < self.miss_ttl:
            raise CodecError(
                RejectReason.UNKNOWN_SCHEMA, f"schema id {schema_id} is not in {self.url}"
            )
        try:
            answer = self._call("GET", f"/schemas/ids/{schema_id}", None, f"schema id {schema_id}")
        except CodecError:
            self._misses[schema_id] = time.monotonic()
            raise
        text = answer.get("schema") if isinstance(answer, dict) else None
        try:
            schema = json.loads(text) if isinstance(text, str) else None
        except json.JSONDecodeError as exc:
            raise RegistryError(f"{self.url}: schema id {schema_id} is not JSON: {exc}") from exc
        if not isinstance(schema, dict):
            raise CodecError(
                RejectReason.UNKNOWN_SCHEMA,
                f"schema id {schema_id} in {self.url} is not an Avro record schema",
            )
        self._misses.pop(schema_id, None)
        self._schemas[schema_id] = schema
        return copy.deepcopy(schema)

    def _call(self, method: str, path: str, body: Any, what: str) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers=self._headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            message = _error_message(exc)
            if exc.code == HTTPStatus.NOT_FOUND:
                raise CodecError(
                    RejectReason.UNKNOWN_SCHEMA, f"{what} not found in {self.url}: {message}"
                ) from exc
            kind = RegistryUnavailable if exc.code >= 500 else RegistryError
            raise kind(
                f"{self.url}: {method} {path} failed with HTTP {exc.code}: {message}", exc.code
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise RegistryUnavailable(f"{self.url}: {method} {path} failed: {exc}") from exc
        try:
            return json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RegistryError(f"{self.url}: {method} {path} returned non-JSON: {exc}") from exc


def _error_message(exc: urllib.error.HTTPError) -> str:
    """Confluent puts the reason in {"error_code", "message"}; fall back to the status text."""
    try:
        body = json.loads(exc.read() or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        body = None
    if isinstance(body, dict) and "message" in body:
        return f"{body.get('error_code', exc.code)} {body['message']}"
    return str(exc.reason)


class WireCodec:
    """Frames records with a registry id on the way out, resolves any known writer version into
    the current model on the way in.

    Registry calls and schema parsing happen once per (topic, type) and per (id, type); the decode
    hot path is a header unpack, one dict lookup and the Avro read. When the writer schema is the
    current one, the very object codec uses as reader is passed as writer, so fastavro skips schema
    resolution altogether.
    """

    def __init__(
        self,
        registry: SchemaRegistry,
        subject_name: Callable[[str, type[BaseModel]], str] = topic_name_strategy,
    ) -> None:
        self.registry = registry
        self.subject_name = subject_name
        self._headers: dict[tuple[str, type[BaseModel]], bytes] = {}
        self._writers: dict[tuple[int, type[BaseModel]], Any] = {}
        self._parsed: dict[int, Any] = {}
        self._refused: dict[tuple[int, type[BaseModel]], str] = {}
        self._lock = threading.Lock()

    def encode(self, topic: str, record: BaseModel) -> bytes:
        return self.framing(topic, type(record)) + codec.encode(record)

    def framing(self, topic: str, model: type[BaseModel]) -> bytes:
        """The header a `model` record on `topic` starts with: the magic byte and its schema id
        (registered on first use)."""
        key = (topic, model)
        header = self._headers.get(key)
        if header is None:
            name = codec.record_name(model)
            schema = codec.expanded_schema(name)
            sid = self.registry.register(self.subject_name(topic, model), schema)
            if not 0 <= sid < 2**31:
                raise RegistryError(f"registry returned schema id {sid}, outside a signed int32")
            header = self._headers[key] = _HEADER.pack(MAGIC_BYTE, sid)
        return header

    def decode(self, model: type[M], data: bytes | None) -> M:
        body, writer = self._framed(model, data)
        return codec.decode(model, body, writer_schema=writer)

    def decode_claim(self, data: bytes | None) -> LeanClaim:
        """`decode(Claim, data)` without pydantic on the hot path (an equal claim, or the same
        error)."""
        body, writer = self._framed(Claim, data)
        return codec.decode_claim(body, writer)

    def decode_record(self, model: type[M], data: bytes | None) -> dict[str, Any]:
        """The record as Avro typed it (the current schema's fields), not validated into `model`:
        for readers that need a field or two of many records."""
        body, writer = self._framed(model, data)
        return codec.decode_dict(codec.record_name(model), body, writer)

    def _framed(self, model: type[M], data: bytes | None) -> tuple[bytes, Any]:
        """The Avro body of a framed record and the parsed schema it was written with."""
        if data is None or len(data) < _HEADER.size or data[0] != MAGIC_BYTE:
            raise _framing_error(data)
        sid = _HEADER.unpack_from(data)[1]
        writer = self._writers.get((sid, model))
        if writer is None:
            writer = self._writer_for(sid, model)
        return data[_HEADER.size :], writer

    def _writer_for(self, sid: int, model: type[M]) -> Any:
        refused = self._refused.get((sid, model))
        if refused is not None:
            raise CodecError(RejectReason.UNKNOWN_SCHEMA, refused)
        name = codec.record_name(model)
        current = codec.expanded_schema(name)
        with self._lock:
            parsed = self._parsed.get(sid)
            if parsed is None:
                writer = self.registry.schema_for_id(sid)
                if canonical_json(writer) == canonical_json(current):
                    # The reader object itself: fastavro then skips resolution entirely.
                    parsed = codec.parsed_schema(name)
                else:
                    try:
                        parsed = fastavro.parse_schema(writer)
                    except Exception as exc:  # fastavro raises several unrelated types
                        raise CodecError(
                            RejectReason.UNKNOWN_SCHEMA,
                            f"schema id {sid} is not a valid Avro schema: {exc}",
                        ) from exc
                self._parsed[sid] = parsed
            expected = _full_name(current)
            if _full_name(parsed) != expected and expected not in _aliases(parsed):
                # Remembered: a topic full of another type must not re-query the registry.
                refused = (
                    f"schema id {sid} is {_full_name(parsed) or 'not a named type'}, "
                    f"which does not resolve to {expected}"
                )
                self._refused[(sid, model)] = refused
                raise CodecError(RejectReason.UNKNOWN_SCHEMA, refused)
            self._writers[(sid, model)] = parsed
        return parsed


def _framing_error(data: bytes | None) -> CodecError:
    """Why `data` is not a Confluent-framed record, worded for the dead-letter topic."""
    if data is None:
        detail = "no value (a tombstone or null record); expected Confluent-framed Avro"
    elif not data:
        detail = "empty value; expected Confluent-framed Avro"
    elif data[0] != MAGIC_BYTE:
        detail = (
            f"first byte is 0x{data[0]:02x}, not the Confluent magic byte 0x00: "
            "not framed with a registry schema id (plain Avro or JSON?)"
        )
    else:
        detail = (
            f"{len(data)} bytes is shorter than the 5-byte Confluent header "
            "(magic byte 0x00 + 4-byte schema id)"
        )
    return CodecError(RejectReason.MALFORMED, detail)


def _aliases(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    namespace = schema.get("namespace") or _full_name(schema).rpartition(".")[0]
    aliases = schema.get("aliases") or []
    return [a if "." in a or not namespace else f"{namespace}.{a}" for a in aliases]


def registry_for(settings: Settings) -> SchemaRegistry:
    """The registry the settings name, with the basic-auth password from its secret setting."""
    password = settings.schema_registry_password
    auth = None
    if settings.schema_registry_username is not None:
        secret = password.get_secret_value() if password is not None else ""
        auth = (settings.schema_registry_username, secret)
    return registry_from_url(settings.schema_registry, auth)


def registry_from_url(url: str | None, auth: tuple[str, str] | None = None) -> SchemaRegistry:
    """`None`/`folder:` -> the checkout's schemas/; `folder:/path`; `http(s)://[user:pass@]host`
    (or the credentials as `auth`)."""
    if url is None or url in ("", "folder:"):
        return FolderRegistry()
    if url.startswith("folder:"):
        return FolderRegistry(Path(url.removeprefix("folder:")))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RegistryError(
            f"unsupported schema registry URL {parts.scheme}://{parts.hostname or ''}...: "
            "use folder:[PATH] or http(s)://[user:password@]host[:port][/prefix]"
        )
    netloc = parts.netloc
    if parts.username is not None:
        auth = auth or (unquote(parts.username), unquote(parts.password or ""))
        netloc = netloc.rpartition("@")[2]
    return HttpRegistry(urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), auth)
