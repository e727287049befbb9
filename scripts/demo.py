"""`make demo`: Ingot with models, no API key: the first ten minutes of the README, for real.

Copies the bundled skills and a task set for release-notes into a throwaway folder (DEMO_DIR,
default .demo/), starts the scripted OpenAI-compatible server from tests/ on loopback, and runs
`ingot serve` pointed at it. The script is the optimizer's usual one (tests/scripted_llm.py): an
agent serving a body that says NEW-MARK answers "strong answer", any other "weak answer"; the
judge grades them 0.9 and 0.2; the teacher rewrites to a body with NEW-MARK. So a proposal that
adds a NEW-MARK line passes its held-out A/B, and one that does not is blocked. The numbers are
a function of the script, not of a model; every step around them (evidence, passport, approval,
promotion, rollback, audit) is the real one. The demo's price table (`demo-prices.json`, made-up
prices for the scripted models) lets the cost cell be measured; no run is blessed, so the replay
cell stays missing and approving asks for a reason. Ctrl-C stops both servers; the folder is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
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


DESCRIPTION = (
    "Drafts user-facing release notes and CHANGELOG entries from merged pull requests, grouped by "
    "Keep a Changelog section, and says which semver bump a release needs. Use for release notes, "
    "a changelog entry or a version bump."
)


def script(server: ScriptedLLM) -> None:
    """The demo's model behaviour (also what tests/ui/test_walkthrough.py and `make test-image`
    run against): the optimizer's usual script, and a teacher that proposes DESCRIPTION for the
    description pass."""
    server.add(
        model="teacher-model",
        user_contains="A router picks agent skills",
        reply=json.dumps({"descriptions": [DESCRIPTION]}),
    )
    server.script_optimizer(REWRITE)


# Made-up prices (USD per million tokens) for the scripted models: not any provider's.
PRICES = {
    "agent-model": {"input": 0.5, "output": 1.5},
    "teacher-model": {"input": 3.0, "output": 15.0},
    "judge-model": {"input": 1.0, "output": 4.0},
}


def prepare(folder: Path) -> dict[str, str]:
    """The demo's skills, task set, price table and state home under `folder`; the environment
    for `ingot`."""
    skills, tasks = folder / "skills", folder / "tasks"
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
    env = prepare(folder)
    with scripted_llm() as server:
        script(server)
        env["BASE_URL"] = server.url
        (folder / "env").write_text("".join(f"{key}={value}\n" for key, value in env.items()))
        shown = os.path.relpath(folder)
        print(f"demo: scripted model server at {server.url} (no key; answers from scripts/demo.py)")
        print(f"demo: skills copied to {shown}/skills; state in {shown}/home")
        print(f"demo: the CLI in another shell talks to this demo after: set -a; . {shown}/env; set +a")
        serving = subprocess.Popen([sys.executable, "-m", "ingot.cli", "serve"], env={**os.environ, **env})
        # A SIGTERM to this script stops `ingot serve` too (Ctrl-C reaches both through the terminal).
        signal.signal(signal.SIGTERM, lambda *_: serving.terminate())
        try:
            return serving.wait()
        except KeyboardInterrupt:
            return serving.wait()
        finally:
            if serving.poll() is None:
                serving.terminate()
                serving.wait()


if __name__ == "__main__":
    sys.exit(main())
