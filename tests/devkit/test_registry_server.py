"""The dev kit's registry server answers Confluent's Schema Registry API: status codes, bodies,
`error_code`s, compatibility levels, and registrations that survive a restart."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from streams.devkit.registry_server import RegistryServer, serve_registry
from streams.devkit.registry_store import COMPATIBILITY_LEVELS, check_compatibility
from streams.wire.codec import expanded_schema, schema_dir
from streams.wire.registry import CONTENT_TYPE, FolderRegistry, RegistryError, schema_id

CURRENT = expanded_schema("Claim")
V1 = json.loads((schema_dir() / "history" / "claimstream.Claim.v1.avsc").read_text())


def with_field(schema: dict[str, Any], field: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "fields": [*schema["fields"], field]}


# A new field without a default: new readers cannot read old data (Confluent's BACKWARD breaks).
REQUIRED_FIELD = with_field(CURRENT, {"name": "tenant", "type": "string"})
OPTIONAL_FIELD = with_field(CURRENT, {"name": "tenant", "type": "string", "default": ""})


@contextmanager
def running(store: Path | None = None) -> Iterator[RegistryServer]:
    server, thread = serve_registry("127.0.0.1", 0, FolderRegistry(), store)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def call(server: RegistryServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON body) of one request, errors included."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        server.url + path, data=data, method=method, headers={"Content-Type": CONTENT_TYPE}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status, content_type, payload = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, content_type, payload = exc.code, exc.headers, exc.read()
    assert content_type["Content-Type"] == CONTENT_TYPE
    return status, json.loads(payload)


def schema_body(schema: dict[str, Any]) -> dict[str, str]:
    return {"schema": json.dumps(schema)}


def error_code(answer: tuple[int, Any]) -> tuple[int, int]:
    status, body = answer
    assert isinstance(body.get("message"), str), body
    assert body["message"], body
    return status, body["error_code"]


def test_the_endpoints_answer_as_confluent_documents_them(tmp_path: Path) -> None:
    subject = "claims.tools-value"
    with running(tmp_path / "registry.json") as server:
        assert call(server, "GET", "/schemas/types") == (200, ["AVRO"])
        assert call(server, "GET", "/mode") == (200, {"mode": "READWRITE"})
        assert call(server, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
        assert error_code(call(server, "GET", f"/config/{subject}")) == (404, 40408)
        assert call(server, "GET", f"/config/{subject}?defaultToGlobal=true") == (
            200,
            {"compatibilityLevel": "BACKWARD"},
        )
        # Nothing registered yet: lookup finds no subject, anything is compatible with "latest".
        assert error_code(call(server, "POST", f"/subjects/{subject}", schema_body(V1))) == (
            404,
            40401,
        )
        latest = f"/compatibility/subjects/{subject}/versions/latest"
        assert call(server, "POST", latest, schema_body(V1)) == (200, {"is_compatible": True})

        v1_id, current_id = schema_id(V1), schema_id(CURRENT)
        assert call(server, "POST", f"/subjects/{subject}/versions", schema_body(V1)) == (
            200,
            {"id": v1_id},
        )
        assert error_code(call(server, "POST", f"/subjects/{subject}", schema_body(CURRENT))) == (
            404,
            40403,
        )
        assert call(server, "POST", latest, schema_body(CURRENT)) == (200, {"is_compatible": True})
        assert call(server, "POST", f"/subjects/{subject}/versions", schema_body(CURRENT)) == (
            200,
            {"id": current_id},
        )
        assert call(server, "GET", f"/subjects/{subject}/versions") == (200, [1, 2])
        assert call(server, "POST", f"/subjects/{subject}", schema_body(V1)) == (
            200,
            {"subject": subject, "version": 1, "id": v1_id, "schema": json_text(V1)},
        )
        status, second = call(server, "GET", f"/subjects/{subject}/versions/2")
        assert status == 200
        assert (second["subject"], second["version"], second["id"]) == (subject, 2, current_id)
        assert json.loads(second["schema"]) == CURRENT
        assert call(server, "GET", f"/subjects/{subject}/versions/latest") == (200, second)
        assert call(server, "GET", f"/subjects/{subject}/versions/-1") == (200, second)
        assert call(server, "GET", f"/subjects/{subject}/versions/latest/schema") == (
            200,
            CURRENT,
        )
        assert call(server, "GET", f"/schemas/ids/{current_id}") == (
            200,
            {"schema": json_text(CURRENT)},
        )
        assert call(server, "GET", f"/schemas/ids/{current_id}/schema") == (200, CURRENT)
        assert call(server, "GET", f"/schemas/ids/{v1_id}/versions") == (
            200,
            [{"subject": subject, "version": 1}],
        )
        assert call(server, "GET", f"/schemas/ids/{v1_id}/subjects") == (200, [subject])
        assert call(server, "GET", "/subjects") == (200, [subject])

        # Errors, with Confluent's error codes.
        assert error_code(call(server, "GET", f"/subjects/{subject}/versions/3")) == (404, 40402)
        for bad_version in ("0", "abc", "2147483648"):
            path = f"/subjects/{subject}/versions/{bad_version}"
            assert error_code(call(server, "GET", path)) == (422, 42202)
        assert error_code(call(server, "GET", "/subjects/nobody-value/versions")) == (404, 40401)
        assert error_code(call(server, "GET", "/subjects/nobody-value/versions/1")) == (404, 40401)
        assert error_code(call(server, "GET", "/schemas/ids/12345")) == (404, 40403)
        assert error_code(call(server, "GET", "/schemas/ids/12345/schema")) == (404, 40403)
        assert error_code(call(server, "GET", "/no/such/route")) == (404, 404)
        assert error_code(call(server, "DELETE", f"/subjects/{subject}")) == (405, 405)
        assert call(server, "GET", f"/subjects/{subject}/versions") == (200, [1, 2])
        invalid = {"type": "record", "name": "x", "fields": [{"name": "a", "type": "no.Such"}]}
        assert error_code(
            call(server, "POST", f"/subjects/{subject}/versions", schema_body(invalid))
        ) == (422, 42201)
        assert error_code(
            call(server, "POST", f"/subjects/{subject}/versions", {"schema": "{not json"})
        ) == (422, 42201)
        protobuf = {"schema": "syntax = 'proto3';", "schemaType": "PROTOBUF"}
        assert error_code(call(server, "POST", f"/subjects/{subject}/versions", protobuf)) == (
            422,
            42201,
        )
        assert error_code(call(server, "PUT", "/config", {"compatibility": "SOMETIMES"})) == (
            422,
            42203,
        )


def json_text(schema: dict[str, Any]) -> str:
    """The schema string the server answers with (canonical JSON)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_a_schema_that_breaks_the_subjects_compatibility_is_refused_with_409() -> None:
    subject = "claims.users-value"
    with running() as server:
        assert call(server, "POST", f"/subjects/{subject}/versions", schema_body(CURRENT))[0] == 200
        latest = f"/compatibility/subjects/{subject}/versions/latest"
        assert call(server, "POST", latest, schema_body(REQUIRED_FIELD)) == (
            200,
            {"is_compatible": False},
        )
        status, verbose = call(
            server, "POST", latest + "?verbose=true", schema_body(REQUIRED_FIELD)
        )
        assert status == 200
        assert verbose["is_compatible"] is False
        assert any("tenant" in message for message in verbose["messages"]), verbose
        status, refused = call(
            server, "POST", f"/subjects/{subject}/versions", schema_body(REQUIRED_FIELD)
        )
        assert (status, refused["error_code"]) == (409, 409)
        assert "incompatible" in refused["message"]
        assert "tenant" in refused["message"]
        assert call(server, "GET", f"/subjects/{subject}/versions") == (200, [1])
        # A default makes the same field compatible; a subject level of NONE allows anything.
        optional = call(
            server, "POST", f"/subjects/{subject}/versions", schema_body(OPTIONAL_FIELD)
        )
        assert optional == (200, {"id": schema_id(OPTIONAL_FIELD)})
        assert call(server, "PUT", f"/config/{subject}", {"compatibility": "none"}) == (
            200,
            {"compatibility": "NONE"},
        )
        assert call(server, "GET", f"/config/{subject}") == (200, {"compatibilityLevel": "NONE"})
        assert call(server, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
        assert call(
            server, "POST", f"/subjects/{subject}/versions", schema_body(REQUIRED_FIELD)
        ) == (
            200,
            {"id": schema_id(REQUIRED_FIELD)},
        )
        assert call(server, "GET", f"/subjects/{subject}/versions") == (200, [1, 2, 3])


def test_registrations_and_levels_survive_a_restart(tmp_path: Path) -> None:
    store = tmp_path / "registry.json"
    probe = {
        "type": "record",
        "name": "claimstream.Probe",
        "fields": [{"name": "x", "type": "long"}],
    }
    with running(store) as server:
        assert call(server, "POST", "/subjects/probe-value/versions", schema_body(probe)) == (
            200,
            {"id": schema_id(probe)},
        )
        call(server, "POST", "/subjects/claims-value/versions", schema_body(CURRENT))
        assert call(server, "PUT", "/config", {"compatibility": "FULL"})[0] == 200
        assert call(server, "PUT", "/config/probe-value", {"compatibility": "NONE"})[0] == 200
        assert call(server, "PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
        before = {
            path: call(server, "GET", path)
            for path in (
                "/subjects",
                "/subjects/probe-value/versions/latest",
                "/subjects/claims-value/versions/1",
                f"/schemas/ids/{schema_id(probe)}",
                "/config",
                "/config/probe-value",
                "/mode",
            )
        }
    with running(store) as restarted:
        assert {path: call(restarted, "GET", path) for path in before} == before
        assert before[f"/schemas/ids/{schema_id(probe)}"][0] == 200
        assert before["/mode"] == (200, {"mode": "READONLY"})


def test_an_unreadable_store_is_a_clear_startup_error(tmp_path: Path) -> None:
    store = tmp_path / "registry.json"
    store.write_text(
        '{"subjects": {"x-value": [12345]}, "schemas": [], "subject_compatibility": {}}'
    )
    with pytest.raises(RegistryError, match="unknown schema ids"):
        serve_registry("127.0.0.1", 0, FolderRegistry(), store)
    store.write_text("not json")
    with pytest.raises(RegistryError, match="unreadable"):
        serve_registry("127.0.0.1", 0, FolderRegistry(), store)


def record(name: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


# x: string -> (x dropped) -> x: int with a default. Each step keeps BACKWARD with the one before,
# but the last cannot read the first's data: only the transitive level sees it.
HISTORY = [
    record("T", {"name": "x", "type": "string"}),
    record("T"),
    record("T", {"name": "x", "type": "int", "default": 0}),
]


@pytest.mark.parametrize(
    ("level", "new", "existing", "compatible"),
    [
        ("BACKWARD", REQUIRED_FIELD, [CURRENT], False),
        ("FORWARD", REQUIRED_FIELD, [CURRENT], True),
        ("FULL", REQUIRED_FIELD, [CURRENT], False),
        ("NONE", REQUIRED_FIELD, [CURRENT], True),
        ("FULL", OPTIONAL_FIELD, [CURRENT], True),
        # Dropping a field without default: new readers are fine, old readers miss it.
        ("BACKWARD", HISTORY[1], HISTORY[:1], True),
        ("FORWARD", HISTORY[1], HISTORY[:1], False),
        ("BACKWARD", HISTORY[2], HISTORY[:2], True),
        ("BACKWARD_TRANSITIVE", HISTORY[2], HISTORY[:2], False),
        ("FORWARD_TRANSITIVE", HISTORY[2], HISTORY[1:2], True),
        ("FULL_TRANSITIVE", HISTORY[2], HISTORY[:2], False),
        ("BACKWARD", V1, [], True),
    ],
)
def test_compatibility_levels_follow_confluents_rules(
    level: str, new: dict[str, Any], existing: list[dict[str, Any]], compatible: bool
) -> None:
    assert level in COMPATIBILITY_LEVELS
    problems = check_compatibility(level, new, existing)
    assert (problems == []) is compatible, problems


def test_a_read_only_registry_refuses_new_versions_and_still_answers_lookups() -> None:
    subject = "claims.tools-value"
    with running() as server:
        call(server, "POST", f"/subjects/{subject}/versions", schema_body(CURRENT))
        assert error_code(call(server, "PUT", "/mode", {"mode": "SOMETIMES"})) == (422, 42204)
        assert call(server, "PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
        assert call(server, "GET", "/mode") == (200, {"mode": "READONLY"})
        refused = call(server, "POST", f"/subjects/{subject}/versions", schema_body(OPTIONAL_FIELD))
        assert error_code(refused) == (422, 42205)
        assert call(server, "POST", f"/subjects/{subject}/versions", schema_body(CURRENT)) == (
            200,
            {"id": schema_id(CURRENT)},
        )
        assert call(server, "POST", f"/subjects/{subject}", schema_body(CURRENT))[0] == 200
        assert call(server, "GET", f"/subjects/{subject}/versions") == (200, [1])
