"""Sealing personal values and wrapping subject keys: deterministic sealing the worker can compare,
opening only with the key and field sealed for, keys bound to their subject and deployment, and
no secret in a repr or an error."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.normalize import normalize_string
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import StringCase
from streams.wire.personal import (
    SEALED_PREFIX,
    DataKey,
    DeploymentKey,
    SealError,
    is_sealed,
    key_id_of,
    open_sealed,
    seal,
    sealed_in,
)
from tests.support.examples import examples

KEY = DataKey("k1", bytes(range(32)))
OTHER = DataKey("k2", bytes(range(1, 33)))
values = st.text(max_size=200)
fields = st.text(min_size=1, max_size=40)


@settings(max_examples=examples(200))
@given(values, fields)
def test_sealing_is_deterministic_and_opens_to_the_normalized_value(value: str, field: str) -> None:
    sealed = seal(value, KEY, field)
    assert sealed == seal(value, KEY, field)
    assert sealed.startswith(f"{SEALED_PREFIX}k1:")
    assert is_sealed(sealed)
    assert key_id_of(sealed) == "k1"
    assert normalize_string(sealed, StringCase.PRESERVE) == sealed  # compared as sent
    assert open_sealed(sealed, KEY, field) == normalize_string(value, StringCase.PRESERVE)


@settings(max_examples=examples(100))
@given(values, values)
def test_values_equal_once_normalized_seal_alike_and_different_ones_do_not(a: str, b: str) -> None:
    same = normalize_string(a, StringCase.PRESERVE) == normalize_string(b, StringCase.PRESERVE)
    assert (seal(a, KEY, "person.name") == seal(b, KEY, "person.name")) is same


def test_spacing_and_composition_do_not_change_the_sealed_value() -> None:
    assert seal("  Ann   Lee ", KEY, "f") == seal("Ann Lee", KEY, "f")
    assert seal("Rene\u0301", KEY, "f") == seal("Ren\u00e9", KEY, "f")
    assert seal("Ann", KEY, "f") != seal("ann", KEY, "f")  # case preserved


@settings(max_examples=examples(100))
@given(values)
def test_another_field_or_key_seals_otherwise_and_does_not_open_it(value: str) -> None:
    sealed = seal(value, KEY, "person.name")
    assert sealed != seal(value, KEY, "person.email")
    assert sealed != seal(value, OTHER, "person.name")
    with pytest.raises(SealError, match="k1"):
        open_sealed(sealed, KEY, "person.email")
    with pytest.raises(SealError, match="sealed under key k1 cannot open with key k2"):
        open_sealed(sealed, OTHER, "person.name")
    impostor = DataKey("k1", OTHER.secret)  # the same id, another secret
    with pytest.raises(SealError):
        open_sealed(sealed, impostor, "person.name")


def test_an_altered_sealed_value_does_not_open_and_the_error_names_no_value() -> None:
    sealed = seal("Ann Lee", KEY, "person.name")
    flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(SealError) as raised:
        open_sealed(flipped, KEY, "person.name")
    assert "Ann" not in str(raised.value)


@pytest.mark.parametrize(
    "malformed",
    [
        "",
        "Ann Lee",
        "csp1:",
        "csp1:k1",
        "csp1:k1:",
        "csp1::AAAAAAAAAAAAAAAAAAAAAAAA",
        "csp1:k 1:AAAAAAAAAAAAAAAAAAAAAAAA",
        "csp1:k1:AAAA",  # shorter than a tag
        "csp1:k1:AAAAAAAAAAAAAAAAAAAAAAAAA",  # 25 characters: not base64's length
        "csp1:k1:AAAAAAAAAAAAAAAAAAAAAA==",  # padded
        "csp2:k1:AAAAAAAAAAAAAAAAAAAAAAAA",
    ],
)
def test_a_malformed_sealed_value_is_a_seal_error(malformed: str) -> None:
    assert not is_sealed(malformed)
    with pytest.raises(SealError, match="not a sealed value"):
        key_id_of(malformed)
    with pytest.raises(SealError):
        open_sealed(malformed, KEY, "f")


def test_only_strings_are_sealed() -> None:
    assert not is_sealed(None)
    assert not is_sealed(b"csp1:k1:AAAAAAAAAAAAAAAAAAAAAAAA")
    assert is_sealed("csp1:k1:AAAAAAAAAAAAAAAAAAAAAA")


def test_a_key_shows_its_id_never_its_secret() -> None:
    key = DataKey.new()
    deployment = DeploymentKey("d1", bytes(32))
    assert len(key.key_id) == 16
    assert int(key.key_id, 16) >= 0
    assert len(key.secret) == 32
    assert key != DataKey.new()
    for shown in (repr(key), str(key)):
        assert key.key_id in shown
        assert "secret" not in shown
        assert repr(key.secret) not in shown
    assert "secret" not in repr(deployment)
    assert repr(bytes(32)) not in repr(deployment)


@pytest.mark.parametrize(
    ("key_id", "secret", "problem"),
    [("k1", bytes(31), "31 bytes"), ("k:1", bytes(32), "k:1"), ("", bytes(32), "give 1 to 64")],
)
def test_a_key_of_the_wrong_size_or_a_bad_id_is_refused(
    key_id: str, secret: bytes, problem: str
) -> None:
    with pytest.raises(SealError, match=problem):
        DataKey(key_id, secret)


def test_a_wrapped_key_opens_for_its_subject_under_its_deployment_key_only() -> None:
    deployment = DeploymentKey("d1", bytes(32))
    key = DataKey.new()
    wrapped = deployment.wrap(key, "Ann  LEE")
    assert wrapped != deployment.wrap(key, "Ann  LEE")  # a random nonce each time
    assert len(wrapped) == 12 + 32 + 16
    assert deployment.unwrap(wrapped, key.key_id, "ann lee") == key  # the spelling as matched
    for wrong, key_id, spelling in [
        (DeploymentKey("d2", bytes(32)), key.key_id, "ann lee"),  # another deployment key id
        (DeploymentKey("d1", bytes(31) + b"\x01"), key.key_id, "ann lee"),  # another secret
        (deployment, key.key_id, "bob"),  # another subject
        (deployment, "0" * 16, "ann lee"),  # another key id
    ]:
        with pytest.raises(SealError, match="does not open under deployment key"):
            wrong.unwrap(wrapped, key_id, spelling)
    with pytest.raises(SealError):
        deployment.unwrap(wrapped[:-1], key.key_id, "ann lee")


def test_a_generated_deployment_key_reads_back_from_its_setting() -> None:
    key_id, secret = DeploymentKey.generate()
    found = DeploymentKey.from_setting(f"{key_id}:CS_DK", {"CS_DK": secret})
    assert (found.key_id, found.secret) == (key_id, base64.b64decode(secret))
    assert DeploymentKey.generate() != (key_id, secret)


@pytest.mark.parametrize(
    ("setting", "env", "problem"),
    [
        ("no-variable", {}, "give KEY_ID:VARIABLE"),
        (":CS_DK", {}, "give KEY_ID:VARIABLE"),
        ("d1:", {}, "give KEY_ID:VARIABLE"),
        ("d1:CS_DK", {}, r"\$CS_DK is not set"),
        ("d1:CS_DK", {"CS_DK": "not base64!"}, "not base64"),
        ("d1:CS_DK", {"CS_DK": base64.b64encode(bytes(16)).decode()}, "16 bytes"),
    ],
)
def test_a_deployment_key_setting_that_does_not_hold_is_explained(
    setting: str, env: dict[str, str], problem: str
) -> None:
    with pytest.raises(ClaimstreamError, match=problem) as raised:
        DeploymentKey.from_setting(setting, env)
    for secret in env.values():
        assert secret not in str(raised.value)


def test_sealed_values_are_found_in_a_records_bytes() -> None:
    key = DataKey.new()
    sealed = seal("1 Main St", key, "customer.shipping_address")
    record = b"\x00\x02" + sealed.encode() + b"\x06crm" + sealed.encode()
    assert sealed_in(record) == [sealed, sealed]
    assert sealed_in(b"csp1: not one") == []
