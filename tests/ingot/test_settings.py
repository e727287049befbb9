"""Settings: one frozen record, every field documented in .env.example, errors reported together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingot.errors import ConfigError
from ingot.settings import Settings, load_settings

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"


def test_env_example_lists_exactly_the_settings_fields():
    listed = set(re.findall(r"^([A-Z0-9_]+)=", ENV_EXAMPLE.read_text(), flags=re.MULTILINE))
    assert listed == {name.upper() for name in Settings.model_fields}


def test_empty_values_in_env_example_mean_the_defaults(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(ENV_EXAMPLE.read_text())
    settings = load_settings()
    assert settings.embed_model_dir is None and settings.route_match_threshold is None
    assert settings.skills_dirs == (Path("skills"),)


def test_lists_are_comma_separated(monkeypatch):
    monkeypatch.setenv("SKILLS_DIRS", "a, b/c")
    monkeypatch.setenv("ALLOWED_HOSTS", "mcp,ui")
    settings = load_settings()
    assert settings.skills_dirs == (Path("a"), Path("b/c"))
    assert settings.allowed_hosts == ("mcp", "ui")


def test_every_invalid_value_is_reported_in_one_error(monkeypatch):
    monkeypatch.setenv("MCP_PORT", "not-a-port")
    monkeypatch.setenv("LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "MCP_PORT" in str(caught.value) and "LOG_LEVEL" in str(caught.value)


def test_settings_are_frozen():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="frozen"):
        load_settings().mcp_port = 1  # type: ignore[misc]


def test_route_thresholds_must_be_in_order(monkeypatch):
    monkeypatch.setenv("ROUTE_MATCH_THRESHOLD", "0.1")
    monkeypatch.setenv("ROUTE_RELATED_THRESHOLD", "0.5")
    with pytest.raises(ConfigError, match="at least ROUTE_RELATED_THRESHOLD"):
        load_settings()


def test_an_embed_model_nothing_reads_is_refused(monkeypatch):
    monkeypatch.setenv("EMBED_MODEL", "/models/bge-small")
    with pytest.raises(ConfigError, match="EMBED_MODEL is read only with EMBED_BACKEND=fastembed"):
        load_settings()
    monkeypatch.setenv("EMBED_BACKEND", "fastembed")
    assert load_settings().embed_model == "/models/bge-small"
