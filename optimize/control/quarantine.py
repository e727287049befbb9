"""Admission into the quarantine: sanitise and check a proposed skill before it becomes pending.

Agent-authored skills (`create_skill` over MCP), operator proposals (`ingot propose`), candidate
folders and branches (the inbox) and direct edits (the guard) pass the same checks, recorded as
measured evidence: Agent Skills validation, an instruction-override
/ prompt-injection phrase scan, and an embedding collision check that refuses a description
that would shadow an existing skill's route. A refused candidate is not queued; the reason is
returned to the caller. An accepted one is only pending: it never serves until a human approves.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from ingot.errors import IngotError, PromotionError, SkillInvalid, SkillNotFound, did_you_mean
from mcp_server.library import Similarity
from mcp_server.registry import (
    MAX_DESCRIPTION,
    MAX_NAME,
    declared_name,
    parse_skill_md,
    read_skill_files,
)
from optimize.control.changes import ChangeControl
from optimize.control.proposals import Proposed
from optimize.measure.checks import CheckResult, collision_check, injection_check

MAX_BODY_BYTES = 64 * 1024


class CandidateRefused(IngotError):
    """A proposed skill failed an admission check; nothing was queued."""


def slugify(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    slug = re.sub(r"-{2,}", "-", slug)[:MAX_NAME].strip("-")
    if not slug:
        raise CandidateRefused("the name has no letters or digits; use e.g. 'pdf-form-filling'")
    return slug


def clean_description(description: str) -> str:
    text = re.sub(r"[\x00-\x1f\x7f]+", " ", description or "")
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        raise CandidateRefused("the description is empty; say what the skill does and when to use it")
    if len(text) > MAX_DESCRIPTION:
        raise CandidateRefused(f"the description is {len(text)} characters; the limit is {MAX_DESCRIPTION}")
    return text


def clean_body(body: str) -> str:
    if "\x00" in (body or ""):
        raise CandidateRefused("the body contains NUL bytes; send plain text")
    text = (body or "").replace("\r\n", "\n").strip("\n") + "\n"
    if not text.strip():
        raise CandidateRefused("the body is empty; write the instructions the skill should give")
    if len(text.encode()) > MAX_BODY_BYTES:
        raise CandidateRefused(f"the body is {len(text.encode())} bytes; the limit is {MAX_BODY_BYTES}")
    if text.lstrip().startswith("---"):
        raise CandidateRefused("the body must not start with '---' (frontmatter is written by Ingot)")
    return text


def render_skill_md(name: str, description: str, body: str, source: str) -> bytes:
    header = yaml.safe_dump(
        {"name": name, "description": description, "metadata": {"source": source}},
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return f"---\n{header}---\n\n{body}".encode()


def admission(
    name: str, files: Mapping[str, bytes], similar_to: Callable[[str, str], Similarity]
) -> dict[str, object]:
    """The admission checks of a complete candidate tree, as measurements; `CandidateRefused` (with
    the reason) when one fails: a refused candidate is never queued."""
    try:
        text = files["SKILL.md"].decode("utf-8")
        _, description, body, _ = parse_skill_md(text, name)
        validation = CheckResult(True, "Agent Skills frontmatter, name, description and body are valid")
    except (KeyError, UnicodeDecodeError, SkillInvalid) as exc:
        raise CandidateRefused(f"not a valid skill: {exc}") from exc
    injection = injection_check(f"{description}\n{body}")
    if not injection.passed:
        raise CandidateRefused(injection.detail)
    similarity = similar_to(name, description)
    collision = collision_check(similarity.named, name, similarity.alone)
    if not collision.passed:
        raise CandidateRefused(collision.detail)
    return {
        "checks": {
            "status": "measured",
            "results": {
                "validation": validation.as_json(),
                "injection": injection.as_json(),
                "collision": collision.as_json(),
            },
        }
    }


def admit(
    control: ChangeControl,
    name: str,
    files: Mapping[str, bytes],
    source: str,
    similarity: Similarity,
    note: str | None,
    new: bool | None = None,
    origin: str | None = None,
    origin_tree: str | None = None,
) -> Proposed:
    """Run the checks on a complete candidate tree and queue it as a pending change, classified
    by what it changes (kinds.py), its evidence the checks alone (evaluated later). `new`: the
    proposer meant a new skill (True) or a change to a live one (False); None takes whichever the
    library says. `origin`: where the inbox read it (proposed once per revision, proposals.py)."""
    measurements = admission(name, files, lambda _name, _description: similarity)
    return control.propose(
        name, source, files, measurements, note, new=new, origin=origin, origin_tree=origin_tree
    )


def propose_removal(control: ChangeControl, name: str, note: str | None) -> Proposed:
    """`ingot propose SKILL --remove`: queue the live skill's removal (its evidence is where its
    requests go without it; nothing is removed until a person approves it)."""
    if control.live_revision(name) is None:
        raise SkillNotFound(f"no skill named {name!r} is live, so there is nothing to remove")
    return control.propose(name, "operator", None, {}, note, new=False)


def read_candidate(
    folder: Path, name: str, control: ChangeControl, new: bool = False
) -> tuple[dict[str, bytes], str]:
    """The files and description of an operator's candidate folder (`ingot propose`), validated
    like any served folder. The folder may be called anything; its SKILL.md must declare `name`.
    `name` must be a live skill (a rewrite) unless `new` says it is a new one (a create), so a
    typo is never quietly proposed as a new skill."""
    try:
        live = control.live_revision(name)
    except PromotionError:  # not even a valid name: certainly not a live skill
        live = None
    if new and live is not None:
        raise CandidateRefused(
            f"skill {name!r} already exists (live at {live[:12]}): drop --new to propose a change to it"
        )
    if not new and live is None:
        served = {s for root in control.roots if root.is_dir() for s in _skill_folders(root)}
        nearest = did_you_mean(name, served, listed=0)  # close names only: a new skill has none
        raise SkillNotFound(
            f"no skill named {name!r} is live{nearest}; to propose {name!r} as a new skill, add --new"
        )
    try:
        skill, files = read_skill_files(folder.parent, folder, control.limits, name=name)
    except SkillInvalid as exc:
        declared = _declared(folder)
        if declared is not None and declared != name:
            raise CandidateRefused(
                f"{folder / 'SKILL.md'} declares the skill {declared!r}, not {name!r}: propose it as "
                f"{declared!r}, or change its frontmatter name"
            ) from exc
        raise CandidateRefused(f"{folder} is not a valid skill folder: {exc}") from exc
    return files, skill.description


def _skill_folders(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]


def _declared(folder: Path) -> str | None:
    """The name the folder's SKILL.md declares, read only if it is a small regular file."""
    path = folder / "SKILL.md"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return declared_name(handle.read(MAX_BODY_BYTES * 2).decode("utf-8", "replace"))


def agent_candidate(
    control: ChangeControl,
    name: str,
    description: str,
    body: str,
    similar_to: Callable[[str, str], Similarity],
    note: str | None = None,
    owner: str | None = None,
) -> Proposed:
    """`create_skill`: sanitise, render, check, and queue a new skill; never overwrite one, and
    never displace a waiting change but its own `owner`'s (the proposer's MCP session; `note`
    says which client name it declared, for people)."""
    slug = slugify(name)
    if control.live_revision(slug) is not None:
        raise CandidateRefused(
            f"a skill named {slug!r} already exists; Ingot never overwrites a skill "
            "from create_skill. Pick another name, or ask the operator to change it"
        )
    cleaned = clean_description(description)
    files = {"SKILL.md": render_skill_md(slug, cleaned, clean_body(body), "agent")}
    measurements = admission(slug, files, lambda _name, _description: similar_to(slug, cleaned))
    return control.propose(
        slug, "agent", files, measurements, note, new=True, own_slot_only=True, owner=owner
    )
