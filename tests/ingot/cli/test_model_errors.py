"""A model endpoint that answers nonsense reaches the operator as one `Error:` line, never a
traceback: real `ingot` processes against the scripted model server and a real MCP server."""

from __future__ import annotations

from tests.ingot.cli.test_errors import error_line
from tests.ingot.cli.test_main import ingot
from tests.scripted_llm import scripted_llm


def test_a_reply_that_is_not_utf8_is_one_error_line_after_the_retries(tmp_path, served_copy):
    mcp_url, *_ = served_copy
    empty = tmp_path / "agent-skills"  # the agent reads skills over MCP; this root is its state home
    empty.mkdir()
    with scripted_llm() as server:
        server.add(garbage_bytes=b'{"choices": [{"message": {"content": "caf\xe9"}}]}')
        done = ingot(
            "agent",
            "Draft release notes for v3.1 from the merged pull requests",
            cwd=tmp_path,
            MCP_URL=mcp_url,
            SKILLS_DIRS=str(empty),
            BASE_URL=server.url,
            AGENT_MODEL="agent-model",
            STRONG_MODEL="strong-model",
            LLM_MAX_RETRIES="1",
        )
        line = error_line(done, 1)
        assert "answered 200 with something that is not a chat completion" in line
        assert "not utf-8 text" in line and "2 times" in line
        assert len(server.chat_requests()) == 2  # the first try and LLM_MAX_RETRIES=1 retry
