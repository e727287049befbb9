"""One routing limit on every surface (mcp_server/router.py, `check_task`): MCP's route_and_load,
`ingot route` and the Library's routing box refuse an empty task and one longer than
MAX_TASK_CHARS in the same words, and a task within the limit is routed whole by each, the box
deciding what `ingot route` decides."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from fastmcp import Client

from mcp_server.router import MAX_TASK_CHARS
from tests.ingot.cli.test_main import ingot

SENTENCE = "Draft the release notes for v2.4 from the merged PRs. "
TOO_LONG = (SENTENCE * 1100).strip()  # 59,399 characters
WITHIN = (SENTENCE * 200)[: MAX_TASK_CHARS - 1].strip()  # past the box's old 4,000-character cut
EMPTY_SAID = "task is empty: describe what you need done in one or two sentences"
LONG_SAID = (
    f"task is {len(TOO_LONG):,} characters; send at most {MAX_TASK_CHARS:,} "
    "(a summary of the request, not the whole conversation)"
)


def mcp_says(url: str, task: str) -> str:
    """route_and_load's answer to `task`: the tool error's text, or "match NAME"."""

    async def call() -> str:
        async with Client(url) as client:
            result = await client.call_tool("route_and_load", {"task": task}, raise_on_error=False)
        if result.is_error:
            return result.content[0].text
        return f"match {result.structured_content['match']}"

    # A thread of its own: Playwright's sync API keeps this thread's event loop marked running.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, call()).result()


def cli_says(world, tmp_path, task: str, code: int) -> str:
    """`ingot route TASK`'s one line (stderr's `Error:` line when it refuses) after its exit code."""
    home = str(world.control.runs_dir)
    done = ingot("route", task, "--skills", str(world.root), cwd=tmp_path, INGOT_HOME=home)
    assert done.returncode == code, (done.returncode, done.stderr)
    if code:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
        return lines[0].removeprefix("Error: ")
    return done.stdout.splitlines()[0]


def box_says(world, page, task: str) -> str:
    """The Library page after typing `task` into the routing box and pressing Route."""
    page.goto(f"{world.ui}/library")
    page.get_by_test_id("route-task").fill(task)
    page.get_by_test_id("route-submit").click()
    page.wait_for_selector("[data-testid=route-result], [data-testid=error-message]")
    if page.get_by_test_id("error-message").count():
        return page.get_by_test_id("error-message").inner_text()
    assert page.get_by_test_id("route-task").input_value() == task  # routed whole, not cut
    return page.get_by_test_id("route-result").inner_text()


def test_an_empty_or_overlong_task_is_refused_in_the_same_words_by_mcp_the_cli_and_the_routing_box(
    world, page, tmp_path
):
    for task, said in (("  ", EMPTY_SAID), (" . - ", EMPTY_SAID), (TOO_LONG, LONG_SAID)):
        assert mcp_says(world.mcp, task) == said
        assert cli_says(world, tmp_path, task, 2) == said
        assert box_says(world, page, task) == said


def test_a_task_within_the_limit_is_routed_whole_and_the_box_decides_what_ingot_route_decides(
    world, page, tmp_path
):
    assert 4000 < len(WITHIN) <= MAX_TASK_CHARS
    line = cli_says(world, tmp_path, WITHIN, 0)  # "match: release-notes @ 4369673aac08 (score 0.638)"
    kind, rest = line.split(": ", 1)
    name, score = rest.split(" @ ")[0], rest.rsplit("(score ", 1)[1].rstrip(")")
    assert (kind, name) == ("match", "release-notes"), line
    assert mcp_says(world.mcp, WITHIN) == "match release-notes"
    shown = box_says(world, page, WITHIN)
    assert f"Decision: match {name}" in shown and f"score {score}" in shown, (line, shown)
