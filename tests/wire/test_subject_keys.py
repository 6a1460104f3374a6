"""The subject keys topic against a real broker (Tansu, one for the module; each test its own
topics): a key made once is the key every reader finds, every key of a subject is destroyed by
erasure and then opens nothing, and a publisher seals a personal field's value under it."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.client import ClaimPublisher, publish_resolutions
from streams.core.records.contracts import Claim, ClaimStatus, Resolution
from streams.core.records.errors import ClaimstreamError
from streams.devkit.brokers import TansuBroker
from streams.settings import Settings, load_settings
from streams.wire.personal import DataKey, DeploymentKey, is_sealed, key_id_of, open_sealed, seal
from streams.wire.registry import FolderRegistry, WireCodec
from streams.wire.subject_keys import (
    DEPLOYMENT_KEY_HEADER,
    SubjectKeys,
    record_key,
    subject_key_topic_config,
)

pytestmark = pytest.mark.integration

DEPLOYMENT = DeploymentKey("d1", os.urandom(32))
NAME = "person.name"


@pytest.fixture(scope="module")
def broker() -> Iterator[TansuBroker]:
    with TansuBroker() as started:
        yield started


@pytest.fixture
async def settings(broker: TansuBroker) -> Settings:
    """Topics of the test's own: the keys topic compacted, on two partitions (one spelling's
    keys may sit on both), and a claims topic."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    found = load_settings(
        env={
            "CLAIMSTREAM_BROKER": f"kafka://{broker.bootstrap}",
            "CLAIMSTREAM_TOPIC_SUBJECT_KEYS": f"{prefix}.subject-keys",
            "CLAIMSTREAM_TOPIC_CLAIMS": f"{prefix}.claims",
            "CLAIMSTREAM_TOPIC_RESOLUTIONS": f"{prefix}.resolutions",
        }
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        keys = NewTopic(
            found.topics.subject_keys, 2, 1, topic_configs=subject_key_topic_config(found)
        )
        await admin.create_topics(
            [keys, NewTopic(found.topics.claims, 1, 1), NewTopic(found.topics.resolutions, 1, 1)]
        )
    finally:
        await admin.close()
    return found


async def reader(settings: Settings, deployment: DeploymentKey | None = DEPLOYMENT) -> SubjectKeys:
    """A fresh reader of the keys topic, read to its end."""
    keys = SubjectKeys(settings, deployment)
    await keys.start()
    await keys.read()
    return keys


@pytest.fixture
async def keys(settings: Settings) -> AsyncIterator[SubjectKeys]:
    started = await reader(settings)
    yield started
    await started.stop()


async def test_a_key_made_once_is_the_key_every_reader_finds(
    settings: Settings, keys: SubjectKeys
) -> None:
    made = await keys.key_for("Ann  Lee")
    assert await keys.key_for("ann lee") == made  # the spelling as aliases match it
    assert keys.keys_of("ANN LEE") == [made.key_id]
    fresh = await reader(settings)
    try:
        assert fresh.keys_of("Ann Lee") == [made.key_id]
        assert await fresh.key_for("Ann Lee") == made
        assert fresh.find(made.key_id) == made
        assert fresh.keys_of("Bob") == []
        assert fresh.find("0" * 16) is None
    finally:
        await fresh.stop()
    without = await reader(settings, deployment=None)
    try:
        with pytest.raises(ClaimstreamError, match="set the deployment_key setting"):
            without.find(made.key_id)
    finally:
        await without.stop()


async def test_every_key_of_a_subject_is_destroyed_and_then_opens_nothing(
    settings: Settings, keys: SubjectKeys
) -> None:
    first = await keys.key_for("Ann Lee")
    other = await keys.key_for("Bob")
    # A second producer that found no key at the same moment made one too.
    racing = DataKey.new()
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topics.subject_keys,
            DEPLOYMENT.wrap(racing, "ann lee"),
            key=record_key("ann lee", racing.key_id),
            headers=[(DEPLOYMENT_KEY_HEADER, DEPLOYMENT.key_id.encode())],
        )
    finally:
        await producer.stop()
    sealed = seal("Ann Lee", first, NAME)
    both = await reader(settings)
    try:
        assert sorted(both.keys_of("Ann Lee")) == sorted([first.key_id, racing.key_id])
        # Every reader seals under the same one of them: the newest.
        assert await both.key_for("Ann Lee") == racing
        destroyed = await both.destroy(["ANN LEE", "ann  lee"])
    finally:
        await both.stop()
    assert sorted(destroyed) == sorted(f"ann lee|{k.key_id}" for k in (first, racing))

    after = await reader(settings)
    try:
        assert after.keys_of("Ann Lee") == []
        assert after.find(key_id_of(sealed)) is None
        assert after.find(racing.key_id) is None
        assert after.find(other.key_id) == other  # another subject keeps its key
        assert await after.destroy(["Ann Lee"]) == []
    finally:
        await after.stop()
    await keys.read()  # a reader that had opened it drops it too
    assert keys.find(first.key_id) is None
    assert keys.keys_of("Ann Lee") == []


async def test_a_publisher_seals_a_personal_fields_value_under_its_subjects_key(
    settings: Settings,
) -> None:
    claim = Claim(
        claim_id="c1",
        subject="Ann Lee",
        field=NAME,
        status=ClaimStatus.PRESENT,
        value="  Ann   Lee ",
        source="crm",
        observed_at=datetime(2026, 12, 1, 9, tzinfo=UTC),
    )
    keys = SubjectKeys(settings, DEPLOYMENT)
    personal = frozenset({NAME})
    async with ClaimPublisher(settings, personal_fields=personal, subject_keys=keys) as publisher:
        assert keys.started  # the publisher starts keys it was given unstarted
        await (await publisher.publish(claim))
        plain = claim.model_copy(update={"claim_id": "c2", "field": "order.status"})
        await (await publisher.publish(plain))
    assert not keys.started
    async with ClaimPublisher(settings, personal_fields=personal) as keyless:
        with pytest.raises(ClaimstreamError, match="set the deployment_key setting"):
            await keyless.publish(claim)

    consumer = AIOKafkaConsumer(
        settings.topics.claims, bootstrap_servers=settings.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        fetched = await consumer.getmany(timeout_ms=5000, max_records=2)
    finally:
        await consumer.stop()
    codec = WireCodec(FolderRegistry())
    read = {
        c.claim_id: c for c in (codec.decode(Claim, r.value) for rs in fetched.values() for r in rs)
    }
    assert read["c2"].value == "  Ann   Lee "  # not personal: as sent
    sealed = read["c1"].value
    assert isinstance(sealed, str)
    assert is_sealed(sealed)
    assert sealed.startswith("csp1:")
    found = await reader(settings)
    try:
        key = found.find(key_id_of(sealed))
        assert key is not None
        assert open_sealed(sealed, key, NAME) == "Ann Lee"
    finally:
        await found.stop()


async def test_a_stewards_resolution_of_a_personal_field_leaves_sealed_too(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolutions topic keeps a steward's statements for ever: a personal value in one is
    sealed under the subject's key (the settings' deployment key, found in the environment), as
    the subject's claims are, so erasing the subject leaves it unreadable there too."""
    key_id, secret = DeploymentKey.generate()
    monkeypatch.setenv("TEST_DEPLOYMENT_KEY", secret)
    sealing = settings.model_copy(update={"deployment_key": f"{key_id}:TEST_DEPLOYMENT_KEY"})
    resolution = Resolution(
        resolution_id="r1", subject="Ann Lee", field=NAME, value="Ann Lee", decided_by="ana",
        decided_at=datetime(2026, 12, 1, 9, tzinfo=UTC),
    )  # fmt: skip
    assert await publish_resolutions(sealing, [resolution], personal_fields=frozenset({NAME})) == 1
    consumer = AIOKafkaConsumer(
        settings.topics.resolutions, bootstrap_servers=settings.bootstrap,
        auto_offset_reset="earliest",
    )  # fmt: skip
    await consumer.start()
    try:
        fetched = await consumer.getmany(timeout_ms=5000, max_records=1)
    finally:
        await consumer.stop()
    [record] = [r for rs in fetched.values() for r in rs]
    sealed = WireCodec(FolderRegistry()).decode(Resolution, record.value).value
    assert is_sealed(sealed)
    found = SubjectKeys(settings, DeploymentKey.from_setting(f"{key_id}:K", {"K": secret}))
    await found.start()
    try:
        await found.read()
        key = found.find(key_id_of(str(sealed)))
        assert key is not None
        assert open_sealed(str(sealed), key, NAME) == "Ann Lee"
    finally:
        await found.stop()
