"""Long commands say what they are doing: real `ingot` processes, stderr not a terminal, so each
step and each unit of work is one plain line on stderr and stdout carries only the result."""

from __future__ import annotations

import json
import re
import shutil

from tests.conftest import BUNDLED_SKILLS
from tests.ingot.cli.test_goldens import env_for
from tests.ingot.cli.test_main import ingot
from tests.regress_sim import regress_world
from tests.scripted_llm import grade_json, scripted_llm

SKILL = "release-notes"
TASKS = (
    "train: [Release notes for 0.9 from the merged pull requests]\n"
    "holdout: [Release notes for a security patch release, "
    "Changelog entry for a breaking API rename, "
    "Summarise the 3.0 release for customers, "
    "Notes for a release that only updates dependencies]\n"
)


def steps(stderr: str, what: str) -> list[str]:
    return [line.removeprefix(f"{what}: ") for line in stderr.splitlines() if line.startswith(f"{what}: ")]


def test_propose_then_evaluate_report_each_cell_and_each_judgement_as_plain_lines(tmp_path):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / f"{SKILL}.yaml").write_text(TASKS)
    edit = tmp_path / "edit" / SKILL
    shutil.copytree(root / SKILL, edit)
    (edit / "SKILL.md").write_text((edit / "SKILL.md").read_text() + "\nCheck every entry.\n")
    with scripted_llm() as server:
        server.add(model="agent-model", reply="an answer")
        server.script_pairwise("no answer is better")  # a tie every time
        server.add(model="judge-model", reply=grade_json(0.7))
        env = {
            "BASE_URL": server.url,
            "AGENT_MODEL": "agent-model",
            "JUDGE_MODEL": "judge-model",
            "TASKS_DIR": str(tmp_path / "tasks"),
        }
        args = ("--skills", str(root))
        proposed = ingot("propose", SKILL, "--from", str(edit), *args, cwd=tmp_path, env=env)
        assert proposed.returncode == 0, proposed.stderr
        lines = steps(proposed.stderr, f"propose {SKILL}")
        assert lines[:4] == [
            "step 1 of 5: checks",
            "step 2 of 5: routing impact",
            "step 3 of 5: held-out A/B",
            "step 3 of 5: held-out A/B 0/12 judgements",  # 4 tasks: two answers graded, one comparison
        ]
        assert [f"step 3 of 5: held-out A/B {n}/12 judgements" for n in range(1, 13)] == lines[4:16]
        assert lines[16:] == ["step 4 of 5: sandbox checks", "step 5 of 5: replay"]
        assert "step " not in proposed.stdout and proposed.stdout.startswith("pending chg-")
        change = re.search(r"pending (chg-[0-9a-f]{12})", proposed.stdout)[1]
        # Measured again: the live skill's answers come from the cache, so there is less to do.
        again = ingot("evaluate", SKILL, "--change", change, *args, cwd=tmp_path, env=env)
        assert again.returncode == 0, again.stderr
        lines = steps(again.stderr, f"evaluate {SKILL}")
        assert "step 3 of 5: held-out A/B 0/8 judgements" in lines
        assert "step 3 of 5: held-out A/B 8/8 judgements" in lines and not any("/12" in x for x in lines)
        assert again.stdout.startswith(f"evaluated {change}: ")


def test_replay_counts_its_replays_on_stderr_and_its_json_stays_clean(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        env = env_for(w)
        blessed = ingot("bless", w.record().id, cwd=tmp_path, env=env)
        assert blessed.returncode == 0, blessed.stderr
        replayed = ingot("replay", "fx-quote", "--json", cwd=tmp_path, env=env)
        assert json.loads(replayed.stdout)["verdict"] == "PASS"  # nothing but the JSON on stdout
        lines = steps(replayed.stderr, "replay fx-quote")
        assert lines == [
            "step 1 of 1: replay",
            "step 1 of 1: replay 0/2 replays run and judged",
            "step 1 of 1: replay 1/2 replays run and judged",
            "step 1 of 1: replay 2/2 replays run and judged",
        ]


def test_a_bench_counts_its_rounds_on_stderr_and_prints_only_json_on_stdout(tmp_path):
    done = ingot("bench", "promote", "--rounds", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rounds"] == 2
    assert steps(done.stderr, "bench promote") == [
        "step 1 of 1: approve to served",
        "step 1 of 1: approve to served 1/2 promotions timed",
        "step 1 of 1: approve to served 2/2 promotions timed",
    ]
