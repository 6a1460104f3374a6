"""The policy file: which source owns which field, how fresh a claim must be, what a conflict does.

Rules are data. The YAML is validated by pydantic and every error names the file, the key and the
problem. `Policy.rules_for(field)` returns the effective, fully defaulted rules of one field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from streams.core.records.bounds import ID_CHARS, VALUE_CHARS
from streams.core.records.contracts import Authority
from streams.core.records.errors import PolicyError, validation_problems
from streams.core.records.memo import by_identity

CATCH_ALL = "*"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}


def parse_duration(raw: object) -> timedelta | None:
    """`60s`, `5m`, `24h`, `1d`, `250ms`; `none` (or null) means unbounded."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() == "none"):
        return None
    if isinstance(raw, timedelta):
        return raw
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return timedelta(seconds=raw)
    match = _DURATION.match(str(raw))
    if match is None:
        raise ValueError(f"{raw!r} is not a duration like 250ms, 60s, 5m, 24h, 1d or none")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _required_duration(raw: object) -> timedelta:
    parsed = parse_duration(raw)
    if parsed is None:
        raise ValueError("this duration cannot be none")
    return parsed


# How a duration is written, for the JSON Schema (streams/core/records/policy_schema.py): what
# parse_duration accepts, a number being seconds.
_DURATION_TEXT = {
    "type": "string",
    "pattern": _DURATION.pattern,
    "description": "a number and a unit: ms, s, m, h or d (250ms, 60s, 5m, 24h, 1d)",
}
_SECONDS = {"type": "number", "description": "seconds"}
_NONE_TEXT = {"type": "string", "pattern": r"^\s*[Nn][Oo][Nn][Ee]\s*$", "description": "unbounded"}

Duration = Annotated[
    timedelta | None,
    BeforeValidator(parse_duration),
    WithJsonSchema({"anyOf": [_DURATION_TEXT, _SECONDS, _NONE_TEXT, {"type": "null"}]}),
]
BoundedDuration = Annotated[
    timedelta,
    BeforeValidator(_required_duration),
    WithJsonSchema({"anyOf": [_DURATION_TEXT, _SECONDS]}),
]


class FieldType(StrEnum):
    ENUM = "enum"
    MONEY = "money"
    NUMBER = "number"
    INTEGER = "integer"
    STRING = "string"
    BOOLEAN = "boolean"
    TIMESTAMP = "timestamp"


class OnConflict(StrEnum):
    BLOCK = "block"
    DEGRADE = "degrade"
    SURFACE = "surface"
    MOST_RECENT = "most_recent"


class EpochChangeRule(StrEnum):
    REOBSERVE = "reobserve"
    ACCEPT = "accept"


class StringCase(StrEnum):
    PRESERVE = "preserve"
    FOLD = "fold"


class _Strict(BaseModel):
    # A field's docstring is its description in the JSON Schema, which editors show on hover.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Review(_Strict):
    """Who must agree before a steward's resolution or undo counts (four eyes, or more); the
    defaults' also before an alias merge or split counts (`timeline.alias_review`)."""

    approvals: int = Field(default=0, ge=0, le=5)
    """How many stewards must approve it; 0: it counts as soon as it is made."""
    author_may_approve: bool = False
    """Whether its author's own approval counts towards them."""
    lease: BoundedDuration = timedelta(minutes=30)
    """How long a steward holds a key's task without a statement on the key before it lapses
    and another may take it."""


class Defaults(_Strict):
    """The rules of every field that does not set its own."""

    freshness: Duration = timedelta(minutes=5)
    """How old a claim may be and still count; `none`: never stale."""
    on_conflict: OnConflict = OnConflict.BLOCK
    """What a conflict does: block, degrade, surface, or most_recent (recency breaks ties)."""
    min_independent_sources: int = Field(default=1, ge=1)
    """How many independent observations a value needs (one lineage or source counts once)."""
    epoch_change: EpochChangeRule = EpochChangeRule.REOBSERVE
    """A value changed across an epoch: reobserve (quarantined until seen twice) or accept."""
    max_clock_skew: BoundedDuration = timedelta(seconds=30)
    """How far past now a claim or resolution may be dated before it is refused."""
    escalate_after: BoundedDuration = timedelta(minutes=15)
    """How long a conflict may stay open before it goes to the escalations topic."""
    review: Review = Review()
    """Who must approve a steward's resolution or undo before it counts."""


# A policy gives sources the authorities of observations; asserted and inferred come from a
# claim's source_class.
_FROM_CLAIMS = (Authority.ASSERTED, Authority.INFERRED)
ObservedAuthority = Annotated[
    Authority,
    WithJsonSchema(
        {"type": "string", "enum": [a.value for a in Authority if a not in _FROM_CLAIMS]}
    ),
]

# Repeated in every decision and kept claim: bounded as a claim's own texts are (bounds.py).
Name = Annotated[str, Field(max_length=ID_CHARS)]
EnumValue = Annotated[str, Field(max_length=VALUE_CHARS)]


class SourcePolicy(_Strict):
    """A source that may publish claims (`*`: any source not named)."""

    authority: ObservedAuthority
    """How far its observations are trusted: system_of_record, cached or derived."""
    lineage: Name | None = None
    """Sources of one lineage count as one observation (the newest replaces older ones)."""
    principal: str | None = Field(default=None, description="Kafka principal allowed to publish it")

    @model_validator(mode="after")
    def _observations_only(self) -> SourcePolicy:
        if self.authority in _FROM_CLAIMS:
            raise ValueError(
                "asserted and inferred come from a claim's source_class, not from the policy"
            )
        return self


class SigningKeyPolicy(_Strict):
    """A key that proves a claim's source; HMAC secrets come from the environment, never the
    file."""

    key_id: str = Field(min_length=1)
    """The id a signed record names its key by."""
    algorithm: Literal["hmac-sha256", "ed25519"]
    """How the key signs: hmac-sha256 with a shared secret, or ed25519 with a public key."""
    public_key: str | None = Field(default=None, description="ed25519: base64 raw public key")
    secret_env: str | None = Field(default=None, description="hmac: env var holding the secret")
    sources: tuple[str, ...] = Field(min_length=1)
    """The sources (or stewards) this key signs for."""

    @model_validator(mode="after")
    def _material(self) -> SigningKeyPolicy:
        if self.algorithm == "ed25519" and not self.public_key:
            raise ValueError("an ed25519 key needs `public_key`")
        if self.algorithm == "hmac-sha256" and not self.secret_env:
            raise ValueError(
                "an hmac-sha256 key needs `secret_env` (the secret stays out of files)"
            )
        return self


class Signing(_Strict):
    """Which keys prove who sent a record."""

    required: bool = False
    """Refuse records that carry no valid signature."""
    max_age: BoundedDuration = timedelta(minutes=5)
    """How old a signature may be."""
    keys: tuple[SigningKeyPolicy, ...] = ()
    """The keys, each with the sources it signs for."""


class FieldPolicy(_Strict):
    """One field's type and rules; a rule not given is taken from `defaults`."""

    type: FieldType
    """The value's type: enum, money, number, integer, string, boolean or timestamp."""
    values: tuple[EnumValue, ...] | None = None
    """enum: the allowed values."""
    currency: str | None = None
    """money: the ISO 4217 currency code, like USD."""
    unit: Name | None = None
    """number and integer: the unit values are given in."""
    tolerance: float = Field(default=0.0, ge=0.0)
    """number: how far apart two values may be and still agree."""
    case: StringCase | None = None
    """Whether values compare with case folded (enum's default) or preserved (the others')."""
    freshness: Duration = None
    """How old a claim may be and still count; `none`: never stale."""
    on_conflict: OnConflict | None = None
    """What a conflict does: block, degrade, surface, or most_recent (recency breaks ties)."""
    min_independent_sources: int | None = Field(default=None, ge=1)
    """How many independent observations a value needs (one lineage or source counts once)."""
    epoch_change: EpochChangeRule | None = None
    """A value changed across an epoch: reobserve (quarantined until seen twice) or accept."""
    escalate_after: BoundedDuration | None = None
    """How long a conflict may stay open before it goes to the escalations topic."""
    review: Review | None = None
    """Who must approve a steward's resolution or undo of this field before it counts."""
    authorities: dict[str, ObservedAuthority] = Field(default_factory=dict)
    """This field's own authority per source, in place of the source's."""
    personal: bool = False
    """A person's data: producers seal its values under the data subject's key, and erasing the
    subject destroys that key (a string field whose case is preserved: values compare sealed)."""

    @model_validator(mode="after")
    def _type_needs(self) -> FieldPolicy:
        if self.personal and (self.type is not FieldType.STRING or self.case is StringCase.FOLD):
            raise ValueError(
                "a personal field is a string whose case is preserved: its values travel sealed, "
                "and sealed values compare as they are"
            )
        if self.type is FieldType.ENUM and not self.values:
            raise ValueError("an enum field needs a non-empty `values` list")
        if self.type is not FieldType.ENUM and self.values is not None:
            raise ValueError("`values` is only for enum fields")
        if self.type is FieldType.MONEY:
            if not self.currency or not re.fullmatch(r"[A-Z]{3}", self.currency):
                raise ValueError("a money field needs `currency`, an ISO 4217 code like USD")
        elif self.currency is not None:
            raise ValueError("`currency` is only for money fields")
        if self.unit is not None and self.type not in (FieldType.NUMBER, FieldType.INTEGER):
            raise ValueError("`unit` is only for number and integer fields")
        if self.tolerance and self.type is not FieldType.NUMBER:
            raise ValueError("`tolerance` is only for number fields")
        return self


class FieldRules(_Strict):
    """One field's effective rules: its policy with every default filled in."""

    name: str
    type: FieldType
    values: tuple[str, ...] | None
    currency: str | None
    unit: str | None
    tolerance: float
    case: StringCase
    freshness: timedelta | None
    on_conflict: OnConflict
    min_independent_sources: int
    epoch_change: EpochChangeRule
    escalate_after: timedelta
    review: Review
    authorities: dict[str, Authority]
    personal: bool = False


_MICROSECOND = timedelta(microseconds=1)


def _freshness_us(rules: FieldRules) -> int | None:
    return None if rules.freshness is None else rules.freshness // _MICROSECOND


def _escalate_after_us(rules: FieldRules) -> int:
    return rules.escalate_after // _MICROSECOND


freshness_us: Callable[[FieldRules], int | None] = by_identity(_freshness_us)
"""The field's freshness budget in microseconds (None: never stale), worked out once per rules:
the engine compares instants as integer microseconds (a duration is whole microseconds, so
the comparison is exact)."""
escalate_after_us: Callable[[FieldRules], int] = by_identity(_escalate_after_us)
"""How long a key may stay open before it escalates, in microseconds, once per rules."""


class Policy(_Strict):
    """A claimstream policy: which source owns which field, how fresh a claim must be, what a
    conflict does. `claimstream policy check FILE` also checks what a schema cannot: that the
    names a policy refers to are its own sources, and each type's own keys."""

    version: str = Field(min_length=1, max_length=ID_CHARS)
    """This policy's version, named in every decision taken under it."""
    defaults: Defaults = Defaults()
    """The rules a field follows where it sets none of its own (freshness, what a conflict does,
    independent sources, epoch changes, clock skew, escalation)."""
    sources: dict[str, SourcePolicy]
    """The sources that may publish claims, by name."""
    fields: dict[str, FieldPolicy] = Field(min_length=1)
    """The fields claims may be about, by name."""
    signing: Signing = Signing()
    """Proof of a claim's source."""
    stewards: Signing = Field(
        default_factory=Signing,
        description="proof for resolutions and alias records, as `signing` is for claims: keys "
        "whose `sources` name the stewards they sign for (a resolution's decided_by, an alias "
        "record's claimstream.steward header); `required` refuses unsigned ones",
    )

    @model_validator(mode="after")
    def _field_authorities_name_known_sources(self) -> Policy:
        for name in self.fields:
            if "|" in name:
                raise ValueError(f"fields.{name}: a field name cannot contain '|'")
        for key in self.signing.keys:
            unknown = [s for s in key.sources if s not in self.sources]
            if unknown:
                raise ValueError(f"signing.keys.{key.key_id} names unknown sources {unknown}")
        for name, field_policy in self.fields.items():
            for source, authority in field_policy.authorities.items():
                if source not in self.sources and CATCH_ALL not in self.sources:
                    raise ValueError(f"fields.{name}.authorities names unknown source {source!r}")
                if authority in _FROM_CLAIMS:
                    raise ValueError(
                        f"fields.{name}.authorities.{source}: asserted and inferred come from "
                        "a claim's source_class"
                    )
        return self

    def rules_for(self, field: str) -> FieldRules | None:
        return self._rules.get(field)

    @property
    def personal_fields(self) -> frozenset[str]:
        """The fields whose values are a person's data (`FieldPolicy.personal`)."""
        return frozenset(name for name, field in self.fields.items() if field.personal)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Policy:
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("_rules", None)  # a copy with other fields must not reuse the cache
        return copied

    @cached_property
    def _rules(self) -> dict[str, FieldRules]:
        # Built once per (frozen) policy: every claim asks for its field's rules.
        return {name: self._effective_rules(name, policy) for name, policy in self.fields.items()}

    def _effective_rules(self, field: str, field_policy: FieldPolicy) -> FieldRules:
        d = self.defaults
        default_case = (
            StringCase.FOLD if field_policy.type is FieldType.ENUM else StringCase.PRESERVE
        )
        return FieldRules(
            name=field,
            type=field_policy.type,
            values=field_policy.values,
            currency=field_policy.currency,
            unit=field_policy.unit,
            tolerance=field_policy.tolerance,
            case=field_policy.case or default_case,
            # `freshness: none` (never stale) must stay distinct from "not given, use the default".
            freshness=field_policy.freshness
            if "freshness" in field_policy.model_fields_set
            else d.freshness,
            on_conflict=field_policy.on_conflict or d.on_conflict,
            min_independent_sources=field_policy.min_independent_sources
            or d.min_independent_sources,
            epoch_change=field_policy.epoch_change or d.epoch_change,
            escalate_after=field_policy.escalate_after or d.escalate_after,
            review=field_policy.review or d.review,
            authorities=field_policy.authorities,
            personal=field_policy.personal,
        )

    def source_policy(self, source: str) -> SourcePolicy | None:
        return self.sources.get(source) or self.sources.get(CATCH_ALL)


def parse_policy(data: object, origin: str = "<policy>") -> Policy:
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(validation_problems(exc.errors(), origin)) from exc


def policy_from_text(text: str, origin: str = "<policy>") -> Policy:
    """A policy from its YAML text, or PolicyError naming `origin`, the key and the problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{origin}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError(
            f"{origin}: (top): a policy is a mapping with version, sources and fields"
        )
    return parse_policy(data, origin)


def load_policy(path: Path | str) -> Policy:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy: {exc.strerror}") from exc
    return policy_from_text(text, str(path))
