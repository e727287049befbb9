"""The Library's list: one entry per skill (served, or put live by Ingot and now missing), and the
search and filters a person narrows it with.

Filters arrive as GET query parameters (so a filtered view has a URL and works without
JavaScript) and are parsed once here into `Filters`; a value outside the choices is an error
naming them. A skill's states are facts, not a ranking: exactly one of SKILL_STATES, plus its
waiting change's passport state (the review card's, from `change_passport`) when one waits.
Autonomy is shown and filtered per change class an existing skill can take (body, description).
Built from values the route reads once per request (status, passports of the waiting changes,
the autonomy table, one pass over the audit chain); the route computes `skills.row` (task sets,
bundles, live score) only for the entries a filter keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ingot.errors import IngotError
from mcp_server.registry import Skill
from optimize.control.autonomy import LEVELS
from optimize.control.passport import BLOCKED
from optimize.control.passport import STATES as CHANGE_STATES
from optimize.control.status import SkillStatus

IN_STEP, DRIFTED, LAID_OUT, NOT_SERVED = "in step", "drifted", "laid out otherwise", "not served"
SKILL_STATES = (IN_STEP, DRIFTED, LAID_OUT, NOT_SERVED)
STATE_CHOICES = SKILL_STATES + tuple(CHANGE_STATES)
PENDING_CHOICES = ("yes", "no")
SKILL_CLASSES = ("body", "description")  # the autonomy classes of a change to an existing skill
STATE_MEANING = {
    IN_STEP: "served at the revision Ingot last put live (or never changed by Ingot)",
    DRIFTED: "changed on disk outside change control",
    LAID_OUT: "its files are the revision Ingot put live, but modes or extra entries in the folder differ",
    NOT_SERVED: "Ingot put it live, but it is missing or invalid on disk now",
}


@dataclass(frozen=True)
class Entry:
    """One skill as the Library lists and filters it."""

    name: str
    skill: Skill | None  # None: not served (see `status`)
    status: SkillStatus | None  # None: served but never seen by change control
    change_state: str | None  # the waiting change's passport state; None: nothing waits
    autonomy: Mapping[str, str] = field(default_factory=dict)  # class -> level
    revisions: int | None = None  # None: the audit chain could not be read

    @property
    def skill_state(self) -> str:
        if self.skill is None:
            return NOT_SERVED
        if self.status is not None and self.status.drifted:
            return DRIFTED
        return LAID_OUT if self.status is not None and self.status.laid_out_otherwise else IN_STEP

    @property
    def states(self) -> tuple[str, ...]:
        return (self.skill_state,) + ((self.change_state,) if self.change_state else ())

    @property
    def pending(self) -> bool:
        return self.change_state is not None

    @property
    def autonomy_text(self) -> str:
        """ "manual" when every class agrees, else each class with its level."""
        levels = [self.autonomy.get(cls, "manual") for cls in SKILL_CLASSES]
        if len(set(levels)) == 1:
            return levels[0]
        return " · ".join(f"{cls} {level}" for cls, level in zip(SKILL_CLASSES, levels, strict=True))


def _choice(label: str, value: str | None, choices: Sequence[str]) -> str:
    value = (value or "").strip()
    if value and value not in choices:
        raise IngotError(f"unknown {label} {value[:40]!r}: choose one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class Filters:
    name: str = ""  # a part of the skill's name, any case
    state: str = ""  # one of STATE_CHOICES
    pending: str = ""  # "yes": a change waits; "no": nothing waits
    autonomy: str = ""  # a level any of the skill's change classes has

    @classmethod
    def parse(cls, name: str | None, state: str | None, pending: str | None, autonomy: str | None) -> Filters:
        """The query parameters as filters; `IngotError` naming the choices for a value outside them."""
        text = " ".join((name or "").split())
        if len(text) > 200:
            raise IngotError("search for a name of at most 200 characters")
        return cls(
            text,
            _choice("state", state, STATE_CHOICES),
            _choice("pending value", pending, PENDING_CHOICES),
            _choice("autonomy level", autonomy, LEVELS),
        )

    @property
    def active(self) -> bool:
        return bool(self.name or self.state or self.pending or self.autonomy)

    def describe(self) -> str:
        """The active filters as a person reads them: `name ~ 'x', state = blocked`."""
        parts = [f"name ~ {self.name!r}"] if self.name else []
        parts += [f"state = {self.state}"] if self.state else []
        parts += [f"pending = {self.pending}"] if self.pending else []
        parts += [f"autonomy = {self.autonomy}"] if self.autonomy else []
        return ", ".join(parts)

    def matches(self, entry: Entry) -> bool:
        if self.name and self.name.lower() not in entry.name.lower():
            return False
        if self.state and self.state not in entry.states:
            return False
        if self.pending and entry.pending != (self.pending == "yes"):
            return False
        levels = {entry.autonomy.get(c, "manual") for c in SKILL_CLASSES}
        return not self.autonomy or self.autonomy in levels


def entries(
    served: Mapping[str, Skill],
    missing: Sequence[SkillStatus],
    managed: Mapping[str, SkillStatus],
    change_states: Mapping[str, str],
    trust: Mapping[str, Mapping[str, str]],
    revisions: Mapping[str, int] | None,
) -> list[Entry]:
    """Every served skill and every missing one, by name, with what the filters read.
    `revisions` None: the audit chain could not be read, so no count is shown."""

    def entry(name: str, skill: Skill | None) -> Entry:
        status = managed.get(name)
        # A change id without a readable record still waits: the review card shows it blocked.
        state = change_states.get(name) or (BLOCKED if status is not None and status.pending else None)
        count = None if revisions is None else revisions.get(name, 0)
        return Entry(name, skill, status, state, trust.get(name, {}), count)

    listed = [entry(name, skill) for name, skill in served.items()] + [entry(s.name, None) for s in missing]
    return sorted(listed, key=lambda e: e.name)
