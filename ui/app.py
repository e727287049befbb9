"""The localhost UI. For now: a read-only status page of what is served and what was skipped.

The change-control review (approve, reject, history, rollback) is a later issue; this page
says so rather than showing controls that do nothing. It renders server-side with no external
assets, so it works offline.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from ingot import __version__
from mcp_server.library import Library

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Ingot</title><style>
body{{font:15px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:60rem;color:#222}}
table{{border-collapse:collapse;width:100%}}
td,th{{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left}}
code{{font-size:13px}}.bad{{color:#a00}}</style></head><body>
<h1>Ingot {version}</h1>
<p>Serving <b>{count}</b> skills over MCP at <code>{mcp_url}</code>. Review, approval and rollback
are not available in this version yet; use the CLI.</p>
<h2>Skills</h2><table><tr><th>name</th><th>revision</th><th>root</th></tr>{rows}</table>
<h2>Skipped</h2><table><tr><th>folder</th><th>reason</th></tr>{problems}</table>
</body></html>"""


def build_app(library: Library, mcp_url: str) -> FastAPI:
    app = FastAPI(title="Ingot", version=__version__, docs_url=None, redoc_url=None)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        status = library.status()
        rows = "".join(
            f"<tr><td>{escape(s.name)}</td><td><code>{s.short_revision}</code></td>"
            f"<td>{escape(str(s.root))}</td></tr>"
            for s in sorted(library.skills().values(), key=lambda s: s.name)
        )
        problems = (
            "".join(
                f"<tr><td>{escape(str(p.folder))}</td><td class=bad>{escape(p.reason)}</td></tr>"
                for p in status.invalid
            )
            or "<tr><td colspan=2>none</td></tr>"
        )
        return _PAGE.format(
            version=__version__, count=status.skills, mcp_url=escape(mcp_url), rows=rows, problems=problems
        )

    @app.get("/api/status")
    def api_status() -> JSONResponse:
        status = library.status()
        return JSONResponse(
            {
                "skills": {n: s.revision for n, s in library.skills().items()},
                "invalid": [{"folder": str(p.folder), "reason": p.reason} for p in status.invalid],
                "disabled": dict(status.disabled),
            }
        )

    return app
