"""Normalization: every value is brought to its field's type and unit before any comparison.

Rules (documented in the README):
- money: `{amount_minor, currency}` only; the currency must equal the field's (never converted).
- number: int or float, finite, in the field's unit after conversion from a known unit of the same
  dimension, then rounded to 15 significant digits (so 0.7 s on a ms field is 700.0, not
  699.9999999999999: unit noise never changes a decided value or its id); two numbers agree when
  they differ by at most the field's tolerance (plus a relative 1e-9, so 0.1 + 0.2 agrees with
  0.3).
- integer: an int (or an integral float) within the signed 64-bit range.
- number and integer: a conversion that overflows (1e308 h in s) is refused, never infinite.
- string: Unicode NFC, outer whitespace stripped, inner whitespace runs collapsed to one space;
  case preserved unless the field says `case: fold`; at most `VALUE_CHARS` characters, as sent
  and as normalized (`too_large` past it).
- enum: the string rule with case folded; must be one of the field's values, reported in the
  policy's spelling.
- a personal field's string (`personal: true`): sealed by its producer under the data subject's
  key (`SEALED_PREFIX`, `streams.wire.personal`), taken as sent: sealed values compare as they
  are; one in plain text is refused (`invalid_value`), never kept.
- boolean: JSON true/false only.
- timestamp: RFC 3339 with an offset, converted to UTC, reported as `YYYY-MM-DDTHH:MM:SS.ffffffZ`
  (the year always four digits: 0001 to 9999; an instant outside them in UTC is refused).
A value that cannot be normalized raises ContractError with a reason; it is never compared.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii

from streams.core.records.bounds import VALUE_CHARS, too_large
from streams.core.records.contracts import Money, RejectReason, Value, constructed
from streams.core.records.errors import ContractError
from streams.core.records.memo import by_identity
from streams.core.records.policy import FieldRules, FieldType, StringCase

_INT64 = (-(2**63), 2**63 - 1)
SEALED_PREFIX = "csp1:"
"""How a sealed personal value begins (`streams.wire.personal` seals and opens them)."""
_RELATIVE_EPSILON = 1e-9

# Each unit maps to (dimension, factor to the dimension's base unit).
_UNITS: dict[str, tuple[str, float]] = {
    "ns": ("time", 1e-9),
    "us": ("time", 1e-6),
    "µs": ("time", 1e-6),
    "ms": ("time", 1e-3),
    "s": ("time", 1.0),
    "min": ("time", 60.0),
    "h": ("time", 3600.0),
    "d": ("time", 86400.0),
    "B": ("bytes", 1.0),
    "KB": ("bytes", 1e3),
    "MB": ("bytes", 1e6),
    "GB": ("bytes", 1e9),
    "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3),
    "%": ("fraction", 0.01),
    "ratio": ("fraction", 1.0),
}
_UNIT_ALIASES = {
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "millisecond": "ms",
    "milliseconds": "ms",
    "minute": "min",
    "minutes": "min",
    "hour": "h",
    "hours": "h",
    "percent": "%",
    "bytes": "B",
}


def canonical_number(number: float) -> float:
    """The float a number stands for: 15 significant digits (what a double holds exactly in
    decimal), so conversion noise in the last bits disappears; -0.0 is 0.0."""
    return float(f"{number:.15g}") + 0.0


def canonical_unit(unit: str) -> str:
    stripped = unit.strip()
    return _UNIT_ALIASES.get(stripped, stripped)


def normalize_string(raw: str, case: StringCase) -> str:
    text = " ".join(unicodedata.normalize("NFC", raw).split())
    return text.casefold() if case is StringCase.FOLD else text


def normalize_scope(scope: str) -> str:
    """A scope label as compared: `Server` and ` server ` are one scope."""
    return normalize_string(scope, StringCase.FOLD)


def format_timestamp(moment: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.ffffffZ`, the year zero-padded to four digits (strftime's `%Y` is
    not, on glibc: year 1 is `1`). OverflowError for an instant before year 1 in UTC."""
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    return utc.isoformat(timespec="microseconds") + "Z"


Normalizer = Callable[[Value, str | None], Value]
_NormalizeWith = Callable[[Value, str | None, FieldRules], Value]


def normalize_value(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    """Return `raw` in the field's canonical form, or raise ContractError saying why not."""
    return normalizer_for(rules)(raw, unit)


def _compiled(rules: FieldRules) -> Normalizer:
    """`normalize_value` for one field, with what depends on the field alone worked out once:
    which normalizer applies, and for an enum the spellings it accepts, normalized."""
    if rules.type is FieldType.ENUM:
        normalize = _enum_of(rules)
    else:
        normalize = _sealed if rules.personal else _NORMALIZERS[rules.type]

    def normalized(raw: Value, unit: str | None) -> Value:
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            raise ContractError(
                RejectReason.EMPTY_VALUE,
                f"{rules.name}: status present but the value is empty (a tool error disguised "
                "as an empty result?)",
            )
        if isinstance(raw, str) and len(raw) > VALUE_CHARS:
            raise too_large(f"{rules.name}: the value", len(raw), VALUE_CHARS)
        value = normalize(raw, unit, rules)
        if isinstance(value, str) and len(value) > VALUE_CHARS:
            raise too_large(f"{rules.name}: the value normalized", len(value), VALUE_CHARS)
        return value

    return normalized


normalizer_for: Callable[[FieldRules], Normalizer] = by_identity(_compiled)
"""A field's normalizer, compiled once per FieldRules (every claim asks; policy rules live as
long as their policy, and a copy with other rules is compiled anew)."""


def _type_error(rules: FieldRules, raw: Value, expected: str) -> ContractError:
    return ContractError(
        RejectReason.TYPE_MISMATCH,
        f"{rules.name}: expected {expected}, got {type(raw).__name__} {raw!r}",
    )


def _money(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if not isinstance(raw, Money):
        raise _type_error(rules, raw, "money {amount_minor, currency}")
    currency = raw.currency.strip().upper()
    if currency != rules.currency or (unit is not None and unit.strip().upper() != currency):
        raise ContractError(
            RejectReason.UNIT_MISMATCH,
            f"{rules.name}: currency {raw.currency!r} (unit {unit!r}) where the field is "
            f"{rules.currency}; currencies are never converted",
        )
    _check_int64(raw.amount_minor, rules)
    if currency == raw.currency:
        return raw
    # Both fields are already of their validated types: no second validation per claim.
    return constructed(Money, {"amount_minor": raw.amount_minor, "currency": currency})


def _convert_unit(number: float, unit: str | None, rules: FieldRules) -> float:
    if rules.unit is None:
        if unit is not None:
            raise ContractError(
                RejectReason.UNIT_MISMATCH, f"{rules.name}: unit {unit!r} on a unitless field"
            )
        return _finite(canonical_number(number), number, unit, rules)
    if unit is None:
        raise ContractError(
            RejectReason.UNIT_MISMATCH,
            f"{rules.name}: no unit given where the field is in {rules.unit}",
        )
    have, want = canonical_unit(unit), canonical_unit(rules.unit)
    if have == want:
        return _finite(canonical_number(number), number, unit, rules)
    have_dim, want_dim = _UNITS.get(have), _UNITS.get(want)
    if have_dim is None or want_dim is None or have_dim[0] != want_dim[0]:
        raise ContractError(
            RejectReason.UNIT_MISMATCH,
            f"{rules.name}: unit {unit!r} does not convert to {rules.unit!r}",
        )
    converted = canonical_number(number * have_dim[1] / want_dim[1])
    if not math.isfinite(converted):  # the product alone may overflow (1e308 h in d)
        converted = canonical_number(number * (have_dim[1] / want_dim[1]))
    return _finite(converted, number, unit, rules)


def _finite(number: float, raw: float, unit: str | None, rules: FieldRules) -> float:
    """`number`, unless rounding or converting `raw` overflowed a double."""
    if not math.isfinite(number):
        given = f"{raw!r} {unit}" if unit else repr(raw)
        raise ContractError(
            RejectReason.INVALID_VALUE,
            f"{rules.name}: {given} is beyond the largest number a double holds (about 1.8e308)"
            + (f" in {rules.unit}" if rules.unit else ""),
        )
    return number


def _as_float(raw: int | float, rules: FieldRules) -> float:
    """`raw` as a finite float, or ContractError: an integer past a double's range, NaN or
    infinity is no number a decision can carry."""
    try:
        number = float(raw)
    except OverflowError:
        raise ContractError(
            RejectReason.INVALID_VALUE, f"{rules.name}: {raw} is beyond a double's range"
        ) from None
    if not math.isfinite(number):
        raise ContractError(RejectReason.INVALID_VALUE, f"{rules.name}: {raw!r} is not finite")
    return number


def _number(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _type_error(rules, raw, "a number")
    return _convert_unit(_as_float(raw, rules), unit, rules)


def _check_int64(number: int, rules: FieldRules) -> None:
    if not _INT64[0] <= number <= _INT64[1]:
        raise ContractError(
            RejectReason.INVALID_VALUE, f"{rules.name}: {number} is outside the 64-bit range"
        )


def _integer(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _type_error(rules, raw, "an integer")
    converts = bool(unit or rules.unit)
    if not converts and isinstance(raw, int):
        _check_int64(raw, rules)
        return raw
    # With a unit, only the converted amount must be whole (0.7 s is 700 ms).
    if isinstance(raw, float) and not (math.isfinite(raw) and (converts or raw.is_integer())):
        raise ContractError(RejectReason.INVALID_VALUE, f"{rules.name}: {raw!r} is not an integer")
    converted = _convert_unit(_as_float(raw, rules), unit, rules) if converts else raw
    if not float(converted).is_integer():
        raise ContractError(
            RejectReason.INVALID_VALUE,
            f"{rules.name}: {raw!r} {unit} is not a whole number of {rules.unit}",
        )
    number = int(converted)
    _check_int64(number, rules)
    return number


def _unitless(rules: FieldRules, unit: str | None) -> None:
    if unit is not None:
        raise ContractError(
            RejectReason.UNIT_MISMATCH, f"{rules.name}: unit {unit!r} on a {rules.type} field"
        )


def _string(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if not isinstance(raw, str):
        raise _type_error(rules, raw, "a string")
    _unitless(rules, unit)
    return normalize_string(raw, rules.case)


def _sealed(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if not isinstance(raw, str):
        raise _type_error(rules, raw, "a sealed string")
    _unitless(rules, unit)
    if not raw.startswith(SEALED_PREFIX):
        raise ContractError(
            RejectReason.INVALID_VALUE,
            f"{rules.name} is personal: its values arrive sealed by their producer under the "
            f"data subject's key ({SEALED_PREFIX}...); this one is in plain text",
        )
    return raw


def _enum_of(rules: FieldRules) -> _NormalizeWith:
    """The enum's normalizer: each allowed value under its normalized spelling (the first, where
    two normalize alike), looked up instead of normalizing every allowed value per claim."""
    allowed = rules.values or ()
    spellings: dict[str, str] = {}
    for value in allowed:
        spellings.setdefault(normalize_string(value, rules.case), value)
    # Most claims spell a value as the policy does: found without normalizing it first.
    as_spelled = {value: spellings[normalize_string(value, rules.case)] for value in allowed}

    def enum(raw: Value, unit: str | None, rules: FieldRules) -> Value:
        if not isinstance(raw, str):
            raise _type_error(rules, raw, "one of " + ", ".join(allowed))
        _unitless(rules, unit)
        found = as_spelled.get(raw) or spellings.get(normalize_string(raw, rules.case))
        if found is None:
            raise ContractError(
                RejectReason.INVALID_VALUE,
                f"{rules.name}: {raw!r} is not one of " + ", ".join(allowed),
            )
        return found

    return enum


def _boolean(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if not isinstance(raw, bool):
        raise _type_error(rules, raw, "true or false")
    _unitless(rules, unit)
    return raw


def _timestamp(raw: Value, unit: str | None, rules: FieldRules) -> Value:
    if not isinstance(raw, str):
        raise _type_error(rules, raw, "an RFC 3339 timestamp string")
    _unitless(rules, unit)
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError as exc:
        raise ContractError(
            RejectReason.INVALID_VALUE, f"{rules.name}: {raw!r} is not an RFC 3339 timestamp"
        ) from exc
    if moment.tzinfo is None:
        raise ContractError(RejectReason.INVALID_VALUE, f"{rules.name}: {raw!r} has no UTC offset")
    try:
        return format_timestamp(moment)
    except OverflowError:
        raise ContractError(
            RejectReason.INVALID_VALUE,
            f"{rules.name}: {raw!r} is outside years 0001-9999 in UTC",
        ) from None


_NORMALIZERS: dict[FieldType, _NormalizeWith] = {
    FieldType.MONEY: _money,
    FieldType.NUMBER: _number,
    FieldType.INTEGER: _integer,
    FieldType.STRING: _string,
    FieldType.BOOLEAN: _boolean,
    FieldType.TIMESTAMP: _timestamp,
}


def values_agree(a: Value, b: Value, tolerance: float) -> bool:
    """Equality of normalized values; floats within tolerance."""
    if isinstance(a, float) and isinstance(b, float):
        slack = tolerance + _RELATIVE_EPSILON * max(1.0, abs(a), abs(b))
        return abs(a - b) <= slack
    return type(a) is type(b) and a == b


def canonical_value(value: Value) -> object:
    """A normalized value as plain JSON data, floats spelled exactly (their repr)."""
    if isinstance(value, Money):
        return {"amount_minor": value.amount_minor, "currency": value.currency}
    if isinstance(value, float):
        return repr(value)
    return value


# JSON's text for the constants.
_CONSTANT_TEXT: dict[object, str] = {None: "null", True: "true", False: "false"}


def statement_order(status: str, value: Value) -> tuple[str, str, float, str]:
    """A total order on (status, value) statements that puts numbers in numeric order, so that
    values within a tolerance of each other sort next to each other. Other values sort by
    their canonical value's JSON text, as `json.dumps(..., sort_keys=True)` spells it, written
    here without the encoder's dispatch."""
    if type(value) is str:
        return (status, "str", 0.0, encode_basestring_ascii(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (status, "number", float(value), "")
    if value is None or isinstance(value, bool):
        return (status, type(value).__name__, 0.0, _CONSTANT_TEXT[value])
    if isinstance(value, Money):
        currency = encode_basestring_ascii(value.currency)
        money = f'{{"amount_minor": {value.amount_minor}, "currency": {currency}}}'
        return (status, "Money", 0.0, money)
    return (status, type(value).__name__, 0.0, encode_basestring_ascii(value))  # a str subclass
