"""Build the served library from settings: the one place settings become live objects.

Writers (serve, propose, approve, ...) get their state home created and claimed (`state_home`).
Commands that only read ask with `read_only=True` (`open_library`, `change_control`,
`trace_store`): the home is found as it is (`reading_home`, which creates nothing and may find
none), the vector cache is only read, and no lock, claim or cache file is made."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from optimize.models.cassette import Cassette
from optimize.models.ledger import UsageLedger, load_prices
from optimize.models.traces import LocalTraceStore, TraceStore

if TYPE_CHECKING:
    from agent.run import AgentLimits
    from optimize.control.inbox import Inbox
    from optimize.control.replica import ReplicaConfig
    from optimize.measure.cascade import JudgeTiers
    from optimize.measure.evaluate import Inputs as EvaluationInputs
    from optimize.measure.judge import Judge
    from optimize.measure.regress import ReplayContext
    from optimize.measure.sandbox import Sandbox
    from optimize.models.endpoints import LLMConfig
    from optimize.models.llm import LLMClient
    from optimize.search.research import Researcher

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


def _home(settings: Settings, read_only: bool) -> StateHome:
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
    home = _home(settings, read_only)
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
    home = _home(settings, read_only)
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
        git=GitHistory(settings.git_history, settings.git_push_remote, signing_key(settings)),
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


def llm_config(settings: Settings) -> LLMConfig:
    """Each role's endpoint from the settings; roles without a model are left out."""
    from optimize.models.endpoints import (  # not llm.py: openai takes ~0.4 s to import
        LLMConfig,
        make_endpoint,
    )

    def secret(value) -> str | None:
        return value.get_secret_value() if value is not None else None

    serving_url = settings.model_base_url or settings.base_url
    serving_key = secret(settings.model_api_key) or secret(settings.api_key)
    models = {
        "agent": settings.agent_model,
        "strong": settings.strong_model or settings.teacher_model,
        "teacher": settings.teacher_model,
        "judge": settings.judge_model
        or next(iter(settings.judge_models), None)
        or settings.judge_l3_model
        or settings.judge_l2_model
        or settings.judge_l1_model,
    }
    endpoints = {}
    for role, model in models.items():
        serving = role in ("agent", "strong")
        endpoint = make_endpoint(
            role,
            serving_url if serving else settings.base_url,
            serving_key if serving else secret(settings.api_key),
            model,
        )
        if endpoint is not None:
            endpoints[role] = endpoint
    return LLMConfig(
        endpoints,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        concurrency=settings.llm_concurrency,
    )


def llm_client(
    settings: Settings, run_id: str, cassette_name: str = "default", journal: Path | None = None
) -> LLMClient:
    """A client for one run: its ledger (with the price table and cap) and the cassette mode.

    With CASSETTE_MODE off, a `journal` is the run's own cassette (record-missing): every call
    it pays for is kept, so rerunning the same command after a failure replays them for free."""
    from optimize.models.llm import LLMClient

    ledger = UsageLedger(run_id, load_prices(settings.prices_file), settings.max_run_usd)
    cassette = None
    if settings.cassette_mode != "off":
        cassette = Cassette(
            state_home(settings) / "cassettes" / f"{cassette_name}.jsonl", settings.cassette_mode
        )
    elif journal is not None:
        cassette = Cassette(journal, "record-missing")
    return LLMClient(llm_config(settings), ledger, cassette)


@contextmanager
def model_run(settings: Settings, purpose: str, journal: str | None = None) -> Iterator[LLMClient]:
    """A client for one paid run. Its ledger is saved to `<home>/ledgers/<run id>.json` whether
    the run succeeds or fails; with a `journal` name, its calls are kept in
    `<home>/journals/<journal>.jsonl` until the run succeeds, so a rerun of a failed command
    resumes from what was already paid for instead of paying again."""
    home = state_home(settings)
    path = home / "journals" / f"{journal}.jsonl" if journal else None
    client = llm_client(settings, run_id(purpose), cassette_name=purpose, journal=path)
    succeeded = False
    try:
        yield client
        succeeded = True
    finally:
        if client.ledger is not None:
            client.ledger.save(home / "ledgers")
        if succeeded and path is not None:
            path.unlink(missing_ok=True)


def trace_store(settings: Settings, prune_expired: bool = False, read_only: bool = False) -> TraceStore:
    """Langfuse when both LANGFUSE keys are set, else the local file (the default).

    `prune_expired` deletes local records past TRACE_RETENTION_DAYS from disk first; commands
    that read all traffic ask for it (Langfuse applies its own retention). `read_only`: the
    file of the home as it is (`reading_home`), for listing; records past retention are skipped,
    not deleted."""
    if read_only and prune_expired:
        raise ValueError("a read-only trace store prunes nothing")
    if settings.langfuse_public_key and settings.langfuse_secret_key:
        from optimize.models.traces_langfuse import LangfuseTraceStore

        # `connect`: the store whose runs hand out Langfuse's LangChain handler (model calls as
        # generations with usage and cost), redacting every observation before export.
        return LangfuseTraceStore.connect(
            settings.langfuse_public_key,
            settings.langfuse_secret_key.get_secret_value(),
            base_url=settings.langfuse_base_url,
            enabled=settings.traces,
            redaction=settings.trace_redact,
        )
    store = LocalTraceStore(
        _home(settings, read_only).path / "traces.jsonl",
        enabled=settings.traces,
        redaction=settings.trace_redact,
        max_bytes=settings.trace_max_bytes,
        backups=settings.trace_backups,
        retention_days=settings.trace_retention_days,
    )
    if prune_expired:
        store.prune()
    return store


def researcher(settings: Settings) -> Researcher:
    """Author-side web research: on only when TAVILY_API_KEY is set; briefs cached under runs/."""
    from optimize.search.research import Researcher

    key = settings.tavily_api_key.get_secret_value() if settings.tavily_api_key else None
    return Researcher(key, state_home(settings) / "cache" / "research", settings.tavily_base_url)


def judge(settings: Settings, llm: LLMClient) -> Judge:
    """The judge for a run: JUDGE_MODELS (an ensemble) or JUDGE_MODEL, never the teacher."""
    from optimize.measure.judge import Judge

    models = settings.judge_models or ((settings.judge_model,) if settings.judge_model else ())
    return Judge(llm, models, settings.teacher_model)


def run_id(purpose: str) -> str:
    """A fresh id for one run's ledger (and its lines in the trace and cost reports)."""
    return f"{purpose}-{secrets.token_hex(4)}"


def sandbox(settings: Settings) -> Sandbox | None:
    """The execution sandbox EXEC_SANDBOX names (bubblewrap, docker or none)."""
    from optimize.measure.execcheck import make_sandbox

    return make_sandbox(settings.exec_sandbox, settings.exec_docker_image, settings.docker_host)


def agent_limits(settings: Settings) -> AgentLimits:
    """Per-task limits for the reference agent (AGENT_MAX_MODEL_CALLS, AGENT_MAX_TOOL_CALLS)."""
    from agent.run import AgentLimits

    return AgentLimits(model_calls=settings.agent_max_model_calls, tool_calls=settings.agent_max_tool_calls)


def models_missing(settings: Settings) -> str | None:
    """Why a held-out A/B cannot run with these settings (no agent or judge model), or None."""
    config = llm_config(settings)
    missing = [role for role in ("agent", "judge") if role not in config.endpoints]
    if missing:
        names = " and ".join(f"{r.upper()}_MODEL" for r in missing)
        return f"no {' or '.join(missing)} model configured: set BASE_URL and {names} (see .env.example)"
    return None


# The model roles each optimize pass calls (optimize/search): the body pass serves, authors and judges.
PASS_ROLES = {"body": ("agent", "teacher", "judge"), "description": ("teacher",)}


def optimize_missing(settings: Settings) -> dict[str, str | None]:
    """Why each optimize pass (body, description) cannot run with these settings, or None when it
    can: the UI disables its Optimize and Start buttons from this, and refuses a run with it."""
    try:
        config = llm_config(settings)
    except ConfigError as exc:
        return dict.fromkeys(PASS_ROLES, str(exc))
    reasons: dict[str, str | None] = {}
    for mode, roles in PASS_ROLES.items():
        missing = [role for role in roles if role not in config.endpoints]
        names = ", ".join(f"{r.upper()}_MODEL" for r in missing)
        reasons[mode] = (
            f"no {' or '.join(missing)} model configured: set BASE_URL and {names} (see .env.example), "
            "then restart `ingot serve`"
            if missing
            else None
        )
    return reasons


def provenance(settings: Settings, llm: LLMClient | None) -> dict:
    """The models and endpoints behind a measurement, for its evidence (never keys)."""
    config = llm.config if llm is not None else llm_config(settings)
    return {
        "models": {
            role: {"model": endpoint.model, "endpoint": endpoint.base_url}
            for role, endpoint in sorted(config.endpoints.items())
        },
        "judges": list(settings.judge_models or ((settings.judge_model,) if settings.judge_model else ())),
        "teacher": settings.teacher_model,
        "judge_is_teacher": bool(settings.teacher_model)
        and settings.teacher_model in (settings.judge_models or (settings.judge_model,)),
    }


def recent_traffic(settings: Settings, limit: int = 500) -> list[str]:
    """The most recent distinct tasks the library routed to a skill (redacted on write)."""
    from optimize.models.redaction import redact

    records = [r for r in trace_store(settings).read().records if r.route in ("match", "related") and r.task]
    records.sort(key=lambda r: r.time, reverse=True)
    return list(dict.fromkeys(redact(r.task) for r in records))[:limit]


def evaluation_inputs(settings: Settings, library: Library, llm: LLMClient | None) -> EvaluationInputs:
    """What `ingot evaluate` measures with: the library, every task set, recent traffic, and an
    A/B runner when models are configured (else the A/B cell says what to set)."""
    from ingot.seal import Seal
    from optimize.measure.ab import ABRunner
    from optimize.measure.evaluate import Inputs

    home = state_home(settings)
    missing = models_missing(settings)
    runner = None
    if llm is not None and missing is None:
        runner = ABRunner(
            llm,
            judge(settings, llm),
            home / "cache" / "ab",
            sandbox(settings),
            embed=library.embed,
            seal=Seal(home / "seal.key"),
            min_samples=settings.promote_min_samples,
        )
    return Inputs(library, settings.tasks_dir, recent_traffic(settings), runner, missing or "")


def judge_tiers(settings: Settings) -> JudgeTiers:
    """The replay judge's tiers (JUDGE_L1/L2/L3_MODEL); L3 defaults to JUDGE_MODEL."""
    from optimize.measure.cascade import JudgeTiers

    default = settings.judge_model or next(iter(settings.judge_models), None)
    return JudgeTiers(settings.judge_l1_model, settings.judge_l2_model, settings.judge_l3_model or default)


def replay_context(settings: Settings) -> ReplayContext:
    """What the replay cell needs: goldens and controls cache in the state home, the judge tiers
    (L3 defaults to JUDGE_MODEL), bounds, side-effect and sandbox tools, and world sources."""
    from optimize.measure.drift import ResearchCheck, WorldEndpoint
    from optimize.measure.regress import ReplayContext, ReplaySettings
    from optimize.measure.replay import ReplayLimits

    if settings.replay_world_tools and not settings.replay_world_url:
        raise ConfigError(
            "REPLAY_WORLD_TOOLS is set but REPLAY_WORLD_URL is empty: set the endpoint that runs them"
        )
    home = state_home(settings)
    tiers = judge_tiers(settings)
    limits = ReplayLimits(
        max_turns=settings.replay_max_turns,
        max_tokens=settings.replay_max_tokens,
        timeout_s=settings.replay_timeout_s,
        max_tool_calls=settings.agent_max_tool_calls,
        sandbox_tools=frozenset(settings.replay_sandbox_tools),
    )
    sources = ()
    if settings.replay_world_url:
        sources = (WorldEndpoint(settings.replay_world_url, frozenset(settings.replay_world_tools)),)
    research = None
    if settings.replay_research and not settings.tavily_api_key:
        raise ConfigError(
            "REPLAY_RESEARCH=true needs TAVILY_API_KEY (the research tool it corroborates with)"
        )
    if settings.replay_research and settings.tavily_api_key:
        research = ResearchCheck(settings.tavily_api_key.get_secret_value(), settings.tavily_base_url)
    return ReplayContext(
        goldens_dir=home / "goldens",
        cache_dir=home / "cache" / "replay",
        tiers=tiers,
        settings=ReplaySettings(
            controls=settings.replay_controls,
            concurrency=settings.replay_concurrency,
            limits=limits,
            side_effects=frozenset(settings.replay_side_effect_tools),
        ),
        world_sources=sources,
        research=research,
        teacher_model=settings.teacher_model,
    )
