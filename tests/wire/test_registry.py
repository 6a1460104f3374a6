"""Confluent framing and schema registries: every record survives the wire, old writers still
read, and no byte string makes the decoder raise anything but a CodecError."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from streams.core.records.contracts import (
    RECORD_MODELS,
    Claim,
    Decision,
    EpochChange,
    Evidence,
    Money,
    Rejection,
    RejectReason,
    ReobserveRequest,
    Resolution,
)
from streams.core.records.errors import CodecError
from streams.devkit.registry_server import RegistryServer, serve_registry
from streams.packaged import schema_dir
from streams.wire import registry as reg
from streams.wire.codec import encode, expanded_schema
from streams.wire.registry import (
    FolderRegistry,
    HttpRegistry,
    RegistryError,
    RegistryUnavailable,
    WireCodec,
    registry_from_url,
    schema_id,
)
from tests.support.builders import REPO

T0 = datetime(2026, 11, 29, 12, 0, 0, 250_000, tzinfo=UTC)
V1 = schema_dir() / "history" / "claimstream.Claim.v1.avsc"

CLAIM = Claim(
    claim_id="c-1",
    subject="invoice:42",
    field="account.balance",
    status="present",
    value=Money(amount_minor=1250, currency="USD"),
    source="billing-api",
    replica="eu-1",
    observed_at=T0,
    valid_from=T0,
    epoch=3,
    lineage="ledger",
    scope="server",
    confidence=0.9,
    trace_id="t-1",
    producer="billing-adapter/1.4.2",
    attributes={"region": "eu"},
)
EVIDENCE = Evidence(
    claim_id="c-1",
    source="billing-api",
    authority="system_of_record",
    status="present",
    value="paid",
    observed_at=T0,
    epoch=3,
    role="winner",
)
SAMPLES: dict[str, BaseModel] = {
    "Claim": CLAIM,
    "Evidence": EVIDENCE,
    "Money": Money(amount_minor=-5, currency="EUR"),
    "Decision": Decision(
        decision_id="dec_1",
        subject="invoice:42",
        field="order.payment_status",
        outcome="conflict",
        conflict_kind="value",
        status="present",
        value="paid",
        action="block",
        policy_version="2026-11-29.1",
        reason="authority_conflict",
        evidence=(
            EVIDENCE,
            Evidence.model_validate(
                {**EVIDENCE.model_dump(), "claim_id": "c-2", "role": "contested"}
            ),
        ),
        decided_at=T0,
        supersedes="dec_0",
    ),
    "Rejection": Rejection(
        claim_id="c-9",
        reason="unit_mismatch",
        detail="ms expected",
        raw=b"\x00\xff",
        topic="claims",
        partition=2,
        offset=77,
        rejected_at=T0,
    ),
    "EpochChange": EpochChange(
        subject="svc",
        field="retry_timeout",
        from_epoch=1,
        to_epoch=2,
        previous_value=5.0,
        new_value=7.5,
        claim_ids=("a", "b"),
        decision_id="dec_2",
        detected_at=T0,
    ),
    "ReobserveRequest": ReobserveRequest(
        request_id="r-1",
        subject="svc",
        field="retry_timeout",
        epoch=2,
        sources=("config-api",),
        reason="cross_epoch",
        decision_id="dec_2",
        requested_at=T0,
    ),
    "Resolution": Resolution(
        resolution_id="res-1",
        subject="invoice:42",
        field="order.payment_status",
        value=True,
        decided_by="ops@example.test",
        note="checked the ledger",
        decided_at=T0,
        resolves_decision_id="dec_1",
    ),
}


def test_samples_cover_every_record_type() -> None:
    assert set(SAMPLES) == set(RECORD_MODELS)


@pytest.fixture(scope="module")
def folder() -> FolderRegistry:
    return FolderRegistry()


@pytest.fixture(scope="module")
def server(folder: FolderRegistry) -> Iterator[RegistryServer]:
    server, thread = serve_registry("127.0.0.1", 0, folder)
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    assert not thread.is_alive()


def _v1_claim_body() -> bytes:
    v1 = fastavro.parse_schema(json.loads(V1.read_text()))
    old = {
        "claim_id": "c-old",
        "subject": "invoice:42",
        "field": "order.payment_status",
        "status": "present",
        "value": "paid",
        "unit": None,
        "source": "billing-api",
        "replica": "eu-1",
        "source_class": "user",
        "observed_at": T0,
        "valid_from": None,
        "valid_to": None,
        "epoch": 3,
        "lineage": None,
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, v1, old)
    return buffer.getvalue()


def _frame(sid: int, body: bytes) -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + body


# --- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_record_round_trips_through_the_folder_registry(
    folder: FolderRegistry, name: str
) -> None:
    wire = WireCodec(folder)
    record = SAMPLES[name]
    data = wire.encode("claims", record)
    assert data[0] == 0
    assert int.from_bytes(data[1:5], "big") == schema_id(expanded_schema(name))
    assert data[5:] == encode(record)
    assert wire.decode(type(record), data) == record
    assert wire.decode(type(record), data) == record  # the cached path


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_record_round_trips_through_a_registry_server(
    server: RegistryServer, folder: FolderRegistry, name: str
) -> None:
    record = SAMPLES[name]
    producer = WireCodec(HttpRegistry(server.url))
    consumer = WireCodec(HttpRegistry(server.url))  # a cold cache: fetches the id over HTTP
    data = producer.encode(f"topic-{name}", record)
    assert data == WireCodec(folder).encode("any", record), "same ids with and without a server"
    assert consumer.decode(type(record), data) == record


def test_server_lists_subjects_and_their_latest_version(server: RegistryServer) -> None:
    http = HttpRegistry(server.url)
    sid = http.register("listed-value", expanded_schema("Claim"))

    def get(path: str) -> Any:
        with urllib.request.urlopen(server.url + path, timeout=5) as response:
            assert response.headers["Content-Type"] == reg.CONTENT_TYPE
            return json.loads(response.read())

    assert "listed-value" in get("/subjects")
    latest = get("/subjects/listed-value/versions/latest")
    assert (latest["subject"], latest["version"], latest["id"]) == ("listed-value", 1, sid)
    assert json.loads(latest["schema"]) == expanded_schema("Claim")
    assert http.register("listed-value", expanded_schema("Claim")) == sid
    assert get("/subjects/listed-value/versions") == [1], "re-registering adds no version"


def test_server_accepts_a_schema_that_is_not_in_the_folder(
    server: RegistryServer, folder: FolderRegistry
) -> None:
    schema = {
        "type": "record",
        "name": "claimstream.Probe",
        "fields": [{"name": "x", "type": "long"}],
    }
    http = HttpRegistry(server.url)
    sid = http.register("probe-value", schema)
    assert sid == schema_id(schema)
    assert HttpRegistry(server.url).schema_for_id(sid) == schema
    with pytest.raises(CodecError) as caught:
        folder.register("probe-value", schema)
    assert caught.value.reason is RejectReason.UNKNOWN_SCHEMA


def test_a_worker_resolves_schemas_registered_by_ci_on_a_read_only_registry(
    folder: FolderRegistry,
) -> None:
    """Production registries often take no writes from applications: the client looks a schema
    up before it would register it, and only a schema nobody registered is refused."""
    server, thread = serve_registry("127.0.0.1", 0, folder)
    try:
        ci = HttpRegistry(server.url)
        sid = ci.register("claims.decisions-value", expanded_schema("Decision"))
        request = urllib.request.Request(
            server.url + "/mode",
            data=json.dumps({"mode": "READONLY"}).encode(),
            method="PUT",
            headers={"Content-Type": reg.CONTENT_TYPE},
        )
        urllib.request.urlopen(request, timeout=5).close()
        worker = WireCodec(HttpRegistry(server.url))
        decision = SAMPLES["Decision"]
        assert worker.encode("claims.decisions", decision)[1:5] == sid.to_bytes(4, "big")
        with pytest.raises(RegistryError) as caught:
            worker.encode("claims.reobserve", SAMPLES["ReobserveRequest"])
        assert caught.value.status == 422
        assert "read-only" in str(caught.value)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_server_rejects_an_invalid_schema(server: RegistryServer) -> None:
    with pytest.raises(RegistryError) as caught:
        HttpRegistry(server.url).register(
            "bad-value",
            {"type": "record", "name": "x", "fields": [{"name": "a", "type": "no.such.Type"}]},
        )
    assert caught.value.status == 422
    assert not isinstance(caught.value, CodecError)


def test_a_claim_written_with_version_1_reads_with_the_current_model(
    folder: FolderRegistry,
) -> None:
    v1_id = folder.files()["history/claimstream.Claim.v1.avsc"]
    assert folder.register("claims-value", json.loads(V1.read_text())) == v1_id
    claim = WireCodec(folder).decode(Claim, _frame(v1_id, _v1_claim_body()))
    assert (claim.claim_id, claim.replica, claim.epoch, claim.source_class) == (
        "c-old",
        "eu-1",
        3,
        "user",
    )
    assert (claim.scope, claim.confidence, claim.attributes) == (None, None, {})


def test_a_version_1_claim_reads_through_a_registry_server(
    server: RegistryServer, folder: FolderRegistry
) -> None:
    v1_id = folder.files()["history/claimstream.Claim.v1.avsc"]
    claim = WireCodec(HttpRegistry(server.url)).decode(Claim, _frame(v1_id, _v1_claim_body()))
    assert claim.claim_id == "c-old"


# --- bad input -----------------------------------------------------------------------------------

GOOD = WireCodec(FolderRegistry()).encode("claims", CLAIM)
UNKNOWN_ID = 0x7FFF_FFFE


def _random_tail() -> bytes:
    return random.Random(20261129).randbytes(64)


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        pytest.param(None, RejectReason.MALFORMED, "tombstone", id="none"),
        pytest.param(b"", RejectReason.MALFORMED, "empty", id="empty"),
        pytest.param(b"\x01" + GOOD[1:], RejectReason.MALFORMED, "magic byte", id="magic"),
        pytest.param(b'{"claim_id": 1}', RejectReason.MALFORMED, "0x7b", id="json"),
        pytest.param(b"\x00\x00\x00", RejectReason.MALFORMED, "shorter", id="3-bytes"),
        pytest.param(
            _frame(UNKNOWN_ID, GOOD[5:]), RejectReason.UNKNOWN_SCHEMA, str(UNKNOWN_ID), id="id"
        ),
        pytest.param(GOOD[:5], RejectReason.MALFORMED, "not valid Avro", id="header-only"),
        pytest.param(GOOD[:-7], RejectReason.MALFORMED, "not valid Avro", id="truncated"),
        pytest.param(GOOD[:5] + _random_tail(), RejectReason.MALFORMED, "Claim", id="random"),
    ],
)
def test_bad_input_is_a_codec_error_with_its_reason(
    folder: FolderRegistry, data: bytes | None, reason: RejectReason, words: str
) -> None:
    with pytest.raises(CodecError) as caught:
        WireCodec(folder).decode(Claim, data)
    assert caught.value.reason is reason
    assert words in caught.value.detail


def test_an_id_of_another_record_type_is_refused(folder: FolderRegistry) -> None:
    wire = WireCodec(folder)
    decision = wire.encode("decisions", SAMPLES["Decision"])
    for _ in range(2):  # the second time from the cache
        with pytest.raises(CodecError) as caught:
            wire.decode(Claim, decision)
        assert caught.value.reason is RejectReason.UNKNOWN_SCHEMA
        assert "claimstream.Decision" in caught.value.detail


def test_an_unknown_id_over_http_is_unknown_schema(server: RegistryServer) -> None:
    with pytest.raises(CodecError) as caught:
        WireCodec(HttpRegistry(server.url)).decode(Claim, _frame(UNKNOWN_ID, GOOD[5:]))
    assert caught.value.reason is RejectReason.UNKNOWN_SCHEMA


def test_registry_caches_survive_the_registry_going_away(folder: FolderRegistry) -> None:
    server, thread = serve_registry("127.0.0.1", 0, folder)
    try:
        http = HttpRegistry(server.url, timeout=2)
        wire = WireCodec(http)
        data = wire.encode("claims", CLAIM)
        assert wire.decode(Claim, data) == CLAIM
        with pytest.raises(CodecError):
            http.schema_for_id(UNKNOWN_ID)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert wire.decode(Claim, data) == CLAIM
    assert wire.encode("claims", CLAIM) == data
    with pytest.raises(CodecError):  # the miss is remembered, not retried against a dead server
        http.schema_for_id(UNKNOWN_ID)
    with pytest.raises(RegistryUnavailable):  # an id never seen needs the registry
        http.schema_for_id(12345)


# --- ids -----------------------------------------------------------------------------------------


def test_ids_are_stable_across_instances_and_processes(folder: FolderRegistry) -> None:
    ids = folder.files()
    assert FolderRegistry().files() == ids
    assert FolderRegistry(schema_dir()).files() == ids
    assert len(set(ids.values())) == len(ids), "every schema file has its own id"
    assert all(0 <= sid < 2**31 for sid in ids.values())
    script = (
        "import json; from streams.wire.registry import FolderRegistry as F; "
        "print(json.dumps(F().files()))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=REPO,
    )
    assert json.loads(other.stdout) == ids


def test_an_id_collision_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reg, "schema_id", lambda schema: 7)
    with pytest.raises(CodecError, match="collision"):
        FolderRegistry()


def test_folder_registry_refuses_schemas_it_does_not_hold(folder: FolderRegistry) -> None:
    changed = dict(expanded_schema("Claim"), doc="edited")
    with pytest.raises(CodecError) as caught:
        folder.register("claims-value", changed)
    assert caught.value.reason is RejectReason.UNKNOWN_SCHEMA
    with pytest.raises(CodecError) as caught:
        folder.schema_for_id(UNKNOWN_ID)
    assert caught.value.reason is RejectReason.UNKNOWN_SCHEMA


# --- configuration -------------------------------------------------------------------------------


def test_registry_from_url(tmp_path: Path) -> None:
    assert isinstance(registry_from_url(None), FolderRegistry)
    assert isinstance(registry_from_url("folder:"), FolderRegistry)
    folder = registry_from_url(f"folder:{schema_dir()}")
    assert isinstance(folder, FolderRegistry)
    assert folder.files() == FolderRegistry().files()
    with pytest.raises(CodecError):
        registry_from_url(f"folder:{tmp_path}")
    http = registry_from_url("https://svc:p%40ss@registry.example.test:8081/apis/ccompat/v7/")
    assert isinstance(http, HttpRegistry)
    assert http.url == "https://registry.example.test:8081/apis/ccompat/v7"
    assert "p@ss" not in repr(http)
    assert http._headers["Authorization"] == "Basic c3ZjOnBAc3M="  # base64("svc:p@ss")
    with pytest.raises(RegistryError):
        registry_from_url("kafka://broker:9092")


# --- fuzz ----------------------------------------------------------------------------------------

_FUZZ = WireCodec(FolderRegistry())
_V1_FRAMED = _frame(FolderRegistry().files()["history/claimstream.Claim.v1.avsc"], _v1_claim_body())


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    buffer = bytearray(data)
    for position, value in edits:
        buffer[position % len(buffer)] = value
    return bytes(buffer[: max(cut, 0) or None])


byte_soup = st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=200).map(lambda tail: GOOD[:5] + tail),
    st.binary(max_size=200).map(lambda tail: _V1_FRAMED[:5] + tail),
    st.builds(
        _mutate,
        st.sampled_from([GOOD, _V1_FRAMED]),
        st.lists(st.tuples(st.integers(5, 500), st.integers(0, 255)), max_size=4),
        st.integers(0, 200),
    ),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=byte_soup)
def test_no_byte_string_raises_anything_but_a_codec_error(data: bytes) -> None:
    outcome: Claim | RejectReason
    try:
        outcome = _FUZZ.decode(Claim, data)
    except CodecError as exc:  # anything else escapes and fails the test
        outcome = exc.reason
    assert isinstance(outcome, Claim) or outcome in (
        RejectReason.MALFORMED,
        RejectReason.UNKNOWN_SCHEMA,
    )
