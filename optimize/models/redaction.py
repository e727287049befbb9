"""Redaction: what leaves a model call for disk (traces, goldens, cassette requests) loses its
secrets and personal addresses first.

Two layers. Our own patterns, written for what shows up in agent traffic: private keys, bearer
and `Authorization: Token` headers, JWTs, provider API keys (OpenAI, Anthropic, GitHub, GitLab,
Slack, npm, ...), credentials in URLs, `token=` / `password: ...` assignments, "the password is
X" in prose, and e-mail addresses. Then detect-secrets' maintained detector plugins (AWS, Azure,
Stripe, Twilio, keyword assignments, ...) line by line, each value found replaced wherever it
occurs. Its entropy plugins are left out on purpose: they flag every SHA-256 (skill revisions,
digests) and would make records useless. Redaction is lossy by design and never reversible.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import transient_settings

SECRET_KEY_NAMES = re.compile(
    r"(?i)(password|passwd|passphrase|secret|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|auth[_-]?token|access[_-]?token|refresh[_-]?token|"
    r"client[_-]?secret|^token$|session[_-]?id|cookie|^authorization$)"
)
_ASSIGNED = (
    r"password|passwd|passphrase|secret|api[_-]?key|apikey|access[_-]?key|auth[_-]?token|"
    r"access[_-]?token|refresh[_-]?token|token"
)
REDACTIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private-key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*)", re.S),
    ),
    (
        "bearer-token",
        re.compile(r"\b(?:Bearer|Basic|Token)\s+(?=[A-Za-z0-9._~+/=-]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{12,}"),
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    (
        "api-key",
        re.compile(
            r"\b(sk-(?:ant-|or-|proj-|live-)?[A-Za-z0-9_-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
            r"|hf_[A-Za-z0-9]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{30,}"
            r"|pypi-[A-Za-z0-9_-]{40,})\b"
        ),
    ),
    ("url-credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)")),
    (
        "email",
        re.compile(r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}\b"),
    ),
    # "name": "any quoted value" (JSON, also escaped JSON): the whole quoted value goes.
    (
        "secret-quoted",
        re.compile(rf"(?i)\b([\w.-]*(?:{_ASSIGNED})\b)(\\?\"\s*:\s*\\?\")([^\"\\]{{1,200}})"),
    ),
    # name = value / name: value / ?token=value, also inside escaped JSON; the value must look like
    # a secret (a digit, or 12+ characters) so prose such as "password: click Reset" survives.
    (
        "secret-assignment",
        re.compile(
            rf"(?i)\b([\w.-]*(?:{_ASSIGNED})\b)(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
            r"((?=[^\s'\",;&\\]*\d)[^\s'\",;&\\]{4,}|[^\s'\",;&\\]{12,})"
        ),
    ),
    # "my password is hunter2", "the PIN was 4821": the word after is/was goes if it looks secret.
    (
        "secret-prose",
        re.compile(
            r"(?i)\b(password|passphrase|passcode|pin)(\s+(?:is|was)\s*:?\s+)"
            r"((?=\S*[\d!@#$%^&*])\S{4,}|\S{12,})"
        ),
    ),
)
_KEEPS_NAME = ("secret-assignment", "secret-quoted", "secret-prose")
_DETECT_SECRETS_SKIPPED = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}
# detect-secrets keeps its settings in a process-wide global that `transient_settings` swaps
# in and out: two threads scanning at once corrupt it (replays redact concurrently).
_SCAN_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _plugins() -> tuple[dict[str, str], ...]:
    classes = get_mapping_from_secret_type_to_class().values()
    return tuple(
        {"name": c.__name__}
        for c in sorted(classes, key=lambda c: c.__name__)
        if c.__name__ not in _DETECT_SECRETS_SKIPPED
    )


def _detected(text: str) -> set[tuple[str, str]]:
    """(kind, value) of every secret detect-secrets' detectors find in `text`, line by line."""
    found: set[tuple[str, str]] = set()
    with _SCAN_LOCK, transient_settings({"plugins_used": list(_plugins())}):
        for line in text.splitlines():
            if line.strip():
                for secret in scan_line(line):
                    if (
                        secret.secret_value
                        and len(secret.secret_value) >= 4
                        and "[REDACTED" not in secret.secret_value
                    ):
                        kind = re.sub(r"[^a-z0-9]+", "-", secret.type.lower()).strip("-")
                        found.add((kind, secret.secret_value))
    return found


def redact(text: str) -> str:
    """`text` with every secret-looking span replaced by `[REDACTED:<kind>]`."""
    for kind, pattern in REDACTIONS:
        if kind in _KEEPS_NAME:
            label = "secret-assignment" if kind != "secret-prose" else kind
            text = pattern.sub(lambda m, label=label: f"{m.group(1)}{m.group(2)}[REDACTED:{label}]", text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    for kind, value in sorted(_detected(text), key=lambda item: -len(item[1])):
        text = text.replace(value, f"[REDACTED:{kind}]")
    return text


def redact_value(value: Any, key: str | None = None) -> Any:
    """A JSON-like value with every string redacted; a field named like a secret loses its value."""
    if isinstance(value, str):
        if key is not None and SECRET_KEY_NAMES.search(key) and value:
            return "[REDACTED:secret-field]"
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, key) for v in value]
    return value
