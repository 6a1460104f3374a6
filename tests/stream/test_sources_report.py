"""Which sources settled conflicts proved right, on Apache Kafka with two real workers fed by the
demo: a steward resolves the demo's payment conflict in Chromium and `/api/sources` (asked of
either worker) counts the winning source agreed and the other disagreed; a feed where two sources
copy one upstream is reported as a candidate lineage and an independent pair is not; `policy
suggest` prints the same lines twice; and the counts survive restarting both workers (the ledger
is restored from the changelog with the keys)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from streams.client import build_resolution, publish_resolutions
from streams.core.keys.state import state_key
from streams.core.records.policy import load_policy
from streams.devkit.demo import scenario_claims
from tests.stream.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    TOKEN,
    WAIT_MS,
    Cluster,
    key_page,
    open_keys,
    run_into,
    shoot,
)
from tests.stream.support import REPO, Deployment, WorkerProcess, write_policy

pytestmark = pytest.mark.integration

PAYMENT = "order.payment_status"
DEMO_KEY = "invoice:42|order.payment_status"
VALUES = ("paid", "unpaid", "overdue", "refunded")
COPYING = ("billing-export", "order-form")  # both repeat one upstream
INDEPENDENT = ("billing-api", "crm")


def copy_feed(now: datetime, subjects: int = 40) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Claims where two sources copy one upstream (right half the time) and two observe on
    their own (right 70% of the time); only keys where they disagree. Returns the claims and
    each key's true value."""
    rng = random.Random(20261201)
    claims, truths = [], {}
    for n in range(subjects):
        truth = rng.choice(VALUES)

        def observed(accuracy: float, truth: str = truth) -> str:
            return (
                truth if rng.random() < accuracy else rng.choice([v for v in VALUES if v != truth])
            )

        upstream = observed(0.5)
        said = {COPYING[0]: upstream, COPYING[1]: upstream}
        said.update({source: observed(0.7) for source in INDEPENDENT})
        if len(set(said.values())) == 1:
            continue
        subject = f"copy:{n}"
        truths[state_key(subject, PAYMENT)] = truth
        claims += [
            {"claim_id": f"{subject}-{source}", "subject": subject, "field": PAYMENT,
             "status": "present", "value": value, "source": source,
             "observed_at": now.isoformat()}
            for source, value in said.items()
        ]  # fmt: skip
    return claims, truths


class SourcesCluster(Cluster):
    truths: dict[str, str]

    def resolve(self, truths: dict[str, str]) -> None:
        policy = load_policy(self.deployment.policy)
        resolutions = [
            build_resolution(
                policy,
                key.rsplit("|", 1)[0],
                PAYMENT,
                decided_by="Ann Steward",
                decided_at=datetime.now(UTC),
                value=value,
                note="checked upstream",
            )
            for key, value in sorted(truths.items())
        ]
        failures: list[BaseException] = []
        thread = threading.Thread(
            target=lambda: run_into(publish_resolutions(self.settings, resolutions), failures)
        )
        thread.start()
        thread.join(60)
        assert not failures, failures


def sources(worker: WorkerProcess) -> dict[str, Any]:
    answer = worker.get("/api/sources")
    assert answer is not None
    return answer


def rows(answer: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["source"], row["field"]): row for row in answer["rows"]}


def wait_for(check: Any, what: str, seconds: float = 90) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SourcesCluster]:
    workdir = tmp_path_factory.mktemp("sources")
    policy = write_policy(workdir / "policy.yaml", **{PAYMENT: {"freshness": "10m"}})
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=workdir, policy=policy)
    writer = deployment.worker(0, CLAIMSTREAM_STEWARD_TOKENS=f"Ann Steward:{TOKEN}")
    reader = deployment.worker(1)
    try:
        writer.start()
        reader.start()
        found = SourcesCluster(deployment, writer, reader)
        now = datetime.now(UTC)
        copies, found.truths = copy_feed(now)
        found.publish(scenario_claims(now) + copies)
        wait_for(lambda: {DEMO_KEY, *found.truths} <= open_keys(reader), "the conflicts to open")
        yield found
    finally:
        reader.stop()
        writer.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        try:
            yield context
        finally:
            context.close()
            browser.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    page.close()
    assert errors == []


def test_a_steward_resolves_the_demo_conflict_and_the_sources_are_judged(
    cluster: SourcesCluster, page: Page
) -> None:
    page.goto(cluster.url(cluster.writer, "/ui/"))
    page.locator("#token").fill(TOKEN)
    page.locator("#token-use").click()
    page.goto(key_page(cluster, cluster.writer, DEMO_KEY))
    form = page.locator("#resolve")
    expect(form).to_be_visible(timeout=WAIT_MS)
    form.get_by_label("paid", exact=True).check()
    page.locator("#note").fill("the ledger says paid; the export lagged")
    page.locator("#resolve-submit").click()
    expect(page.locator("#outcome")).to_contain_text("resolved", timeout=WAIT_MS)

    def judged() -> dict[tuple[str, str], dict[str, Any]] | None:
        found = rows(sources(cluster.reader))
        return found if ("billing-export", PAYMENT) in found else None

    found = wait_for(judged, "the settlement in /api/sources")
    assert found[("billing-api", PAYMENT)]["agreed"] == 1
    assert found[("billing-api", PAYMENT)]["disagreed"] == 0
    export = found[("billing-export", PAYMENT)]
    assert (export["settled"], export["agreed"], export["disagreed"]) == (1, 0, 1)
    assert export["latest_disagreements"][0]["key"] == DEMO_KEY
    assert export["authority"] == "system_of_record"
    assert rows(sources(cluster.writer)) == found  # the same answer from either worker
    metrics = cluster.writer.get("/metrics") + cluster.reader.get("/metrics")
    assert re.search(
        r'claimstream_source_settled_total\{field="order.payment_status",'
        r'source="billing-export",verdict="disagreed"\} 1\.0',
        metrics,
    )

    page.goto(cluster.url(cluster.reader, "/ui/#/sources"))
    row = page.locator(
        '#sources tr[data-source="billing-export"][data-field="order.payment_status"]'
    )
    expect(row.locator("td.disagreed")).to_have_text("1", timeout=WAIT_MS)
    # Sorted by disagreements first.
    most = max(r["disagreed"] for r in found.values())
    expect(page.locator("#sources tbody tr td.disagreed").first).to_have_text(str(most))
    shoot(page, "sources")
    row.locator("td.latest a").first.click()
    expect(page.locator("h1")).to_have_text("invoice:42 · order.payment_status", timeout=WAIT_MS)
    records = page.locator("#evidence .record")
    expect(records.first).to_be_visible(timeout=WAIT_MS)
    texts = [records.nth(i).inner_text() for i in range(records.count())]
    assert "1/1 agreed" in texts
    assert "0/1 agreed" in texts
    shoot(page, "sources-key-record")


def test_two_sources_copying_one_upstream_are_a_candidate_lineage(
    cluster: SourcesCluster,
) -> None:
    cluster.resolve(cluster.truths)

    def settled() -> dict[str, Any] | None:
        answer = sources(cluster.reader)
        row = rows(answer).get((COPYING[0], PAYMENT))
        return answer if row and row["settled"] >= len(cluster.truths) else None

    answer = wait_for(settled, "the copy feed's settlements")
    lineages = {(f["first"], f["second"]) for f in answer["lineages"]}
    assert COPYING in lineages
    assert INDEPENDENT not in lineages
    assert lineages == {COPYING}
    (finding,) = answer["lineages"]
    assert finding["same"] == finding["together"]
    assert finding["same_wrong"] >= 2


def test_policy_suggest_prints_the_same_lines_for_the_same_cluster(
    cluster: SourcesCluster,
) -> None:
    def suggest() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "streams.cli", "policy", "suggest", "--since", "1d",
             "--url", cluster.url(cluster.reader), "--now", datetime.now(UTC).date().isoformat()
             + "T12:00:00Z"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return done.stdout

    first = suggest()
    assert suggest() == first
    assert "[lineage] billing-export and order-form may share one upstream" in first
    assert "edit: sources.order-form.lineage: billing-export" in first
    assert "billing-api and crm" not in first


def test_the_counts_survive_restarting_every_worker(cluster: SourcesCluster) -> None:
    before = rows(sources(cluster.reader))
    cluster.reader.stop()
    cluster.writer.stop()
    cluster.writer.start()
    cluster.reader.start()

    def restored() -> dict[tuple[str, str], dict[str, Any]] | None:
        answer = sources(cluster.reader)
        return rows(answer) if not answer["unanswered"] and rows(answer) == before else None

    wait_for(restored, "the restored ledgers to answer as before")
    assert before[("billing-export", PAYMENT)]["disagreed"] >= 1
    query = "/api/decisions/" + urllib.parse.quote(DEMO_KEY, safe="")
    assert cluster.writer.get(query)["decision"]["outcome"] == "resolved"
