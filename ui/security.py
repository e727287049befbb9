"""Who may use the review UI: the person who opened its sign-in link, from this origin.

One ASGI middleware, in front of every route:
- Every request but /login, /static and /healthz needs the session: the `ingot_session` cookie
  that a sign-in sets (HttpOnly, SameSite=Strict, a keyed hash of the access token, never the
  token). A person signs in by opening the one-time link `ingot serve` prints (`LoginLinks`:
  the code works once, then the URL is dead), or by pasting the token at /login. Reads also take
  `Authorization: Bearer <token>` (for /api/status and /metrics scrapers); writes never do.
- State-changing requests (anything but GET/HEAD/OPTIONS) need the session cookie and must come
  from this origin: a `Sec-Fetch-Site` other than same-origin or none, an `Origin` that is not
  this server's, or neither header is refused with 403. Headers a local process can forge, so
  they guard against other web pages; the session is what keeps a process that is not the
  person out, on loopback too. There is no way in without the token or a link made from it.
- Tokens are never accepted in URLs, so they never reach logs. Every response carries a strict
  Content-Security-Policy (no inline script, nothing off-site).
Which Host names are accepted is TrustedHostMiddleware's job (see ingot/cli/serve.py).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
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
    """Read the access token from `path`, creating it (0600, random) if it does not exist yet.
    A file that other users may read is refused: the token is the way in."""
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(32)
        # O_EXCL: never overwrite a token another process just wrote; 0600 from the first byte.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ValueError(f"{path} may be read by other users (mode {mode:o}): `chmod 600 {path}`")
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


class LoginLinks:
    """One-time sign-in codes for `/login/<code>`: `issue` makes one (what `ingot serve` prints),
    `redeem` accepts it once. Held in this process only, so a code dies with the server that
    issued it; only the code's hash is kept, and a redeemed code is forgotten."""

    def __init__(self) -> None:
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def issue(self) -> str:
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._open.add(_digest(code))
        return code

    def redeem(self, code: str) -> bool:
        digest = _digest(code)
        with self._lock:
            if digest not in self._open:
                return False
            self._open.discard(digest)
        return True


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "replace")).hexdigest()


class Guard:
    """ASGI middleware: the session on every request (a write: the cookie, from this origin),
    and the security headers on every response."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("the review UI needs an access token")
        self.app = app
        self.session = session_value(token)
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
        write = method not in SAFE_METHODS
        if write:
            reason = cross_site_reason(headers, scope.get("scheme", "http"))
            if reason is not None:
                return PlainTextResponse(reason, status_code=403)
        if path.startswith(OPEN_PATHS):
            return None
        if self.signed_in(headers) or (not write and self.bearer(headers)):
            return None
        if method == "GET" and "text/html" in headers.get("accept", ""):
            return RedirectResponse("/login", status_code=303)
        why = (
            "not signed in: open the sign-in link `ingot serve` printed (or sign in at /login); "
            "nothing was changed"
            if write
            else "access token required: sign in at /login"
        )
        return JSONResponse({"error": why}, status_code=401)

    def signed_in(self, headers: Headers) -> bool:
        """The request carries the session cookie a sign-in set."""
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        # Compared as bytes: compare_digest refuses non-ASCII str, and a stray byte must be a
        # plain "no", not a server error.
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.session.encode())

    def bearer(self, headers: Headers) -> bool:
        """The request carries the token itself (`Authorization: Bearer`): enough to read."""
        bearer = headers.get("authorization", "")
        return bearer.startswith("Bearer ") and hmac.compare_digest(
            bearer[7:].strip().encode(), self.token.encode()
        )


async def _with_headers(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    response.headers.update(HEADERS)
    await response(scope, receive, send)
