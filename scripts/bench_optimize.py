"""`ingot bench optimize`: model calls and tokens per verdict, against the scripted model server.

Runs the body pass (search + held-out A/B) and the description pass on a small synthetic skill
with the scripted OpenAI-compatible server from tests/ (no real model, no network), then runs the
body pass again against the unchanged champion: the seed rollout and the A/B champion side come
from their sealed caches, so it pays only for the challenger side (counted, not assumed).
Prints JSON. Numbers are call and token counts, which do not depend on machine speed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.library import Library  # noqa: E402
from mcp_server.skillmd import split  # noqa: E402
from optimize.control.changes import ChangeControl  # noqa: E402
from optimize.measure.judge import Judge  # noqa: E402
from optimize.measure.taskset import load_task_set  # noqa: E402
from optimize.models.ledger import UsageLedger  # noqa: E402
from optimize.search.describe import optimize_description  # noqa: E402
from optimize.search.pipeline import optimize_body  # noqa: E402
from tests.conftest import BUNDLED_SKILLS  # noqa: E402
from tests.scripted_llm import scripted_llm  # noqa: E402

TASKS = """\
train: [Notes for 1.0, Notes for 1.1, Notes for 1.2, Notes for 1.3, Notes for 1.4, Notes for 1.5]
holdout: [Notes for 2.0, Notes for 2.1, Notes for 2.2, Notes for 2.3]
routing:
  - {task: Draft release notes for v3.1, expected: release-notes}
  - {task: Summarise the merged PRs for the changelog, expected: release-notes}
  - {task: Turn this sprint's merged pull requests into user-facing notes, expected: release-notes}
  - {task: Write the announcement of what changed in version 4, expected: release-notes}
  - {task: Write a commit message for this fix, expected: git-commit-messages}
  - {task: Plan a three-day itinerary for Lisbon, expected: null}
  - {task: "What shipped in the last sprint? Write it up for customers", expected: release-notes}
  - {task: Prepare the GitHub release text for tag v2.0.0, expected: release-notes}
  - {task: Harden our Dockerfile, expected: dockerfile-hardening}
  - {task: Explain the rules of cricket, expected: null}
"""


def _counts(server, since: int) -> dict:
    """Calls the scripted server received since request number `since`, by model."""
    requests = server.chat_requests()[since:]
    models = sorted({r.body["model"] for r in requests})
    return {
        "model_calls": len(requests),
        "calls_by_model": {m: sum(r.body["model"] == m for r in requests) for m in models},
    }


def _ab_state(ab: dict | None, control) -> str:  # noqa: ANN001 - ChangeControl
    """The held-out A/B cell's state for the body pass's winner (what its calls bought)."""
    from optimize.control.gate import ab_cell

    if not ab or ab.get("status") != "measured":
        return "missing"
    return ab_cell({"measurements": {"ab": ab}}, control.thresholds).state


def run(candidates: int = 5) -> dict:
    work = Path(tempfile.mkdtemp(prefix="ingot-bench-optimize-"))
    import shutil

    shutil.copytree(BUNDLED_SKILLS, work / "skills")
    skill_md = work / "skills" / "release-notes" / "SKILL.md"
    text = skill_md.read_text()
    parts = split(text)
    skill_md.write_text(f"{parts.head}SEED-MARK\n\n{parts.body}")  # a marker line opens the body
    (work / "tasks").mkdir()
    (work / "tasks" / "release-notes.yaml").write_text(TASKS)
    library = Library((work / "skills",), load_embedder(None, None, work / "vectors.sqlite"))
    library.reload()
    control = ChangeControl(work / "runs", (work / "skills",))
    with scripted_llm() as server:
        server.script_optimizer("# Release notes\n\nNEW-MARK: group by theme.\n", weak=0.3)
        server.add(
            model="teacher-model",
            user_contains="router picks agent skills",
            reply=json.dumps(
                {
                    "descriptions": [
                        "Writes user-facing release notes and changelog entries from merged pull "
                        "requests, grouped by theme. Use when the user asks for release notes, a "
                        "changelog or a summary of what changed in a version."
                    ]
                }
            ),
        )
        ledger = UsageLedger("bench")
        llm = server.client("agent", "teacher", "judge", ledger=ledger)
        judge = Judge(llm, ("judge-model",), "teacher-model")
        body = optimize_body("release-notes", control, library, llm, judge, work / "tasks", candidates)
        body_counts = {
            **_counts(server, 0),
            "tokens_in": ledger.totals()["total"]["tokens_in"],
            "tokens_out": ledger.totals()["total"]["tokens_out"],
        }
        first_seed = server.champion_side_calls("SEED-MARK")
        mark = len(server.chat_requests())
        tasks = load_task_set(work / "tasks", "release-notes")
        described = optimize_description("release-notes", library, llm, tasks.routing, candidates)
        description_counts = _counts(server, mark)
        mark = len(server.chat_requests())
        again = optimize_body("release-notes", control, library, llm, judge, work / "tasks", candidates)
        repeat = server.chat_requests()[mark:]
    holdout = len(tasks.holdout)
    return {
        "candidates": candidates,
        "train_tasks": len(tasks.train),
        "holdout_tasks": holdout,
        "body_pass": {**body_counts, "passport": body.verdict, "ab": _ab_state(body.ab, control)},
        "description_pass": {
            **description_counts,
            "chosen": described.chosen is not None,
            "summary": described.reason,
        },
        "repeat_run": {  # the same body pass again, champion unchanged: its side comes from caches
            **_counts(server, mark),
            "passport": again.verdict,
            "seed_side_calls": server.champion_side_calls("SEED-MARK", mark),
            "first_run_seed_side_calls": first_seed,
            "calls_saved": body_counts["model_calls"] - len(repeat),
            "saving_share": round(1 - len(repeat) / body_counts["model_calls"], 3),
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
