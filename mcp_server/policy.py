"""Routing policy: which skills a caller may be routed to, decided before anything is ranked.

A skill declares its constraints under `metadata` in its frontmatter (Agent Skills allows any
string map there). Each is checked against the *caller's* context (its harness, platform, cwd,
tools and MCP servers), never the server's. A constraint the caller gave no context for is not
enforced and is reported as unchecked. A malformed value disables only that skill, with a reason.

    metadata:
      harnesses: "claude-code, codex"     # only for these harnesses
      platforms: "linux, darwin"          # caller platform (linux / darwin / windows)
      requires-tools: "bash"              # caller must have these tools
      requires-mcps: "github"             # ... and these MCP servers
      project: "~/work/billing"           # caller cwd must be inside one of these folders
      paths: "**/*.sql, migrations/**"    # caller cwd must contain a matching file (checked
                                          # only under ALLOWED_CALLER_ROOTS; else unchecked)
      trust: "trusted"                    # trusted | unverified | blocked (never served)
      activation: "auto"                  # auto | manual (never routed; get_skill still works)
      priority: "5"                       # -100..100; wins declared conflicts and exact ties
      conflicts: "other-skill"            # never routed together with these skills

Skills written for the most common peer server keep the same policy in a nested
`metadata.skill-router` mapping (`trust`, `required_tools`, `platforms`, `activation`,
`harnesses`, `priority`, `conflicts`). That block is read as an alias of the keys above: ours win
when both are given, except that `trust: blocked` in either place always blocks. A key in the block
that Ingot does not know disables the skill with a reason rather than being ignored, so a
constraint is never dropped silently.

`paths` patterns are gitignore patterns (pathspec's "gitignore" flavour, git's wildmatch), matched
against each file's path relative to the caller's cwd: `src/*.sql` is `src/a.sql` and never
`src/a/b.sql`, `**/*.sql` is any depth, a pattern without a slash is a file name anywhere, `!p`
excludes. Hidden folders and `node_modules` are neither walked nor matched unless a pattern names
one (`.github/**`); at most PATHS_SCAN_LIMIT entries are looked at, else the check is unchecked.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import pathspec

PATHS_SCAN_LIMIT = 4000  # files and folders looked at under a caller's cwd for `paths` patterns
PATHS_CACHE_S = 10.0
_PLATFORM_ALIASES = {
    "macos": "darwin",
    "osx": "darwin",
    "mac": "darwin",
    "win32": "windows",
    "win": "windows",
    "linux2": "linux",
}
TRUST_VALUES = ("trusted", "unverified", "blocked")
ACTIVATION_VALUES = ("auto", "manual")
PEER_BLOCK = "skill-router"
# peer key (hyphens and underscores alike) -> our key
_PEER_KEYS = {
    "trust": "trust",
    "required-tools": "requires-tools",
    "requires-tools": "requires-tools",
    "required-mcps": "requires-mcps",
    "requires-mcps": "requires-mcps",
    "platforms": "platforms",
    "activation": "activation",
    "harnesses": "harnesses",
    "priority": "priority",
    "conflicts": "conflicts",
    "project": "project",
    "paths": "paths",
}


class PolicyInvalid(ValueError):
    """A skill's routing metadata cannot be parsed; the skill is disabled until it is fixed."""


@dataclass(frozen=True)
class CallerContext:
    """What the calling agent told us about itself. None means 'not said'."""

    harness: str | None = None
    platform: str | None = None
    cwd: str | None = None
    available_tools: tuple[str, ...] | None = None
    available_mcps: tuple[str, ...] | None = None
    # Whether the server may look inside `cwd` on its own disk (for `paths`): only when the
    # front end found it under a folder the operator allows (see `may_read`). Never the caller's say.
    may_read_cwd: bool = False


def may_read(cwd: str | None, allowed_roots: tuple[Path, ...]) -> bool:
    """True if `cwd`, symlinks resolved, lies under one of the operator's `allowed_roots`. Outside
    them the server never touches the path, so no answer reveals what exists there."""
    if not cwd or not allowed_roots:
        return False
    try:
        real = Path(os.path.realpath(cwd))
    except (OSError, ValueError):
        return False
    return any(real == root or real.is_relative_to(root) for root in allowed_roots)


@dataclass(frozen=True)
class Policy:
    """A skill's parsed routing constraints."""

    harnesses: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    requires_tools: tuple[str, ...] = ()
    requires_mcps: tuple[str, ...] = ()
    projects: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    trust: str = "unverified"
    activation: str = "auto"
    priority: int = 0
    conflicts: tuple[str, ...] = ()

    @property
    def routable(self) -> bool:
        """Whether routing may ever pick the skill (blocked ones are never served, manual ones
        load by name only), whatever the caller's context."""
        return self.trust != "blocked" and self.activation != "manual"


def normalise_platform(value: str) -> str:
    value = value.strip().lower()
    return _PLATFORM_ALIASES.get(value, value)


def _as_list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise PolicyInvalid(f"metadata.{key} must be a comma-separated string, got {value!r}")
    return tuple(item for item in items if item)


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.strip().lower() not in allowed:
        raise PolicyInvalid(f"metadata.{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value.strip().lower()


def _peer_block(metadata: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The peer-format block, under `skill-router` or a near spelling of it (`skill_router`,
    `Skill-Router`): a `blocked` written under a misspelt key must not be ignored either."""
    keys = [k for k in metadata if str(k).strip().lower().replace("_", "-") == PEER_BLOCK]
    if len(keys) > 1:
        raise PolicyInvalid(
            f"metadata has {len(keys)} peer routing blocks ({', '.join(map(str, keys))}); keep one"
        )
    return (str(keys[0]), metadata[keys[0]]) if keys else None


def _merged_with_peer(metadata: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
    """Our routing keys, filled in from a peer-format `skill-router` block where ours are absent,
    and where each key taken from the block came from (so an error names the key the author wrote)."""
    found = _peer_block(metadata)
    if found is None:
        return metadata, {}
    name, block = found
    if not isinstance(block, Mapping):
        raise PolicyInvalid(f"metadata.{name} must be a mapping of routing keys, got {block!r}")
    merged = dict(metadata)
    origin: dict[str, str] = {}
    unknown = []
    for key, value in block.items():
        ours = _PEER_KEYS.get(str(key).strip().lower().replace("_", "-"))
        if ours is None:
            unknown.append(str(key))
        elif ours not in metadata:
            merged[ours] = value
            origin[ours] = f"{name}.{key}"
    if unknown:
        raise PolicyInvalid(
            f"metadata.{name} has keys Ingot does not enforce ({', '.join(sorted(unknown))}); "
            f"remove them or express them with Ingot's keys ({', '.join(sorted(set(_PEER_KEYS.values())))})"
        )
    peer_trust = block.get("trust")
    if isinstance(peer_trust, str) and peer_trust.strip().lower() == "blocked":
        merged["trust"] = "blocked"  # a block is never overridden, whoever wrote it
        origin["trust"] = f"{name}.trust"
    return merged, origin


def parse_policy(metadata: Mapping[str, Any]) -> Policy:
    """Read the routing keys from a skill's `metadata` (and its peer-format block); others are left alone."""
    metadata, origin = _merged_with_peer(metadata)
    fields: dict[str, Any] = {}
    lists = {
        "harnesses": "harnesses",
        "platforms": "platforms",
        "requires-tools": "requires_tools",
        "requires-mcps": "requires_mcps",
        "project": "projects",
        "paths": "paths",
        "conflicts": "conflicts",
    }
    for key, attr in lists.items():
        if key in metadata:
            fields[attr] = _as_list(origin.get(key, key), metadata[key])
    if "paths" in fields:
        compile_paths(fields["paths"])  # a pattern that is not one disables the skill, saying which
    if "platforms" in fields:
        fields["platforms"] = tuple(normalise_platform(p) for p in fields["platforms"])
    if "harnesses" in fields:
        fields["harnesses"] = tuple(h.lower() for h in fields["harnesses"])
    if "trust" in metadata:
        fields["trust"] = _choice(origin.get("trust", "trust"), metadata["trust"], TRUST_VALUES)
    if "activation" in metadata:
        fields["activation"] = _choice(
            origin.get("activation", "activation"), metadata["activation"], ACTIVATION_VALUES
        )
    if "priority" in metadata:
        raw, where = metadata["priority"], origin.get("priority", "priority")
        try:
            priority = int(str(raw).strip())
        except ValueError:
            raise PolicyInvalid(f"metadata.{where} must be an integer, got {raw!r}") from None
        if not -100 <= priority <= 100 or isinstance(raw, bool):
            raise PolicyInvalid(f"metadata.{where} must be between -100 and 100, got {raw!r}")
        fields["priority"] = priority
    return Policy(**fields)


def _inside(cwd: str, project: str) -> bool:
    """Whether `cwd` is `project` or under it, compared as normalised paths: the caller's folder
    may not exist here, and `/work/app/../../etc` is not inside `/work/app`."""
    base = PurePath(os.path.normpath(os.path.expanduser(project)))
    here = PurePath(os.path.normpath(cwd))
    return here == base or base in here.parents


def _pruned(folder: str) -> bool:
    """A folder the walk skips unless a pattern names it: hidden ones and `node_modules`."""
    return folder.startswith(".") or folder == "node_modules"


def _pruned_parts(pattern: str) -> list[str]:
    """The pruned folders a pattern spells out (`.github/**`, `**/node_modules/x/*.js`)."""
    return [] if pattern.startswith("!") else [part for part in pattern.split("/")[:-1] if _pruned(part)]


@dataclass(frozen=True)
class _PathPatterns:
    """A `paths` list compiled: `everywhere` for ordinary paths; `pruned` (only the patterns that
    name a pruned folder, with every exclusion) for paths inside one; `entered`, the pruned
    folders the walk goes into (those the patterns name)."""

    everywhere: pathspec.PathSpec
    pruned: pathspec.PathSpec
    entered: pathspec.PathSpec

    def matches(self, rel: str) -> bool:
        inside_pruned = any(_pruned(part) for part in rel.split("/")[:-1])
        return (self.pruned if inside_pruned else self.everywhere).match_file(rel)

    def enters(self, folder: str) -> bool:
        return not _pruned(folder) or self.entered.match_file(folder)


@functools.lru_cache(maxsize=256)
def compile_paths(patterns: tuple[str, ...]) -> _PathPatterns:
    """The patterns as gitignore patterns, or PolicyInvalid naming the one that is not one."""
    for pattern in patterns:
        try:
            compiled = pathspec.PathSpec.from_lines("gitignore", [pattern])
        except ValueError as exc:  # GitIgnorePatternError: a lone `!`, a trailing backslash
            raise PolicyInvalid(
                f"metadata.paths pattern {pattern!r} is not a gitignore pattern: {exc}"
            ) from None
        if not compiled.patterns or compiled.patterns[0].include is None:
            raise PolicyInvalid(
                f"metadata.paths pattern {pattern!r} matches nothing (gitignore reads it as a comment); "
                "escape a leading '#' as '\\#'"
            )
    named = [p for p in patterns if _pruned_parts(p) or p.startswith("!")]
    return _PathPatterns(
        pathspec.PathSpec.from_lines("gitignore", patterns),
        pathspec.PathSpec.from_lines("gitignore", named),
        pathspec.PathSpec.from_lines("gitignore", [part for p in patterns for part in _pruned_parts(p)]),
    )


_paths_cache: dict[tuple[str, tuple[str, ...]], tuple[float, bool | None]] = {}


def _has_matching_file(cwd: str, patterns: tuple[str, ...]) -> bool | None:
    """True/False if `cwd` is readable here; None if the server cannot see the caller's folder.

    Cached per (cwd, patterns) for PATHS_CACHE_S, so routing a burst of tasks from one project
    walks its tree once."""
    try:  # one entry per folder, however the caller spells it (`dir/.`, `dir//`, a link to it)
        folder = os.path.realpath(cwd)
    except (OSError, ValueError):
        folder = os.path.normpath(cwd)
    key = (folder, patterns)
    hit = _paths_cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < PATHS_CACHE_S:
        return hit[1]
    found = _scan_for_match(folder, patterns)
    if len(_paths_cache) > 256:
        _paths_cache.clear()
    _paths_cache[key] = (time.monotonic(), found)
    return found


def _scan_for_match(cwd: str, patterns: tuple[str, ...]) -> bool | None:
    """Walk at most PATHS_SCAN_LIMIT entries (files and folders) under `cwd`; None when it cannot
    be read here (a name too long, no permission) or is too big to say."""
    root = Path(cwd)
    try:
        if not root.is_dir():
            return None
    except (OSError, ValueError):  # ENAMETOOLONG, EACCES, an embedded NUL: the folder is unreadable
        return None
    compiled = compile_paths(patterns)
    looked = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if compiled.enters(d)]
        looked += 1  # a tree of empty folders costs a walk too
        if looked >= PATHS_SCAN_LIMIT:
            return None
        rel_dir = Path(dirpath).relative_to(root)
        for name in filenames:
            if compiled.matches((rel_dir / name).as_posix()):
                return True
            looked += 1
            if looked >= PATHS_SCAN_LIMIT:
                return None
    return False


def check(policy: Policy, ctx: CallerContext) -> tuple[str | None, tuple[str, ...]]:
    """(reason the skill is excluded or None, constraints that could not be checked)."""
    if policy.trust == "blocked":
        return "trust: blocked", ()
    if policy.activation == "manual":
        return "activation: manual", ()
    unchecked: list[str] = []
    if policy.harnesses:
        if ctx.harness is None:
            unchecked.append("harness")
        elif ctx.harness.strip().lower() not in policy.harnesses:
            return "harness", ()
    if policy.platforms:
        if ctx.platform is None:
            unchecked.append("platform")
        elif normalise_platform(ctx.platform) not in policy.platforms:
            return "platform", ()
    for attr, given, label in (
        ("requires_tools", ctx.available_tools, "tools"),
        ("requires_mcps", ctx.available_mcps, "mcps"),
    ):
        needed = getattr(policy, attr)
        if needed:
            if given is None:
                unchecked.append(label)
            elif not set(needed) <= set(given):
                return label, ()
    if policy.projects:
        if ctx.cwd is None:
            unchecked.append("project")
        elif not any(_inside(ctx.cwd, p) for p in policy.projects):
            return "project", ()
    if policy.paths:
        found = (
            _has_matching_file(ctx.cwd, policy.paths) if ctx.cwd is not None and ctx.may_read_cwd else None
        )
        if found is None:
            unchecked.append("paths")
        elif not found:
            return "paths", ()
    return None, tuple(unchecked)
