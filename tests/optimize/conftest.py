"""Fixtures for change control: a skills root, a runs folder and the ChangeControl over them."""

from __future__ import annotations

import shutil

import pytest

from optimize.control.changes import ChangeControl
from optimize.measure.judge import Judge
from tests.conftest import write_skill
from tests.scripted_llm import scripted_llm


def require_bwrap() -> None:
    """Sandbox tests run for real or fail: a skip would hide a missing sandbox in CI."""
    if shutil.which("bwrap") is None:
        pytest.fail("the sandbox tests need bubblewrap: apt-get install bubblewrap (.ci/run installs it)")


def skill_md(name: str, description: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n{body}\n".encode()


def body_rewrite(root, skill: str, marker: str = "NEW-RULE") -> dict[str, bytes]:
    """The live skill's files with a line appended to its body: a body-only rewrite."""
    folder = root / skill
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    files["SKILL.md"] += f"\n{marker}: check every entry against the merged pull request.\n".encode()
    return files


def checks(passed: bool = True) -> dict:
    result = {"passed": passed, "detail": "test"}
    return {
        "checks": {
            "status": "measured",
            "results": {"validation": result, "injection": result, "collision": result},
        }
    }


def ab(champion: list[float], challenger: list[float], fail_case: int | None = None) -> dict:
    cases = [
        {
            "id": f"h{i}",
            "champion": a,
            "challenger": b,
            "champion_pass": a >= 0.5,
            "challenger_pass": b >= 0.5 and i != fail_case,
        }
        for i, (a, b) in enumerate(zip(champion, challenger, strict=True))
    ]
    pairs = list(zip(champion, challenger, strict=True))
    pairwise = {
        "status": "measured",
        "wins": sum(b > a for a, b in pairs),
        "ties": sum(b == a for a, b in pairs),
        "losses": sum(b < a for a, b in pairs),
    }
    return {"ab": {"status": "measured", "samples": len(cases), "cases": cases, "pairwise": pairwise}}


ROUTING_BASE = {"top1": 0.8, "recall_at_3": 0.9, "no_route_precision": 0.9, "others_top1": 0.8}


def routing(after: dict | None = None, n: int = 8) -> dict:
    """A measured routing-impact cell: nothing shadowed, the metrics `after` (default unchanged)."""
    return {
        "routing_impact": {
            "status": "measured",
            "metrics": {
                "champion": ROUTING_BASE,
                "challenger": {**ROUTING_BASE, **(after or {})},
                "n": dict.fromkeys(ROUTING_BASE, n),
            },
            "shadowed": [],
            "collisions": [],
        }
    }


def replay_passed() -> dict:
    golden = {"id": "g-1", "verdict_found": "pass", "evidence": "", "signature": [], "controls": []}
    return {"replay": {"status": "measured", "verdict": "PASS", "goldens": [golden]}}


def replay_blocked() -> dict:
    """A replay cell whose one golden regressed with L0 evidence: a BLOCK."""
    golden = {"id": "g-1", "verdict_found": "regressed", "evidence": "L0", "signature": ["x"], "controls": []}
    return {"replay": {"status": "measured", "verdict": "BLOCK", "goldens": [golden]}}


NO_CODE = {"sandbox_checks": {"status": "not_applicable", "why": "nothing in this skill runs code"}}


def ready_body(champion: list[float] | None = None, challenger: list[float] | None = None) -> dict:
    """Every cell a body change has, each passing: a ready passport (priced, replayed, routed)."""
    measured = ab(champion or [0.2, 0.3, 0.1, 0.4], challenger or [0.9, 0.8, 0.7, 0.9])
    measured["ab"] |= {"champion_usd": 0.010, "challenger_usd": 0.011}
    return {**checks(), **routing(), **measured, **replay_passed(), **NO_CODE}


def ready_create() -> dict:
    """Every cell a new skill has, each passing (its A/B against no skill, its routes)."""
    return {**checks(), **routing(), **ab([0.1, 0.2, 0.1, 0.2], [0.9, 0.9, 0.8, 0.9]), **NO_CODE}


def ready_description() -> dict:
    """A description change's cells, each passing (routing improves on held-out cases)."""
    return {**checks(), **routing({"top1": 0.9})}


@pytest.fixture
def control(tmp_path, library_factory) -> ChangeControl:
    root = tmp_path / "skills"
    write_skill(root, "alpha", "Alpha does alpha things.", "# Alpha\n\nStep one.\n")
    return ChangeControl(tmp_path / "runs", (root,), neighbours=library_factory(root).current)


STALE = "# Release notes\n\nSEED-MARK: list every commit verbatim.\n"
TASKS = """\
train: [Notes for 1.0, Notes for 1.1, Notes for 1.2, Notes for 1.3]
holdout: [Notes for 2.0, Notes for 2.1, Notes for 2.2, Notes for 2.3]
"""


@pytest.fixture
def optimizer_world(tmp_path, library_factory):
    """A stale release-notes skill with a task set and a scripted teacher, judge and agent: the
    agent answers "strong" under NEW-MARK bodies and "weak" under any other (SEED-MARK, MEH-MARK).
    Each test scripts the teacher's rewrite."""
    root = tmp_path / "skills"
    write_skill(root, "release-notes", "Writes release notes from merged pull requests.", STALE)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "release-notes.yaml").write_text(TASKS)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    with scripted_llm() as server:
        server.script_optimizer(
            diagnosis=[{"section": "SEED-MARK", "kind": "incorrect", "detail": "verbatim commits"}]
        )
        llm = server.client("agent", "teacher", "judge")
        yield server, control, library, llm, Judge(llm, ("judge-model",), "teacher-model"), tasks, root
