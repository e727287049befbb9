"""Execution-grounded checks: the answer's code against a task's fixture and assertion, run for
real in bubblewrap (containment itself is tested in test_sandbox.py)."""

from __future__ import annotations

import pytest

from optimize.measure.execcheck import (
    BubblewrapSandbox,
    DockerSandbox,
    Limits,
    answer_code,
    make_sandbox,
    run_check,
    run_python,
)
from tests.optimize.conftest import require_bwrap

FIXTURE = {"data.csv": "a,b\n1,2\n3,4\n"}
CHECK = "from answer import total\nassert total('data.csv') == 10, total('data.csv')\n"
GOOD = (
    "Here you go:\n```python\nimport csv\ndef total(p):\n    rows = list(csv.reader(open(p)))[1:]\n"
    "    return sum(int(x) for r in rows for x in r)\n```\n"
)


@pytest.fixture
def sandbox():
    require_bwrap()
    return BubblewrapSandbox(limits=Limits(wall_s=5, cpu_s=3, processes=32))


def test_a_task_check_runs_the_answers_code_against_the_fixture(sandbox):
    bad = "```python\ndef total(p):\n    return 0\n```"
    assert run_check(sandbox, GOOD, FIXTURE, CHECK).status == "passed"
    failed = run_check(sandbox, bad, FIXTURE, CHECK)
    assert failed.status == "failed" and "AssertionError: 0" in failed.stderr


def test_a_broken_fixture_is_inconclusive_not_a_failure(sandbox):
    result = run_python(sandbox, "print('answer')\n", setup="raise SystemExit('fixture broke')\n")
    assert result.status == "inconclusive" and "fixture failed" in result.reason
    assert run_check(sandbox, GOOD, FIXTURE, CHECK, setup="raise SystemExit(1)").status == "inconclusive"


def test_no_sandbox_configured_is_inconclusive():
    assert run_check(None, GOOD, FIXTURE, CHECK).status == "inconclusive"


def test_the_answers_first_python_block_is_its_code():
    assert answer_code("text\n```py\nx = 1\n```\n```python\ny = 2\n```") == "x = 1\n"
    assert answer_code("x = 1") == "x = 1"


def test_the_configured_sandbox_is_built_from_its_kind():
    assert make_sandbox("none") is None
    assert isinstance(make_sandbox("bubblewrap"), BubblewrapSandbox)
    docker = make_sandbox("docker", docker_image="python:3.12-slim", docker_host="unix:///x.sock")
    assert isinstance(docker, DockerSandbox)
    assert (docker.image, docker.base_url) == ("python:3.12-slim", "unix:///x.sock")
