"""What keeps other web pages and other machines away from the review UI.

One ASGI middleware, in front of every route:
- State-changing requests (anything but GET/HEAD/OPTIONS) must come from this origin: a
  `Sec-Fetch-Site` other than same-origin, an `Origin` that is not this server's, or neither
  header at all is refused with 403. Browsers send at least one of them on every POST, so a page
  elsewhere can never approve, reject, roll back or start a run; scripts should use the CLI.
- With an access token configured, every request needs it: the `ingot_session` cookie set by
  /login (HttpOnly, SameSite=Strict, holding a hash of the token, never the token) or an
  `Authorization: Bearer` header. Tokens are never accepted in URLs, so they never reach logs.
- Every response carries a strict Content-Security-Policy (no inline script, nothing off-site).
Which Host names are accepted is TrustedHostMiddleware's job (see ingot/cli/serve.py).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
COOKIE = "ingot_session"
OPEN_PATHS = ("/login", "/static/", "/healthz")  # reachable without the token
HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # "no-referrer" would make Chromium send `Origin: null` on POSTs
    "cache-control": "no-store",
}


def session_value(token: str) -> str:
    """The cookie value for `token`: a keyed hash, so the cookie never holds the token itself."""
    return hmac.new(token.encode(), b"ingot-ui-session", hashlib.sha256).hexdigest()


def token_from_file(path: Path) -> str:
    """Read the access token from `path`, creating it (0600, random) if it does not exist yet."""
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(32)
        # O_EXCL: never overwrite a token another process just wrote; 0600 from the first byte.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
    if len(token) < 16:
        raise ValueError(f"the UI access token in {path} is shorter than 16 characters")
    return token


def cross_site_reason(headers: Headers, scheme: str) -> str | None:
    """Why a state-changing request is not provably same-origin, or None if it is."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {site})"
    origin = headers.get("origin")
    if origin is not None:
        if origin != f"{scheme}://{headers.get('host', '')}":
            return "cross-origin request refused (Origin does not match this server)"
        return None
    if site is None:
        return "request refused: no Origin or Sec-Fetch-Site header (use the ingot CLI from scripts)"
    return None


class Guard:
    """ASGI middleware enforcing same-origin writes, the optional token and security headers."""

    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        self.app = app
        self.session = session_value(token) if token else None
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _with_headers(refusal, scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        path, method = scope["path"], scope["method"]
        if method not in SAFE_METHODS:
            reason = cross_site_reason(headers, scope.get("scheme", "http"))
            if reason is not None:
                return PlainTextResponse(reason, status_code=403)
        if self.session is None or path.startswith(OPEN_PATHS) or self.authenticated(headers):
            return None
        if method == "GET" and "text/html" in headers.get("accept", ""):
            return RedirectResponse("/login", status_code=303)
        return JSONResponse({"error": "access token required: sign in at /login"}, status_code=401)

    def authenticated(self, headers: Headers) -> bool:
        assert self.session is not None and self.token is not None
        bearer = headers.get("authorization", "")
        # Compared as bytes: compare_digest refuses non-ASCII str, and a stray byte must be a
        # plain "no", not a server error.
        if bearer.startswith("Bearer ") and hmac.compare_digest(
            bearer[7:].strip().encode(), self.token.encode()
        ):
            return True
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.session.encode())


async def _with_headers(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    response.headers.update(HEADERS)
    await response(scope, receive, send)
