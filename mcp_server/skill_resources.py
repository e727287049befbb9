"""The served library as SEP-2640 skills: `skills/list`, `skills/get` and `skill://` resources.

Every skill the library serves is one `skills/list` entry (its verbatim frontmatter and complete
file manifest, validated when the folder was read: mcp_server/skillspec.py) and one resource per
file, `skill://<name>/<path>`; nothing else is listed (no synthetic `_manifest`: a real file of
that name is served as itself). The SKILL.md resource is named for the skill, as the spec says.
A file that is UTF-8 text is served as text, whatever its extension (TOML and YAML templates
included), with the registered MIME type; anything else as a blob. Each read is re-hashed
against the served revision (Library.read_file), so a file edited after listing is an error,
never a silent mix. Deliberately left out: `resources/directory/read` (not declared; a held
manifest already answers it) and nested skills (a skill is a direct folder of a root).
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

import anyio
from fastmcp.resources.base import Resource, ResourceContent, ResourceResult
from fastmcp.skills import MCPSkill, SkillManifest
from fastmcp.skills.provider import SkillFileResource, SkillManifestProvider
from fastmcp.utilities.versions import VersionSpec
from mcp.server.context import ServerRequestContext
from pydantic import AnyUrl

from ingot.errors import IngotError
from mcp_server.library import Library
from mcp_server.registry import Skill

# The builtin table only (no /etc/mime.types), so a file gets the same type on every machine;
# plus the types Python 3.11 lacks (TOML, YAML: RFC 9512) and the spec's text/markdown.
_TYPES = mimetypes.MimeTypes(filenames=())
for _extension, _type in {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".toml": "application/toml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".sh": "text/x-shellscript",
    ".ts": "text/x-typescript",
    ".sql": "application/sql",
    ".jsonl": "application/jsonl",
}.items():
    _TYPES.add_type(_type, _extension)


def mime_type(path: str, text: bool) -> str:
    """The MIME type of a skill file: by its extension, else text/plain for text."""
    guessed = _TYPES.guess_type(path, strict=False)[0]
    return guessed or ("text/plain" if text else "application/octet-stream")


def file_uri(name: str, path: str) -> str:
    return f"skill://{quote(name, safe='')}/{quote(path, safe='/')}"


def parse_uri(uri: str) -> tuple[str, str] | None:
    """(skill name, file path) of a `skill://<name>/<path>` URI, or None for any other URI."""
    if not uri.startswith("skill://"):
        return None
    name, _, path = uri[len("skill://") :].partition("/")
    return (unquote(name), unquote(path)) if name and path else None


class SkillText(SkillFileResource):
    """One file of a served skill; text goes out as text, anything else as a blob."""

    text: bool = False

    async def read(self) -> ResourceResult:
        content = await self.provider.read_file(self)
        value: str | bytes = content.decode("utf-8") if self.text else content
        return ResourceResult([ResourceContent(value, mime_type=self.mime_type)])


class LibrarySkills(SkillManifestProvider):
    """The library's served revisions as SEP-2640 skills and `skill://` resources."""

    def __init__(self, library: Library) -> None:
        super().__init__()
        self._library = library

    def served(self) -> dict[str, Skill]:
        """Every skill a client may load now: blocked, disabled and manual-only ones never."""
        found = {}
        for name, skill in self._library.skills().items():
            if skill.wire is None:
                continue
            try:
                self._library.get(name)
            except IngotError:
                continue
            found[name] = skill
        return found

    async def load_manifests(self) -> Mapping[str, SkillManifest]:
        return {name: skill.wire for name, skill in self.served().items() if skill.wire is not None}

    async def read_file(self, resource: SkillFileResource) -> bytes:
        # Off the event loop: a slow disk must not stall other clients.
        return await anyio.to_thread.run_sync(
            self._library.read_file, resource.skill_path, resource.file_path
        )

    def _resource(self, skill: Skill, path: str) -> SkillText:
        assert skill.wire is not None
        text = path in skill.text_files
        return SkillText(
            uri=AnyUrl(file_uri(skill.name, path)),
            name=skill.name if path == "SKILL.md" else f"{skill.name}/{path}",
            description=skill.description if path == "SKILL.md" else None,
            mime_type=mime_type(path, text),
            provider=self,
            skill_path=skill.name,
            file_path=path,
            file=skill.wire.files[path],
            text=text,
        )

    async def _list_resources(self) -> Sequence[Resource]:
        return [self._resource(skill, path) for skill in self.served().values() for path in skill.wire.files]

    async def _get_resource(self, uri: str, version: VersionSpec | None = None) -> Resource | None:
        located = parse_uri(uri)
        if located is None:
            return None
        skill = self.served().get(located[0])
        if skill is None or skill.wire is None or located[1] not in skill.wire.files:
            return None
        return self._resource(skill, located[1])

    # The SkillsExtension source contract. Entries are built from the same manifests the resources
    # are, on a server with no transforms or per-resource auth, so every listed file reads as listed
    # without resolving each one again (fastmcp's check costs O(skills x files) per listing).

    def _owns_skill_resource(self, uri: str) -> bool:
        return uri.startswith("skill://")

    async def _skill_uris(self, uri: str | None = None) -> Sequence[str]:
        uris = [file_uri(name, "SKILL.md") for name in self.served()]
        return uris if uri is None else [u for u in uris if u == uri]

    async def _list_skill_entries(self, context: ServerRequestContext[Any, Any]) -> Sequence[MCPSkill]:
        return [skill.wire.to_mcp_skill(name) for name, skill in self.served().items() if skill.wire]

    async def _get_skill_entry(self, uri: str, context: ServerRequestContext[Any, Any]) -> MCPSkill | None:
        located = parse_uri(uri)
        if located is None or located[1] != "SKILL.md":
            return None
        skill = self.served().get(located[0])
        return skill.wire.to_mcp_skill(skill.name) if skill is not None and skill.wire else None
