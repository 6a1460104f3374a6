"""What a preview says: per key, the decision now beside the one a change would give, compared
by what a decision says (`Gist`: outcome, conflict kind, status, value with its unit, action),
not by its id nor its policy version; per field (`FieldPreview`), the keys looked at, those not
judged and those that would flip (by from -> to), the first `MAX_EXAMPLES` flipped keys by key,
and the kept claims the change would refuse, by reason. Previews of disjoint keys (one per
worker) merge (`merged`) into the one their union gives; `render` prints one for people. Pure.

Where it sits: `policy_preview` judges keys under a policy and tallies them here (`Tally`); the
console merges the workers' answers and the command line renders them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.records.contracts import Decision, Money

MAX_EXAMPLES = 5
"""Flipped keys shown per field: the first by key, so any split of the keys merges alike."""
MAX_REASONS = 10
"""Refusal reasons listed per field, most claims first; the rest are counted together."""
NO_DECISION = "no decision"
"""The label of a key no policy in force decides now."""

JsonValue = None | bool | int | float | str | dict[str, Any]


@dataclass(frozen=True, slots=True)
class Gist:
    """What a decision says, as a preview compares it; its reason is shown, not compared."""

    outcome: str
    action: str
    conflict_kind: str | None = None
    status: str | None = None
    value: JsonValue = None
    unit: str | None = None
    reason: str = field(default="", compare=False)

    @classmethod
    def of(cls, decision: Decision) -> Gist:
        value = decision.value
        return cls(
            outcome=decision.outcome.value,
            action=decision.action.value,
            conflict_kind=decision.conflict_kind.value if decision.conflict_kind else None,
            status=decision.status.value if decision.status else None,
            value=value.model_dump(mode="json") if isinstance(value, Money) else value,
            unit=decision.unit,
            reason=decision.reason,
        )

    @property
    def label(self) -> str:
        """`outcome[/conflict kind] (action)`: what the flips are counted by."""
        kind = f"/{self.conflict_kind}" if self.conflict_kind else ""
        return f"{self.outcome}{kind} ({self.action})"

    def as_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "conflict_kind": self.conflict_kind,
            "status": self.status,
            "value": self.value,
            "unit": self.unit,
            "action": self.action,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Gist:
        return cls(
            outcome=str(data["outcome"]),
            action=str(data["action"]),
            conflict_kind=data.get("conflict_kind"),
            status=data.get("status"),
            value=data.get("value"),
            unit=data.get("unit"),
            reason=str(data.get("reason") or ""),
        )


def label(gist: Gist | None) -> str:
    return NO_DECISION if gist is None else gist.label


@dataclass(frozen=True, slots=True)
class KeyPreview:
    """One key: its decision now (None: no policy in force decides its field), under the new
    policy (None: not judged, the new policy does not decide its field), and the reasons the
    new policy refuses its kept claims for."""

    key: str
    field: str
    before: Gist | None
    after: Gist | None
    refused: tuple[str, ...] = ()

    @property
    def judged(self) -> bool:
        return self.after is not None

    @property
    def flipped(self) -> bool:
        return self.after is not None and self.before != self.after

    @property
    def flip(self) -> str:
        """`from -> to` by outcome, conflict kind and action, or, when those stay, what else
        changes: `resolved (continue): value changes` (its value or unit) or `status changes`."""
        before, after = label(self.before), label(self.after)
        if before != after or self.before is None or self.after is None:
            return f"{before} -> {after}"
        if self.before.status != self.after.status:
            return f"{before}: status changes"
        return f"{before}: value changes"

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "before": self.before.as_json() if self.before else None,
            "after": self.after.as_json() if self.after else None,
            "refused": list(self.refused),
        }

    @classmethod
    def from_json(cls, field_name: str, data: Mapping[str, Any]) -> KeyPreview:
        before, after = data.get("before"), data.get("after")
        return cls(
            key=str(data["key"]),
            field=field_name,
            before=Gist.from_json(before) if before else None,
            after=Gist.from_json(after) if after else None,
            refused=tuple(str(reason) for reason in data.get("refused") or ()),
        )


@dataclass(frozen=True, slots=True)
class FieldPreview:
    """One field's keys under the new policy."""

    field: str
    looked_at: int = 0
    not_judged: int = 0
    flipped: int = 0
    flips: tuple[tuple[str, int], ...] = ()
    """(`from -> to`, keys), most keys first."""
    examples: tuple[KeyPreview, ...] = ()
    """The first `MAX_EXAMPLES` flipped keys, by key."""
    refused_claims: int = 0
    """Kept claims of the field's keys the new policy refuses."""
    refusals: tuple[tuple[str, int], ...] = ()
    """(reason, claims), most claims first, the first `MAX_REASONS`."""

    @property
    def judged(self) -> int:
        return self.looked_at - self.not_judged

    def as_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "looked_at": self.looked_at,
            "judged": self.judged,
            "not_judged": self.not_judged,
            "flipped": self.flipped,
            "flips": [{"flip": flip, "keys": n} for flip, n in self.flips],
            "examples": [example.as_json() for example in self.examples],
            "refused_claims": self.refused_claims,
            "refusals": [{"reason": reason, "claims": n} for reason, n in self.refusals],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldPreview:
        name = str(data["field"])
        return cls(
            field=name,
            looked_at=int(data["looked_at"]),
            not_judged=int(data["not_judged"]),
            flipped=int(data["flipped"]),
            flips=tuple((str(f["flip"]), int(f["keys"])) for f in data["flips"]),
            examples=tuple(KeyPreview.from_json(name, e) for e in data["examples"]),
            refused_claims=int(data["refused_claims"]),
            refusals=tuple((str(r["reason"]), int(r["claims"])) for r in data["refusals"]),
        )


@dataclass(frozen=True, slots=True)
class Preview:
    """The new policy against a set of keys, field by field (sorted by field)."""

    policy_version: str
    fields: tuple[FieldPreview, ...] = ()

    @property
    def looked_at(self) -> int:
        return sum(f.looked_at for f in self.fields)

    @property
    def not_judged(self) -> int:
        return sum(f.not_judged for f in self.fields)

    @property
    def flipped(self) -> int:
        return sum(f.flipped for f in self.fields)

    @property
    def refused_claims(self) -> int:
        return sum(f.refused_claims for f in self.fields)

    def as_json(self) -> dict[str, Any]:
        return {
            "policy_version": self.policy_version,
            "looked_at": self.looked_at,
            "judged": self.looked_at - self.not_judged,
            "not_judged": self.not_judged,
            "flipped": self.flipped,
            "refused_claims": self.refused_claims,
            "fields": [f.as_json() for f in self.fields],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Preview:
        """A preview `as_json` wrote, or KeyError, TypeError or ValueError."""
        return cls(
            policy_version=str(data["policy_version"]),
            fields=tuple(FieldPreview.from_json(f) for f in data["fields"]),
        )


@dataclass(slots=True)
class _Counts:
    """One field's counts as keys are added (mutable: `Tally`'s own)."""

    looked_at: int = 0
    not_judged: int = 0
    flipped: int = 0
    flips: Counter[str] = field(default_factory=Counter)
    examples: list[KeyPreview] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    refused_claims: int = 0

    def example(self, key: KeyPreview) -> None:
        examples = self.examples
        if len(examples) < MAX_EXAMPLES or key.key < examples[-1].key:
            examples.append(key)
            examples.sort(key=lambda e: e.key)
            del examples[MAX_EXAMPLES:]

    def frozen(self, name: str) -> FieldPreview:
        listed = self.refusals.most_common(MAX_REASONS)
        return FieldPreview(
            field=name,
            looked_at=self.looked_at,
            not_judged=self.not_judged,
            flipped=self.flipped,
            flips=tuple(sorted(self.flips.items(), key=lambda f: (-f[1], f[0]))),
            examples=tuple(self.examples),
            refused_claims=self.refused_claims,
            refusals=tuple(sorted(listed, key=lambda r: (-r[1], r[0]))),
        )


class Tally:
    """Key previews (and whole previews of other keys) added up, field by field."""

    __slots__ = ("_fields",)

    def __init__(self) -> None:
        self._fields: dict[str, _Counts] = {}

    def add(self, key: KeyPreview) -> None:
        counts = self._fields.setdefault(key.field, _Counts())
        counts.looked_at += 1
        if not key.judged:
            counts.not_judged += 1
            return
        counts.refused_claims += len(key.refused)
        counts.refusals.update(key.refused)
        if key.flipped:
            counts.flipped += 1
            counts.flips[key.flip] += 1
            counts.example(key)

    def not_judged(self, field_name: str) -> None:
        """A key of `field_name` looked at and not judged (its state could not be read)."""
        counts = self._fields.setdefault(field_name, _Counts())
        counts.looked_at += 1
        counts.not_judged += 1

    def add_preview(self, preview: Preview) -> None:
        """Another set of keys' preview (another worker's): their counts added, the examples
        kept as if their keys had been added (reasons beyond those it lists are not known)."""
        for found in preview.fields:
            counts = self._fields.setdefault(found.field, _Counts())
            counts.looked_at += found.looked_at
            counts.not_judged += found.not_judged
            counts.flipped += found.flipped
            counts.flips.update(dict(found.flips))
            counts.refused_claims += found.refused_claims
            counts.refusals.update(dict(found.refusals))
            for example in found.examples:
                counts.example(example)

    def result(self, policy_version: str) -> Preview:
        return Preview(
            policy_version,
            tuple(self._fields[name].frozen(name) for name in sorted(self._fields)),
        )


def merged(policy_version: str, previews: Iterable[Preview]) -> Preview:
    """The previews of disjoint sets of keys as one."""
    tally = Tally()
    for found in previews:
        tally.add_preview(found)
    return tally.result(policy_version)


def said(gist: Gist | None) -> str:
    """A decision in a few words: `resolved 15 (continue)`, `conflict/value (block)`."""
    if gist is None:
        return NO_DECISION
    kind = f"/{gist.conflict_kind}" if gist.conflict_kind else ""
    value = "" if gist.value is None else " " + json.dumps(gist.value, ensure_ascii=False)
    unit = f" {gist.unit}" if gist.unit and gist.value is not None else ""
    status = f" {gist.status}" if gist.status not in (None, "present") else ""
    return f"{gist.outcome}{kind}{status}{value}{unit} ({gist.action})"


def render(preview: Preview) -> list[str]:
    """The preview for people: a row per field, then each field's flips, examples and refusals.
    The same preview gives the same lines."""
    header = ("field", "keys", "not judged", "would flip", "claims refused")
    rows = [
        (f.field, str(f.looked_at), str(f.not_judged), str(f.flipped), str(f.refused_claims))
        for f in preview.fields
    ]
    width = max((len(row[0]) for row in [header, *rows]), default=5)
    lines = [
        f"{row[0]:<{width}}  "
        + "  ".join(f"{cell:>{len(header[n + 1])}}" for n, cell in enumerate(row[1:]))
        for row in [header, *rows]
    ]
    for found in preview.fields:
        if not (found.flipped or found.not_judged or found.refused_claims):
            continue
        lines.append("")
        if not found.judged:
            lines.append(
                f"{found.field}: its {found.not_judged} keys not judged (policy "
                f"{preview.policy_version} does not decide the field)"
            )
            continue
        lines.append(
            f"{found.field}: {found.flipped} of {found.judged} keys judged would flip"
            + (f", {found.not_judged} not judged" if found.not_judged else "")
        )
        lines += [f"  {count:>6}  {flip}" for flip, count in found.flips]
        lines += [f"  e.g. {e.key}: {said(e.before)} -> {said(e.after)}" for e in found.examples]
        if found.refused_claims:
            lines.append(f"  {found.refused_claims} kept claims it would refuse:")
            lines += [f"  {count:>6}  {reason}" for reason, count in found.refusals]
    return lines


def render_answer(answer: Mapping[str, Any]) -> list[str]:
    """`POST /api/policy/preview`'s answer for people: who answered and what was left out, then
    `render`; KeyError, TypeError or ValueError if it is not such an answer."""
    found = Preview.from_json(answer)
    workers, unanswered = answer.get("workers") or [], answer.get("unanswered") or []
    lines = [
        f"policy preview: policy {found.policy_version} against {found.looked_at} keys held by "
        f"{len(workers)} worker{'' if len(workers) == 1 else 's'} "
        f"(in force: {', '.join(answer.get('in_force') or ['?'])}): "
        f"{found.flipped} would flip, {found.not_judged} not judged, "
        f"{found.refused_claims} kept claims refused"
    ]
    if unanswered:
        lines.append(f"  {len(unanswered)} workers did not answer: {', '.join(unanswered)}")
    if answer.get("not_looked_at"):
        lines.append(
            f"  about {answer['not_looked_at']} keys not looked at: past {answer.get('limit')} "
            "keys per worker (--limit)"
        )
    lines += [
        f"  {part['worker']}: tasks {part['incomplete_tasks']} moved away meanwhile, their keys "
        "not all looked at"
        for part in answer.get("by_worker") or []
        if part.get("incomplete_tasks")
    ]
    lines += render(found)
    lines.append("nothing was sent or changed: `claimstream policy publish` puts a policy in force")
    return lines
