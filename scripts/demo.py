"""`make demo`: Ingot with models, no API key: the first ten minutes of the README, for real.

Starts from a clean copy each time: clears the previous demo's folder (DEMO_DIR, default .demo/;
`--keep`, i.e. `make demo KEEP=1`, continues it instead; `--reset` only clears it), copies the
bundled skills and a task set for release-notes there, writes `env` (the settings as `export`
lines, with this venv's bin on PATH), starts the scripted OpenAI-compatible server from tests/
on loopback and runs `ingot serve` pointed at it. The script is the optimizer's usual one
(tests/scripted_llm.py): an agent serving a body that says NEW-MARK answers "strong answer", any
other "weak answer"; the judge grades them 0.9 and 0.2; the teacher rewrites to a body with
NEW-MARK. So a proposal that adds a NEW-MARK line passes its held-out A/B, and one that does not
is blocked. Blessing a recorded run (`ingot agent`, then `ingot bless TRACE_ID`) gets criteria
drafted by the teacher, and every replay judge rules "pass", so the replay cell is measured. The
numbers are a function of the script, not of a model; every step around them (evidence,
passport, approval, promotion, rollback, audit) is the real one. The price table
(`demo-prices.json`, made-up prices for the scripted models) lets the cost cell be measured.
A folder that is not a demo's is never cleared. Ctrl-C stops both servers; the folder is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.scripted_llm import ScriptedLLM, scripted_llm  # noqa: E402

TASKS = """\
# The demo's task set: train tasks for the optimizer, a holdout sealed into the evidence,
# routing cases for the routing-impact cell.
train: [Release notes for 1.0 from the merged PRs, Release notes for 1.1 from the merged PRs,
        Release notes for 1.2 from the merged PRs, Release notes for 1.3 from the merged PRs]
holdout: [Release notes for 2.0 from the merged PRs, Release notes for 2.1 from the merged PRs,
          Release notes for 2.2 from the merged PRs, Release notes for 2.3 from the merged PRs]
routing:
  - {task: Draft the release notes for v2.4 from the merged PRs, expected: release-notes}
  - {task: Write the CHANGELOG entry for this release, expected: release-notes}
  - {task: Which semver bump does this breaking change need, expected: release-notes}
  - {task: Tune this slow PostgreSQL query, expected: postgres-query-tuning}
  - {task: Write a commit message for this diff, expected: git-commit-messages}
  - {task: Harden this Dockerfile for production, expected: dockerfile-hardening}
  - {task: Write a blameless postmortem for yesterday's outage, expected: incident-postmortem}
  - {task: Clean up the dates and duplicate rows in this CSV export, expected: csv-data-cleaning}
  - {task: Publish this library to PyPI with a pyproject.toml, expected: python-packaging}
  - {task: Plan a three-day itinerary for Lisbon, expected: null}
"""
REWRITE = (
    "# Release notes\n\nNEW-MARK: start from the merged pull requests, group them by Keep a "
    "Changelog section, and lead with anything that needs action.\n"
)

# What the scripted teacher drafts for a blessed run of the demo (`ingot bless TRACE_ID`).
CRITERIA = ("drafts release notes for the version the task names",)

DESCRIPTION = (
    "Drafts user-facing release notes and CHANGELOG entries from merged pull requests, grouped by "
    "Keep a Changelog section, and says which semver bump a release needs. Use for release notes, "
    "a changelog entry or a version bump."
)


def script(server: ScriptedLLM) -> None:
    """The demo's model behaviour (also what tests/ui/test_walkthrough.py and `make test-image`
    run against): the optimizer's usual script, and a teacher that proposes DESCRIPTION for the
    description pass; for regression replay, a teacher that drafts a golden's criteria when a run
    is blessed and judges that pass every replay."""
    server.add(
        model="teacher-model",
        user_contains="A router picks agent skills",
        reply=json.dumps({"descriptions": [DESCRIPTION]}),
    )
    server.script_goldens(CRITERIA)
    server.script_optimizer(REWRITE)


# Made-up prices (USD per million tokens) for the scripted models: not any provider's.
PRICES = {
    "agent-model": {"input": 0.5, "output": 1.5},
    "teacher-model": {"input": 3.0, "output": 15.0},
    "judge-model": {"input": 1.0, "output": 4.0},
}


def prepare(folder: Path) -> dict[str, str]:
    """The demo's skills (copied only when `folder` has none), task set, price table and state
    home under `folder`, marked as a demo's folder; the environment for `ingot`."""
    skills, tasks = folder / "skills", folder / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("A folder scripts/demo.py made; `make demo` clears it and starts afresh.\n")
    if not skills.exists():
        shutil.copytree(REPO / "skills", skills)
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "release-notes.yaml").write_text(TASKS)
    prices = folder / "demo-prices.json"
    prices.write_text(json.dumps(PRICES, indent=1))
    return {
        "PRICES_FILE": str(prices),
        "SKILLS_DIRS": str(skills),
        "TASKS_DIR": str(tasks),
        "INGOT_HOME": str(folder / "home"),
        "AGENT_MODEL": "agent-model",
        "TEACHER_MODEL": "teacher-model",
        "JUDGE_MODEL": "judge-model",
        "OPTIMIZE_CANDIDATES": "2",
        # .demo/ sits inside this repository's work tree: its promotions are not commits to make here.
        "GIT_HISTORY": "false",
    }


# What a demo folder holds (MARKER since it is written; the rest also in folders older demos made).
MARKER = ".ingot-demo"
DEMO_ENTRIES = frozenset({MARKER, "skills", "tasks", "home", "env", "demo-prices.json"})


class DemoError(Exception):
    """The demo cannot start as asked: its folder holds someone else's files, or a port is taken."""


def clear(folder: Path) -> bool:
    """Remove a previous demo's `folder` (True if there was one to remove). A folder that holds
    anything a demo does not make, and no demo marker, is refused, never removed."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    entries = {p.name for p in folder.iterdir()}
    if MARKER not in entries and not entries <= DEMO_ENTRIES:
        others = ", ".join(sorted(entries - DEMO_ENTRIES)[:3])
        raise DemoError(
            f"{folder} is not a demo's folder (it holds {others}); set DEMO_DIR to a new folder, "
            "or empty this one yourself"
        )
    shutil.rmtree(folder)
    return True


def setup(folder: Path, keep: bool = False) -> tuple[dict[str, str], str]:
    """A clean demo under `folder` (the previous one's skills, changes and state removed), or with
    `keep` the previous one as it was left; the environment for `ingot` and a line saying which."""
    shown = _shown(folder)
    if keep and (folder / "skills").is_dir():
        said = f"kept the last demo's skills in {shown}/skills and its state in {shown}/home (KEEP=1)"
    else:
        cleared = clear(folder)
        said = f"copied the bundled skills to {shown}/skills; state in {shown}/home" + (
            " (the last demo's folder was cleared first: KEEP=1 keeps it)" if cleared else ""
        )
    return prepare(folder), said


def write_env(folder: Path, env: dict[str, str]) -> Path:
    """`folder`/env: the demo's settings as `export` lines, and this Python's bin folder (where
    the venv installed `ingot`) first on PATH, so `source .demo/env` in a new shell is enough."""
    bin_dir = Path(sys.executable).parent  # not resolved: a venv's python is a symlink out of it
    lines = [
        "# The demo's settings for another shell: `source` this file (scripts/demo.py rewrites it).",
        f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
        *(f"export {key}={shlex.quote(value)}" for key, value in env.items()),
    ]
    path = folder / "env"
    path.write_text("\n".join(lines) + "\n")
    return path


def ports() -> dict[str, str]:
    """The MCP and UI ports `ingot serve` will bind (the environment's or .env's, else the defaults),
    checked free now, before a previous demo's folder is cleared under a demo still running."""
    import socket

    from ingot.errors import IngotError
    from ingot.settings import load_settings

    try:
        settings = load_settings()
    except IngotError as exc:
        raise DemoError(str(exc)) from exc
    for setting, port in (("MCP_PORT", settings.mcp_port), ("UI_PORT", settings.ui_port)):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as `ingot serve` binds
            try:
                probe.bind((settings.bind_host, port))
            except OSError as exc:
                raise DemoError(
                    f"port {port} ({setting}) on {settings.bind_host} is taken ({exc.strerror}): "
                    f"stop what listens there (a demo still running?), or set {setting} to a free port"
                ) from exc
    return {"MCP_PORT": str(settings.mcp_port), "UI_PORT": str(settings.ui_port)}


def _shown(folder: Path) -> str:
    """`folder` as the person who ran the demo types it: relative inside the current folder."""
    try:
        return str(folder.relative_to(Path.cwd()))
    except ValueError:
        return str(folder)


def serve_models(host: str, port: int) -> int:
    """Only the demo's scripted model server, on `host`:`port`, until interrupted: what `make
    test-image` runs in a container on the compose network, for the optimizer and the agent."""
    import threading

    with scripted_llm(host=host, port=port) as server:
        script(server)
        print(f"demo: scripted model server at {server.url} (answers from scripts/demo.py)", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--models-only"]:  # scripts/demo.py --models-only [HOST [PORT]]
        host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
        return serve_models(host, int(sys.argv[3]) if len(sys.argv) > 3 else 9999)
    folder = Path(os.environ.get("DEMO_DIR", REPO / ".demo")).resolve()
    try:
        if sys.argv[1:2] == ["--reset"]:  # `make demo-reset`
            removed = clear(folder)
            print(f"demo: {'removed' if removed else 'nothing to remove at'} {_shown(folder)}")
            return 0
        bound = ports()
        env, said = setup(folder, keep=sys.argv[1:2] == ["--keep"])
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    env.update(bound)
    with scripted_llm() as server:
        script(server)
        env["BASE_URL"] = server.url
        shown = _shown(write_env(folder, env))
        print(f"demo: scripted model server at {server.url} (no key; answers from scripts/demo.py)")
        print(f"demo: {said}")
        print(f"demo: in another shell, `source {shown}` puts `ingot` on PATH and talks to this demo")
        sys.stdout.flush()  # before `ingot serve` writes its own lines
        serving = subprocess.Popen([sys.executable, "-m", "ingot.cli", "serve"], env={**os.environ, **env})
        stopped: list[bool] = []  # asked to stop: the servers ending then is success, not `make: Error`

        def stop(*_: object) -> None:  # a SIGTERM to this script stops `ingot serve` too
            stopped.append(True)
            serving.terminate()

        signal.signal(signal.SIGTERM, stop)
        try:
            code = serving.wait()
        except KeyboardInterrupt:  # Ctrl-C reaches both through the terminal
            stopped.append(True)
            code = serving.wait()
        finally:
            if serving.poll() is None:
                serving.terminate()
                serving.wait()
        return 0 if stopped else code


if __name__ == "__main__":
    sys.exit(main())
