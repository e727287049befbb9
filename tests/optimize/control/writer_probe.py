"""Exercise every front door of Ingot with an audit hook that records who writes the skills root.

    python writer_probe.py WORKDIR
Prints JSON {"allowed": n, "offenders": [...]}: writes under the root whose call stack does not
pass through the promotion module (optimize/control/promote/) are offenders.
"""

import asyncio
import json
import os
import sys
import traceback
from pathlib import Path

WRITE_EVENTS = {
    "os.rename",
    "os.remove",
    "os.rmdir",
    "os.mkdir",
    "os.symlink",
    "os.link",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "os.utime",
    "shutil.rmtree",
    "shutil.copyfile",
    "shutil.move",
    "shutil.copytree",
}
PROMOTION_MODULE = os.path.join("optimize", "control", "promote", "")  # the package's folder
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def main() -> None:
    work = Path(sys.argv[1])
    root = (work / "skills").resolve()
    seen = {"allowed": 0, "offenders": []}

    def under_root(value) -> bool:
        try:
            path = os.path.abspath(os.fsdecode(value))
        except TypeError:
            return False
        return path == str(root) or path.startswith(str(root) + os.sep)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            paths = [path] if writes else []
        elif event in WRITE_EVENTS:
            paths = [a for a in args if isinstance(a, str | bytes | os.PathLike)]
        else:
            return
        if not any(under_root(p) for p in paths):
            return
        stack = traceback.extract_stack()
        if any(PROMOTION_MODULE in frame.filename for frame in stack):
            seen["allowed"] += 1
        else:
            seen["offenders"].append(
                {
                    "event": event,
                    "paths": [os.fsdecode(p) for p in paths],
                    "where": [f"{f.filename}:{f.lineno}" for f in stack[-6:-1]],
                }
            )

    from tests.conftest import write_skill

    write_skill(
        root, "alpha", "Alpha does alpha things.", "# Alpha\n\nStep one.\n", files={"notes/extra.md": "more"}
    )
    sys.addaudithook(hook)
    exercise(work, root)
    print(json.dumps(seen))


def exercise(work: Path, root: Path) -> None:
    from fastmcp import Client

    from mcp_server.embedding import load_embedder
    from mcp_server.library import Library
    from mcp_server.server import build_server
    from mcp_server.sessions import SessionRoutes
    from optimize.control.changes import ChangeControl
    from tests.optimize.conftest import ready_body, skill_md

    library = Library((root,), load_embedder(None, None, work / "vectors.sqlite"))
    library.reload()
    library.start_watching()
    library.route("do alpha things")
    library.read_file("alpha", "notes/extra.md")
    control = ChangeControl(work / "runs", (root,), neighbours=library.current)
    created: dict = {}

    async def mcp_calls() -> None:
        server = build_server(library, control, SessionRoutes(work / "runs"))
        async with Client(server) as client:
            await client.call_tool("route_and_load", {"task": "do alpha things", "session": "probe"})
            await client.call_tool("get_skill", {"name": "alpha"})
            await client.call_tool("reload_skills", {})
            await client.read_resource("skill://alpha/notes/extra.md")
            tools = {t.name for t in await client.list_tools()}
            assert "create_skill" in tools, tools  # the probe must cover the agents' write path
            result = await client.call_tool(
                "create_skill",
                {
                    "name": "Gamma Reports",
                    "description": "Builds quarterly gamma reports from ledger exports.",
                    "body": "# Gamma\n\nCollect the ledger export, then summarise it.",
                },
            )
            created.update(result.structured_content)

    asyncio.run(mcp_calls())
    control.approve("gamma-reports", "probe", created["change_id"], accept_missing="probe")  # a create
    gamma = control.live_revision("gamma-reports")
    control.rollback("gamma-reports", "absent", "probe", "probe", expected_live=gamma)  # removed again
    control.rollback("gamma-reports", gamma, "probe", "probe", expected_live="absent")  # and restored
    files = {"SKILL.md": skill_md("alpha", "Alpha does alpha things.", "Better step one.")}
    control.propose("alpha", "optimizer", files, ready_body())
    original = control.live_revision("alpha")
    control.approve("alpha", "probe", control.queue.get("alpha").id)
    control.rollback("alpha", original, "probe", "probe")
    control.propose("alpha", "optimizer", files, ready_body())
    control.reject("alpha", "probe", "probe")
    control.recover()
    control.status()
    control.history("alpha")
    library.reload()
    library.stop_watching()


if __name__ == "__main__":
    main()
