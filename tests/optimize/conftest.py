"""Fixtures for change control: a skills root, a runs folder and the ChangeControl over them."""

from __future__ import annotations

import pytest

from optimize.changes import ChangeControl
from tests.conftest import write_skill


def skill_md(name: str, description: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n{body}\n".encode()


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
    return {"ab": {"status": "measured", "samples": len(cases), "cases": cases}}


@pytest.fixture
def control(tmp_path) -> ChangeControl:
    root = tmp_path / "skills"
    write_skill(root, "alpha", "Alpha does alpha things.", "# Alpha\n\nStep one.\n")
    return ChangeControl(tmp_path / "runs", (root,))
