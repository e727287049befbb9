"""The one error hierarchy every Ingot module raises, and the CLI's exit codes.

Errors are raised deep and shown at the edge (CLI `main`, MCP tool handler, HTTP handler). Each
message says what happened and what to do next. `exit_code` is what the CLI exits with:
0 ok, 1 refused or failed, 2 usage or configuration, 3 conflict, 130 interrupted
(`EXIT_CODES`, printed by `ingot --help`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "done"),
    (1, "refused or failed: a check said no (approval, passport, audit chain, drift), or a write failed"),
    (
        2,
        "usage or configuration: a bad flag or setting, a missing or empty skills root, an unknown "
        "skill, change or revision, a port in use",
    ),
    (
        3,
        "conflict: another process holds the change lock; the change you named left review since you "
        "looked (decided, displaced or withheld: the same whether or not another change waits now) or "
        "the revision you named was replaced; or a proposal was withheld behind a better waiting change",
    ),
    (
        4,
        "not checked against the outside: `ingot audit verify` could not read the pushed git "
        "remote; the local checks passed and were printed",
    ),
    (130, "interrupted (Ctrl-C)"),
)


class IngotError(Exception):
    """Base class: anything Ingot reports to a person or a calling model."""

    exit_code = 1


class ConfigError(IngotError):
    """A setting or command-line value is invalid or missing."""

    exit_code = 2


class NotFound(IngotError):
    """A skill, change or revision named by the caller does not exist (the message lists the
    nearest names that do)."""

    exit_code = 2


class SkillInvalid(IngotError):
    """A skill folder breaks the Agent Skills spec or Ingot's safety limits."""


class SkillNotFound(NotFound):
    """A skill name is not in the served library, or not known to change control at all."""


class ChangeNotFound(NotFound):
    """A change id names no change of that skill, pending, decided or displaced."""


class SkillChanged(IngotError):
    """A skill's files changed on disk between indexing and reading."""


class EmbeddingModelError(IngotError):
    """The embedding model is missing, unreadable or fails its checksum."""


class PromotionError(IngotError):
    """A promotion or rollback was refused or could not be carried out; nothing changed."""


class UnsafePath(PromotionError):
    """A candidate's file path is not a plain relative path inside its folder."""


class WriteFailed(IngotError):
    """A write to the state home or a skills root failed (disk full, I/O error, permissions);
    the message says what is served now and what, if anything, is left for recovery."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's first line, cut at `limit` characters (its type's name when it says nothing):
    what a one-line error quotes of a library's multi-line or untyped message."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


def os_reason(exc: OSError) -> str:
    """What a failed write says, with the file it was about, for a `WriteFailed` message."""
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return f"{exc.strerror or exc}{where}"


@contextmanager
def write_or_fail(doing: str, left: str) -> Iterator[None]:
    """An OSError inside becomes one `WriteFailed` line: "<doing>: <why> (<file>); <left>. Free disk
    space or fix permissions, then retry". `left` says what the failure left (e.g. nothing queued)."""
    try:
        yield
    except OSError as exc:
        raise WriteFailed(
            f"{doing}: {os_reason(exc)}; {left}. Free disk space or fix permissions, then retry"
        ) from exc


def did_you_mean(name: str, known: Iterable[str], listed: int = 8) -> str:
    """The end of an "unknown name" message: " (did you mean 'x'?)" for the nearest of `known` to
    a mistyped `name` (case, `_` and spaces forgiven), else " (known: ...)" when they are few,
    else nothing."""
    names = sorted({k for k in known if k})
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    if close:
        return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
    if names and len(names) <= listed:
        return f" (known: {', '.join(names)})"
    return ""
