"""`ingot evaluate` end to end: real CLI processes, the scripted model server, real files.

An operator's hand-made rewrite is measured and approved; a description that steals another
skill's routes is blocked with the stolen tasks named; a tampered champion cache entry is refused
at approval; garbage replies end in one error and a rerun pays for nothing twice."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingot.home import establish
from ingot.progress import parse
from mcp_server.skillmd import with_description
from optimize.control import evidence
from optimize.control.changes import ChangeControl
from optimize.measure.replay_verdict import ruling_text
from tests.conftest import BUNDLED_SKILLS
from tests.scripted_llm import scripted_llm

ROUTING = [
    {"task": "Draft release notes for v3.1 from the merged pull requests", "expected": "release-notes"},
    {"task": "Summarise what changed in this release for customers", "expected": "release-notes"},
    {"task": "Turn the merged PRs into a user-facing changelog entry", "expected": "release-notes"},
    {"task": "Write release notes for version 2.4", "expected": "release-notes"},
    {"task": "Write a commit message for this fix", "expected": "git-commit-messages"},
    {"task": "Write a conventional commit message for the staged changes", "expected": "git-commit-messages"},
    {"task": "Write a blameless postmortem for yesterday's outage", "expected": "incident-postmortem"},
    {"task": "Plan a three-day itinerary for Lisbon", "expected": None},
    {"task": "Recommend three novels like Dune", "expected": None},
]
# A description that takes other skills' routing cases.
THIEF = (
    "Write the commit message for a fix or for the staged changes, in conventional commit style, "
    "and release notes from merged pull requests. Use for any commit message or release note."
)
HOLDOUT = ["Notes for 2.0", "Notes for 2.1", "Notes for 2.2", "Notes for 2.3", "Notes for 2.4"]


@pytest.fixture
def library(tmp_path):
    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    data = {
        "train": ["Notes for 1.0", "Notes for 1.1", "Notes for 1.2"],
        "holdout": HOLDOUT,
        "routing": ROUTING,
    }
    (tasks / "release-notes.yaml").write_text(yaml.safe_dump(data))
    return root, tasks


def ingot(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("INGOT_HOME", "API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "ingot.cli", *args],
        cwd=cwd,
        env={**base, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def propose(root: Path, folder: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`ingot propose release-notes --from FOLDER`, which evaluates the change at once."""
    return ingot("propose", "release-notes", "--from", str(folder), "--skills", str(root), cwd=cwd, **env)


def models(server, tasks: Path) -> dict[str, str]:
    return {
        "BASE_URL": server.url,
        "AGENT_MODEL": "agent-model",
        "JUDGE_MODEL": "judge-model",
        "TEACHER_MODEL": "teacher-model",
        "TASKS_DIR": str(tasks),
        "LLM_MAX_RETRIES": "1",
    }


def candidate(tmp_path: Path, root: Path, edit) -> Path:  # noqa: ANN001 - a function of the SKILL.md text
    folder = tmp_path / "candidate" / "release-notes"
    shutil.copytree(root / "release-notes", folder)
    (folder / "SKILL.md").write_text(edit((folder / "SKILL.md").read_text()))
    return folder


def bundle(root: Path) -> dict:
    home = establish((root,))
    change = ChangeControl(home.path, home.roots).queue.get("release-notes")
    return evidence.load(home.path / change.evidence_path).data, change.id


def test_an_operators_rewrite_is_measured_and_can_be_approved(library, tmp_path):
    root, tasks = library
    folder = candidate(tmp_path, root, lambda text: text + "\nNEW-MARK: group the changes by theme.\n")
    with scripted_llm() as server:
        server.script_optimizer()
        done = propose(
            root,
            folder,
            tmp_path,
            **models(server, tasks),
        )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "body change of release-notes" in out and "+2 / -0 lines" in out
    assert "needs-acknowledgement (body change)" in out  # no blessed runs, no prices: two cells missing
    for cell, state in (("held-out A/B", "pass"), ("routing impact", "pass"), ("replay", "missing")):
        assert re.search(rf"^  {re.escape(cell)} +{state} ", out, re.M), (cell, out)
    assert "gate" not in out.lower()
    data, change_id = bundle(root)
    ab = data["measurements"]["ab"]
    assert ab["samples"] == 5 and ab["pairwise"]["wins"] == 5 and ab["challenger_mean"] > ab["champion_mean"]
    assert data["provenance"]["models"]["judge"]["model"] == "judge-model" and "key" not in json.dumps(
        data["provenance"]
    )
    assert data["provenance"]["task_set"]["origin"] == "human" and data["passport"]["statistics"]
    assert data["passport"]["state"] == "needs-acknowledgement" and data["kind"] == "body"
    refused = ingot("approve", "release-notes", "--change", change_id, "--skills", str(root), cwd=tmp_path)
    assert refused.returncode == 1 and "needs acknowledgement" in refused.stderr
    assert "replay" in refused.stderr and "cost" in refused.stderr and "--accept-missing" in refused.stderr
    why = ("--accept-missing", "no blessed runs yet; prices unknown", "--accepting", "replay,cost")
    approved = ingot(
        "approve", "release-notes", "--change", change_id, *why, "--skills", str(root), cwd=tmp_path
    )
    assert approved.returncode == 0, approved.stderr
    assert "NEW-MARK" in (root / "release-notes" / "SKILL.md").read_text()
    history = ingot("history", "release-notes", "--skills", str(root), cwd=tmp_path).stdout
    assert "accepted missing replay, cost: no blessed runs yet; prices unknown" in history


def test_a_description_that_steals_another_skills_routes_is_blocked_with_the_tasks_named(library, tmp_path):
    root, tasks = library

    def steal(text: str) -> str:
        return with_description(text, THIEF)

    folder = candidate(tmp_path, root, steal)
    done = propose(
        root,
        folder,
        tmp_path,
        TASKS_DIR=str(tasks),
    )
    assert done.returncode == 0, done.stderr
    data, change_id = bundle(root)
    impact = data["measurements"]["routing_impact"]
    stolen = {s["task"] for s in impact["shadowed"]}
    assert "Write a commit message for this fix" in stolen, impact
    assert data["kind"] == "description"  # an operator's description-only edit: routing evidence decides
    cells = {c["cell"]: c for c in data["passport"]["cells"]}
    assert data["passport"]["state"] == "blocked" and cells["routing impact"]["state"] == "fail"
    assert "git-commit-messages" in cells["routing impact"]["why"] and cells["held-out A/B"]["state"] == "n/a"
    refused = ingot("approve", "release-notes", "--change", change_id, "--skills", str(root), cwd=tmp_path)
    assert refused.returncode == 1 and "shadows" in refused.stderr
    markdown = (
        establish((root,)).path / "evidence" / "release-notes" / data["id"] / "EVIDENCE.md"
    ).read_text()
    assert "SHADOWS git-commit-messages" in markdown


def test_a_tampered_champion_cache_entry_is_refused_at_approval(library, tmp_path):
    root, tasks = library
    folder = candidate(tmp_path, root, lambda text: text + "\nNEW-MARK: group the changes by theme.\n")
    with scripted_llm() as server:
        server.script_optimizer()
        done = propose(
            root,
            folder,
            tmp_path,
            **models(server, tasks),
        )
    assert done.returncode == 0 and "needs-acknowledgement" in done.stdout, done.stdout + done.stderr
    data, change_id = bundle(root)
    entry = establish((root,)).path / "cache" / "ab" / data["measurements"]["ab"]["champion_cache"]["file"]
    edited = json.loads(entry.read_text())
    edited["results"][0]["score"] = 0.0
    entry.write_text(json.dumps(edited))
    why = ("--accept-missing", "no runs blessed yet", "--accepting", "replay,cost")
    refused = ingot(
        "approve", "release-notes", "--change", change_id, *why, "--skills", str(root), cwd=tmp_path
    )
    assert refused.returncode == 1 and "champion results cannot be trusted" in refused.stderr
    assert "NEW-MARK" not in (root / "release-notes" / "SKILL.md").read_text()


def test_garbage_replies_are_one_error_and_a_rerun_pays_for_nothing_twice(library, tmp_path):
    root, tasks = library
    folder = candidate(tmp_path, root, lambda text: text + "\nNEW-MARK: group the changes by theme.\n")
    queued = ingot(
        "propose",
        "release-notes",
        "--from",
        str(folder),
        "--skills",
        str(root),
        "--no-evaluate",
        cwd=tmp_path,
    )
    assert queued.returncode == 0, queued.stderr
    _, change_id = bundle(root)
    with scripted_llm() as server:
        # The challenger's fourth answer comes back as an HTML page: after the calls before it were paid.
        broken = server.add(
            system_contains="NEW-MARK", user_contains="Notes for 2.3", garbage="<html>502 Bad Gateway</html>"
        )
        server.script_optimizer()
        failed = ingot(
            "evaluate",
            "release-notes",
            "--change",
            change_id,
            "--skills",
            str(root),
            cwd=tmp_path,
            **models(server, tasks),
        )
        progress, lines = [], []  # the steps it got through (ingot/cli/progress.py), then one error
        for line in failed.stderr.strip().splitlines():
            (progress if parse(line) is not None else lines).append(line)
        assert (
            failed.returncode == 1
            and len(lines) == 1
            and lines[0].startswith("Error: ")
            and "not a chat completion" in lines[0]
        )
        assert progress[-1].startswith("evaluate release-notes: step 3 of 5: held-out A/B ")
        assert "Traceback" not in failed.stderr
        paid = [json.dumps(r.body, sort_keys=True) for r in server.chat_requests()]
        broken.garbage = None
        broken.reply = "strong answer"
        again = ingot(
            "evaluate",
            "release-notes",
            "--change",
            change_id,
            "--skills",
            str(root),
            cwd=tmp_path,
            **models(server, tasks),
        )
        assert again.returncode == 0, again.stderr
        repeated = [json.dumps(r.body, sort_keys=True) for r in server.chat_requests()[len(paid) :]]
    good_before = {body for body in paid if "Notes for 2.3" not in body or "NEW-MARK" not in body}
    assert not good_before & set(repeated)  # nothing the first run paid for was asked again
    home = establish((root,)).path
    assert len(list((home / "ledgers").glob("evaluate-release-notes-*.json"))) == 2  # both runs ledgered
    assert not list((home / "journals").glob("*.jsonl"))  # the successful rerun cleared its journal


def test_an_agents_new_skill_is_evaluated_in_the_background_when_models_are_configured(
    library, tmp_path, library_factory
):
    import asyncio

    from fastmcp import Client

    from ingot.evaluation import BackgroundEvaluator
    from ingot.settings import load_settings
    from tests.conftest import running_mcp, wait_for

    root, tasks = library
    home = establish((root,))
    served = library_factory(root)
    control = ChangeControl(home.path, home.roots, neighbours=served.current)
    with scripted_llm() as server:
        settings = load_settings(
            skills_dirs=(root,),
            ingot_home=home.path,
            tasks_dir=tasks,
            base_url=server.url,
            agent_model="agent-model",
            judge_model="judge-model",
        )
        evaluator = BackgroundEvaluator(settings, served, control)
        try:
            with running_mcp(served, control=control, queued=evaluator.submit) as url:

                async def create() -> dict:
                    async with Client(url) as client:
                        args = {
                            "name": "kiln-firing",
                            "description": "Plans glaze firing schedules for an electric ceramic kiln.",
                            "body": "# Kiln\n\n1. Ramp slowly to 1000C.\n",
                        }
                        return (await client.call_tool("create_skill", args)).structured_content

                created = asyncio.run(create())
            change = wait_for(
                lambda: (c := control.queue.get("kiln-firing")) and c.evidence_history and c, timeout=120
            )
        finally:
            evaluator.close()
    assert change.id == created["change_id"]
    data = evidence.load(home.path / change.evidence_path).data
    assert data["measurements"]["routing_impact"]["status"] == "measured"
    assert "no task set for 'kiln-firing'" in data["measurements"]["ab"]["why"]
    assert data["kind"] == "create" and data["passport"]["state"] == "needs-acknowledgement"
    cells = {c["cell"]: c["state"] for c in data["passport"]["cells"]}
    assert cells["held-out A/B"] == "missing" and cells["replay"] == "n/a" and cells["safety"] == "pass"


def test_ingot_evaluate_replays_the_skills_blessed_runs_with_the_candidate(
    library, tmp_path, library_factory
):
    from agent.run import skill_system_prompt
    from optimize.control.goldens_admin import GoldenAdmin
    from optimize.models.traces import TraceRecord
    from tests.regress_judges import exercised_by
    from tests.scripted_llm import Rule

    root, tasks = library
    home = establish((root,))
    served = library_factory(root).get("release-notes")
    control = ChangeControl(home.path, home.roots)
    run = TraceRecord(
        task="Notes for 0.9",
        answer="weak answer",
        route="match",
        skill=served.name,
        revision=served.revision,
        model="agent-model",
        messages=(
            {
                "role": "system",
                "content": skill_system_prompt("match", served.name, served.revision, served.body),
            },
            {"role": "user", "content": "Notes for 0.9"},
        ),
    )
    admin = GoldenAdmin(control)
    golden, _ = admin.bless(run, "ana")
    admin.approve(golden.id, "ana", ["answers the task"], [])
    folder = candidate(tmp_path, root, lambda text: text + "\nNEW-MARK: group the changes by theme.\n")
    with scripted_llm() as server:
        verdict = json.dumps({"verdict": "pass", "failed": [], "rationale": "the new answer is stronger"})
        server.rules[:0] = [
            Rule(model="judge-model", user_contains="You adjudicate", reply=verdict),
            Rule(model="judge-model", user_contains="Write the rationale", reply="All good."),
            Rule(
                model="judge-model",
                user_contains="ALTERED INSTRUCTIONS",
                compute=exercised_by(golden.id),  # never asked: the replay shows the line model-free
            ),
        ]
        server.script_optimizer()
        done = propose(root, folder, tmp_path, **models(server, tasks))
        requests = server.chat_requests()
    assert done.returncode == 0, done.stderr
    data, _ = bundle(root)
    cell = data["measurements"]["replay"]
    assert cell["status"] == "measured" and cell["verdict"] == "PASS", cell
    (replayed,) = cell["goldens"]
    assert replayed["id"] == golden.id and replayed["answer"] == "strong answer"  # the candidate's bytes ran
    assert cell["candidate_revision"] == data["candidate_revision"]
    # The line the candidate adds is the only change the run was served, and the run answers
    # otherwise while the unchanged champion's controls answer as the golden did: exercised,
    # model-free, and no model is asked.
    (altered,) = cell["coverage"]["instructions"]
    assert altered["status"] == "exercised" and altered["shown_by"] == [golden.id]
    assert altered["model"] is None and cell["coverage"]["decision"] is None
    # `ingot evaluate` (here through propose) names under the replay cell each model ruling its
    # verdict rests on, with the digest of the prompt that model read.
    sent = {hashlib.sha256(r.body["messages"][-1]["content"].encode()).hexdigest() for r in requests}
    assert cell["decided_by"] and all(r["prompt_digest"] in sent for r in cell["decided_by"])
    for ruling in cell["decided_by"]:
        assert f"ruled by a model: {ruling_text(ruling)}" in done.stdout, done.stdout


def test_routing_impact_counts_recent_real_traffic_when_no_task_set_has_cases(tmp_path):
    from optimize.models.traces import LocalTraceStore, TraceRecord

    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    empty_tasks = tmp_path / "no-tasks"
    empty_tasks.mkdir()
    home = establish((root,))
    store = LocalTraceStore(home.path / "traces.jsonl")
    traffic = {
        "Write a commit message for this fix": "git-commit-messages",
        "Write a conventional commit message for the staged changes": "git-commit-messages",
        "Draft release notes for v3.1": "release-notes",
    }
    for task, skill in traffic.items():
        store.append(TraceRecord(task=task, answer="ok", route="match", skill=skill, revision="r", model="m"))

    def steal(text: str) -> str:
        return with_description(text, THIEF)

    folder = candidate(tmp_path, root, steal)
    done = propose(root, folder, tmp_path, TASKS_DIR=str(empty_tasks))
    assert done.returncode == 0, done.stderr
    data, _ = bundle(root)
    impact = data["measurements"]["routing_impact"]
    assert impact["status"] == "measured" and impact["cases"]["total"] == 0
    assert impact["cases"]["traffic"] == 3
    moved = {m["task"]: (m["from"], m["to"]) for m in impact["traffic_moved"]}
    assert moved["Write a commit message for this fix"] == ("git-commit-messages", "release-notes"), moved
    assert "Write a commit message for this fix" in impact["by_skill"]["git-commit-messages"]["lost"]


def test_a_candidate_is_measured_before_it_is_queued_so_a_blocked_one_never_displaces_a_waiting_one(
    library, tmp_path
):
    root, tasks = library
    benign = candidate(tmp_path / "a", root, lambda text: text + "\nCheck every entry.\n")
    first = propose(root, benign, tmp_path, TASKS_DIR=str(tasks))
    assert first.returncode == 0 and "needs-acknowledgement" in first.stdout, first.stderr
    _, waiting = bundle(root)

    def steal(text: str) -> str:
        return with_description(text, THIEF)

    thief = candidate(tmp_path / "b", root, steal)
    second = propose(root, thief, tmp_path, TASKS_DIR=str(tasks))
    said = [line for line in second.stderr.splitlines() if parse(line) is None]  # no progress lines
    assert second.returncode == 3 and len(said) == 1
    assert said[0].startswith(f"Error: withheld: a better change is waiting ({waiting})")
    assert "blocked: routing impact fail" in said[0]  # judged on its measured evidence
    assert bundle(root)[1] == waiting


def test_prices_set_after_a_cached_run_measure_the_cost_cell_without_running_the_champion_again(
    library, tmp_path
):
    """The champion's holdout answers come from the sealed cache on the second evaluation; their
    cost is recomputed from the token counts it recorded under the prices set since, so the cost
    cell goes from missing to measured (it used to stay missing: the cache ignored prices)."""
    root, tasks = library
    folder = candidate(tmp_path, root, lambda text: text + "\nNEW-MARK: group the changes by theme.\n")
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {m: {"input": 1.0, "output": 2.0} for m in ("agent-model", "judge-model", "teacher-model")}
        )
    )
    with scripted_llm() as server:
        server.script_optimizer()
        done = propose(root, folder, tmp_path, **models(server, tasks))
        assert done.returncode == 0, done.stderr
        assert re.search(r"^  cost +missing .*no price", done.stdout, re.M), done.stdout
        _, change_id = bundle(root)
        champion_runs = sum("weak answer" in json.dumps(r.body) for r in server.chat_requests())
        again = ingot(
            "evaluate", "release-notes", "--change", change_id, "--skills", str(root), cwd=tmp_path,
            **models(server, tasks), PRICES_FILE=str(prices),
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        rerun = sum("weak answer" in json.dumps(r.body) for r in server.chat_requests()) - champion_runs
    assert re.search(r"^  cost +(pass|fail) +serving cost [+-]\d+% over the holdout", again.stdout, re.M), (
        again.stdout
    )
    data, _ = bundle(root)
    ab = data["measurements"]["ab"]
    assert ab["cost_basis"]["champion"] == "recomputed from cached token counts"
    assert isinstance(ab["champion_usd"], float) and ab["champion_usd"] > 0
    assert rerun < champion_runs  # the champion's answers were not asked for again
