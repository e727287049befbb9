"""Build the served library from settings: the one place settings become live objects (those of
model-calling work are model_runtime.py's).

Writers (serve, propose, approve, ...) get their state home created and claimed (`state_home`).
Commands that only read ask with `read_only=True` (`open_library`, `change_control`,
`trace_store`): the home is found as it is (`reading_home`, which creates nothing and may find
none), the vector cache is only read, and no lock, claim or cache file is made."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingot.errors import ConfigError
from ingot.home import StateHome, establish, for_reading, lost_state
from ingot.settings import Settings
from mcp_server.calibration import Procedure
from mcp_server.embedding import load_embedder
from mcp_server.library import Library, Pin
from mcp_server.registry import Limits
from optimize.control.audit import AuditError
from optimize.control.changes import ChangeControl
from optimize.control.gate import Thresholds
from optimize.control.gitrepo import GitHistory

if TYPE_CHECKING:
    from optimize.control.inbox import Inbox
    from optimize.control.replica import ReplicaConfig

log = logging.getLogger(__name__)


def procedure_from(settings: Settings) -> Procedure:
    """The calibration procedure, with ROUTE_*_THRESHOLD overriding its thresholds (calibrated scale)."""
    procedure = Procedure()
    if settings.route_match_threshold is not None:
        procedure = replace(procedure, tau_match=settings.route_match_threshold)
    if settings.route_related_threshold is not None:
        procedure = replace(procedure, tau_related=settings.route_related_threshold)
    if procedure.tau_match < procedure.tau_related:
        raise ConfigError(
            f"route thresholds out of order: match {procedure.tau_match} < related "
            f"{procedure.tau_related}; set both ROUTE_MATCH_THRESHOLD and ROUTE_RELATED_THRESHOLD"
        )
    return procedure


def state_home(settings: Settings) -> Path:
    """The state home of the configured skills roots, created (with its claims) if new; see
    ingot/home.py. Every command, the MCP server and the UI get their state folder here."""
    return establish(settings.skills_dirs, settings.ingot_home).path


def signing_key(settings: Settings) -> Path | None:
    """GIT_SIGNING_KEY, checked the way git will use it (ssh-keygen reads it), or None."""
    key = settings.git_signing_key
    if key is None:
        return None
    key = key.expanduser().absolute()
    import subprocess

    try:
        done = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"GIT_SIGNING_KEY is set but ssh-keygen did not run ({exc}): install openssh-client"
        ) from exc
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["not a private key"])[-1]
        raise ConfigError(
            f"GIT_SIGNING_KEY={key} cannot sign ({why}): point it at an SSH private key readable only by "
            "you (chmod 600), e.g. one made with `ssh-keygen -t ed25519 -N '' -f ingot_signing`"
        )
    return key


def replica_home(settings: Settings) -> Path:
    """A replica's state home: INGOT_HOME, else `.ingot/replica` in the working folder (a replica
    has no skills root to keep it beside)."""
    home = (settings.ingot_home or Path.cwd() / ".ingot" / "replica").expanduser().absolute()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def replica_config(settings: Settings, home: Path) -> ReplicaConfig:
    """The replica's remote, branch, signers and interval (REPLICA_*), state in `home`."""
    from optimize.control.replica import ReplicaConfig

    if not settings.replica_remote:
        raise ConfigError("no remote to replicate: pass --replica REMOTE or set REPLICA_REMOTE")
    if settings.replica_allowed_signers is None:
        raise ConfigError(
            "REPLICA_ALLOWED_SIGNERS is not set: a replica serves only commits signed by the keys that "
            "file lists (one line per key: `ingot ssh-ed25519 AAAA...`, the primary's GIT_SIGNING_KEY.pub)"
        )
    return ReplicaConfig(
        settings.replica_remote,
        settings.replica_branch,
        settings.replica_allowed_signers.expanduser().absolute(),
        home,
        settings.replica_interval_s,
    )


def reading_home(settings: Settings) -> StateHome:
    """The state home of the configured roots as it is on disk, for a command that only reads:
    found the same way, never created or claimed; it may not exist yet (ingot/home.py)."""
    return for_reading(settings.skills_dirs, settings.ingot_home)


def home_for(settings: Settings, read_only: bool) -> StateHome:
    """`reading_home` for a command that only reads, else the home created and claimed."""
    return reading_home(settings) if read_only else establish(settings.skills_dirs, settings.ingot_home)


def skill_limits(settings: Settings) -> Limits:
    """The per-skill safety caps (MAX_FILE_BYTES, MAX_SKILL_BYTES, MAX_SKILL_FILES)."""
    return Limits(
        max_file_bytes=settings.max_file_bytes,
        max_skill_bytes=settings.max_skill_bytes,
        max_files=settings.max_skill_files,
    )


def open_library(
    settings: Settings, roots: tuple[Path, ...] | None = None, read_only: bool = False
) -> Library:
    """Load the embedder (checksum verified), index every skill root, and return the library.

    `read_only`: the vector cache is only read (vectors it lacks are computed in memory) and the
    state home is neither created nor claimed; LIVE_EDITS=quarantine pins it the same way."""
    home = home_for(settings, read_only)
    embedder = load_embedder(
        settings.embed_model_dir,
        settings.embed_model_sha256,
        home.path / "cache" / "vectors.sqlite",
        threads=settings.embed_threads,
        backend=settings.embed_backend,
        model=settings.embed_model,
        read_only=read_only,
    )
    limits = skill_limits(settings)
    pin = _pin(home, limits) if settings.live_edits == "quarantine" and roots is None else None
    library = Library(roots or settings.skills_dirs, embedder, limits, procedure_from(settings), pin)
    library.reload()
    return library


def _pin(home: StateHome, limits: Limits) -> Pin:
    """LIVE_EDITS=quarantine: serve approved revisions only (optimize/control/approved.py). A
    home not created yet has no protection started, so what is on disk is served, as the first
    `ingot serve` adopts it; a home that is gone while a claim anchors its chain approves nothing."""
    from optimize.control.approved import MARKER, ApprovedRevisions, Pinned
    from optimize.control.audit import AuditLog

    if lost_state(home) is not None:
        log.warning("%s: serving no skill (no approval can be read)", _lost(home))
        return lambda _skills, _roots: {}
    audit = AuditLog(home.path)
    return Pinned(ApprovedRevisions(audit), home.path / "revisions", limits, home.path / MARKER)


def _lost(home: StateHome) -> str:
    return (
        f"the state home {home.path} is gone, but the claim {lost_state(home)} records lines of its "
        "audit chain: restore the state home from backup"
    )


def one_blas_thread() -> Any:
    """Limit BLAS to one thread for the rest of the process (or, used as a context manager, for
    its block). Per-query scoring is a few matrix-vector products: memory-bound work that a
    second BLAS thread only slows down when the other core is busy, as it is while serving
    (10k skills, measured: 2.3 ms on one thread, 13-24 ms on two with the other core loaded)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def change_control(
    settings: Settings, library: Library | None = None, read_only: bool = False
) -> ChangeControl:
    """The change-control API over the configured roots, with its state in their state home.

    Given the served `library`, queued candidates are pre-embedded so approval is fast.
    `read_only`: over the home as it is (`reading_home`; it may not exist yet), for commands that
    only read: call none of its writers (recover, approve, ...). A home that is gone while a
    claim anchors its chain is an `AuditError`, never an empty history."""
    limits = skill_limits(settings)
    thresholds = Thresholds(
        min_margin=settings.promote_min_margin,
        min_samples=settings.promote_min_samples,
        retention_warn=settings.retention_warn,
        alpha=settings.promote_alpha,
        min_routing_cases=settings.promote_min_routing_cases,
    )
    home = home_for(settings, read_only)
    if read_only and lost_state(home) is not None:
        raise AuditError(f"{_lost(home)}; nothing was read as a fresh start")
    opened: list[Library] = [library] if library is not None else []

    def neighbours() -> Library:
        """The served library as it is now: opened on first use (only approvals need it), then
        re-read, so a skill promoted a moment ago counts."""
        if not opened:
            opened.append(open_library(settings))
        return opened[0].current()

    control = ChangeControl(
        home.path,
        home.roots,
        thresholds,
        limits,
        prepare=library.prewarm if library is not None else None,
        neighbours=None if read_only else neighbours,
        autonomy_streak=settings.autonomy_streak,
        review_window_s=settings.review_window,
        git=GitHistory(
            settings.git_history, settings.git_push_remote, signing_key(settings), settings.audit_remote_url
        ),
        live_edits=settings.live_edits,
    )
    return control


def inbox(
    settings: Settings,
    library: Library,
    control: ChangeControl,
    queued: Callable[[str, str], None] | None = None,
) -> Inbox | None:
    """The candidate inbox (CANDIDATE_ROOTS, CANDIDATE_BRANCH), or None when neither is set."""
    if not settings.candidate_roots and not settings.candidate_branch:
        return None
    from optimize.control.inbox import Inbox

    return Inbox(
        control,
        settings.candidate_roots,
        library.similarity,
        branch=settings.candidate_branch,
        settle_s=settings.inbox_settle_s,
        queued=queued,
    )


def actor(settings: Settings) -> str:
    return settings.actor or os.environ.get("USER") or "operator"
