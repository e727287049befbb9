"""The sockets `ingot serve` binds up front serve like the ones uvicorn would bind itself."""

from __future__ import annotations

import asyncio
import socket

from ingot.cli.serve import listen
from tests.conftest import free_port


def test_connections_on_a_port_bound_up_front_reply_without_waiting_for_a_delayed_ack():
    """asyncio (and so uvicorn, which serves the socket through it) turns Nagle off only on
    sockets that say they are TCP; without it every MCP reply waited ~40 ms for the client's
    delayed ACK. Checked on a connection accepted the way uvicorn accepts them."""
    sock = listen("127.0.0.1", free_port(), "--mcp-port")

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(
                writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            )
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        async with server:
            _, client = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(seen, 10)
            client.close()
        return value

    try:
        assert asyncio.run(accepted_nodelay()) != 0
    finally:
        sock.close()
