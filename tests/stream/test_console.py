"""The steward console in a real browser (Debian's Chromium driven by Playwright) against two real
workers on Apache Kafka, fed by the demo's scenarios.

Worker 0 has steward tokens configured (Ann Steward's, alice's and bob's), worker 1 none: the queue
is the same on both (each fans out to the other), only worker 0 accepts writes. The policy requires
stewards' signatures: worker 0 signs what each token writes with that steward's key. Three fields
need another steward's approval before a resolution or undo counts (contract.reviewed_seats,
contract.bulk_seats, and contract.leased_seats, whose tasks' leases last 5 s): alice and bob review
each other there, and take and hand on the queue's tasks, each in a browser context of their own.
Screenshots are
kept in artifacts/screenshots/; the documentation's pictures of the console
(docs/images/console-*.png) are taken here too, each once the test has asserted what it shows.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    FloatRect,
    Locator,
    Page,
    Playwright,
    Route,
    expect,
    sync_playwright,
)

from streams.client import build_resolution, publish_resolutions
from streams.core.admission.authenticity import KEY_ID_HEADER
from streams.core.keys.state import split_key, state_key
from streams.core.timeline.aliases import AliasChange
from streams.devkit.brokers import free_port
from streams.devkit.demo import scenario_claims
from streams.pipeline.rekey import partition_of
from streams.worker.alias_log import publish_alias
from tests.stream.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOTS,
    STEWARDS,
    TOKEN,
    WAIT_MS,
    Cluster,
    key_page,
    open_keys,
    require_steward_signatures,
    run_into,
    shoot,
    signer_of,
    signing_secrets,
    steward_signing_keys,
    steward_tokens,
)
from tests.stream.support import REPO, Deployment, read_topic, write_policy

pytestmark = pytest.mark.integration

DOCS = REPO / "docs"

SCRIPT_VALUE = "<script>window.__pwned = 1</script>"
MARKUP_SUBJECT = '<img src=x onerror="window.__pwned = 2">'
ADDRESS = "customer.shipping_address"
PAYMENT = "order.payment_status"
SEATS = "contract.reviewed_seats"  # a resolution or undo here needs another steward's approval
BULK = "contract.bulk_seats"  # reviewed too: many proposals approved at once
LEASED = "contract.leased_seats"  # reviewed, a task's lease lasting 5 s, due 2 s after it opens
DEMO_CONFLICTS = {
    "invoice:42|order.payment_status": "value",
    "api:checkout|api.latency": "semantic",
    "svc:checkout|service.retry_timeout": "cross_epoch",
    "globex|contract.seats": "value",  # `claimstream dev` resolves it a moment later
}


def shoot_for_docs(page: Page, *paths: Path) -> None:
    """A picture for the documentation, taken where the test has just asserted what it shows."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)


def one_subject_per_partition(prefix: str, partitions: int, field: str) -> list[str]:
    """Subjects whose keys land on every partition: every worker owns some of them."""
    subjects: dict[int, str] = {}
    for n in itertools.count(1):
        subject = f"{prefix}{n}"
        subjects.setdefault(partition_of(state_key(subject, field).encode(), partitions), subject)
        if len(subjects) == partitions:
            return [subjects[p] for p in range(partitions)]
    raise AssertionError("unreachable")


def payment_conflict(subject: str, now: datetime) -> list[dict[str, Any]]:
    """Two systems of record disagree: a value conflict that blocks."""
    at = now.isoformat()
    return [
        {"claim_id": f"{subject}-a", "subject": subject, "field": PAYMENT, "status": "present",
         "value": "paid", "source": "billing-api", "observed_at": at},
        {"claim_id": f"{subject}-b", "subject": subject, "field": PAYMENT, "status": "present",
         "value": "overdue", "source": "billing-export", "observed_at": at},
    ]  # fmt: skip


def markup_claims(now: datetime) -> list[dict[str, Any]]:
    """A producer sends markup as a subject and as a value: it must show as text."""
    at = now.isoformat()
    return [
        {"claim_id": "xss-a", "subject": MARKUP_SUBJECT, "field": ADDRESS, "status": "present",
         "value": SCRIPT_VALUE, "source": "crm", "observed_at": at},
        {"claim_id": "xss-b", "subject": MARKUP_SUBJECT, "field": ADDRESS, "status": "present",
         "value": "1 Main St", "source": "order-form", "observed_at": at},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("console")
    # Fresh for ten minutes (no conflict ages out during the test); the address field blocks; the
    # reviewed seats need one approval by a steward other than the author; a steward's record is
    # refused unless signed by their key.
    reviewed = {"type": "integer", "freshness": "none", "review": {"approvals": 1}}
    leased = {"escalate_after": "2s", "review": {"approvals": 1, "lease": "5s"}}
    policy = write_policy(
        workdir / "policy.yaml",
        **{
            PAYMENT: {"freshness": "10m"},
            ADDRESS: {"on_conflict": "block"},
            SEATS: reviewed,
            BULK: reviewed,
            LEASED: reviewed | leased,
        },
    )
    policy = require_steward_signatures(policy)
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=workdir, policy=policy)
    writer = deployment.worker(
        0,
        CLAIMSTREAM_STEWARD_TOKENS=steward_tokens(),
        CLAIMSTREAM_STEWARD_SIGNING_KEYS=steward_signing_keys(),
        **signing_secrets(),
    )
    reader = deployment.worker(1, **signing_secrets())
    try:
        writer.start()
        reader.start()
        found = Cluster(deployment, writer, reader)
        now = datetime.now(UTC)
        spread = one_subject_per_partition("invoice:90", deployment.partitions, PAYMENT)
        found.publish(
            scenario_claims(now)
            + markup_claims(now)
            + [c for subject in spread for c in payment_conflict(subject, now)]
        )
        # Every test starts from a settled queue: all these conflicts decided, on both workers.
        expected = {
            *DEMO_CONFLICTS,
            state_key(MARKUP_SUBJECT, ADDRESS),
            *(state_key(s, PAYMENT) for s in spread),
        }
        deadline = time.monotonic() + 90
        while open_keys(reader) != expected and time.monotonic() < deadline:
            time.sleep(0.5)
        assert open_keys(reader) == expected
        yield found
    finally:
        reader.stop()
        writer.stop()


@pytest.fixture(scope="module")
def driver() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="module")
def browser(driver: Playwright) -> Iterator[BrowserContext]:
    with tempfile.TemporaryDirectory() as profile:
        context = driver.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def chromium(driver: Playwright) -> Iterator[Browser]:
    """A second Chromium, for stewards who share nothing: each a browser context of their own."""
    launched = driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        yield launched
    finally:
        launched.close()


def hold_live_silent(route: Route) -> None:
    """The live feed held silent, as when it drops: the page keeps the view it loaded."""
    route.fulfill(
        status=200, headers={"Content-Type": "text/event-stream"}, body="retry: 600000\n\n"
    )


LOGGED_REFUSAL = "the server responded with a status of 409"  # Chromium logs a refused write


@pytest.fixture
def steward(cluster: Cluster, chromium: Browser) -> Iterator[Callable[..., Page]]:
    """`steward(name, key)`: the steward's page of `key` on worker 0 (`key` None: the queue, as
    `query` filters it), in a browser context of their own (a session each), at 1400 px, their
    token in the session as the steward form keeps it (the other tests enter it). A script error
    or a CSP violation fails the test; the 409 of a refused write is the page's to show."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    def open_as(name: str, key: str | None, live: bool = True, query: str = "") -> Page:
        context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        contexts.append(context)
        if not live:
            context.route("**/api/live*", hold_live_silent)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(f"{name}: {error}"))
        page.on(
            "console",
            lambda m: (
                errors.append(f"{name}: {m.text}")
                if m.type == "error" and LOGGED_REFUSAL not in m.text
                else None
            ),
        )
        token = json.dumps(STEWARDS[name])
        context.add_init_script(f"sessionStorage.setItem('claimstream.steward', {token})")
        if key is None:
            page.goto(cluster.url(cluster.writer, f"/ui/#/?{query}"))
        else:
            page.goto(key_page(cluster, cluster.writer, key))
        expect(page.locator("#token-forget")).to_be_visible()  # the page took the token
        return page

    yield open_as
    for context in contexts:
        context.close()
    assert errors == []


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    page.close()
    # A CSP violation or a script error is a failure of the page, whatever it showed.
    assert errors == []


def apart(a: FloatRect, b: FloatRect) -> bool:
    """Two boxes on the page share no point: one lies wholly beside, above or below the other."""
    return (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def queue_rows(page: Page) -> dict[str, str]:
    rows = page.locator("#queue tbody tr[data-key]")
    return {
        rows.nth(i).get_attribute("data-key") or "": rows.nth(i).locator("td.worker").inner_text()
        for i in range(rows.count())
    }


def wait_for_queue(page: Page, keys: set[str]) -> dict[str, str]:
    page.wait_for_function(
        "keys => keys.every(k => [...document.querySelectorAll('#queue tr[data-key]')]"
        ".some(tr => tr.dataset.key === k))",
        arg=sorted(keys),
        timeout=WAIT_MS,
    )
    return queue_rows(page)


def test_the_queue_lists_the_demos_conflicts_from_both_workers(
    cluster: Cluster, page: Page
) -> None:
    page.goto(cluster.url(cluster.reader))  # the root sends a browser to the console
    assert page.url.endswith("/ui/")
    rows = wait_for_queue(page, set(DEMO_CONFLICTS))
    expect(page.locator("#workers")).to_contain_text("2 of 2 workers answered", timeout=WAIT_MS)
    assert set(rows.values()) == {
        cluster.url(w, "").rstrip("/") for w in (cluster.writer, cluster.reader)
    }
    for key, kind in DEMO_CONFLICTS.items():
        outcome = page.locator(f'#queue tr[data-key="{key}"] td.outcome').inner_text()
        assert kind in outcome
    shoot(page, "queue")

    # The JSON API gives the same cluster-wide answer from either worker.
    for worker in (cluster.writer, cluster.reader):
        answer = worker.get("/api/conflicts")
        assert answer["unanswered"] == []
        assert {r["key"] for r in answer["open_conflicts"]} >= set(DEMO_CONFLICTS)
        assert {r["key"] for r in answer["open_conflicts"]} == set(rows)
        assert answer["counts_per_field"][PAYMENT] >= 5

    page.locator(".chip", has_text="api.latency").click()
    expect(page.locator("#queue tbody tr[data-key]")).to_have_count(1, timeout=WAIT_MS)
    assert list(queue_rows(page)) == ["api:checkout|api.latency"]


def test_new_decisions_appear_without_reloading(cluster: Cluster, page: Page) -> None:
    """The page talks to worker 1 only; the new conflicts are all owned by worker 0, so they can
    reach the page only through worker 1 relaying worker 0's live decisions."""
    writer_url = cluster.url(cluster.writer, "").rstrip("/")
    owners = {
        partition_of(row["key"].encode(), cluster.deployment.partitions): row["worker"]
        for row in cluster.reader.get("/api/conflicts")["open_conflicts"]
    }
    spread = one_subject_per_partition("invoice:live-", cluster.deployment.partitions, PAYMENT)
    remote = [subject for p, subject in enumerate(spread) if owners[p] == writer_url]
    assert remote, owners
    page.goto(cluster.url(cluster.reader, "/ui/"))
    wait_for_queue(page, set(DEMO_CONFLICTS))
    expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    page.evaluate("window.__same_page = true")
    now = datetime.now(UTC)
    cluster.publish([c for subject in remote for c in payment_conflict(subject, now)])
    rows = wait_for_queue(page, {state_key(subject, PAYMENT) for subject in remote})
    assert {rows[state_key(subject, PAYMENT)] for subject in remote} == {writer_url}
    for subject in remote:  # each row was touched by its own live event, not a mere refetch
        fresh = page.locator(f'#queue tr.fresh[data-key="{state_key(subject, PAYMENT)}"]')
        expect(fresh).to_have_count(1, timeout=WAIT_MS)

    # A key page follows its key at the owner: the ledger's newer word settles the conflict.
    key = state_key(remote[0], PAYMENT)
    page.goto(key_page(cluster, cluster.reader, key))
    expect(page.locator("#outcome")).to_contain_text("conflict", timeout=WAIT_MS)
    expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    page.evaluate("window.__same_page = true")
    newer = {
        **payment_conflict(remote[0], now)[0],
        "claim_id": f"{remote[0]}-c",
        "value": "overdue",
        "observed_at": datetime.now(UTC).isoformat(),
    }
    cluster.publish([newer])
    expect(page.locator("#outcome.fresh")).to_contain_text("resolved", timeout=WAIT_MS)
    assert page.evaluate("window.__same_page") is True  # not reloaded


def test_a_key_shows_its_evidence_timeline_rules_and_the_belief_as_of_an_instant(
    cluster: Cluster, page: Page
) -> None:
    key = "invoice:42|order.payment_status"
    page.goto(key_page(cluster, cluster.reader, key))
    evidence = page.locator("#evidence tbody tr")
    expect(evidence).to_have_count(2, timeout=WAIT_MS)
    expect(page.locator("#explain")).to_contain_text("sources disagree (value conflict)")
    table = page.locator("#evidence").inner_text()
    assert "billing-api" in table
    assert "billing-export" in table
    assert "system_of_record" in table
    assert "ledger" in table  # lineage
    expect(page.locator("#timeline rect.bar")).to_have_count(2)
    expect(page.locator("#timeline circle.decision.conflict")).to_have_count(1)
    expect(page.locator("#rules")).to_contain_text("on_conflict")
    expect(page.locator("#rules")).to_contain_text("10m")  # this test's freshness

    # At 1400 px the evidence's last column is on screen and clear of the policy panel, whose
    # authorities read one a line, not as JSON.
    page.set_viewport_size({"width": 1400, "height": 1000})
    last_column = page.locator("#evidence th").last.bounding_box()
    panel = page.locator("#rules").bounding_box()
    assert last_column is not None
    assert panel is not None
    assert page.locator("#evidence th").last.inner_text() == "Valid to"
    assert last_column["x"] + last_column["width"] <= 1400
    assert apart(last_column, panel), (last_column, panel)
    authorities = page.locator("#rules ul.pairs li")
    expect(authorities.filter(has_text="billing-api")).to_contain_text("system_of_record")
    assert "{" not in page.locator("#rules").inner_text()
    page.set_viewport_size({"width": 1440, "height": 1000})

    # What did we believe when the first decision was made? Picked from the decisions table.
    history = cluster.reader.get("/api/decisions/" + urllib.parse.quote(key, safe="") + "/history")
    first = history["decisions"][0]
    page.locator(f'#decisions a[data-at="{first["decided_at"]}"]').first.click()
    expect(page.locator("#asof")).to_contain_text("What we believed at", timeout=WAIT_MS)
    expect(page.locator("#asof-evidence tbody tr")).not_to_have_count(0)
    shoot(page, "key")
    shoot_for_docs(page, DOCS / "images" / "console-key.png", DOCS / "console.png")

    # The API answers from the emitted history, at explicit instants taken from it.
    quoted = urllib.parse.quote(key, safe="")
    emitted = [
        (datetime.fromisoformat(s["decided_at"]), s["decision_id"]) for s in history["decisions"]
    ]
    for instant, _ in emitted:
        in_force = [decision_id for decided_at, decision_id in emitted if decided_at <= instant][-1]
        at = urllib.parse.quote(instant.isoformat())
        answer = cluster.writer.get(f"/api/decisions/{quoted}?as_of={at}")
        assert answer["belief"]["decision_id"] == in_force
        assert answer["evidence_basis"] == "rebuilt"
        assert answer["decision"]["decision_id"] == in_force
    before = urllib.parse.quote("2000-01-01T00:00:00Z")
    assert cluster.writer.get(f"/api/decisions/{quoted}?as_of={before}", attempts=1) is None


def test_markup_from_producers_renders_as_text(cluster: Cluster, page: Page) -> None:
    key = state_key(MARKUP_SUBJECT, ADDRESS)
    page.goto(cluster.url(cluster.reader, "/ui/"))
    wait_for_queue(page, {key})
    row = page.locator("#queue tr[data-key]").filter(has_text="onerror")
    expect(row.locator("td.subject")).to_have_text(MARKUP_SUBJECT)
    page.goto(key_page(cluster, cluster.reader, key))
    expect(page.locator("#evidence")).to_contain_text(SCRIPT_VALUE, timeout=WAIT_MS)
    expect(page.locator("h1")).to_contain_text(MARKUP_SUBJECT)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#main script, #main img").count() == 0
    with urllib.request.urlopen(cluster.url(cluster.reader, "/ui/"), timeout=10) as reply:
        policy = reply.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    shoot(page, "markup-as-text")


def test_without_a_token_there_is_no_button_and_the_api_refuses(
    cluster: Cluster, page: Page
) -> None:
    key = "api:checkout|api.latency"
    body = {"key": key, "value": 200, "decided_by": "mallory"}
    # Worker 1 has no steward token: writes are off, the page offers no form at all.
    page.goto(key_page(cluster, cluster.reader, key))
    expect(page.locator("#evidence")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#resolve")).to_have_count(0)
    expect(page.locator("#steward")).to_be_hidden()
    assert cluster.post(cluster.reader, body, TOKEN)[0] == 403
    # Worker 0 takes writes, but not before a token is entered, and not without a good one.
    page.goto(key_page(cluster, cluster.writer, key))
    expect(page.locator("#resolve")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#resolve-submit")).to_have_count(0)
    assert cluster.post(cluster.writer, body, None)[0] == 401
    assert cluster.post(cluster.writer, body, "not-the-steward-token")[0] == 403
    refused = cluster.writer.get("/metrics") + cluster.reader.get("/metrics")
    for reason in ("writes_disabled", "missing_token", "bad_token"):
        assert re.search(
            rf'claimstream_console_writes_refused_total\{{reason="{reason}"\}} [1-9]', refused
        ), reason
    assert cluster.writer.get("/api/conflicts")["counts_per_field"]["api.latency"] == 1


def test_a_steward_resolves_the_demos_conflict_from_the_browser(
    cluster: Cluster, page: Page
) -> None:
    key = "invoice:42|order.payment_status"
    page.goto(cluster.url(cluster.writer, "/ui/"))
    page.locator("#token").fill(TOKEN)
    page.locator("#token-use").click()
    page.goto(key_page(cluster, cluster.writer, key))
    expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    form = page.locator("#resolve")
    expect(form).to_be_visible(timeout=WAIT_MS)
    form.get_by_label("paid", exact=True).check()
    page.locator("#note").fill("the ledger is authoritative; the export lagged")
    page.locator("#resolve-submit").click()
    expect(page.locator("#outcome")).to_contain_text("resolved", timeout=WAIT_MS)
    expect(page.locator("#outcome")).to_contain_text("reason manual")
    resolution = page.locator('#steward-log tr[data-act="resolve"]')
    expect(resolution.locator("td.by")).to_have_text("Ann Steward")
    expect(resolution.locator("td.standing")).to_have_text("in force")
    expect(page.locator("#resolve")).to_have_count(0)
    shoot(page, "resolved")

    history = cluster.reader.get("/api/decisions/" + urllib.parse.quote(key, safe="") + "/history")
    (resolution,) = history["resolutions"]
    assert resolution["decided_by"] == "Ann Steward"
    assert resolution["note"] == "the ledger is authoritative; the export lagged"
    assert history["decisions"][-1]["reason"] == "manual"
    assert key not in {r["key"] for r in cluster.reader.get("/api/conflicts")["open_conflicts"]}
    assert 'claimstream_console_resolutions_total{field="order.payment_status"} 1.0' in (
        cluster.writer.get("/metrics")
    )


def test_a_newcomer_resolves_a_demo_conflict_in_claimstream_dev(page: Page, tmp_path: Path) -> None:
    """What the README promises: run `claimstream dev`, open the printed URL, paste the printed
    token, resolve. (The semantic latency conflict stays open for ten minutes: time enough.)"""
    web_port = free_port()
    log = tmp_path / "dev.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "dev", "--round-seconds", "600"],
            cwd=REPO,
            env=dict(os.environ, CLAIMSTREAM_WEB_PORT=str(web_port), CLAIMSTREAM_LOG_LEVEL="error"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        printed = None
        deadline = time.monotonic() + 90
        while printed is None and time.monotonic() < deadline and proc.poll() is None:
            printed = re.search(
                r"steward console on (\S+) \(steward token: (\S+)\)", log.read_text()
            )
            time.sleep(0.3)
        assert printed is not None, log.read_text()[-2000:]
        url, token = printed.groups()
        assert url == f"http://127.0.0.1:{web_port}/ui/"
        while time.monotonic() < deadline:  # printed before the worker's web server is up
            try:
                with urllib.request.urlopen(url, timeout=5):
                    break
            except OSError:
                time.sleep(0.5)
        page.goto(url)
        key = "api:checkout|api.latency"
        # The demo's conflicts as a newcomer first sees them (these two stay open for minutes).
        wait_for_queue(page, {key, "svc:checkout|service.retry_timeout"})
        expect(page.locator("#workers")).to_contain_text("1 of 1 workers answered", timeout=WAIT_MS)
        shoot_for_docs(page, DOCS / "images" / "console-conflicts.png")
        page.locator("#token").fill(token)
        page.locator("#token-use").click()
        page.locator(f'#queue tr[data-key="{key}"] a').click()
        form = page.locator("#resolve")
        expect(form).to_be_visible(timeout=WAIT_MS)
        form.locator("input[name=choice]").first.check()
        page.locator("#resolve-submit").click()
        expect(page.locator("#outcome")).to_contain_text("reason manual", timeout=WAIT_MS)
        expect(page.locator("#outcome")).to_contain_text("resolved")
        shoot(page, "dev-resolved")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def spread_owners(cluster: Cluster) -> dict[str, bool]:
    """The spread payment conflicts' keys, each with whether the writer owns it."""
    owners = {}
    for subject in one_subject_per_partition("invoice:90", cluster.deployment.partitions, PAYMENT):
        key = state_key(subject, PAYMENT)
        shown = cluster.writer.get("/api/decisions/" + urllib.parse.quote(key, safe=""))
        owners[key] = shown["worker"].endswith(f":{cluster.writer.web_port}")
    return owners


def dead_letter(cluster: Cluster, reason: str, naming: str = "") -> str:
    """The detail of a dead letter refused for `reason` whose detail names `naming`, read from
    the dead-letter topic until one is there (a minute at most)."""
    topic = cluster.deployment.topics.dead_letters
    found: list[Any] = []
    failures: list[BaseException] = []

    async def dead_letters() -> None:
        found.extend(await read_topic(cluster.deployment.bootstrap, topic, idle_s=1))

    deadline = time.monotonic() + 60
    while True:
        found.clear()
        reading = threading.Thread(target=lambda: run_into(dead_letters(), failures))
        reading.start()
        reading.join(90)
        assert not failures, failures
        for message in found:
            headers = {name: value.decode() for name, value in message.headers}
            detail = headers.get("claimstream.error.detail", "")
            if headers.get("claimstream.error.reason") == reason and naming in detail:
                return detail
        assert time.monotonic() < deadline, f"no dead letter {reason} naming {naming!r}"


def test_a_resolution_of_a_decision_no_longer_current_is_refused_where_the_steward_sees_it(
    cluster: Cluster,
) -> None:
    """On the worker owning the key the console refuses at once (409, the reason in the answer);
    on another it publishes, and the owner refuses it when it applies it (a dead letter). Either
    way the key's decision stands, and the steward's name comes from the token, not the body."""
    owners: dict[bool, str] = {}
    for key, here in spread_owners(cluster).items():
        owners.setdefault(here, key)
    assert set(owners) == {True, False}
    stale = "dec_000000000000000000000000"
    for here, key in owners.items():
        body = {"key": key, "value": "paid", "decided_by": "mallory"}
        status, answer = cluster.post(
            cluster.writer, {**body, "resolves_decision_id": stale}, TOKEN
        )
        if here:
            assert status == 409, answer
            assert answer["refused"] == "stale_decision"
            assert stale in answer["error"]
        else:
            assert status == 202, answer
            assert answer["resolution"]["decided_by"] == "Ann Steward"
    dead_letter(cluster, "stale_decision")
    assert set(owners.values()) <= open_keys(cluster.reader)


def test_a_steward_whose_view_went_stale_sees_the_resolution_refused_in_the_browser(
    cluster: Cluster, browser: BrowserContext
) -> None:
    """The page keeps the conflict it loaded (its live feed held silent, as when it drops),
    new evidence settles the key meanwhile: publishing the old view is refused, and said so."""
    key = [k for k, here in spread_owners(cluster).items() if here][-1]
    subject = split_key(key)[0]
    page = browser.new_page()
    script_errors: list[str] = []  # the 409 itself is logged by Chromium: only scripts count
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    page.route("**/api/live*", hold_live_silent)
    try:
        page.goto(cluster.url(cluster.writer, "/ui/"))
        page.locator("#token").fill(TOKEN)
        page.locator("#token-use").click()
        page.goto(key_page(cluster, cluster.writer, key))
        form = page.locator("#resolve")
        expect(form).to_be_visible(timeout=WAIT_MS)
        path = "/api/decisions/" + urllib.parse.quote(key, safe="")
        viewed = cluster.writer.get(path)["decision"]["decision_id"]
        later = datetime.now(UTC).isoformat()
        cluster.publish(
            [
                {
                    "claim_id": f"{subject}-c",
                    "subject": subject,
                    "field": PAYMENT,
                    "status": "present",
                    "value": "paid",
                    "source": "billing-export",
                    "observed_at": later,
                },
            ]
        )
        deadline = time.monotonic() + 60
        while cluster.writer.get(path)["decision"]["decision_id"] == viewed:
            assert time.monotonic() < deadline, "the new evidence did not change the decision"
            time.sleep(0.5)
        form.get_by_label("overdue", exact=True).check()
        page.locator("#resolve-submit").click()
        status = page.locator("#resolve-status")
        expect(status).to_contain_text("Refused", timeout=WAIT_MS)
        expect(status).to_contain_text(viewed)
        expect(status).to_contain_text("look again")
        shoot(page, "stale-view-refused")
        answer = cluster.writer.get(path)
        assert (answer["decision"]["outcome"], answer["decision"]["value"]) == ("resolved", "paid")
        history = cluster.writer.get(path + "/history")
        assert history["resolutions"] == []
        assert script_errors == []
    finally:
        page.close()


def test_a_key_shows_the_spelling_each_claim_was_sent_about_and_its_merges(
    cluster: Cluster, page: Page
) -> None:
    """Two spellings of one invoice agree; once an alias merges them, the canonical key's page
    names the spelling of the claim sent under the alias, and lists the merge."""
    alias, canonical = "INV-7731", "invoice:7731"
    at = datetime.now(UTC).isoformat()
    cluster.publish(
        [
            {
                "claim_id": "inv7731-a",
                "subject": alias,
                "field": PAYMENT,
                "status": "present",
                "value": "paid",
                "source": "billing-api",
                "observed_at": at,
            },
            {
                "claim_id": "inv7731-b",
                "subject": canonical,
                "field": PAYMENT,
                "status": "present",
                "value": "paid",
                "source": "reporting-replica",
                "observed_at": at,
            },
        ]
    )
    change = AliasChange(alias, canonical, datetime.now(UTC), "Ann Steward")
    signer = signer_of("Ann Steward")  # the policy asks for stewards' signatures
    failures: list[BaseException] = []
    publishing = threading.Thread(
        target=lambda: run_into(publish_alias(cluster.settings, change, signer), failures)
    )
    publishing.start()
    publishing.join(60)
    assert not failures, failures
    key = state_key(canonical, PAYMENT)
    path = f"/api/decisions/{urllib.parse.quote(key, safe='')}"
    deadline = time.monotonic() + 60  # the alias key is quiet: the sweep moves its evidence
    while len((cluster.reader.get(path) or {}).get("decision", {}).get("evidence", ())) < 2:
        assert time.monotonic() < deadline, cluster.reader.get(path)
        time.sleep(0.5)
    # The page is the reader's, which follows the aliases topic on its own poll: it may read
    # the change a moment after the key's owner moved the evidence.
    merges = f"/api/aliases?subject={urllib.parse.quote(canonical)}"
    while not (cluster.reader.get(merges) or {}).get("changes"):
        assert time.monotonic() < deadline, cluster.reader.get(merges)
        time.sleep(0.5)
    page.goto(key_page(cluster, cluster.reader, key))
    expect(page.locator("#evidence tbody tr")).to_have_count(2, timeout=WAIT_MS)
    expect(page.locator("#evidence .sent-about")).to_have_text(f"sent about {alias}")
    expect(page.locator("#merges")).to_contain_text(alias)
    expect(page.locator("#merges")).to_contain_text(f"→ {canonical}")


# ---- stewards reviewing each other: contract.reviewed_seats needs one approval ----------------


def seats_claim(
    subject: str, suffix: str, source: str, seats: int, at: datetime, field: str = SEATS
) -> dict[str, Any]:
    """A claim on a reviewed field: `source` says `seats`."""
    return {"claim_id": f"{subject}-{suffix}", "subject": subject, "field": field,
            "status": "present", "value": seats, "source": source,
            "observed_at": at.isoformat()}  # fmt: skip


def seats_conflict(
    cluster: Cluster, name: str, writer_owns: bool = True, field: str = SEATS
) -> str:
    """A new value conflict on a reviewed field (two systems of record say 10 and 12), on a
    key worker 0 owns (it refuses a stale basis at once, 409) or, `writer_owns` false, not;
    its key, once decided (a page asking before would be answered 404)."""
    partitions = cluster.deployment.partitions
    owned = {
        partition_of(k.encode(), partitions) for k, here in spread_owners(cluster).items() if here
    }
    subject = next(
        subject
        for subject in (f"{name}{n}" for n in itertools.count(1))
        if (partition_of(state_key(subject, field).encode(), partitions) in owned) == writer_owns
    )
    at = datetime.now(UTC)
    cluster.publish(
        [
            seats_claim(subject, "a", "crm", 10, at, field),
            seats_claim(subject, "b", "order-form", 12, at, field),
        ]
    )
    decision_of(cluster, state_key(subject, field), "conflict")
    return state_key(subject, field)


def decision_of(cluster: Cluster, key: str, outcome: str) -> dict[str, Any]:
    """Worker 0's answer for `key` once its decision is `outcome` (a minute at most)."""
    path = "/api/decisions/" + urllib.parse.quote(key, safe="")
    deadline = time.monotonic() + 60
    while (answer := cluster.writer.get(path) or {}).get("decision", {}).get("outcome") != outcome:
        assert time.monotonic() < deadline, answer
        time.sleep(0.3)
    return answer


def history_of(cluster: Cluster, key: str) -> dict[str, Any]:
    return cluster.writer.get("/api/decisions/" + urllib.parse.quote(key, safe="") + "/history")


def standing_of(cluster: Cluster, key: str, statement_id: str, standing: str) -> None:
    """Wait until worker 0 says the statement stands so on the key (a minute at most)."""
    deadline = time.monotonic() + 60
    while True:
        history = history_of(cluster, key)
        found = {s["resolution_id"]: s["standing"] for s in history["steward_log"]}
        found |= {r["resolution_id"]: "in_force" for r in history["resolutions"]}
        if found.get(statement_id) == standing:
            return
        assert time.monotonic() < deadline, history
        time.sleep(0.2)


def propose(page: Page, value: str, note: str) -> None:
    """The key's resolve form, where the field needs review: a proposal, and it says so."""
    expect(page.locator("#review-needed")).to_contain_text("1 approval", timeout=WAIT_MS)
    expect(page.locator("#resolve-submit")).to_have_text("Propose resolution")
    page.locator("#resolve").get_by_label(value, exact=True).check()
    page.locator("#note").fill(note)
    page.locator("#resolve-submit").click()
    expect(page.locator("#resolve-status")).to_contain_text(
        "pending, it waits for 1 approval", timeout=WAIT_MS
    )


def laid_out_at_1400(page: Page) -> None:
    """At 1400 px nothing runs under anything else: the policy panel beside the explanation, the
    stewards' history and the evidence (its last column on screen) below both."""
    panel = page.locator("#rules").bounding_box()
    history = page.locator("#steward-log").bounding_box()
    last_column = page.locator("#evidence th").last.bounding_box()
    assert panel is not None
    assert history is not None
    assert last_column is not None
    for box in (history, last_column):
        assert apart(box, panel), (box, panel)
        assert box["x"] + box["width"] <= 1400, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400


def test_a_proposal_counts_once_another_steward_approves_it_never_its_author(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """On a key worker 0 owns, alice's approval of her own proposal is refused at once (409);
    bob's approval, naming what his page showed, puts it in force."""
    key = seats_conflict(cluster, "seats-four-eyes-")
    alice = steward("alice", key)
    propose(alice, "10", "the signed order says 10")
    proposal = alice.locator('#steward-log tr[data-act="resolve"]')
    expect(proposal).to_have_attribute("data-standing", "pending")
    expect(proposal.locator("td.approvals")).to_have_text("0 of 1")
    expect(proposal.locator("td.note")).to_have_text("the signed order says 10")
    expect(alice.locator("#outcome")).to_contain_text("conflict")  # not applied

    proposal.locator("button.approve").click()
    refused = proposal.locator("p.status.warn")
    expect(refused).to_contain_text("Refused: approve", timeout=WAIT_MS)
    expect(refused).to_contain_text("'alice' made")
    expect(refused).to_contain_text("its author's approval does not count")
    assert re.search(
        r'claimstream_console_writes_refused_total\{reason="review_refused"\} [1-9]',
        cluster.writer.get("/metrics"),
    )
    log = history_of(cluster, key)["steward_log"]
    assert [(s["act"], s["standing"], s["decided_by"]) for s in log] == [
        ("resolve", "pending", "alice")
    ]

    # Bob approves as he saw it: the value is in force, for him and (live) for her.
    bob = steward("bob", key)
    basis = cluster.writer.get("/api/decisions/" + urllib.parse.quote(key, safe=""))["basis"]
    reviewed = bob.locator('#steward-log tr[data-act="resolve"]')
    expect(reviewed).to_have_attribute("data-standing", "pending", timeout=WAIT_MS)
    reviewed.locator("button.approve").click()
    expect(bob.locator("#outcome")).to_contain_text("reason manual", timeout=WAIT_MS)
    expect(bob.locator("#value")).to_have_text("10")
    expect(reviewed.locator("td.standing")).to_have_text("in force")
    expect(reviewed.locator("td.approvals")).to_have_text("approved by bob")
    seen = bob.locator('#steward-log tr[data-act="approve"]')
    expect(seen.locator("td.by")).to_have_text("bob")
    expect(seen).to_contain_text(
        f"saw decision {basis['decision_id']} · evidence {basis['evidence_digest']}"
    )
    expect(alice.locator("#value")).to_have_text("10", timeout=WAIT_MS)
    expect(proposal.locator("td.standing")).to_have_text("in force")
    laid_out_at_1400(bob)
    shoot(bob, "proposal-approved")
    history = history_of(cluster, key)
    assert [r["decided_by"] for r in history["resolutions"]] == ["alice"]
    assert [(s["act"], s["decided_by"]) for s in history["steward_log"]] == [("approve", "bob")]


def test_an_approval_of_a_view_gone_stale_is_refused_and_the_proposal_goes_back(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """Bob's page keeps the view it loaded (its live feed silent); new evidence decides the key
    meanwhile. His approval of that view, published through worker 0 (which does not own the
    key), is refused by the key's owner, which sends the proposal back to alice, saying why."""
    key = seats_conflict(cluster, "seats-stale-", writer_owns=False)
    subject = split_key(key)[0]
    alice = steward("alice", key)
    propose(alice, "10", "crm first")
    bob = steward("bob", key, live=False)
    reviewed = bob.locator('#steward-log tr[data-act="resolve"]')
    expect(reviewed).to_have_attribute("data-standing", "pending", timeout=WAIT_MS)
    viewed = decision_of(cluster, key, "conflict")["basis"]["decision_id"]
    cluster.publish([seats_claim(subject, "c", "crm", 12, datetime.now(UTC))])
    now = decision_of(cluster, key, "resolved")["basis"]["decision_id"]  # both say 12 now
    reviewed.locator("button.approve").click()
    refused = reviewed.locator("p.status.warn")
    expect(refused).to_contain_text("is sent back", timeout=WAIT_MS)
    expect(refused).to_contain_text(f"its decision is now {now}")
    proposal = alice.locator('#steward-log tr[data-act="resolve"]')
    expect(proposal).to_have_attribute("data-standing", "sent_back", timeout=WAIT_MS)
    expect(proposal.locator("td.standing")).to_contain_text("sent back")
    expect(proposal.locator(".why")).to_contain_text("look at the new evidence and propose again")
    expect(proposal).to_contain_text(f"on decision {viewed}")
    shoot(alice, "proposal-sent-back")
    (step,) = history_of(cluster, key)["steward_log"]
    assert (step["standing"], step["decided_by"]) == ("sent_back", "alice")
    answer = decision_of(cluster, key, "resolved")["decision"]
    assert (answer["value"], answer["reason"]) == (12, "system_of_record_precedence")


def test_the_owner_refuses_an_authors_approval_later_and_a_rejection_shows_with_its_note(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """On a key another worker owns, worker 0 publishes alice's approval of her own proposal
    (202): her page says it is refused, and the owner dead-letters it. Bob rejects the proposal
    with a note (markup in it shows as text); her page shows it."""
    key = seats_conflict(cluster, "seats-rejected-", writer_owns=False)
    alice = steward("alice", key)
    propose(alice, "10", "crm first")
    proposal = alice.locator('#steward-log tr[data-act="resolve"]')
    proposal.locator("button.approve").click()
    refused = proposal.locator("p.status.warn")
    expect(refused).to_contain_text("its author's own approval does not count", timeout=WAIT_MS)
    approval = re.search(r"refuses approval (res-[0-9a-f]+)", refused.inner_text())
    assert approval is not None, refused.inner_text()

    bob = steward("bob", key)
    reviewed = bob.locator('#steward-log tr[data-act="resolve"]')
    expect(reviewed).to_have_attribute("data-standing", "pending", timeout=WAIT_MS)
    note = f"{MARKUP_SUBJECT} the signed order form says 12"
    reviewed.locator("input.review-note").fill(note)
    reviewed.locator("button.reject").click()
    expect(reviewed.locator("p.status")).to_contain_text("is rejected", timeout=WAIT_MS)
    expect(proposal.locator("td.standing")).to_have_text("rejected", timeout=WAIT_MS)
    rejection = alice.locator('#steward-log tr[data-act="reject"]')
    expect(rejection.locator("td.by")).to_have_text("bob")
    expect(rejection.locator("td.note")).to_have_text(note)  # a steward's markup: text too
    assert alice.evaluate("window.__pwned") is None
    assert alice.locator("#steward-log img").count() == 0
    expect(alice.locator("#outcome")).to_contain_text("conflict")
    shoot(alice, "proposal-rejected")
    log = history_of(cluster, key)["steward_log"]
    assert [(s["act"], s["standing"], s["note"]) for s in log] == [
        ("resolve", "rejected", "crm first"),
        ("reject", "recorded", note),
    ]
    # Her approval went before bob's rejection, to the same partition: refused by then.
    assert "'alice' made" in dead_letter(cluster, "review_refused", approval[1])


def test_an_approved_undo_returns_the_policys_own_decision(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """Alice's resolution, approved by bob (through the API), is in force; her undo, approved
    by bob in his browser, takes it back: the key is decided as the policy decides it, the very
    decision it had before (its id), and her page shows the resolution undone."""
    key = seats_conflict(cluster, "seats-undone-")
    own = decision_of(cluster, key, "conflict")
    basis = own["basis"]
    body = {"key": key, "value": 10, "resolves_decision_id": basis["decision_id"]}
    status, proposed = cluster.post(cluster.writer, body, STEWARDS["alice"])
    assert status == 202, proposed
    resolution_id = proposed["resolution"]["resolution_id"]
    standing_of(cluster, key, resolution_id, "pending")  # what bob's approval is checked against
    approve = {"key": key, "act": "approve", "target_id": resolution_id,
               "resolves_decision_id": basis["decision_id"],
               "basis_digest": basis["evidence_digest"]}  # fmt: skip
    status, answer = cluster.post(cluster.writer, approve, STEWARDS["bob"])
    assert status == 202, answer

    alice = steward("alice", key)
    resolution = alice.locator(f'#steward-log tr[data-id="{resolution_id}"]')
    expect(resolution).to_have_attribute("data-standing", "in_force", timeout=WAIT_MS)
    resolution.locator("input.review-note").fill("the order form was amended")
    undo = resolution.locator("button.undo")
    expect(undo).to_have_text("Propose undo")
    undo.click()
    proposed_undo = alice.locator('#steward-log tr[data-act="undo"]')
    expect(proposed_undo).to_have_attribute("data-standing", "pending", timeout=WAIT_MS)
    expect(alice.locator("#outcome")).to_contain_text("reason manual")  # not undone yet

    bob = steward("bob", key)
    reviewed = bob.locator('#steward-log tr[data-act="undo"]')
    expect(reviewed).to_have_attribute("data-standing", "pending", timeout=WAIT_MS)
    reviewed.locator("button.approve").click()
    expect(alice.locator("#outcome")).to_contain_text("conflict", timeout=WAIT_MS)
    expect(resolution.locator("td.standing")).to_have_text("undone")
    expect(proposed_undo.locator("td.standing")).to_have_text("applied")
    expect(proposed_undo.locator("td.approvals")).to_have_text("1 of 1 (bob)")
    expect(proposed_undo.locator("td.note")).to_have_text("the order form was amended")
    expect(alice.locator("#resolve")).to_be_visible()  # open again: another may be proposed
    shoot(alice, "undo-approved")
    answer = cluster.writer.get("/api/decisions/" + urllib.parse.quote(key, safe=""))
    assert answer["decision"]["decision_id"] == own["decision"]["decision_id"]
    assert history_of(cluster, key)["resolutions"] == []


# ---- the queue's tasks: who holds each, leases, bulk reviews ----------------------------------


def queue_row(page: Page, key: str) -> Locator:
    return page.locator(f'#queue tr[data-key="{key}"]')


def test_a_task_held_by_another_is_refused_until_its_lease_lapses_then_taken(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """On contract.leased_seats a task's lease lasts 5 s after its holder's last statement on the
    key. Bob takes a task from the queue; alice's Take while his lease runs is refused (worker 0
    owns the key: at once), her page saying whose it is and until when; once the lease lapses
    her page shows the task free, and her Take holds. She hands it on to bob. The field falls
    due 2 s after the conflict opens: the row is overdue by then."""
    key = seats_conflict(cluster, "leased-", field=LEASED)
    alice = steward("alice", None, query=f"field={LEASED}")
    bob = steward("bob", None, query=f"field={LEASED}")
    theirs, his = queue_row(alice, key), queue_row(bob, key)
    expect(theirs).to_have_attribute("data-assignee", "", timeout=WAIT_MS)
    expect(alice.locator("#steward-name")).to_have_text("as alice")  # GET /api/console says
    expect(his.locator("button.take")).to_be_enabled(timeout=WAIT_MS)
    his.locator("button.take").click()
    expect(his).to_have_attribute("data-assignee", "bob", timeout=WAIT_MS)  # the owner took it
    theirs.locator("button.take").click()  # her page has not looked again: it shows it free
    refused = theirs.locator("p.status.warn")
    expect(refused).to_contain_text("Refused (review_refused)", timeout=WAIT_MS)
    expect(refused).to_contain_text("the task is bob's until")
    assert "its lease lapses without a statement" in refused.inner_text()
    expect(theirs.locator("td.task .holder")).to_have_text("bob")  # it looked again
    expect(theirs.locator("td.task .lease")).to_contain_text("until")
    shoot(alice, "task-refused")

    # Bob says nothing more on the key: his lease lapses, and her page looks again then.
    expect(theirs).to_have_attribute("data-assignee", "", timeout=WAIT_MS)
    theirs.locator("button.take").click()
    expect(theirs).to_have_attribute("data-assignee", "alice", timeout=WAIT_MS)
    expect(theirs.locator("td.task")).to_contain_text("alice (you)")
    expect(theirs).to_have_attribute("data-overdue", "true")
    expect(theirs.locator("td.due .badge.overdue")).to_have_text("overdue")
    theirs.get_by_label(f"hand {key} to").fill("bob")
    theirs.locator("button.hand").click()
    expect(theirs.locator("p.status")).to_contain_text("Handed to bob", timeout=WAIT_MS)
    assigned = [
        (s["decided_by"], s["assignee"])
        for s in history_of(cluster, key)["steward_log"]
        if s["act"] == "assign"
    ]
    assert assigned == [("bob", "bob"), ("alice", "alice"), ("alice", "bob")], assigned
    overdue = cluster.writer.get(f"/api/conflicts?field={LEASED}&overdue=1")["open_conflicts"]
    assert key in {row["key"] for row in overdue}


def test_a_steward_approves_200_proposals_in_one_action_each_answered_on_its_own(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """Alice proposes a value for 200 conflicts of contract.bulk_seats (one batch, through the
    API); bob proposes one himself. Bob selects all 201 in the queue and approves them in one
    action (one batch): 200 accepted, his own refused at once with the reason (worker 0 owns
    that key); the 200 keys resolve. He then takes the one left (Take selected), finds it under
    "mine", and releases it."""
    at = datetime.now(UTC)
    subjects = [f"bulk-{n}" for n in range(200)]
    cluster.publish(
        [
            claim
            for subject in subjects
            for claim in (
                seats_claim(subject, "a", "crm", 10, at, BULK),
                seats_claim(subject, "b", "order-form", 12, at, BULK),
            )
        ]
    )
    own = seats_conflict(cluster, "bulk-own-", field=BULK)
    keys = {state_key(subject, BULK) for subject in subjects}

    def queue() -> dict[str, dict[str, Any]]:
        answer = cluster.writer.get(f"/api/conflicts?field={BULK}") or {"open_conflicts": []}
        return {row["key"]: row for row in answer["open_conflicts"]}

    deadline = time.monotonic() + 60
    while not keys <= set(queue()):
        assert time.monotonic() < deadline, len(queue())
        time.sleep(0.3)
    proposals = [{"key": key, "value": 10, "note": "the signed order"} for key in sorted(keys)]
    answer = cluster.post_many(cluster.writer, proposals, STEWARDS["alice"])
    assert (answer["accepted"], answer["refused"]) == (200, 0), answer
    status, proposed = cluster.post(cluster.writer, {"key": own, "value": 12}, STEWARDS["bob"])
    assert status == 202, proposed
    while any(row["waiting_for_review"] != 1 for row in queue().values()):
        assert time.monotonic() < deadline, queue()
        time.sleep(0.3)

    bob = steward("bob", None, query=f"field={BULK}")
    rows = bob.locator("#queue tbody tr[data-key]")
    expect(rows).to_have_count(201, timeout=WAIT_MS)
    expect(queue_row(bob, own).locator("td.review")).to_have_text("1 to review")
    bob.locator("#select-all").check()
    expect(bob.locator("#selected-count")).to_have_text("201 selected")
    with bob.expect_request("**/api/resolutions/batch") as sent:
        bob.locator("#bulk-approve").click()
    statements = json.loads(sent.value.post_data or "{}")["statements"]
    assert len(statements) == 201
    assert {s["act"] for s in statements} == {"approve"}
    summary = bob.locator("#bulk-summary")
    expect(summary).to_have_text(
        "Approve selected: 200 accepted · 1 refused · 0 not sent", timeout=WAIT_MS
    )
    results = bob.locator("#bulk-results tbody tr")
    expect(results.filter(has=bob.locator("td.accepted"))).to_have_count(200)
    refused = bob.locator(f'#bulk-results tr[data-key="{own}"]')
    expect(refused).to_have_attribute("data-result", "refused")
    expect(refused).to_contain_text("Refused (review_refused)")
    expect(refused).to_contain_text("its author's approval does not count")
    expect(queue_row(bob, own).locator("p.status.warn")).to_contain_text(
        "its author's approval does not count"
    )
    # The 200 keys resolve (live), and leave the queue: bob's own proposal waits still.
    expect(rows).to_have_count(1, timeout=WAIT_MS)
    expect(queue_row(bob, own)).to_be_visible()
    bob.screenshot(path=str(SCREENSHOTS / "bulk-approved.png"))  # the window: the page is long
    assert set(queue()) == {own}
    answer = decision_of(cluster, sorted(keys)[0], "resolved")["decision"]
    assert (answer["value"], answer["reason"]) == (10, "manual")

    # What is left he takes (one batch), finds among his tasks, and releases.
    queue_row(bob, own).locator("input.pick").check()
    bob.locator("#bulk-take").click()
    expect(summary).to_have_text("Take selected: 1 accepted · 0 refused · 0 not sent")
    expect(queue_row(bob, own)).to_have_attribute("data-assignee", "bob", timeout=WAIT_MS)
    bob.locator("#filter-mine").check()
    expect(bob).to_have_url(re.compile(r"assignee=bob"))
    expect(rows).to_have_count(1, timeout=WAIT_MS)
    queue_row(bob, own).locator("button.release").click()
    expect(rows).to_have_count(0, timeout=WAIT_MS)  # no longer his
    expect(bob.locator("#queue tbody")).to_contain_text("No open conflicts.")
    assert queue()[own]["assignee"] is None


def test_the_console_signs_what_a_steward_resolves_where_the_policy_requires_it(
    cluster: Cluster, steward: Callable[..., Page]
) -> None:
    """The policy requires stewards' signatures: alice's resolution sent straight to Kafka
    unsigned is dead-lettered; hers from the browser, signed by worker 0 with her key, holds."""
    subject = "invoice:signed-1"
    key = state_key(subject, PAYMENT)
    cluster.publish(payment_conflict(subject, datetime.now(UTC)))
    decision_of(cluster, key, "conflict")
    unsigned = build_resolution(
        None, subject, PAYMENT, decided_by="alice", value="paid", decided_at=datetime.now(UTC)
    )
    failures: list[BaseException] = []
    sending = threading.Thread(
        target=lambda: run_into(publish_resolutions(cluster.settings, [unsigned]), failures)
    )
    sending.start()
    sending.join(60)
    assert not failures, failures
    assert "'alice' requires a signature" in dead_letter(cluster, "unauthenticated", "'alice'")
    assert history_of(cluster, key)["resolutions"] == []

    alice = steward("alice", key)
    form = alice.locator("#resolve")
    expect(form).to_be_visible(timeout=WAIT_MS)
    form.get_by_label("overdue", exact=True).check()
    alice.locator("#note").fill("the export is right this time")
    alice.locator("#resolve-submit").click()
    expect(alice.locator("#outcome")).to_contain_text("reason manual", timeout=WAIT_MS)
    expect(alice.locator("#value")).to_have_text("overdue")
    resolution = alice.locator('#steward-log tr[data-act="resolve"]')
    expect(resolution.locator("td.by")).to_have_text("alice")
    (held,) = history_of(cluster, key)["resolutions"]
    assert held["resolution_id"] != unsigned.resolution_id

    found: list[Any] = []

    async def resolutions() -> None:
        topic = cluster.deployment.topics.resolutions
        found.extend(await read_topic(cluster.deployment.bootstrap, topic, idle_s=1))

    reading = threading.Thread(target=lambda: run_into(resolutions(), failures))
    reading.start()
    reading.join(90)
    assert not failures, failures
    signed_by = [dict(m.headers).get(KEY_ID_HEADER) for m in found if m.key == key.encode()]
    assert sorted(signed_by, key=lambda k: k or b"") == [None, b"alice-1"], signed_by
