"""What every page of the review UI renders and decides with, built once per app by build_app.

`Site.page` renders a template with the status header (a header that cannot be built shows as
none, never an error page of its own); `Site.exclusive` lets one approve, reject or rollback run
at a time in this process, refusing a second with `PromotionConflict` (409); `Site.refresh`
serves a skill's new revision now. Routes live in review_routes.py, library_routes.py and
trace_routes.py; the app, its guard and error mapping in app.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from ingot import __version__
from ingot.errors import IngotError
from mcp_server.library import Library
from optimize.control.changes import ChangeControl
from optimize.control.goldens_admin import GoldenAdmin
from optimize.control.lock import PromotionConflict
from optimize.control.status import Status
from optimize.measure.goldens import Golden, Review
from optimize.models.traces import TraceStore
from ui.header import header
from ui.runs import RunManager

log = logging.getLogger(__name__)
NOTICES = {
    "approved": "Approved and promoted; the new revision is being served.",
    "rejected": "Rejected; the change is archived with your reason.",
    "rolled-back": "Rolled back; the selected revision is being served.",
    "removed": "Removed; the skill is no longer served. Its last revision is kept in the snapshots.",
    "blessed": "Blessed: the run is a golden. Review its criteria below; every change to the skill "
    "is replayed against it.",
    "criteria": "Criteria and world facts approved (recorded as yours in the audit chain).",
    "retired": "Retired: the golden is no longer replayed (kept on disk and in the audit chain).",
}


@dataclass(frozen=True)
class Site:
    """The app's collaborators and settings, shared by every route module."""

    library: Library
    control: ChangeControl
    runs: RunManager
    admin: GoldenAdmin
    templates: Jinja2Templates
    mcp_url: str
    actor: str
    traces: TraceStore | None = None
    drafter: Callable[[Golden], Review] | None = None
    tasks_dir: Path | None = None
    in_flight: threading.Lock = field(default_factory=threading.Lock)  # one decision at a time

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if not self.in_flight.acquire(blocking=False):
            raise PromotionConflict("another approval or rollback is in progress; retry when it finishes")
        try:
            yield
        finally:
            self.in_flight.release()

    def page(
        self, request: Request, name: str, status_code: int = 200, state: Status | None = None, **values: Any
    ) -> HTMLResponse:
        if "header" not in values:
            try:
                values["header"] = header(state or self.control.status())
            except (IngotError, OSError) as exc:  # never let the header take a page (or an error) down
                log.warning("cannot build the status header: %s", type(exc).__name__)
                values["header"] = None
        return self.templates.TemplateResponse(
            request,
            name,
            {"version": __version__, "mcp_url": self.mcp_url, **values},
            status_code=status_code,
        )

    def refresh(self, skill: str) -> None:
        # Serve the new revision (or stop serving a removed skill) now, not at the watcher's next event.
        self.library.reload([root / skill for root in self.control.roots])
