"""The MCP front end: routing tools and skill:// resources, over streamable HTTP or stdio.

Tools: `suggest_skills`, `get_skill`, `route_and_load`, `reload_skills`, and `create_skill`
where change control is given (never on a replica). Skills are also exposed as SEP-2640
`skill://<name>/...` resources, one per file (skill_resources.py), each checked against the
served revision's digest before it is returned. At most one
skill body crosses the boundary per call. Tool failures come back as tool errors the calling
model can read; nothing a client sends can crash the server. Host and Origin headers are
checked (DNS-rebinding protection), and the default bind is loopback.

Limits (`ToolLimits`), because any local process can be a client: `create_skill` is rate limited
and capped per source (the client name it declared at initialize, so one noisy agent cannot lock
the others out) and for all sources together (a process may declare any name). Which waiting
change a client may replace is never decided by that name: only the session the server assigned
it (`session_owner`), or for a client without one the `replace_token` its first call returned,
replaces its own change; no other client displaces it. It never waits
more than a moment for the change lock (a busy lock answers "busy, retry", so routing keeps its
threads); results name a skill's root by label, never by its path on this disk; and a caller's
`cwd` is looked into (for `paths` constraints) only under the operator's ALLOWED_CALLER_ROOTS.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import Field

from ingot import __version__
from ingot.errors import IngotError
from mcp_server.library import Library
from mcp_server.notify import ChangeNotifier
from mcp_server.policy import CallerContext, may_read
from mcp_server.ratelimit import SourceRates
from mcp_server.registry import Skill
from mcp_server.router import MIN_SCORE_RANGE, TaskRefused, check_task
from mcp_server.sessions import SessionRoutes
from mcp_server.skill_resources import LibrarySkills
from optimize.control.changes import ChangeControl
from optimize.control.lock import PromotionConflict
from optimize.control.proposals import SlotTaken
from optimize.control.quarantine import agent_candidate

log = logging.getLogger(__name__)
LIST_PAGE_SIZE = 500  # tools/list, resources/list and skills/list items per page
MIN_SCORE_FIELD = Field(  # route_and_load's and suggest_skills' per-call threshold (router.MIN_SCORE_RANGE)
    ge=MIN_SCORE_RANGE[0],
    le=MIN_SCORE_RANGE[1],
    strict=True,  # a number: not `true`, not "0.5"
    allow_inf_nan=False,
    description=(
        "Count a skill only if its score reaches this (calibrated scale: 0 = a typical unrelated "
        "request for this library, 1 = a request quoting a skill's description). "
        "Default: the library's calibrated threshold."
    ),
)


@dataclass(frozen=True)
class ToolLimits:
    """What MCP callers may do; the defaults match the settings' defaults."""

    allowed_caller_roots: tuple[Path, ...] = ()  # where `paths` constraints may look
    create_max_pending: int = 25  # changes one MCP client proposed, waiting for review at once
    create_max_pending_total: int = 100  # ... from all clients together
    create_per_minute: float = 6.0  # create_skill calls admitted per minute per client, on average
    create_burst: int = 3  # ... and at once after a quiet spell
    create_total_per_minute: float = 24.0  # ... from all clients together (4 busy clients' worth)
    create_lock_wait_s: float = 1.0  # longest a create_skill waits for the change lock
    create_concurrency: int = 2  # create_skill calls working at once; more answer "busy"


def _files(skill: Skill) -> list[dict[str, Any]]:
    return [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in skill.files]


def _check_task(task: str) -> str:
    try:
        return check_task(task)  # the limit every surface shares (router.py)
    except TaskRefused as exc:
        raise ToolError(str(exc)) from exc


def _root_labels(roots: tuple[Path, ...]) -> dict[Path, str]:
    """Each root's folder name, numbered when two share one: what results say instead of a path."""
    labels: dict[Path, str] = {}
    for index, root in enumerate(roots, start=1):
        label = root.name or f"root{index}"
        labels[root] = label if label not in labels.values() else f"{label}#{index}"
    return labels


def build_server(
    library: Library,
    control: ChangeControl | None = None,
    sessions: SessionRoutes | None = None,
    limits: ToolLimits | None = None,
    queued: Callable[[str, str], None] | None = None,
) -> FastMCP:
    """An MCP server whose tools and resources read from `library`.

    With `control`, agents may also propose new skills through `create_skill` (quarantined);
    `queued(skill, change_id)` is told of each one (e.g. to evaluate it in the background)."""
    limits = limits or ToolLimits()
    labels = _root_labels(library.roots)
    mcp = FastMCP(
        "ingot",
        version=__version__,
        instructions=(
            "Ingot serves approved skills. Call route_and_load(task) once per request: follow "
            "skill_body when match is set, adapt it when related_match is set, and handle the "
            "task yourself when novel is true."
        ),
        providers=[LibrarySkills(library)],
        list_page_size=LIST_PAGE_SIZE,  # paged, so a bad cursor is refused (-32602), not ignored
    )
    notifier = ChangeNotifier()
    notifier.install(mcp)
    library.on_served_change(notifier.served_changed)

    @mcp.tool
    def suggest_skills(
        task: Annotated[str, Field(description="What the user wants done.")],
        k: Annotated[int, Field(ge=1, le=50, strict=True, description="How many suggestions at most.")] = 5,
        min_score: Annotated[float | None, MIN_SCORE_FIELD] = None,
    ) -> list[dict[str, Any]]:
        """List the skills that fit a task, best first, without loading any body.

        Each item has name, description, score, related (true when the skill is only close
        enough to adapt, not a direct match) and revision. Empty when nothing is even related."""
        suggestions = library.suggest(_check_task(task), k, min_score=min_score)
        skills = library.skills()
        return [
            {
                "name": c.name,
                "description": skills[c.name].description,
                "score": c.score,
                "related": c.related,
                "revision": skills[c.name].revision,
            }
            for c in suggestions
            if c.name in skills
        ]

    @mcp.tool
    def get_skill(name: Annotated[str, Field(description="Skill name, e.g. 'pdf-forms'.")]) -> dict[str, Any]:
        """Load one skill by name: its served revision, body and file manifest."""
        try:
            skill = library.get(name)
        except IngotError as exc:
            raise ToolError(str(exc)) from exc
        return {"name": skill.name, "revision": skill.revision, "body": skill.body, "files": _files(skill)}

    @mcp.tool
    def route_and_load(
        task: Annotated[str, Field(description="What the user wants done.")],
        harness: Annotated[str | None, Field(description="Calling harness, e.g. 'claude-code'.")] = None,
        platform: Annotated[str | None, Field(description="Caller OS: linux, darwin or windows.")] = None,
        cwd: Annotated[str | None, Field(description="Caller's working directory.")] = None,
        available_tools: Annotated[list[str] | None, Field(description="Tools the caller has.")] = None,
        available_mcps: Annotated[list[str] | None, Field(description="MCP servers the caller has.")] = None,
        session: Annotated[
            str | None,
            Field(description="Your conversation id; send it as X-Ingot-Session to the capture proxy too."),
        ] = None,
        min_score: Annotated[float | None, MIN_SCORE_FIELD] = None,
    ) -> dict[str, Any]:
        """Pick the skill for a task and load its approved revision in one call.

        Returns match (a direct fit) or related_match (close enough to adapt) with that skill's
        body and revision, or novel=true when nothing fits (handle the task yourself).
        alternatives lists the nearest other skills (up to 3 names in all, also when novel) by
        name, score and fit, never loaded; call get_skill to load one."""
        context = CallerContext(
            harness=harness,
            platform=platform,
            cwd=cwd,
            available_tools=tuple(available_tools) if available_tools is not None else None,
            available_mcps=tuple(available_mcps) if available_mcps is not None else None,
            may_read_cwd=may_read(cwd, limits.allowed_caller_roots),
        )
        result = library.route(_check_task(task), context, min_score=min_score)
        skill = result.skill
        if session and sessions is not None:
            route = "match" if result.match else ("related" if result.related_match else "novel")
            try:
                sessions.record(
                    session, route, skill.name if skill else None, skill.revision if skill else None
                )
            except OSError as exc:  # attribution is best-effort; the routing answer is not
                log.warning("could not remember the route for a session: %s", exc)
        return {
            "match": result.match,
            "related_match": result.related_match,
            "novel": result.novel,
            "score": result.score,
            "revision": skill.revision if skill else None,
            "root": labels.get(skill.root, "?") if skill else None,
            "skill_body": skill.body if skill else None,
            "alternatives": [{"name": c.name, "score": c.score, "fit": c.fit} for c in result.nearest],
            "components": dict(result.components),
        }

    @mcp.tool
    def reload_skills() -> dict[str, Any]:
        """Re-read the skills roots now; returns counts of added, changed, removed and invalid."""
        report = library.reload()
        return {
            **report.counts(),
            "problems": [
                {"folder": f"{labels.get(p.folder.parent, '?')}/{p.folder.name}", "reason": p.reason}
                for p in report.invalid
            ],
        }

    if control is not None:
        _add_create_skill(mcp, library, control, limits, queued)
    mcp.add_middleware(_UnknownTool(mcp))
    return mcp


class _UnknownTool(Middleware):
    """A call to a tool this server does not have is a protocol error (JSON-RPC -32602, as the
    MCP spec says), not a tool result the model would read as the tool's own failure."""

    def __init__(self, mcp: FastMCP) -> None:
        self._mcp = mcp
        self._names: frozenset[str] | None = None  # the tools are fixed once the server is built

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        if self._names is None:
            self._names = frozenset(tool.name for tool in await self._mcp.list_tools())
        name = context.message.name
        if name not in self._names:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Unknown tool: {name!r}; this server's tools are {', '.join(sorted(self._names))}",
            )
        return await call_next(context)


def client_name(ctx: Context) -> str:
    """The name the MCP client declared at initialize (its `clientInfo`), tidied; the source that
    create_skill's per-client limits count. A client that declared none is "unnamed client"."""
    try:
        params = ctx.session.client_params
    except RuntimeError:  # no session (called outside a request)
        params = None
    info = getattr(params, "client_info", None)
    name = str(getattr(info, "name", "") or "")
    tidy = "".join(ch for ch in name if ch.isalnum() or ch in "._- ").strip()[:64]
    return tidy or "unnamed client"


def session_owner(ctx: Context, process: str) -> str | None:
    """Who a create_skill comes from as this server knows it, never as the client says: over
    stdio, this server process (`process`: one client per process); over streamable HTTP, the
    session the server assigned at initialize (`Mcp-Session-Id`, which the SDK checks on every
    request of that session). Kept as a digest, so a pending record never holds a credential.
    None for a 2026-07-28 request, which is its own connection: nothing the server assigned
    identifies its client from one call to the next."""
    try:
        transport, context = ctx.transport, ctx.request_context
    except RuntimeError:  # no request
        return None
    if transport == "stdio":
        return f"stdio:{process}"
    if context is None or context.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    session = context.request.headers.get("mcp-session-id") if context.request is not None else None
    if not session:
        return None
    return "mcp-session:" + hashlib.sha256(session.encode()).hexdigest()[:32]


def slot_owner(ctx: Context, process: str, key: bytes, replace_token: str | None) -> tuple[str, str | None]:
    """The owner a create_skill's change is recorded with, and the token to hand back (None: the
    session is the credential). A client with a session (stdio, or the initialize handshake) owns
    its change by that session. A 2026-07-28 request has none, so its change is owned by a token
    this server issues (a nonce and its HMAC under `key`, this process's secret) and returns;
    presenting it later replaces that change. A token this process did not issue (forged, or
    from before a restart) is refused. Only a digest of the token is recorded."""
    if replace_token:
        nonce, _, mac = replace_token.partition(".")
        if not hmac.compare_digest(mac.encode(), _token_mac(key, nonce).encode()):
            raise ToolError(
                "not queued: this replace_token was not issued by this server (or it restarted since); "
                "call create_skill without it: a change still waiting then keeps its slot"
            )
        return "token:" + hashlib.sha256(replace_token.encode()).hexdigest()[:32], replace_token
    owner = session_owner(ctx, process)
    if owner is not None:
        return owner, None
    nonce = secrets.token_urlsafe(16)
    token = f"{nonce}.{_token_mac(key, nonce)}"
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:32], token


def _token_mac(key: bytes, nonce: str) -> str:
    return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()[:32]


def source_note(source: str) -> str:
    """The pending change's note for a create_skill from `source`: shown to the reviewer, and how
    the per-client cap counts what a client already has waiting (it survives a restart)."""
    return f"proposed over MCP by a client that calls itself {source!r}"


def _add_create_skill(
    mcp: FastMCP,
    library: Library,
    control: ChangeControl,
    limits: ToolLimits,
    queued: Callable[[str, str], None] | None,
) -> None:
    quick = replace(control, lock_wait_s=limits.create_lock_wait_s)
    rates = SourceRates(
        limits.create_per_minute,
        limits.create_burst,
        limits.create_total_per_minute,
        limits.create_burst * 4,
    )
    working = threading.BoundedSemaphore(limits.create_concurrency)
    process = secrets.token_hex(8)  # this server's identity for its one stdio client
    key = secrets.token_bytes(32)  # what this process signs the replace tokens it issues with

    @mcp.tool
    def create_skill(
        name: Annotated[str, Field(description="Short name, e.g. 'invoice-reconciliation'.")],
        description: Annotated[
            str, Field(description="What the skill does and when to use it (<=1024 chars).")
        ],
        body: Annotated[str, Field(description="The instructions, in markdown.")],
        ctx: Context,
        replace_token: Annotated[
            str | None,
            Field(
                description="To replace a change of yours that still waits: the replace_token the "
                "create_skill that queued it returned (given to clients without an MCP session).",
                max_length=128,
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Propose a new reusable skill from what you just did. It is quarantined for human review
        and is NOT served until approved; existing skills are never overwritten."""
        source = client_name(ctx)
        wait, which = rates.take(source)
        if wait > 0:
            per = (
                f"at most {limits.create_per_minute:g} a minute from {source!r}"
                if which == "source"
                else f"at most {limits.create_total_per_minute:g} a minute from all clients"
            )
            raise ToolError(f"not queued: too many create_skill calls ({per}); retry in {math.ceil(wait)} s")
        owner, token = slot_owner(ctx, process, key, replace_token)
        if not working.acquire(blocking=False):
            raise ToolError("not queued: busy with other create_skill calls; retry in a few seconds")
        try:
            agents = [c for c in quick.pending() if c.source == "agent"]
            notes = (source_note(source), f"proposed over MCP by {source}")  # the note as 0.1.0 wrote it
            mine = sum(1 for c in agents if c.note in notes)
            if mine >= limits.create_max_pending:
                raise ToolError(
                    f"not queued: {mine} changes from {source!r} already wait for review (the limit is "
                    f"{limits.create_max_pending} per client); ask the operator to review them, then retry"
                )
            if len(agents) >= limits.create_max_pending_total:
                raise ToolError(
                    f"not queued: {len(agents)} agent-proposed changes already wait for review (the limit "
                    f"is {limits.create_max_pending_total}); ask the operator to review them, then retry"
                )
            proposed = agent_candidate(
                quick,
                name,
                description,
                body,
                library.similarity,
                note=source_note(source),
                owner=owner,
            )
        except SlotTaken as exc:  # another session's change waits under that name: never displaced
            raise ToolError(f"not queued: {exc}") from exc
        except PromotionConflict as exc:
            raise ToolError("not queued: Ingot is busy changing skills; retry in a few seconds") from exc
        except IngotError as exc:
            raise ToolError(f"not queued: {exc}") from exc
        finally:
            working.release()
        change = proposed.change
        if proposed.withheld:  # archived, not queued: saying "pending" would be false
            return {
                "status": "withheld",
                "skill": change.skill,
                "change_id": change.id,
                "candidate_revision": change.candidate_revision,
                "message": f"not queued: a better change for this skill waits for review "
                f"({proposed.waiting}); yours was archived. Ask the operator to decide that one first",
            }
        if queued is not None:
            queued(change.skill, change.id)
        kept = {"replace_token": token} if token else {}
        how = "; to replace it while it waits, call create_skill again with its replace_token"
        return {
            "status": "pending",
            "skill": change.skill,
            "change_id": change.id,
            "candidate_revision": change.candidate_revision,
            **kept,
            "message": "queued for human review; it will not be served until a person approves it"
            + (how if token else ""),
        }
