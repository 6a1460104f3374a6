"""Steward tokens: writes off without one, a header only, every configured token accepted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from streams.console.stewards import Refusal, StewardTokens
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import Signing, SigningKeyPolicy
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


def test_the_console_signs_as_the_tokens_steward_with_the_key_named_for_it() -> None:
    secret = "ann-steward-secret-ann-steward-secret!"
    section = Signing(
        required=True,
        keys=(
            SigningKeyPolicy(
                key_id="ann-1", algorithm="hmac-sha256", secret_env="ANN_KEY", sources=("ann",)
            ),
        ),
    )
    settings = Settings(
        steward_tokens=SecretStr("ann:ann-token-0123456789,bo:bo-token-0123456789"),
        steward_signing_keys="ann:ann-1:ANN_KEY",
    )
    tokens = StewardTokens.from_settings(settings, {"ANN_KEY": secret})
    signer = tokens.signer("ann", section)
    assert callable(signer)
    headers = dict(signer(b"value"))
    assert headers["claimstream.key-id"] == b"ann-1"
    assert tokens.signer("bo", section) is Refusal.UNSIGNED
    assert tokens.signer("bo", section.model_copy(update={"required": False})) is None
    unbound = section.model_copy(update={"keys": ()})
    assert tokens.signer("ann", unbound) is Refusal.UNSIGNED  # the policy moved on without it


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ("ann:ann-1", "is not steward:key_id:VARIABLE"),
        ("ann:ann-1:NOPE", "$NOPE, which is not set"),
    ],
)
def test_a_signing_key_entry_that_cannot_be_used_stops_the_start(
    entries: str, problem: str
) -> None:
    with pytest.raises(ClaimstreamError, match=re.escape(problem)):
        StewardTokens.from_settings(Settings(steward_signing_keys=entries), {})
