"""The one error hierarchy every Ingot module raises.

Errors are raised deep and shown at the edge (CLI `main`, MCP tool handler, HTTP handler). Each
message says what happened and what to do next. `exit_code` is what the CLI exits with."""

from __future__ import annotations


class IngotError(Exception):
    """Base class: anything Ingot reports to a person or a calling model."""

    exit_code = 1


class ConfigError(IngotError):
    """A setting or command-line value is invalid or missing."""

    exit_code = 2


class SkillInvalid(IngotError):
    """A skill folder breaks the Agent Skills spec or Ingot's safety limits."""


class SkillNotFound(IngotError):
    """A skill name is not in the served library."""


class SkillChanged(IngotError):
    """A skill's files changed on disk between indexing and reading."""


class EmbeddingModelError(IngotError):
    """The embedding model is missing, unreadable or fails its checksum."""


class PromotionError(IngotError):
    """A promotion or rollback was refused or could not be carried out; nothing changed."""


class UnsafePath(PromotionError):
    """A candidate's file path is not a plain relative path inside its folder."""
