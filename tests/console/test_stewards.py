"""Steward tokens: writes off without one, a header only, every configured token accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from streams.console.stewards import Refusal, StewardTokens
from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings

ANN = "ann-0123456789abcdef"
BOB = "bob-0123456789abcdef"


def test_writes_are_off_unless_a_token_is_configured() -> None:
    tokens = StewardTokens.from_settings(Settings())
    assert not tokens.writes_enabled
    assert tokens.refusal(f"Bearer {ANN}") is Refusal.WRITES_DISABLED


def test_each_configured_token_is_accepted_and_anything_else_refused(tmp_path: Path) -> None:
    file = tmp_path / "stewards"
    file.write_text(f"# stewards of the billing fields\n{BOB}\n\n")
    tokens = StewardTokens.from_settings(
        Settings(steward_tokens=SecretStr(f"{ANN}, "), steward_tokens_file=file)
    )
    assert tokens.writes_enabled
    assert tokens.refusal(f"Bearer {ANN}") is None
    assert tokens.refusal(f"bearer {BOB}") is None
    assert tokens.refusal(None) is Refusal.MISSING_TOKEN
    assert tokens.refusal(ANN) is Refusal.MISSING_TOKEN  # not a bearer header
    assert tokens.refusal(f"Basic {ANN}") is Refusal.MISSING_TOKEN
    assert tokens.refusal(f"Bearer {ANN[:-1]}") is Refusal.BAD_TOKEN
    assert tokens.refusal(f"Bearer {ANN}x") is Refusal.BAD_TOKEN
    assert tokens.refusal("Bearer # stewards of the billing fields") is Refusal.BAD_TOKEN


def test_short_tokens_and_unreadable_files_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ClaimstreamError, match="at least 16 characters"):
        StewardTokens(["secret"])
    with pytest.raises(ClaimstreamError, match="cannot read steward tokens"):
        StewardTokens.from_settings(Settings(steward_tokens_file=tmp_path / "missing"))


def test_a_token_is_bound_to_its_steward() -> None:
    tokens = StewardTokens([f"Ann Steward:{ANN}", BOB])
    assert tokens.steward(f"Bearer {ANN}") == "Ann Steward"
    bare = tokens.steward(f"Bearer {BOB}")
    assert isinstance(bare, str)
    assert bare.startswith("steward-")
    assert BOB not in bare
    assert tokens.steward(f"Bearer Ann Steward:{ANN}") is Refusal.BAD_TOKEN
    assert tokens.steward(None) is Refusal.MISSING_TOKEN
