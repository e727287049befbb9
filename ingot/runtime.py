"""Build the served library from settings: the one place settings become live objects."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ingot.errors import ConfigError
from ingot.settings import Settings
from mcp_server.embedding import load_embedder
from mcp_server.library import Library
from mcp_server.registry import Limits
from mcp_server.router import Calibration
from optimize.changes import ChangeControl
from optimize.gate import Thresholds


def calibration_from(settings: Settings) -> Calibration:
    cal = Calibration()
    if settings.route_match_threshold is not None:
        cal = replace(cal, match_threshold=settings.route_match_threshold)
    if settings.route_related_threshold is not None:
        cal = replace(cal, related_threshold=settings.route_related_threshold)
    if cal.match_threshold < cal.related_threshold:
        raise ConfigError(
            f"route thresholds out of order: match {cal.match_threshold} < related "
            f"{cal.related_threshold}; set both ROUTE_MATCH_THRESHOLD and ROUTE_RELATED_THRESHOLD"
        )
    return cal


def open_library(settings: Settings, roots: tuple[Path, ...] | None = None) -> Library:
    """Load the embedder (checksum verified), index every skill root, and return the library."""
    embedder = load_embedder(
        settings.embed_model_dir,
        settings.embed_model_sha256,
        settings.vector_cache_path,
        threads=settings.embed_threads,
    )
    limits = Limits(
        max_file_bytes=settings.max_file_bytes,
        max_skill_bytes=settings.max_skill_bytes,
        max_files=settings.max_skill_files,
    )
    library = Library(roots or settings.skills_dirs, embedder, limits, calibration_from(settings))
    library.reload()
    return library


def change_control(
    settings: Settings, roots: tuple[Path, ...] | None = None, library: Library | None = None
) -> ChangeControl:
    """The change-control API over the configured roots and runs directory.

    Given the served `library`, queued candidates are pre-embedded so approval is fast."""
    limits = Limits(
        max_file_bytes=settings.max_file_bytes,
        max_skill_bytes=settings.max_skill_bytes,
        max_files=settings.max_skill_files,
    )
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
