"""The source ledger in the worker: judged as a record's decision is applied, kept as the task's
record (journaled and restored with its keys), counted, and reported for the cluster."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry

from streams.arbiter.sources import LEDGER_KEY, SourceLedgers, ledger_of, merged, sources_report
from streams.core.admission.intake import admit
from streams.core.keys.transitions import Transition, add_resolution, apply_claim
from streams.core.records.contracts import Resolution
from streams.ops.metrics import Metrics
from streams.pipeline.records import Handled
from streams.state.cache import StateCache
from streams.state.task import TaskStore
from tests.support.builders import NOW, POLICY, claim
from tests.support.settlements import FIELD, RULES, opened

KEY = f"invoice:42|{FIELD}".encode()


def settled_once(store: TaskStore, ledgers: SourceLedgers) -> None:
    before = opened([claim(1), claim(2, source="billing-export", value="overdue")])
    store.put(KEY, before)
    resolution = Resolution(
        resolution_id="r1",
        subject="invoice:42",
        field=FIELD,
        value="paid",
        decided_by="steward",
        decided_at=NOW + timedelta(seconds=5),
    )
    later = NOW + timedelta(seconds=5)
    step = add_resolution(before, resolution, RULES, POLICY.version, later)
    assert step.emitted is not None
    ledgers.settle(store, handled_of(step))
    store.put(KEY, step.state)
    # The same resolution delivered again (a redelivery) settles nothing more.
    again = add_resolution(step.state, resolution, RULES, POLICY.version, later)
    ledgers.settle(store, handled_of(again))


def handled_of(step: Transition) -> Handled:
    emitted = [step.emitted] if step.emitted is not None else []
    return Handled(key=KEY, state=step.state, emitted=emitted, opened=step.opened)


def test_an_observation_settles_through_the_in_place_transition() -> None:
    """The hot path changes the key's state in place: the settlement is judged against the open
    state the transition kept, not the (already changed) state in the store."""
    metrics = Metrics(POLICY, CollectorRegistry())
    store = TaskStore(StateCache(8))
    ledgers = SourceLedgers(POLICY, metrics)
    state = opened([claim(1, source="crm"), claim(2, source="billing-export", value="overdue")])
    store.put(KEY, state)
    correction = admit(claim(3, source="billing-export", observed_at=NOW), POLICY, NOW)
    step = apply_claim(state, correction, RULES, POLICY.version, NOW)
    assert step.state is state  # changed in place
    ledgers.settle(store, handled_of(step))
    verdicts = {
        (row["source"], row["agreed"], row["disagreed"])
        for row in sources_report(merged([ledger_of(store)]), POLICY, None)["rows"]
    }
    assert verdicts == {("crm", 1, 0), ("billing-export", 0, 1)}


def test_a_settlement_is_counted_kept_with_the_task_and_restored() -> None:
    metrics = Metrics(POLICY, CollectorRegistry())
    store = TaskStore(StateCache(8))
    settled_once(store, SourceLedgers(POLICY, metrics))

    def count(source: str, verdict: str) -> float | None:
        return metrics.registry.get_sample_value(
            "claimstream_source_settled_total",
            {"source": source, "field": FIELD, "verdict": verdict},
        )

    assert count("billing-api", "agreed") == 1
    assert count("billing-export", "disagreed") == 1
    assert count("billing-export", "agreed") is None
    journaled = store.journal()
    assert LEDGER_KEY in journaled
    restored = TaskStore(StateCache(8))
    for key, data in journaled.items():
        restored.load(key, data)
    assert list(restored) == [KEY]
    rows = {
        row["source"]: row
        for row in sources_report(merged([ledger_of(restored)]), POLICY, None)["rows"]
    }
    assert rows["billing-api"]["agreed"] == rows["billing-api"]["settled"] == 1
    assert rows["billing-export"]["disagreed"] == 1
    assert rows["billing-export"]["latest_disagreements"][0]["key"] == KEY.decode()
    assert rows["billing-export"]["share"] == 0.0
    later = sources_report(merged([ledger_of(restored)]), POLICY, (NOW + timedelta(days=1)).date())
    assert later["rows"] == []


def test_a_ledger_a_newer_release_wrote_is_kept_and_deciding_goes_on() -> None:
    store = TaskStore(StateCache(8))
    newer = b'{"format": 99}'
    store.put_encoded(LEDGER_KEY, newer)
    assert ledger_of(store) is None
    settled_once(store, SourceLedgers(POLICY, Metrics(POLICY, CollectorRegistry())))
    assert store.get_encoded(LEDGER_KEY) == newer
    assert store.get(KEY) is not None


def test_a_ledger_reloaded_from_the_changelog_is_read_again_not_taken_from_memory() -> None:
    """A rewind reloads the task's records: what was judged since the commit is forgotten."""
    store = TaskStore(StateCache(8))
    ledgers = SourceLedgers(POLICY, Metrics(POLICY, CollectorRegistry()))
    settled_once(store, ledgers)
    committed = store.journal()[LEDGER_KEY]
    store.journaled()  # the changelog holds it
    store.load(LEDGER_KEY, b'{"format": 1, "days": {}, "last_settled": [], "disagreements": []}')
    settled_once(store, ledgers)
    rows = sources_report(merged([ledger_of(store)]), POLICY, None)["rows"]
    assert {row["source"]: row["settled"] for row in rows} == {
        "billing-api": 1,
        "billing-export": 1,
    }
    store.load(LEDGER_KEY, committed)
    settled_once(store, ledgers)
    rows = sources_report(merged([ledger_of(store)]), POLICY, None)["rows"]
    assert {row["source"]: row["settled"] for row in rows} == {
        "billing-api": 2,
        "billing-export": 2,
    }
