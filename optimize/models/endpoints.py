"""Which model answers each role, and where: validated from the settings, with nothing imported
that talks to a network (so `ingot mcp` and `ingot serve` can ask "are models configured?"
without loading the OpenAI SDK). The calls themselves are llm.py's.
Guarantee: an `Endpoint` exists only for a role whose model is set, with a base URL free of
whitespace and, for a remote (non-http) URL, a key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ingot.errors import ConfigError

ROLES = ("agent", "strong", "teacher", "judge")


@dataclass(frozen=True)
class Endpoint:
    """Where one role's requests go."""

    role: str
    base_url: str
    api_key: str | None = field(repr=False)
    model: str = ""


@dataclass(frozen=True)
class LLMConfig:
    """Model settings, parsed once by the entry point (ingot/runtime.py)."""

    endpoints: Mapping[str, Endpoint]
    timeout_s: float = 60.0
    max_retries: int = 3
    concurrency: int = 4
    retry_backoff_s: float = 0.5  # first wait before retrying a malformed reply; doubles each time

    def endpoint(self, role: str) -> Endpoint:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        found = self.endpoints.get(role)
        if found is None:
            setting = f"{role.upper()}_MODEL" if role != "strong" else "STRONG_MODEL or TEACHER_MODEL"
            raise ConfigError(
                f"no model configured for the {role} role: set BASE_URL, {setting} and, "
                "for a remote endpoint, API_KEY"
            )
        return found


def is_openrouter(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "openrouter.ai" or host.endswith(".openrouter.ai")


def needs_key(base_url: str) -> bool:
    return urlsplit(base_url).scheme != "http"


def make_endpoint(role: str, base_url: str | None, api_key: str | None, model: str | None) -> Endpoint | None:
    """Validate one role's settings; None when the role is simply not configured."""
    if not model:
        return None
    if not base_url:
        raise ConfigError(
            f"{role.upper()} model {model!r} is set but BASE_URL is empty: set BASE_URL "
            "(e.g. https://openrouter.ai/api/v1 or http://localhost:11434/v1)"
        )
    if any(ch.isspace() or not ch.isprintable() for ch in base_url):
        raise ConfigError(  # a pasted line break would otherwise surface deep inside the client
            f"the base URL for the {role} role ({base_url!r}) contains whitespace or control "
            "characters: set BASE_URL (or MODEL_BASE_URL) to the URL alone"
        )
    if needs_key(base_url) and not api_key:
        key = "MODEL_API_KEY or API_KEY" if role in ("agent", "strong") else "API_KEY"
        raise ConfigError(
            f"{base_url} is a remote endpoint and no key is set for the {role} role: set {key}. "
            "(A local http:// URL needs no key.)"
        )
    return Endpoint(role, base_url.rstrip("/"), api_key, model)
