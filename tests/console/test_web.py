"""The console's web helpers and its shipped assets (no worker needed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from streams.console.api import duration_text, parse_instant, rules_json
from streams.console.web import CONTENT_SECURITY_POLICY, static_assets
from streams.core.records.policy import load_policy
from tests.support.builders import REPO


def test_durations_read_as_the_policy_file_writes_them() -> None:
    assert duration_text(None) == "none"
    assert duration_text(timedelta(seconds=60)) == "1m"
    assert duration_text(timedelta(seconds=90)) == "90s"
    assert duration_text(timedelta(days=1)) == "1d"
    assert duration_text(timedelta(milliseconds=250)) == "250ms"
    rules = load_policy(REPO / "examples" / "policy.yaml").rules_for("order.payment_status")
    assert rules is not None
    shown = rules_json(rules)
    assert (shown["freshness"], shown["escalate_after"], shown["on_conflict"]) == (
        "1m",
        "5m",
        "block",
    )
    assert shown["authorities"] == {"billing-api": "system_of_record"}


def test_instants_need_an_offset_and_come_back_in_utc() -> None:
    assert parse_instant("2026-11-30T09:14:00Z") == datetime(2026, 11, 30, 9, 14, tzinfo=UTC)
    # A `+` left unescaped in a query string arrives as a space.
    assert parse_instant("2026-11-30T10:14:00 01:00") == datetime(2026, 11, 30, 9, 14, tzinfo=UTC)
    with pytest.raises(ValueError, match="UTC offset"):
        parse_instant("2026-11-30T09:14:00")
    with pytest.raises(ValueError, match="Invalid isoformat"):
        parse_instant("at nine")


def test_the_pages_ship_in_the_package_with_no_inline_code_and_no_markup_sinks() -> None:
    assets = static_assets()
    assert {"index.html", "console.js", "console.css"} <= set(assets)
    html = assets["index.html"][0].decode()
    # Every script comes from a file (the CSP allows no inline script), and no inline styles.
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/ui/console.js" defer>']
    assert " style=" not in html
    script = assets["console.js"][0].decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe" not in CONTENT_SECURITY_POLICY
