"""Redaction before anything reaches disk: our patterns plus detect-secrets' detectors."""

from __future__ import annotations

import pytest

from optimize.models.redaction import redact, redact_value


def test_prose_that_merely_mentions_secrets_survives():
    for prose in (
        "Explain how token buckets rate-limit an API.",
        "Input tokens: 1500",
        "Reset your password: click the link",
        "The bearer instrument",
    ):
        assert redact(prose) == prose


@pytest.mark.parametrize(
    "secret",
    [
        "sk_live_abcdefghijklmnop1234",
        "hf_abcdefghijklmnopqrstuvwxyz123456",
        "glpat-abcdefghij1234567890",
        "github_pat_11ABCDEFG0123456789abcdefghijklmnop",
        "AKIAABCDEFGHIJKLMNOP",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk",
    ],
)
def test_common_token_formats_are_redacted(secret):
    assert secret not in redact(f"config: {secret} end")


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Contact jane.doe+billing@example.co.uk about the invoice", "jane.doe+billing@example.co.uk"),
        ("Authorization: Token 4f9a1c2b3d4e5f60718293a4b5c6d7e8", "4f9a1c2b3d4e5f60718293a4b5c6d7e8"),
        ("curl 'https://api.example.com/v1/items?token=abcd1234efgh5678&page=2'", "abcd1234efgh5678"),
        (
            "export NPM_TOKEN=npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        ),
        ("My password is Sup3rS3cret! please log in", "Sup3rS3cret!"),
        ("the PIN was 4821 yesterday", "4821"),
        ("twilio key SK0123456789abcdef0123456789abcdef in the config", "SK0123456789abcdef0123456789abcdef"),
        ("mailchimp 0123456789abcdef0123456789abcdef-us12", "0123456789abcdef0123456789abcdef-us12"),
    ],
)
def test_addresses_header_tokens_and_secrets_in_prose_are_redacted(text, secret):
    assert secret not in redact(text)


def test_revisions_digests_and_ordinary_words_survive():
    revision = "8199be6f" + "0123456789abcdef" * 3 + "0123d2a6"
    for prose in (
        f"served revision {revision}",
        "The token endpoint returns 401 when the session expired",
        "Token counts: 1200 in, 300 out",
        "Use git@github.com:org/repo.git to clone",  # an SSH remote is an address: it goes, the rest stays
    ):
        kept = redact(prose)
        assert kept.split()[0] == prose.split()[0]
    assert revision in redact(f"served revision {revision}")
    assert redact("The token endpoint returns 401 when the session expired").endswith("session expired")


def test_nested_records_lose_secret_fields_and_addresses():
    record = {
        "task": "email bob@corp.example the report",
        "tool_calls": [{"arguments": {"api_key": "x" * 5}}],
    }
    cleaned = redact_value(record)
    assert "bob@corp.example" not in str(cleaned) and cleaned["tool_calls"][0]["arguments"]["api_key"] == (
        "[REDACTED:secret-field]"
    )


def test_redaction_is_safe_from_many_threads_at_once():
    """Replays redact concurrently (REPLAY_CONCURRENCY); detect-secrets' settings are global."""
    from concurrent.futures import ThreadPoolExecutor

    from optimize.models.redaction import redact

    texts = [
        f"aws_secret_access_key = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCY{n:010d}'\nhello {n}" for n in range(600)
    ]
    expected = [redact(t) for t in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(redact, texts)) == expected
