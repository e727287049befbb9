"""The execution sandbox, for real: bubblewrap, limits, and containment of hostile code."""

from __future__ import annotations

import pytest

from optimize.measure.execcheck import BubblewrapSandbox, Limits, run_python
from tests.optimize.conftest import require_bwrap


@pytest.fixture
def sandbox():
    require_bwrap()
    box = BubblewrapSandbox(limits=Limits(wall_s=5, cpu_s=3, processes=32))
    assert box.available() == (True, "bubblewrap")
    return box


def test_ordinary_code_runs_and_passes(sandbox):
    result = run_python(sandbox, "import json\nprint(json.dumps({'ok': 1 + 1}))\n")
    assert result.status == "passed" and result.stdout.strip() == '{"ok": 2}'


def test_a_failing_assertion_is_a_failure_with_its_output(sandbox):
    result = run_python(sandbox, "assert 1 + 1 == 3, 'math is broken'\n")
    assert result.status == "failed" and "math is broken" in result.stderr


def test_network_is_unreachable(sandbox):
    code = (
        "import socket\ns = socket.socket()\ns.settimeout(2)\n"
        "try:\n    s.connect(('1.1.1.1', 80))\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', e)\n"
    )
    result = run_python(sandbox, code)
    assert "CONNECTED" not in result.stdout and "blocked" in result.stdout


def test_writes_outside_tmp_are_refused_and_nothing_leaks_to_the_host(sandbox, tmp_path):
    code = (
        "import pathlib\nfor p in ['/usr/evil', '/work/evil', '/etc/evil']:\n"
        "    try:\n        pathlib.Path(p).write_text('x'); print('WROTE', p)\n"
        "    except OSError as e:\n        print('refused', p)\n"
        "pathlib.Path('/tmp/ok').write_text('fine'); print('tmp ok')\n"
    )
    result = run_python(sandbox, code)
    assert "WROTE" not in result.stdout and "tmp ok" in result.stdout
    assert not list(tmp_path.glob("evil"))


def test_an_unbounded_fork_is_contained(sandbox):
    code = (
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        "            time.sleep(3); os._exit(0)\n        n += 1\n"
        "except OSError:\n    print('stopped at', n)\n"
    )
    result = run_python(sandbox, code)
    assert "stopped at" in result.stdout and int(result.stdout.split()[-1]) < 32


def test_an_infinite_loop_is_killed_and_reported(sandbox):
    result = run_python(sandbox, "while True:\n    pass\n")
    assert result.status == "failed" and ("limit" in result.reason)


def test_no_sandbox_means_inconclusive_never_an_unsandboxed_run(tmp_path):
    marker = tmp_path / "ran"
    box = BubblewrapSandbox(bwrap="/nonexistent/bwrap")
    result = run_python(box, f"open({str(marker)!r}, 'w').write('ran')\n")
    assert result.status == "inconclusive" and "no sandbox" in result.reason and not marker.exists()


def test_a_broken_fixture_is_inconclusive_not_a_failure(sandbox):
    result = run_python(sandbox, "print('answer')\n", setup="raise SystemExit('fixture broke')\n")
    assert result.status == "inconclusive" and "fixture failed" in result.reason


def test_a_task_check_runs_the_answers_code_against_the_fixture(sandbox):
    from optimize.measure.execcheck import run_check

    fixture = {"data.csv": "a,b\n1,2\n3,4\n"}
    check = "from answer import total\nassert total('data.csv') == 10, total('data.csv')\n"
    good = (
        "Here you go:\n```python\nimport csv\ndef total(p):\n    rows = list(csv.reader(open(p)))[1:]\n"
        "    return sum(int(x) for r in rows for x in r)\n```\n"
    )
    bad = "```python\ndef total(p):\n    return 0\n```"
    assert run_check(sandbox, good, fixture, check).status == "passed"
    assert run_check(sandbox, bad, fixture, check).status == "failed"
    broken = run_check(sandbox, good, fixture, check, setup="raise SystemExit(1)")
    assert broken.status == "inconclusive"
    assert run_check(None, good, fixture, check).status == "inconclusive"


def test_docker_without_an_engine_is_inconclusive_and_none_means_no_sandbox():
    from optimize.measure.execcheck import DockerSandbox, make_sandbox

    ok, why = DockerSandbox().available()
    if ok:
        pytest.skip("a Docker engine is reachable here; this checks the no-engine path")
    result = run_python(DockerSandbox(), "print('hi')\n")
    assert result.status == "inconclusive" and "no sandbox" in result.reason
    assert make_sandbox("none") is None and isinstance(make_sandbox("docker"), DockerSandbox)


def test_availability_is_probed_once_per_sandbox_not_per_check():
    class Counted(BubblewrapSandbox):
        probes = 0

        def available(self) -> tuple[bool, str]:
            Counted.probes += 1
            return False, "counted"

    box = Counted()
    assert [box.run({}, ["true"]).status for _ in range(3)] == ["inconclusive"] * 3
    assert Counted.probes == 1
