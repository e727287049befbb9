"""Build the served library from settings: the one place settings become live objects."""

from __future__ import annotations

import os
import secrets
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ingot.errors import ConfigError
from ingot.settings import Settings
from mcp_server.calibration import Procedure
from mcp_server.embedding import load_embedder
from mcp_server.library import Library
from mcp_server.registry import Limits
from optimize.control.changes import ChangeControl
from optimize.control.gate import Thresholds
from optimize.models.cassette import Cassette
from optimize.models.ledger import UsageLedger, load_prices
from optimize.models.llm import LLMClient, LLMConfig, make_endpoint
from optimize.models.traces import LocalTraceStore, TraceStore

if TYPE_CHECKING:
    from optimize.measure.judge import Judge
    from optimize.search.research import Researcher


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


def skill_limits(settings: Settings) -> Limits:
    """The per-skill safety caps (MAX_FILE_BYTES, MAX_SKILL_BYTES, MAX_SKILL_FILES)."""
    return Limits(
        max_file_bytes=settings.max_file_bytes,
        max_skill_bytes=settings.max_skill_bytes,
        max_files=settings.max_skill_files,
    )


def open_library(settings: Settings, roots: tuple[Path, ...] | None = None) -> Library:
    """Load the embedder (checksum verified), index every skill root, and return the library."""
    embedder = load_embedder(
        settings.embed_model_dir,
        settings.embed_model_sha256,
        settings.vector_cache_path,
        threads=settings.embed_threads,
        backend=settings.embed_backend,
        model=settings.embed_model,
    )
    limits = skill_limits(settings)
    library = Library(roots or settings.skills_dirs, embedder, limits, procedure_from(settings))
    library.reload()
    return library


def change_control(
    settings: Settings, roots: tuple[Path, ...] | None = None, library: Library | None = None
) -> ChangeControl:
    """The change-control API over the configured roots and runs directory.

    Given the served `library`, queued candidates are pre-embedded so approval is fast."""
    limits = skill_limits(settings)
    thresholds = Thresholds(
        min_margin=settings.promote_min_margin,
        min_samples=settings.promote_min_samples,
        retention_warn=settings.retention_warn,
        alpha=settings.promote_alpha,
    )
    absolute = tuple(Path(r).expanduser().absolute() for r in (roots or settings.skills_dirs))
    return ChangeControl(
        settings.runs_dir.absolute(),
        absolute,
        thresholds,
        limits,
        prepare=library.prewarm if library is not None else None,
    )


def actor(settings: Settings) -> str:
    return settings.actor or os.environ.get("USER") or "operator"


def llm_config(settings: Settings) -> LLMConfig:
    """Each role's endpoint from the settings; roles without a model are left out."""

    def secret(value) -> str | None:
        return value.get_secret_value() if value is not None else None

    serving_url = settings.model_base_url or settings.base_url
    serving_key = secret(settings.model_api_key) or secret(settings.api_key)
    models = {
        "agent": settings.agent_model,
        "strong": settings.strong_model or settings.teacher_model,
        "teacher": settings.teacher_model,
        "judge": settings.judge_model or next(iter(settings.judge_models), None),
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


def llm_client(settings: Settings, run_id: str, cassette_name: str = "default") -> LLMClient:
    """A client for one run: its ledger (with the price table and cap) and the cassette mode."""
    ledger = UsageLedger(run_id, load_prices(settings.prices_file), settings.max_run_usd)
    cassette = None
    if settings.cassette_mode != "off":
        cassette = Cassette(
            settings.runs_dir / "cassettes" / f"{cassette_name}.jsonl", settings.cassette_mode
        )
    return LLMClient(llm_config(settings), ledger, cassette)


def trace_store(settings: Settings, prune_expired: bool = False) -> TraceStore:
    """Langfuse when both LANGFUSE keys are set, else the local file (the default).

    `prune_expired` deletes local records past TRACE_RETENTION_DAYS from disk first; commands
    that read all traffic ask for it (Langfuse applies its own retention)."""
    if settings.langfuse_public_key and settings.langfuse_secret_key:
        from langfuse import Langfuse

        from optimize.models.traces_langfuse import LangfuseTraceStore

        client = Langfuse(
            public_key=settings.langfuse_public_key,
            secret_key=settings.langfuse_secret_key.get_secret_value(),
            base_url=settings.langfuse_base_url,
        )
        return LangfuseTraceStore(client, enabled=settings.traces, redaction=settings.trace_redact)
    store = LocalTraceStore(
        settings.runs_dir / "traces.jsonl",
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
    return Researcher(key, settings.runs_dir / "cache" / "research", settings.tavily_base_url)


def judge(settings: Settings, llm: LLMClient) -> Judge:
    """The judge for a run: JUDGE_MODELS (an ensemble) or JUDGE_MODEL, never the teacher."""
    from optimize.measure.judge import Judge

    models = settings.judge_models or ((settings.judge_model,) if settings.judge_model else ())
    return Judge(llm, models, settings.teacher_model)


def run_id(purpose: str) -> str:
    """A fresh id for one run's ledger (and its lines in the trace and cost reports)."""
    return f"{purpose}-{secrets.token_hex(4)}"
