"""Servers the CLI starts check their ports before they announce or start anything: `ingot serve`
given one port for MCP and the UI, and `ingot proxy` on a port something else holds, are one
`Error:` line and exit 2 (EXIT_CODES: a port in use is usage or configuration), never a
traceback, a startup line or exit 3 (a conflict)."""

from __future__ import annotations

import socket

from tests.conftest import free_port
from tests.ingot.cli.test_errors import error_line
from tests.ingot.cli.test_main import bundled, ingot


def test_serve_with_one_port_for_mcp_and_the_ui_is_one_line_and_exit_2_before_anything_starts(tmp_path):
    port = str(free_port())
    skills = str(bundled(tmp_path))
    done = ingot("serve", "--skills", skills, "--mcp-port", port, "--ui-port", port, cwd=tmp_path, timeout=60)
    assert error_line(done, 2) == (
        f"Error: MCP and the UI are both given port {port} (--mcp-port; --ui-port): give each its own "
        "port, e.g. --mcp-port 8000 --ui-port 8080"
    )
    assert done.stdout == ""
    done = ingot("serve", "--skills", skills, "--mcp-port", port, cwd=tmp_path, timeout=60, UI_PORT=port)
    assert f"port {port} (--mcp-port; UI_PORT or --ui-port)" in error_line(done, 2)


def test_proxy_on_a_taken_port_says_so_in_one_line_with_exit_2_and_never_announces_itself(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        at = {"cwd": tmp_path, "timeout": 60, "SKILLS_DIRS": str(bundled(tmp_path))}
        upstream = "http://127.0.0.1:9/v1"
        done = ingot("proxy", "--upstream", upstream, "--port", port, **at)
        assert error_line(done, 2) == (
            f"Error: port {port} on 127.0.0.1 is already in use (--port): stop what listens there, or "
            "choose another port"
        )
        assert "capture proxy at" not in done.stderr and done.stdout == ""
        done = ingot("proxy", "--upstream", upstream, PROXY_PORT=port, **at)
        assert "in use (PROXY_PORT or --port)" in error_line(done, 2)
