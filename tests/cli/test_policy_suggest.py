"""`claimstream policy suggest`: candidate edits read from a worker's /api/sources, with their
evidence, the same lines for the same answer, and nothing applied."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from streams.arbiter.sources import sources_report
from streams.cli.main import main
from streams.core.sources.settlement import Ledger
from tests.support.builders import NOW, POLICY
from tests.support.settlements import synthetic


@pytest.fixture
def worker() -> Iterator[tuple[str, list[str]]]:
    """A stand-in worker answering /api/sources from the synthetic feed's ledger."""
    ledger = Ledger()
    for settlement in synthetic(seed=7, subjects=160):
        ledger.add(settlement)
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            since = parse_qs(url.query)["since"][0]
            asked.append(since)
            report: dict[str, Any] = {
                **sources_report(ledger, POLICY, None),
                "since": since[:10],
                "workers": ["http://w1", "http://w2"],
                "unanswered": [],
            }
            body = json.dumps(report).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()
    server.server_close()


def test_suggest_prints_the_lineage_with_its_evidence_the_same_way_twice(
    worker: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = worker
    argv = ["policy", "suggest", "--since", "7d", "--url", url, "--now", NOW.isoformat()]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert asked == [(NOW - timedelta(days=7)).isoformat()] * 2
    lines = first.splitlines()
    assert lines[0].startswith("policy suggest: 1 candidate edits from the settlements since")
    assert "[lineage] billing-export and order-form may share one upstream" in lines[1]
    assert "both wrong the same way" in lines[2]
    assert lines[3].startswith("   examples: order:")
    assert "   edit: sources.billing-export.lineage: billing-export" in lines
    assert "   edit: sources.order-form.lineage: billing-export" in lines
    assert "policy diff" in lines[-1]


def test_suggest_names_a_worker_that_does_not_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["policy", "suggest", "--since", "1d", "--url", "http://127.0.0.1:9"]
    assert main(argv) == 2
    assert "could not read http://127.0.0.1:9/api/sources" in capsys.readouterr().err


def test_an_authority_to_review_is_an_edit_of_the_field_authorities() -> None:
    from streams.core.records.contracts import Authority
    from streams.core.sources.dependence import report
    from streams.core.sources.suggestions import suggest
    from tests.support.settlements import AUTHORITIES, FIELD

    ledger = Ledger()
    for settlement in synthetic(seed=3, subjects=160):
        ledger.add(settlement)
    found = suggest(report(ledger, {**AUTHORITIES, (FIELD, "crm"): Authority.CACHED}, {}))
    authority = [s for s in found if s.kind == "authority"]
    assert authority
    assert found.index(authority[0]) > 0  # lineages first
    assert all(s.edits == (f"fields.{FIELD}.authorities.crm: system_of_record",) for s in authority)
    assert "crm (cached) was right more often than" in authority[0].title
