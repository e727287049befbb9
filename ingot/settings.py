"""Every setting Ingot reads, parsed once from the environment and `.env` into a frozen record.

Only entry points (the CLI, scripts) call `load_settings`; everything else receives values as
arguments. Invalid values are reported together in one `ConfigError`. `.env.example` lists every
field here with a comment, and a test keeps the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ingot.errors import ConfigError


class Settings(BaseSettings):
    """Ingot's configuration. Environment variable names are the field names in upper case."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True, env_ignore_empty=True)

    skills_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(Path("skills"),),
        description="Skills roots, comma-separated; the first wins on duplicate names.",
    )
    ingot_home: Path | None = Field(
        default=None,
        description="State home of these skills roots; default: <first root's parent>/.ingot/<its name>.",
    )
    bind_host: str = Field(
        default="127.0.0.1", description="Address the MCP server and UI bind (loopback by default)."
    )
    mcp_port: int = Field(default=8000, ge=1, le=65535)
    ui_port: int = Field(default=8080, ge=1, le=65535)
    ui_access_token: SecretStr | None = Field(
        default=None,
        description="The UI's access token (default: <state home>/ui-token); set for a non-loopback UI.",
    )
    ui_access_token_file: Path | None = Field(
        default=None, description="Read the UI token from this file (created, random, 0600, if missing)."
    )
    mcp_url: str | None = Field(default=None, description="Where `ingot agent` finds Ingot's MCP server.")
    proxy_port: int = Field(default=8090, ge=1, le=65535, description="Capture proxy (`ingot proxy`).")
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Extra Host header values the MCP server accepts (e.g. a Docker service name).",
    )
    allowed_caller_roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(),
        description="Folders under which a caller's cwd may be inspected for `paths` constraints.",
    )
    create_skill_max_pending: int = Field(
        default=25, ge=0, description="Changes one MCP client may have waiting for review at once."
    )
    create_skill_max_pending_total: int = Field(
        default=100, ge=0, description="Agent-proposed changes from all clients waiting at once."
    )
    create_skill_per_minute: float = Field(
        default=6.0, gt=0, description="create_skill calls admitted per minute from one MCP client."
    )
    create_skill_per_minute_total: float = Field(
        default=24.0, gt=0, description="create_skill calls admitted per minute from all clients."
    )
    embed_model_dir: Path | None = Field(default=None, description="Folder with model.onnx + tokenizer.json.")
    embed_model_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    embed_threads: int = Field(default=2, ge=1, le=64)
    embed_backend: Literal["onnx", "fastembed"] = Field(
        default="onnx", description="onnx: onnxruntime directly (default); fastembed: through fastembed."
    )
    embed_model: str | None = Field(
        default=None, description="fastembed: a model folder (or a name in its cache); empty = bundled."
    )
    max_file_bytes: int = Field(default=1 << 20, ge=1024)
    max_skill_bytes: int = Field(default=16 << 20, ge=1024)
    max_skill_files: int = Field(default=512, ge=1)
    route_match_threshold: float | None = Field(default=None, ge=0, le=2)
    route_related_threshold: float | None = Field(default=None, ge=0, le=2)
    promote_min_margin: float = Field(default=0.15, ge=0, le=1)
    promote_min_samples: int = Field(default=3, ge=1)
    promote_alpha: float = Field(default=0.1, gt=0, lt=1)
    promote_min_routing_cases: int = Field(
        default=5, ge=1, description="Routing cases each routing metric needs before it can decide."
    )
    retention_warn: float = Field(default=0.5, ge=0, le=1)
    review_window: float = Field(
        default=86400,
        gt=0,
        description="Seconds a supervised change waits for a rejection before it is promoted.",
    )
    autonomy_streak: int = Field(
        default=3, ge=1, description="Clean changes in a row that lift a class one level."
    )
    autopilot_tick_s: float = Field(
        default=5.0, gt=0, description="How often `ingot serve` checks what autonomy may do."
    )
    candidate_roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(),
        description="Folders agents write candidate skills to (never served); each becomes a pending change.",
    )
    candidate_branch: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._/-]+$",
        description="In a git skills root: commits on this branch that touch a skill become pending changes.",
    )
    inbox_settle_s: float = Field(
        default=2.0, ge=0, description="A candidate folder must be this many seconds unchanged to be read."
    )
    live_edits: Literal["serve", "quarantine"] = Field(
        default="serve",
        description="serve: edits to live skills are served (drift); quarantine: queued and restored.",
    )
    git_history: bool = Field(
        default=True, description="In a git skills root, commit every promotion and rollback."
    )
    git_push_remote: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._-]+$", description="Push each such commit to this remote."
    )
    audit_remote_url: str | None = Field(
        default=None,
        description="Where GIT_PUSH_REMOTE really is (URL or path): `ingot audit verify` fetches the "
        "pushed history from here, not from the repository's config, which whoever can edit the "
        "repository can repoint, and fails if that config points elsewhere.",
    )
    git_signing_key: Path | None = Field(
        default=None,
        description="Sign every Ingot commit with this SSH key (replicas verify it); attach its evidence.",
    )
    # -- replicas (optimize/control/replica.py): serve a primary's pushed remote, verified --
    replica_remote: str | None = Field(
        default=None,
        description="The primary's pushed remote (URL or path); `ingot serve --replica` sets it.",
    )
    replica_branch: str = Field(
        default="main", pattern=r"^[A-Za-z0-9._/-]+$", description="The branch of it a replica serves."
    )
    replica_allowed_signers: Path | None = Field(
        default=None,
        description="git's allowed-signers file: the public keys whose commits a replica serves.",
    )
    replica_interval_s: float = Field(
        default=30.0, ge=0.2, description="How often a replica fetches and verifies (seconds)."
    )
    actor: str | None = Field(default=None, description="Name recorded in the audit log; default: $USER.")
    # -- models (one client layer: optimize/models/llm.py) --
    base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint for every role.")
    api_key: SecretStr | None = Field(default=None)
    model_base_url: str | None = Field(
        default=None, description="Override for the serving roles (agent, strong)."
    )
    model_api_key: SecretStr | None = Field(default=None)
    agent_model: str | None = None
    strong_model: str | None = Field(default=None, description="Defaults to TEACHER_MODEL.")
    teacher_model: str | None = None
    judge_model: str | None = None
    judge_models: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="Ensemble, comma-separated."
    )
    judge_l1_model: str | None = Field(default=None, description="Replay judge, cheap screen (L1).")
    judge_l2_model: str | None = Field(
        default=None, description="Replay judge, mid re-check that cites (L2)."
    )
    judge_l3_model: str | None = Field(
        default=None, description="Replay judge, strongest (L3); default JUDGE_MODEL."
    )
    replay_controls: int = Field(default=2, ge=0, le=10, description="Unchanged-champion replays per golden.")
    replay_concurrency: int = Field(default=4, ge=1, le=64, description="Replays running at once.")
    replay_max_turns: int = Field(default=8, ge=1, le=100, description="Model calls per replay.")
    replay_max_tokens: int = Field(default=60_000, ge=1000, description="Tokens in + out per replay.")
    replay_timeout_s: float = Field(default=300.0, gt=0, description="Wall clock per replay.")
    replay_side_effect_tools: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("write_file", "edit_file", "delete", "create_skill"),
        description="Tools whose calls are side effects (a missing or extra one is L0 evidence).",
    )
    replay_sandbox_tools: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("execute",), description="Tools whose `command` replays run in the execution sandbox."
    )
    replay_world_url: str | None = Field(
        default=None, description="Endpoint that executes REPLAY_WORLD_TOOLS live during replays."
    )
    replay_world_tools: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="Read-only tools replays may call live (world drift); never side effects."
    )
    replay_research: bool = Field(
        default=False, description="Corroborate a moved world fact by a web search of its label (Tavily)."
    )
    llm_timeout_s: float = Field(default=60.0, gt=0)
    llm_max_retries: int = Field(default=3, ge=0, le=10)
    llm_concurrency: int = Field(default=4, ge=1, le=64)
    max_run_usd: float | None = Field(default=None, ge=0)
    prices_file: Path | None = Field(
        default=None, description="JSON: model -> USD per million input/output tokens."
    )
    cassette_mode: Literal["off", "record", "replay", "record-missing"] = "off"
    optimize_candidates: int = Field(default=5, ge=1, le=5, description="Rewrites authored per search.")
    tasks_dir: Path = Field(default=Path("optimize/tasks"), description="Eval task sets, <skill>.yaml.")
    loop_health_threshold: float = Field(
        default=0.7, ge=0, le=1, description="Optimize skills scoring below."
    )
    loop_passes: Annotated[tuple[str, ...], NoDecode] = Field(default=("body", "description"))
    exec_sandbox: Literal["bubblewrap", "docker", "none"] = Field(
        default="bubblewrap", description="Where code from answers runs; none: checks are inconclusive."
    )
    # -- the reference agent's limits and the sandbox's Docker backend --
    exec_docker_image: str = Field(
        default="python:3.11-slim", min_length=1, description="Image for EXEC_SANDBOX=docker (never pulled)."
    )
    docker_host: str | None = Field(
        default=None, description="Docker Engine URL for EXEC_SANDBOX=docker; default the local socket."
    )
    agent_max_model_calls: int = Field(default=8, ge=1, le=100, description="Model calls per agent task.")
    agent_max_tool_calls: int = Field(default=16, ge=0, le=500, description="Tool calls per agent task.")
    tavily_api_key: SecretStr | None = Field(
        default=None, description="Optional web research for candidate authors (never the judge)."
    )
    tavily_base_url: str = Field(default="https://api.tavily.com", description="Tavily API base URL.")
    # -- traces --
    traces: bool = Field(default=True, description="Record agent runs in runs/traces.jsonl.")
    trace_redact: bool = True
    trace_max_bytes: int = Field(default=10 << 20, ge=1024)
    trace_backups: int = Field(default=5, ge=0)
    trace_retention_days: int = Field(default=30, ge=1)
    langfuse_public_key: str | None = Field(default=None, description="Set both keys to trace to Langfuse.")
    langfuse_secret_key: SecretStr | None = None
    langfuse_base_url: str | None = Field(default=None, description="Default: Langfuse Cloud.")
    # -- OpenTelemetry export (mcp_server/telemetry.py); the SDK reads the other OTEL_* itself --
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="Export the servers' and model calls' spans over OTLP/HTTP to this collector base URL.",
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        default=None, description="The collector's traces URL itself (used as is), instead of the base URL."
    )
    otel_exporter_otlp_protocol: str | None = Field(
        default=None, description="Only http/protobuf; anything else stops an exporting command."
    )
    watch_skills: bool = Field(default=True, description="Re-index skills when files change on disk.")
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$")

    @field_validator("skills_dirs", "allowed_caller_roots", "candidate_roots", mode="before")
    @classmethod
    def _split_paths(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(Path(p.strip()) for p in value.split(",") if p.strip())
        return value

    @field_validator(
        "allowed_hosts",
        "judge_models",
        "loop_passes",
        "replay_side_effect_tools",
        "replay_sandbox_tools",
        "replay_world_tools",
        mode="before",
    )
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(h.strip() for h in value.split(",") if h.strip())
        return value

    @model_validator(mode="after")
    def _thresholds_in_order(self) -> Settings:
        match, related = self.route_match_threshold, self.route_related_threshold
        if match is not None and related is not None and match < related:
            raise ValueError("ROUTE_MATCH_THRESHOLD must be at least ROUTE_RELATED_THRESHOLD")
        return self

    @model_validator(mode="after")
    def _embed_model_has_a_reader(self) -> Settings:
        if self.embed_model and self.embed_backend != "fastembed":
            raise ValueError(
                "EMBED_MODEL is read only with EMBED_BACKEND=fastembed; for the default onnx "
                "backend set EMBED_MODEL_DIR to the model folder instead"
            )
        return self


RETIRED = {
    "RUNS_DIR": "state now lives in one state home per set of skills roots (INGOT_HOME; default "
    "<first root's parent>/.ingot/<its name>): remove RUNS_DIR, and move existing state with "
    "`ingot migrate --from <the old RUNS_DIR>`",
}


def _retired_settings() -> list[str]:
    """Settings an older Ingot read, still set in the environment or .env."""
    found = dict(dotenv_values(".env")) if Path(".env").is_file() else {}
    found.update(os.environ)
    return [f"{name} is no longer read: {why}" for name, why in RETIRED.items() if found.get(name)]


def load_settings(flags: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build `Settings` from env/.env plus explicit overrides; raise `ConfigError` listing every problem.

    `flags` maps an override's field to the command-line flag it came from (`mcp_port` ->
    `--mcp-port`), so a bad value is reported against the flag the user typed, not the environment."""
    retired = _retired_settings()
    if retired:
        raise ConfigError("; ".join(retired))
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        flags = flags or {}
        from_flags, from_env = [], []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            if field in flags and field in given:
                from_flags.append(f"{flags[field]} {_shown(given[field])}: {err['msg'].lower()}")
            else:
                where = ".".join(str(p) for p in err["loc"]).upper() or "settings"
                from_env.append(f"{where}: {err['msg']}")
        problems = from_flags + ([f"invalid settings: {'; '.join(from_env)}"] if from_env else [])
        fix = ". Fix them in the environment or .env" if from_env else ""
        raise ConfigError("; ".join(problems) + fix) from exc


def _shown(value: object) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)
