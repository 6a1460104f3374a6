"""`claimstream alias add|remove|list|history` against a real broker (Tansu, one for the module;
each test its own aliases topic): chains listed by the subject they resolve to, the history as the
JSON lines replay reads, a cycle and a retraction of nothing refused with nothing published, a
signed change proven as a worker proves it, and the records a worker passes over told."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.cli.main import main
from streams.core.records.policy import Review, load_policy
from streams.core.timeline.aliases import AliasChange, history_from_lines
from streams.devkit.brokers import TansuBroker
from streams.pipeline.authentication import Authentication
from streams.settings import Settings, load_settings
from streams.worker.alias_log import AliasLog, published_history
from tests.support.builders import REPO

pytestmark = pytest.mark.integration

T1 = datetime(2026, 12, 1, 9, tzinfo=UTC)
T2 = T1 + timedelta(hours=1)
T3 = T1 + timedelta(hours=2)
SECRET = "ann's steward secret, 32 bytes or more"

Run = Callable[..., tuple[int, str, str]]


def at(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
def broker() -> Iterator[TansuBroker]:
    with TansuBroker() as started:
        yield started


@pytest.fixture
def settings(broker: TansuBroker, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A topic of the test's own, with several partitions (the history orders them by instant)."""
    monkeypatch.setenv("CLAIMSTREAM_BROKER", f"kafka://{broker.bootstrap}")
    monkeypatch.setenv("CLAIMSTREAM_TOPIC_ALIASES", f"t{uuid.uuid4().hex[:8]}.subject-aliases")
    found = load_settings()

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(found.topics.aliases, 3, 1)])
        finally:
            await admin.close()

    asyncio.run(create())
    return found


@pytest.fixture
def cli(settings: Settings, capsys: pytest.CaptureFixture[str]) -> Run:
    """`claimstream ARGS`: its exit code, stdout and stderr."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def published(settings: Settings) -> list[AliasChange]:
    return [p.change for p in asyncio.run(published_history(settings)).published]


def test_added_aliases_are_listed_by_the_subject_their_chain_resolves_to(cli: Run) -> None:
    code, out, err = cli("alias", "add", "ACME-2231", "Acme Corp", "--at", at(T1))
    assert code == 0, err
    assert json.loads(out) == {
        "at": at(T1),
        "alias": "ACME-2231",
        "canonical": "Acme Corp",
        "by": "",
    }
    assert "from 2026-12-01T09:00:00+00:00" in err
    code, out, err = cli("alias", "add", "Acme Corp", "acme", "--at", at(T2), "--by", "ann")
    assert code == 0, err
    assert "on the key of 'acme'" in err

    assert cli("alias", "list", "--at", at(T1 - timedelta(seconds=1)))[1] == ""
    assert cli("alias", "list", "--at", at(T1))[1] == "ACME-2231 -> Acme Corp\n"
    code, out, err = cli("alias", "list", "--at", at(T2))
    assert out == "ACME-2231 -> acme\nAcme Corp -> acme\n"
    assert "2 aliases in force at 2026-12-01T10:00:00+00:00" in err
    listed = json.loads(cli("alias", "list", "--at", at(T3), "--json")[1])
    assert listed == {"ACME-2231": "acme", "Acme Corp": "acme"}


def test_an_alias_takes_effect_the_policy_lead_time_after_it_is_published(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAIMSTREAM_POLICY_LEAD_S", "60")
    before = datetime.now(UTC)
    assert cli("alias", "add", "ACME-2231", "acme", "--at", at(before - timedelta(hours=1)))[0] == 0
    code, out, err = cli("alias", "add", "Acme Corp", "acme")
    assert code == 0, err
    effective = datetime.fromisoformat(json.loads(out)["at"])
    assert before + timedelta(seconds=60) <= effective <= datetime.now(UTC) + timedelta(seconds=60)
    assert cli("alias", "list")[1] == "ACME-2231 -> acme\n"  # now: the other not yet
    both = "ACME-2231 -> acme\nAcme Corp -> acme\n"
    assert cli("alias", "list", "--at", at(effective))[1] == both


def test_the_history_is_the_json_lines_replay_reads(cli: Run, settings: Settings) -> None:
    for args in (
        ("Acme Corp", "acme", "--at", at(T2), "--by", "ann"),
        ("ACME-2231", "Acme Corp", "--at", at(T1)),
        ("acme inc", "acme", "--at", at(T1)),
    ):
        assert cli("alias", "add", *args)[0] == 0
    assert cli("alias", "remove", "ACME INC", "--at", at(T3), "--by", "bo")[0] == 0

    code, out, err = cli("alias", "history")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [json.loads(line)["at"] for line in lines] == [at(T1), at(T1), at(T2), at(T3)]
    history = history_from_lines(lines)
    assert sorted(history.changes, key=repr) == sorted(published(settings), key=repr)
    assert history.changes[-1] == AliasChange("ACME INC", None, T3, "bo")
    assert history.canonical("acme-2231", T2) == "acme"
    assert history.canonical("Acme Inc", T3) == "Acme Inc"


def test_a_cycle_is_refused_and_nothing_is_published(cli: Run, settings: Settings) -> None:
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T1))[0] == 0
    assert cli("alias", "add", "ACME-2231", "Acme Corp", "--at", at(T3))[0] == 0

    code, out, err = cli("alias", "add", "acme", "acme-2231", "--at", at(T3))
    assert (code, out) == (2, "")
    assert "closes a cycle (acme -> acme-2231 -> Acme Corp -> acme)" in err
    assert "nothing published" in err
    # Before T3 there is no cycle, but the change published for T3 would then close one.
    code, _, err = cli("alias", "add", "acme", "ACME-2231", "--at", at(T2))
    assert code == 2
    assert "the change 'ACME-2231' -> 'Acme Corp' at" in err
    code, _, err = cli("alias", "add", "Acme  CORP", "acme corp", "--at", at(T2))
    assert code == 2
    assert "claimstream: error: alias 'Acme  CORP' names itself" in err
    assert len(published(settings)) == 2


def test_a_retracted_alias_is_no_longer_listed_after_its_instant(cli: Run) -> None:
    assert cli("alias", "add", "ACME-2231", "Acme Corp", "--at", at(T1))[0] == 0
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T1))[0] == 0
    code, out, err = cli("alias", "remove", "acme-2231", "--at", at(T2))
    assert code == 0, err
    assert json.loads(out)["canonical"] is None
    assert "'acme-2231' -> 'Acme Corp' retracted" in err

    assert cli("alias", "list", "--at", at(T1))[1] == "ACME-2231 -> acme\nAcme Corp -> acme\n"
    assert cli("alias", "list", "--at", at(T2))[1] == "Acme Corp -> acme\n"
    assert json.loads(cli("alias", "list", "--at", at(T3), "--json")[1]) == {"Acme Corp": "acme"}
    # Merged again later: the history says the split no longer stands.
    assert cli("alias", "add", "ACME-2231", "acme", "--at", at(T3))[0] == 0
    code, _, err = cli("alias", "history")
    assert code == 0
    assert err == (
        "alias history: the retraction of 'acme-2231' at 2026-12-01T10:00:00+00:00 is "
        "superseded by 'ACME-2231' -> 'acme' at 2026-12-01T11:00:00+00:00\n"
    )


def test_retracting_an_alias_not_in_force_is_refused(cli: Run, settings: Settings) -> None:
    code, out, err = cli("alias", "remove", "Acme Corp", "--at", at(T1))
    assert (code, out) == (2, "")
    assert "alias 'Acme Corp' is not in force at 2026-12-01T09:00:00+00:00: nothing" in err
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T2))[0] == 0
    assert cli("alias", "remove", "Acme Corp", "--at", at(T1))[0] == 2  # before its instant
    assert cli("alias", "remove", "Acme Corp", "--at", at(T3))[0] == 0
    assert cli("alias", "remove", "Acme Corp", "--at", at(T3 + timedelta(seconds=1)))[0] == 2
    assert [change.canonical for change in published(settings)] == ["acme", None]


def _stewarded(path: Path) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["stewards"] = {
        "required": True,
        "keys": [
            {"key_id": "ann-1", "algorithm": "hmac-sha256", "secret_env": "ANN_KEY",
             "sources": ["ann"]},
        ],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(policy))
    return path


def test_a_change_signed_by_a_steward_is_proven_as_a_worker_proves_it(
    cli: Run, settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    policy = _stewarded(tmp_path / "policy.yaml")
    monkeypatch.setenv("CLAIMSTREAM_POLICY", str(policy))
    monkeypatch.setenv("ANN_KEY", SECRET)
    signing = ("--by", "ann", "--key-id", "ann-1")
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T1), *signing)[0] == 0
    assert cli("alias", "remove", "Acme Corp", "--at", at(T2), *signing)[0] == 0
    assert cli("alias", "add", "ACME-2231", "acme", "--at", at(T1), "--by", "ann")[0] == 0
    code, _, err = cli("alias", "add", "x", "y", "--by", "bo", "--key-id", "ann-1")
    assert code == 2
    assert "not a key of the policy's stewards section bound to --by 'bo'" in err
    monkeypatch.setenv("SHORT_KEY", "too-short")
    code, _, err = cli("alias", "add", "x", "y", *signing, "--key-env", "SHORT_KEY")
    assert code == 2
    assert "the key in $SHORT_KEY: an hmac-sha256 secret must be at least 32 bytes" in err
    assert "Traceback" not in err

    proof = Authentication(settings, load_policy(policy), {"ANN_KEY": SECRET})

    async def read() -> AliasLog:
        log = AliasLog(settings, proof.check_alias)
        await log.start()
        try:
            await log.read()
        finally:
            await log.stop()
        return log

    log = asyncio.run(read())
    proven = sorted((p.change.at, p.change.alias, p.change.canonical) for p in log.published)
    assert proven == [(T1, "Acme Corp", "acme"), (T2, "Acme Corp", None)]
    assert len(log.passed_over) == 1  # the unsigned one
    assert "ACME-2231" in cli("alias", "history")[1]  # history does not check signatures


def test_the_history_says_what_a_worker_passes_over(
    cli: Run, settings: Settings, broker: TansuBroker
) -> None:
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T1))[0] == 0

    async def unreadable() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            headers = [("claimstream.effective_at", b"not an instant")]
            await producer.send_and_wait(
                settings.topics.aliases, b"acme", key=b"ACME", headers=headers
            )
        finally:
            await producer.stop()

    asyncio.run(unreadable())
    code, out, err = cli("alias", "history")
    assert code == 0
    assert [json.loads(line)["alias"] for line in out.splitlines()] == ["Acme Corp"]
    assert "alias history: 1 records passed over, applied by no worker:" in err
    assert "an alias record that does not read" in err


def test_where_the_policy_asks_for_review_an_alias_counts_once_another_steward_makes_it(
    cli: Run, settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["defaults"] = {**policy.get("defaults", {}), "review": {"approvals": 1}}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    monkeypatch.setenv("CLAIMSTREAM_POLICY", str(path))
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T1), "--by", "ann")[0] == 0
    assert cli("alias", "list", "--at", at(T3))[1] == ""  # waiting for a second steward
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T1), "--by", "ann")[0] == 0
    assert cli("alias", "list", "--at", at(T3))[1] == ""  # its author's own counts for nothing
    assert cli("alias", "add", "Acme Corp", "acme", "--at", at(T2), "--by", "bo")[0] == 0
    assert cli("alias", "list", "--at", at(T2 - timedelta(seconds=1)))[1] == ""
    assert cli("alias", "list", "--at", at(T2))[1] == "Acme Corp -> acme\n"
    (change,) = history_from_lines(cli("alias", "history")[1].splitlines()).changes
    assert (change.at, change.by) == (T2, "ann")  # as replay is given it: from bo's approval
    log = asyncio.run(published_history(settings))
    assert log.history(lambda _: Review()).in_force(T1) == {"acme corp": "acme"}  # no review
