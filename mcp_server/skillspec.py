"""The one set of validity rules for a skill: the Agent Skills spec and SEP-2640, read strictly.

Every surface that serves a skill (the MCP tools, `skills/list`, `resources/list`, `ingot skills`,
the UI, change control's admission) validates through this module, so a folder one surface would
reject is rejected by all of them, with one reason. The rules are the union of three readers:
the Agent Skills reference validator (skills-ref, strict YAML), fastmcp's SEP-2640 wire models
(`SkillFrontmatter`, `SkillManifest`, which serve the skill to hosts) and a host's YAML parser
(which reads `yes` as a boolean and `2024-01-01` as a date). Where they disagree, Ingot refuses
what any of them would refuse or misread; the two deliberate exceptions (frontmatter fields outside
the spec, non-string metadata values) are served as written and reported as notes, because real
libraries and Claude Code's own documented fields use them. tests/mcp_server/test_spec_agreement.py
keeps every disagreement with skills-ref listed and explained.
Reads text only: files and folders are registry.py's and skillfiles.py's.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

import frontmatter
import yaml
from fastmcp.skills import SkillFile as WireFile
from fastmcp.skills import SkillFrontmatter, SkillManifest
from frontmatter.default_handlers import YAMLHandler
from pydantic import ValidationError

from ingot.errors import SkillInvalid, first_line

MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_FRONTMATTER_NODES = 5000
# The frontmatter fields the Agent Skills spec defines (agentskills.io/specification).
SPEC_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster at 10k skills


class _NoDuplicateKeys(_Loader):  # type: ignore[misc, valid-type]
    """A safe loader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently; a JS host's parser refuses the file, and skills-ref does too)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue  # refused with its own reason once loaded
            if key in seen:
                raise SkillInvalid(
                    f"frontmatter key {key!r} appears twice (line {key_node.start_mark.line + 2}); keep one"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_events(text: str) -> None:
    """Refuse what a strict YAML reader (skills-ref's strictyaml) refuses: aliases and anchors
    (a few bytes can also expand exponentially), explicit tags, and flow style."""
    for event in list(yaml.parse(text, Loader=_Loader)):  # whole first: a YAML error comes first
        line = (event.start_mark.line + 2) if event.start_mark else "?"  # +1 for the opening ---
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise SkillInvalid(
                f"frontmatter uses YAML aliases (&anchor / *alias) at line {line}; write the value out"
            )
        if getattr(event, "tag", None) and not getattr(event, "implicit", (True,))[0]:
            raise SkillInvalid(
                f"frontmatter uses an explicit YAML tag ({event.tag}) at line {line}; remove it"
            )
        if isinstance(event, yaml.CollectionStartEvent) and event.flow_style:
            raise SkillInvalid(
                f"frontmatter uses YAML flow style ({{...}} or [...]) at line {line}; write it in block "
                "style, one key or item per line (the Agent Skills reference validator refuses flow style)"
            )


class StrictYAMLHandler(YAMLHandler):
    """python-frontmatter's YAML handler with the rules above: a mapping with string keys."""

    def load(self, fm: str, **kwargs: object) -> Any:
        _check_events(fm)
        data = yaml.load(fm, Loader=_NoDuplicateKeys)  # noqa: S506 - a safe loader
        if not isinstance(data, dict):
            raise SkillInvalid("frontmatter must be a YAML mapping of keys to values")
        odd = [k for k in data if not isinstance(k, str)]
        if odd:
            raise SkillInvalid(
                f"frontmatter key {odd[0]!r} is not a string (YAML reads it as "
                f"{type(odd[0]).__name__}); quote it"
            )
        return data


def _json_value(value: Any, where: str, count: list[int]) -> Any:
    """The value as plain JSON (what SEP-2640 carries verbatim), or `SkillInvalid` naming what a
    host would read differently: a date (a host's YAML reads a date, a JSON host a string)."""
    count[0] += 1
    if count[0] > MAX_FRONTMATTER_NODES:
        raise SkillInvalid(f"frontmatter has more than {MAX_FRONTMATTER_NODES} values")
    if isinstance(value, dict):
        odd = next((k for k in value if not isinstance(k, str)), None)
        if odd is not None:
            raise SkillInvalid(
                f"frontmatter key {odd!r} under {where!r} is not a string (YAML reads it as "
                f"{type(odd).__name__}); quote it"
            )
        return {k: _json_value(v, f"{where}.{k}" if where else k, count) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v, f"{where}[{i}]", count) for i, v in enumerate(value)]
    if isinstance(value, dt.date | dt.datetime | dt.time):
        raise SkillInvalid(
            f"frontmatter value {where}: {value.isoformat()} reads as a YAML date; quote it "
            f"('{value.isoformat()}') so every host reads the same string"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise SkillInvalid(f"frontmatter value {where} is {value}: not finite, and JSON cannot carry it")
    if isinstance(value, bytes | set | frozenset | tuple):
        raise SkillInvalid(
            f"frontmatter value {where} is a YAML {type(value).__name__}; use strings, numbers, lists "
            "and mappings"
        )
    return value


def load(text: str) -> tuple[dict[str, Any], str]:
    """Split SKILL.md text into (frontmatter as plain JSON, body), or raise `SkillInvalid`."""
    if text.startswith("\ufeff"):
        raise SkillInvalid(
            "SKILL.md starts with a byte-order mark (U+FEFF); save it as UTF-8 without BOM (hosts "
            "and the Agent Skills reference validator look for '---' as the first bytes)"
        )
    if not text.startswith("---"):
        raise SkillInvalid("SKILL.md must start with YAML frontmatter between '---' lines")
    try:
        post = frontmatter.loads(text, handler=StrictYAMLHandler())
    except SkillInvalid:
        raise
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise SkillInvalid(f"frontmatter is not valid YAML: {first_line(exc)}") from exc
    if not post.metadata and not any(line.rstrip() == "---" for line in text.splitlines()[1:]):
        raise SkillInvalid("SKILL.md's frontmatter has no closing '---' line; add one after the last key")
    return _json_value(dict(post.metadata), "", [0]), post.content


def _string(meta: Mapping[str, Any], key: str) -> str | None:
    """`meta[key]` when present; `SkillInvalid` when it is present but not a string."""
    if key not in meta:
        return None
    value = meta[key]
    if not isinstance(value, str):
        shown = "empty" if value is None else f"{value!r}, which YAML reads as {type(value).__name__}"
        raise SkillInvalid(f"'{key}' must be a string, not {shown}; quote it")
    return value


def _check_name(name: str | None, folder_name: str) -> str:
    if not name:
        raise SkillInvalid("frontmatter needs a 'name' (a non-empty string)")
    odd = next((ch for ch in name if ch not in NAME_CHARACTERS), None)
    if odd is not None and not odd.isascii():
        raise SkillInvalid(
            f"name {name[:80]!r} has the non-ASCII character {odd!r}: the Agent Skills spec allows "
            "a-z, 0-9 and hyphens (fastmcp's SEP-2640 server and VS Code refuse other letters)"
        )
    if len(name) > MAX_NAME or odd is not None or name.startswith("-") or name.endswith("-") or "--" in name:
        raise SkillInvalid(
            f"name {name[:80]!r} must be 1-{MAX_NAME} lowercase letters, digits and single "
            "hyphens (no leading, trailing or double hyphen)"
        )
    if name != folder_name:
        raise SkillInvalid(f"name {name!r} must equal the folder name {folder_name!r}")
    return name


def check(meta: Mapping[str, Any], body: str, folder_name: str) -> tuple[str, str]:
    """The skill's (name, description) if the frontmatter and body follow every rule, else
    `SkillInvalid` with the first rule broken."""
    name = _check_name(_string(meta, "name"), folder_name)
    description = _string(meta, "description")
    if description is None or not description.strip():
        raise SkillInvalid("frontmatter needs a 'description' (a non-empty string)")
    if len(description) > MAX_DESCRIPTION:
        raise SkillInvalid(f"description is {len(description)} characters; the limit is {MAX_DESCRIPTION}")
    _string(meta, "license")
    compatibility = _string(meta, "compatibility")
    if compatibility is not None and not 1 <= len(compatibility) <= MAX_COMPATIBILITY:
        raise SkillInvalid(
            f"'compatibility' is {len(compatibility)} characters; it must be 1-{MAX_COMPATIBILITY}"
        )
    tools = meta.get("allowed-tools")
    if "allowed-tools" in meta and not (
        isinstance(tools, str) or (isinstance(tools, list) and all(isinstance(t, str) for t in tools))
    ):
        raise SkillInvalid("'allowed-tools' must be a string (tool names separated by spaces)")
    if "metadata" in meta and not isinstance(meta["metadata"], dict):
        raise SkillInvalid("'metadata' must be a mapping of keys to values")
    if not body.strip():
        raise SkillInvalid("SKILL.md has no body after the frontmatter")
    try:  # the served surface's own model has the last word, so no rule can drift apart
        SkillFrontmatter.model_validate(dict(meta))
    except ValidationError as exc:
        raise SkillInvalid(f"frontmatter: {_pydantic_reason(exc)}") from exc
    return name, description


def wire_manifest(meta: Mapping[str, Any], files: Mapping[str, tuple[str, int]]) -> SkillManifest:
    """The SEP-2640 manifest served for a skill (`files`: path -> (sha256, size)), or
    `SkillInvalid` when a host could not be given it (over 512 files or 16 MiB, a path no URI
    can carry)."""
    try:
        return SkillManifest(
            frontmatter=SkillFrontmatter(dict(meta)),
            files={
                path: WireFile(digest=f"sha256:{digest}", size=size) for path, (digest, size) in files.items()
            },
        )
    except ValidationError as exc:
        raise SkillInvalid(f"cannot be served over MCP: {_pydantic_reason(exc)}") from exc


def notes(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """What the spec would have written differently, served as written: fields outside the spec
    (hosts ignore them; Claude Code reads some of its own) and metadata values that are not strings."""
    found = []
    extra = [key for key in meta if key not in SPEC_FIELDS]
    if extra:
        found.append(
            f"frontmatter fields outside the Agent Skills spec: {', '.join(extra)} (served as written; "
            "skills-ref refuses them, most hosts ignore them)"
        )
    odd = [key for key, value in (meta.get("metadata") or {}).items() if not isinstance(value, str)]
    if odd:
        found.append(f"metadata values that are not strings: {', '.join(odd)} (the spec expects strings)")
    if isinstance(meta.get("allowed-tools"), list):
        found.append("allowed-tools is a list (the spec expects one string, names separated by spaces)")
    return tuple(found)


def _pydantic_reason(exc: ValidationError) -> str:
    return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
