"""Settings become the live objects of model-calling work: clients, ledgers, judges, traces.

runtime.py builds the library and change control; this module builds what a command that calls
models needs on top: each role's endpoint (`llm_config`), a client with its ledger and cassette
(`llm_client`, `model_run`), the judge tiers, the trace store (local or Langfuse), the sandbox,
and the evaluation and replay inputs. Nothing here is built unless a command asks for it: `ingot
mcp` starts without importing the model stack."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ingot.errors import ConfigError
from ingot.runtime import home_for, state_home
from ingot.settings import Settings
from mcp_server.library import Library
from optimize.models.cassette import Cassette
from optimize.models.ledger import UsageLedger, load_prices
from optimize.models.traces import LocalTraceStore, TraceStore

if TYPE_CHECKING:
    from agent.run import AgentLimits
    from optimize.measure.cascade import JudgeTiers
    from optimize.measure.evaluate import Inputs as EvaluationInputs
    from optimize.measure.judge import Judge
    from optimize.measure.regress import ReplayContext
    from optimize.measure.sandbox import Sandbox
    from optimize.models.endpoints import LLMConfig
    from optimize.models.llm import LLMClient
    from optimize.search.research import Researcher


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
        home_for(settings, read_only).path / "traces.jsonl",
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
