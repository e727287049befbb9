"""Self-calibration as a caller sees it: the real model, the real MCP server on loopback, the
official MCP SDK client. A body-less and a body-rich library each route their own pseudo-queries
home and refuse off-library tasks (listing the nearest skills, loading none); 100 distractor
skills added to a library do not turn a correct route novel."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from mcp.client import Client as SDKClient

from ingot.bench.workload import write_library
from mcp_server.calibration import _sentences
from tests.conftest import running_mcp
from tests.mcp_server.test_calibration import BODYLESS, BODYRICH, OFF_LIBRARY, REQUESTS


def route_all(url: str, tasks: list[str]) -> dict[str, dict]:
    """route_and_load for every task in one SDK session: task -> structured result."""

    async def go():
        async with SDKClient(url) as client:
            out = {}
            for task in tasks:
                result = await client.call_tool("route_and_load", {"task": task})
                assert not result.is_error, (task, result)
                out[task] = result.structured_content
            return out

    return asyncio.run(go())


def loaded(data: dict) -> str | None:
    return data["match"] or data["related_match"]


@pytest.mark.parametrize("root", [BODYLESS, BODYRICH], ids=["bodyless", "bodyrich"])
def test_over_mcp_a_library_routes_its_own_requests_and_refuses_off_library_tasks(library_factory, root):
    library = library_factory(root)
    pseudo = {s: name for name, skill in library.skills().items() for s in _sentences(skill.description)}
    with running_mcp(library) as url:
        got = route_all(url, [*pseudo, *REQUESTS[root], *OFF_LIBRARY])
    wrong = {s: loaded(got[s]) for s, name in pseudo.items() if loaded(got[s]) not in (None, name)}
    assert not wrong  # a pseudo-query may be too vague to route, never routed to another skill
    assert sum(loaded(got[s]) == name for s, name in pseudo.items()) / len(pseudo) >= 0.9
    assert {t: loaded(got[t]) for t in REQUESTS[root]} == REQUESTS[root]
    for task in OFF_LIBRARY:
        data = got[task]
        assert data["novel"] is True and loaded(data) is None and data["skill_body"] is None, task
        assert len(data["alternatives"]) == 3  # the nearest skills by name, not loaded
        assert set(data["components"]) >= {"calibrated", "background_anchor", "own_anchor", "related_at"}


def test_over_mcp_a_hundred_distractors_do_not_turn_a_correct_route_novel(tmp_path, library_factory):
    root = tmp_path / "skills"
    shutil.copytree(BODYRICH, root)
    with running_mcp(library_factory(root)) as url:
        before = route_all(url, list(REQUESTS[BODYRICH]))
    assert {t: loaded(d) for t, d in before.items()} == REQUESTS[BODYRICH]
    write_library(tmp_path / "distractors", 100)
    for folder in (tmp_path / "distractors").iterdir():
        folder.rename(root / folder.name)
    library = library_factory(root)
    assert library.status().skills == 112
    with running_mcp(library) as url:
        after = route_all(url, list(REQUESTS[BODYRICH]))
    assert {t: loaded(d) for t, d in after.items()} == REQUESTS[BODYRICH]
