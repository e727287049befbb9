"""Tell connected hosts when the served skills change, on both protocol lanes.

After a reload that changes what is served (Library.on_served_change), every connected client
learns that the resource list (and with it `skills/list`) changed: on the handshake lane
(protocols before 2026-07-28) as `notifications/resources/list_changed` on each session that
spoke to us; on the 2026-07-28 lane through `subscriptions/listen` streams, with a
`notifications/resources/updated` for every file URI of a skill that changed or went. The
handshake lane declares `listChanged` for resources only (tools and prompts never change here);
on the 2026-07-28 lane the SDK derives the flags from the listen handler. Delivery is
fire-and-forget: a session that has gone away is forgotten, never retried.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware, MiddlewareContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ResourceUpdated,
)
from mcp_types import SubscriptionsListenRequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_server.library import ServedChange
from mcp_server.skill_resources import file_uri

log = logging.getLogger(__name__)


class ChangeNotifier:
    """Fans a served change out to listen streams and handshake-era sessions."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()  # handshake-era ones
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self, mcp: FastMCP) -> None:
        """Serve `subscriptions/listen` and remember the sessions that talk to `mcp`."""
        mcp.add_middleware(_Remember(self))
        low = mcp._mcp_server  # the SDK server under fastmcp: where protocol handlers live
        low.add_request_handler(
            "subscriptions/listen", SubscriptionsListenRequestParams, ListenHandler(self.bus)
        )
        low.notification_options = NotificationOptions(
            prompts_changed=False, resources_changed=True, tools_changed=False
        )

    def remember(self, session: Any) -> None:
        """Note the connection behind a request's session (the SDK builds a ServerSession per
        request; the connection is what lives as long as the host stays connected)."""
        self._loop = asyncio.get_running_loop()
        connection = getattr(session, "_connection", None)
        if connection is not None and connection.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self._connections.add(connection)

    def served_changed(self, change: ServedChange) -> None:
        """Library listener (any thread): publish the change on the server's event loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # nobody has connected yet: nobody to tell
        asyncio.run_coroutine_threadsafe(self.publish(change), loop)

    async def publish(self, change: ServedChange) -> None:
        await self.bus.publish(ResourcesListChanged())
        for name in (*change.changed, *change.removed):
            for path in sorted(f.path for f in change.before[name].files):
                await self.bus.publish(ResourceUpdated(uri=file_uri(name, path)))
        for connection in list(self._connections):
            try:
                await connection.outbound.notify("notifications/resources/list_changed", None)
            except Exception as exc:  # the host went away: forget it
                log.debug("not telling a connection the skills changed: %s", exc)
                self._connections.discard(connection)


class _Remember(Middleware):
    async def on_message(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        session = None
        if context.fastmcp_context is not None:
            try:
                session = context.fastmcp_context.session
            except RuntimeError:  # no session yet (a modern request's own, or before initialize)
                session = None
        self._notifier.remember(session)
        return await call_next(context)

    def __init__(self, notifier: ChangeNotifier) -> None:
        self._notifier = notifier
