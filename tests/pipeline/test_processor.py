"""The processor without a broker: authenticity, dead letters and re-keying of single records."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from streams.core.admission.authenticity import sign
from streams.core.keys.state import KeyState, state_key
from streams.core.records.contracts import Claim, Resolution
from streams.core.records.policy import Policy, load_policy
from streams.ops.metrics import Metrics
from streams.pipeline import Handled, Incoming, Processor
from streams.settings import Settings
from streams.wire.registry import FolderRegistry, WireCodec
from tests.stream.support import crc32_partition
from tests.support.builders import REPO
from tests.support.pipeline import CODEC, NOW, SECRET, owner, reason, run
from tests.support.strategies import DATETIMES, INT64


def secured_policy(tmp_path: Path) -> Policy:
    data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    data["sources"]["billing-api"]["principal"] = "alice"
    data["signing"] = {
        "required": True,
        "max_age": "5m",
        "keys": [
            {
                "key_id": "billing-1",
                "algorithm": "hmac-sha256",
                "secret_env": "BILLING_KEY",
                "sources": ["billing-api"],
            },
            {
                "key_id": "crm-1",
                "algorithm": "hmac-sha256",
                "secret_env": "CRM_KEY",
                "sources": ["crm"],
            },
        ],
    }
    path = tmp_path / "secured.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_policy(path)


@pytest.fixture
def processor(tmp_path: Path) -> Processor:
    policy = secured_policy(tmp_path)
    settings = Settings(principal_topic_prefix="claims.from.")
    env = {"BILLING_KEY": SECRET, "CRM_KEY": SECRET[::-1]}
    return Processor(settings, policy, CODEC, Metrics(policy), env=env, wall_clock=NOW.timestamp)


def claim(source: str = "billing-api") -> Claim:
    return Claim(
        claim_id=f"c-{source}",
        subject="inv:9",
        field="order.payment_status",
        status="present",
        value="paid",
        source=source,
        observed_at=NOW,
    )


def record(topic: str, value: bytes, headers: list[tuple[str, bytes]]) -> Incoming:
    c = claim()
    key = state_key(c.subject, c.field).encode()
    return Incoming(topic, owner(key), 7, key, value, tuple(headers), NOW.timestamp())


def signed(
    value: bytes, key_id: str = "billing-1", secret: str = SECRET, at: datetime = NOW
) -> list[tuple[str, bytes]]:
    return sign(value, key_id, "hmac-sha256", secret.encode(), at)


def test_a_signed_claim_on_its_principal_topic_is_decided(processor: Processor) -> None:
    value = CODEC.encode("claims.from.alice", claim())
    handled = run(processor, record("claims.from.alice", value, signed(value)))
    assert reason(handled) is None
    assert [a.decision.outcome for a in handled.emitted] == ["resolved"]


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        ("unsigned", "unsigned claim"),
        ("flipped bit", "bad signature"),
        ("another source's key", "spoofed source"),
        ("replayed", "replayed"),
        ("wrong principal topic", "spoofed source"),
        ("shared topic", "spoofed source"),
    ],
)
def test_unproven_sources_are_dead_lettered_as_unauthenticated(
    processor: Processor, case: str, detail: str
) -> None:
    topic = "claims.from.alice"
    value = CODEC.encode(topic, claim())
    headers = signed(value)
    if case == "unsigned":
        headers = []
    elif case == "flipped bit":
        at = value.index(b"inv:9") + 4  # still valid Avro: the subject reads inv:8
        value = value[:at] + bytes([value[at] ^ 0x01]) + value[at + 1 :]
    elif case == "another source's key":
        headers = signed(value, key_id="crm-1", secret=SECRET[::-1])
    elif case == "replayed":
        headers = signed(value, at=NOW - timedelta(hours=1))
    elif case == "wrong principal topic":
        topic = "claims.from.mallory"
    elif case == "shared topic":
        topic = "claims.tools"
    handled = run(processor, record(topic, value, headers))
    found = reason(handled)
    assert found is not None, case
    assert found.startswith("unauthenticated: ")
    assert detail in found
    assert handled.emitted == []


def test_a_missing_secret_is_a_startup_error(tmp_path: Path) -> None:
    from streams.core.records.errors import ClaimstreamError

    policy = secured_policy(tmp_path)
    with pytest.raises(ClaimstreamError, match="BILLING_KEY"):
        Processor(Settings(), policy, CODEC, Metrics(policy), env={})


plain_processor_policy = load_policy(REPO / "examples" / "policy.yaml")
PLAIN = Processor(
    Settings(),
    plain_processor_policy,
    CODEC,
    Metrics(plain_processor_policy),
    wall_clock=NOW.timestamp,
)
FIELDS = [*sorted(plain_processor_policy.fields), "no.such.field"]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50),
    st.sampled_from(["paid", "unpaid", "overdue", " PAID ", ""]),
)
fuzzed_claims = st.builds(
    Claim,
    claim_id=st.text(max_size=10),
    subject=st.text(max_size=10),
    field=st.sampled_from(FIELDS),
    status=st.sampled_from(["present", "not_found", "forbidden", "unavailable", "error"]),
    value=VALUES,
    unit=st.none() | st.sampled_from(["ms", "s", "kg", "USD", ""]),
    source=st.sampled_from(["billing-api", "crm", "chat", "nobody", ""]),
    source_class=st.sampled_from(["observation", "user", "inference"]),
    observed_at=DATETIMES,
    epoch=st.none() | st.integers(min_value=-5, max_value=5),
    confidence=st.none() | st.floats(allow_nan=True),
)


def _exactly_one_outcome(handled: Handled) -> None:
    dead = [o for o in handled.outputs if o.topic == "claims.dead-letters"]
    if dead:
        assert len(handled.outputs) == 1
        assert dict(dead[0].headers)["claimstream.error.reason"]
    else:
        assert handled.state is not None or any(
            o.topic == "claimstream-rekeyed" for o in handled.outputs
        )


@settings(max_examples=400, deadline=None)
@given(claim=fuzzed_claims, rekey=st.booleans())
def test_fuzzed_claims_are_decided_or_dead_lettered_never_raised(claim: Claim, rekey: bool) -> None:
    value = CODEC.encode("claims.tools", claim)
    key = b"other" if rekey else state_key(claim.subject, claim.field).encode()
    handled = PLAIN.process(
        Incoming("claims.tools", owner(key), 0, key, value, (), NOW.timestamp()),
        {}.get,
    )
    _exactly_one_outcome(handled)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=300), cut=st.integers(min_value=0, max_value=300))
def test_fuzzed_bytes_are_dead_lettered(data: bytes, cut: int) -> None:
    valid = CODEC.encode("claims.tools", claim())
    for value in (data, valid[:cut] + data[: len(valid) - cut]):
        handled = PLAIN.process(
            Incoming("claims.tools", 0, 0, b"k", value, (), NOW.timestamp()), {}.get
        )
        _exactly_one_outcome(handled)


def test_a_late_claim_that_loses_counts_as_a_loss_even_when_the_decision_stands() -> None:
    policy = load_policy(REPO / "examples" / "policy.yaml")
    metrics = Metrics(policy)
    processor = Processor(Settings(), policy, CODEC, metrics, wall_clock=NOW.timestamp)
    states: dict[bytes, KeyState] = {}
    truth = claim("billing-api")
    lagging = truth.model_copy(
        update={"claim_id": "c-replica", "source": "reporting-replica", "value": "unpaid"}
    )
    decisions = []
    for n, arriving in enumerate((truth, lagging)):
        key = state_key(arriving.subject, arriving.field).encode()
        value = CODEC.encode("claims.tools", arriving)
        incoming = Incoming("claims.tools", owner(key), n, key, value, (), NOW.timestamp())
        handled = processor.process(incoming, states.get)
        assert handled.key is not None
        assert handled.state is not None
        states[handled.key] = handled.state
        decisions += [a.decision for a in handled.emitted]
    assert [d.value for d in decisions] == ["paid"]  # the lagging claim changed nothing...
    metrics.flush()  # as the worker does after every batch
    losses = metrics.registry.get_sample_value(
        "claimstream_claim_losses_total",
        {"field": "order.payment_status", "source": "reporting-replica"},
    )
    assert losses == 1.0  # ...but it lost, and that is the signal


def test_a_record_on_the_wrong_partition_hops_to_its_owner_before_it_is_decided() -> None:
    policy = load_policy(REPO / "examples" / "policy.yaml")
    metrics = Metrics(policy)
    processor = Processor(Settings(), policy, CODEC, metrics, wall_clock=NOW.timestamp)
    arriving = claim()
    key = state_key(arriving.subject, arriving.field).encode()
    landed = crc32_partition(key, Settings().partitions)
    assert landed != owner(key)  # the case at hand: librdkafka and Kafka disagree on this key
    value = CODEC.encode("claims.tools", arriving)
    hop = run(processor, Incoming("claims.tools", landed, 3, key, value, (), NOW.timestamp()))
    assert (hop.key, hop.state, hop.emitted) == (
        None,
        None,
        [],
    )  # nothing decided where it landed
    (forwarded,) = hop.outputs
    assert (forwarded.topic, forwarded.key, forwarded.partition) == (
        "claimstream-rekeyed",
        key,
        owner(key),
    )
    assert (
        metrics.registry.get_sample_value("claimstream_rekey_hops_total", {"cause": "partition"})
        == 1.0
    )
    assert forwarded.partition is not None
    decided = run(
        processor,
        Incoming(
            forwarded.topic,
            forwarded.partition,
            0,
            forwarded.key,
            forwarded.value,
            forwarded.headers,
            NOW.timestamp(),
        ),
    )
    assert [a.decision.value for a in decided.emitted] == ["paid"]
    assert decided.key == key


def test_a_resolution_on_the_wrong_partition_hops_as_a_resolution() -> None:
    resolution = Resolution(
        resolution_id="res-1",
        subject="inv:9",
        field="order.payment_status",
        value="paid",
        decided_by="ops@example.test",
        note="checked the ledger",
        decided_at=NOW - timedelta(minutes=1),
    )
    key = state_key(resolution.subject, resolution.field).encode()
    landed = crc32_partition(key, Settings().partitions)
    value = CODEC.encode("claims.resolutions", resolution)
    hop = run(PLAIN, Incoming("claims.resolutions", landed, 0, key, value, (), NOW.timestamp()))
    assert (hop.state, hop.emitted) == (None, [])
    (forwarded,) = hop.outputs
    assert (forwarded.topic, forwarded.key, forwarded.partition) == (
        "claimstream-rekeyed",
        key,
        owner(key),
    )
    assert dict(forwarded.headers)["claimstream.kind"] == b"resolution"


@settings(max_examples=300, deadline=None)
@given(
    subject=st.from_regex(r"[a-z0-9:-]{1,20}", fullmatch=True),
    landed=st.integers(min_value=0, max_value=Settings().partitions - 1),
    topic=st.sampled_from(["claims.tools", "claimstream-rekeyed"]),
    keyed_right=st.booleans(),
)
def test_state_is_only_ever_kept_on_the_keys_own_partition(
    subject: str, landed: int, topic: str, keyed_right: bool
) -> None:
    """Whatever partitioner or key the producer used, a key's state changes only on
    `partition_of(key)`, and a hop goes exactly there."""
    arriving = claim().model_copy(update={"subject": subject})
    key = state_key(arriving.subject, arriving.field).encode()
    value = CODEC.encode(topic, arriving)
    sent_key = key if keyed_right else b"producer-own-key"
    handled = PLAIN.process(
        Incoming(topic, landed, 0, sent_key, value, (), NOW.timestamp()), {}.get
    )
    if handled.state is not None:
        assert landed == owner(key)
        assert handled.key == key
    else:
        (forwarded,) = handled.outputs
        assert (forwarded.topic, forwarded.key, forwarded.partition) == (
            "claimstream-rekeyed",
            key,
            owner(key),
        )


def test_a_retried_record_is_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first attempt decodes slowly, counts as far as it gets, then fails to encode its
    decision; the retry succeeds. Metrics and stage clocks show one claim, one attempt's time."""
    policy = load_policy(REPO / "examples" / "policy.yaml")
    metrics = Metrics(policy)
    codec = WireCodec(FolderRegistry())
    processor = Processor(Settings(), policy, codec, metrics, wall_clock=NOW.timestamp)
    decode, framing = codec.decode_claim, codec.framing
    attempts: list[str] = []
    slow_s = 0.25

    def slow_first_decode(data: bytes | None) -> Claim:
        if not attempts:
            time.sleep(slow_s)
        return decode(data)

    def failing_first_decision(topic: str, model: type[BaseModel]) -> bytes:
        if topic == "claims.decisions":
            attempts.append(topic)
            if len(attempts) == 1:
                raise RuntimeError("injected: the broker's schema lookup failed")
        return framing(topic, model)

    monkeypatch.setattr(codec, "decode_claim", slow_first_decode)
    monkeypatch.setattr(codec, "framing", failing_first_decision)
    arriving = claim()
    key = state_key(arriving.subject, arriving.field).encode()
    value = CODEC.encode("claims.tools", arriving)
    handled = run(
        processor, Incoming("claims.tools", owner(key), 0, key, value, (), NOW.timestamp())
    )
    assert len(attempts) == 2
    assert reason(handled) is None
    assert [a.decision.outcome for a in handled.emitted] == ["resolved"]
    metrics.flush(processor.stages)  # as the worker does after every batch
    sample = metrics.registry.get_sample_value
    assert sample("claimstream_processing_retries_total") == 1.0
    labels = {"field": "order.payment_status", "source": "billing-api"}
    assert sample("claimstream_claims_accepted_total", labels) == 1.0
    decode_s = sample("claimstream_stage_seconds_total", {"stage": "decode"})
    assert decode_s is not None
    assert decode_s < slow_s  # the failed attempt's slow decode is not charged
    for stage in ("admit", "arbitrate", "encode"):
        assert (sample("claimstream_stage_seconds_total", {"stage": stage}) or 0.0) < slow_s


def test_the_disputed_bound_is_the_setting() -> None:
    policy = load_policy(REPO / "examples" / "policy.yaml")
    processor = Processor(Settings(max_disputed_per_key=7), policy, CODEC, Metrics(policy))
    assert processor.limits.max_disputed == 7
    assert Settings().max_disputed_per_key == 64
