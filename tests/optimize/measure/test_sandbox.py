"""The bubblewrap sandbox, for real: containment of hostile code, limits, mounts, identity.

CI runs this file as root and again as the unprivileged user `nobody` (`make test-sandbox-
nonroot`): as root the sandbox drops to uid 65534 with setpriv, as a normal user it relies on
bubblewrap's own user namespace, and both must contain the same things."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import textwrap
from pathlib import Path

import pytest

from optimize.measure.sandbox import BubblewrapSandbox, Limits, check_mount_point
from tests.optimize.conftest import require_bwrap


@pytest.fixture
def sandbox():
    require_bwrap()
    box = BubblewrapSandbox(limits=Limits(wall_s=5, cpu_s=3, processes=32))
    assert box.available() == (True, "bubblewrap"), box.available()
    return box


def py(box: BubblewrapSandbox, code: str, **files: bytes):
    return box.run({**files, "main.py": textwrap.dedent(code).encode()}, ["python3", "main.py"])


def test_ordinary_code_runs_and_passes(sandbox):
    result = py(sandbox, "import json\nprint(json.dumps({'ok': 1 + 1}))\n")
    assert result.status == "passed" and result.stdout.strip() == '{"ok": 2}'


def test_a_failing_assertion_is_a_failure_with_its_output(sandbox):
    result = py(sandbox, "assert 1 + 1 == 3, 'math is broken'\n")
    assert result.status == "failed" and "math is broken" in result.stderr


def test_the_hosts_loopback_is_unreachable(sandbox):
    # A listener on this host's loopback: reachable from anything sharing our network namespace.
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"""
            import socket
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect(('127.0.0.1', {port})); print('CONNECTED')
            except OSError as e:
                print('blocked', e)
        """
        result = py(sandbox, code)
    assert "blocked" in result.stdout and "CONNECTED" not in result.stdout


def test_writes_outside_tmp_are_refused_and_nothing_leaks_to_the_host(sandbox, tmp_path):
    code = """
        import pathlib
        for p in ['/usr/evil', '/work/evil', '/etc/evil']:
            try:
                pathlib.Path(p).write_text('x'); print('WROTE', p)
            except OSError as e:
                print('refused', p)
        pathlib.Path('/tmp/ok').write_text('fine'); print('tmp ok')
    """
    result = py(sandbox, code)
    assert "WROTE" not in result.stdout and "tmp ok" in result.stdout
    assert not list(tmp_path.glob("evil"))


def test_the_code_runs_as_uid_65534_with_no_capabilities_and_no_environment(sandbox, monkeypatch):
    monkeypatch.setenv("INGOT_SECRET_PROBE", "leaked")
    code = """
        import os
        caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]
        print(os.getuid(), os.getgid(), caps, os.environ.get('INGOT_SECRET_PROBE'))
    """
    result = py(sandbox, code)
    assert result.stdout.split() == ["65534", "65534", "0000000000000000", "None"]


def test_an_unbounded_fork_is_contained(sandbox):
    code = """
        import os, time
        n = 0
        try:
            while n < 200:
                if os.fork() == 0:
                    time.sleep(3); os._exit(0)
                n += 1
        except OSError:
            print('stopped at', n)
    """
    result = py(sandbox, code)
    assert "stopped at" in result.stdout and int(result.stdout.split()[-1]) < 32


def test_an_infinite_loop_is_killed_and_reported(sandbox):
    result = py(sandbox, "while True:\n    pass\n")
    assert result.status == "failed" and "limit" in result.reason


def test_a_shorter_wall_clock_can_be_asked_for_per_run_never_a_longer_one(sandbox):
    short = sandbox.run_in({"/work": {}}, ["sleep", "3"], cwd="/work", wall_s=1)
    assert short.status == "failed" and "1 s wall-clock" in short.reason
    capped = sandbox.run_in({"/work": {}}, ["sleep", "0"], cwd="/work", wall_s=600)
    assert capped.status == "passed"


def test_several_mounts_are_read_only_and_scripts_keep_their_shebang(sandbox):
    mounts = {
        "/skill": {"scripts/hello.sh": b"#!/bin/sh\necho hello from $1\n", "SKILL.md": b"# s\n"},
        "/scratch": {"input.txt": b"scratch data\n"},
    }
    result = sandbox.run_in(
        mounts,
        ["sh", "-c", "./scripts/hello.sh skill && cat /scratch/input.txt && touch /skill/x || echo ro"],
        cwd="/skill",
    )
    assert result.stdout.splitlines() == ["hello from skill", "scratch data", "ro"], result


@pytest.mark.parametrize("point", ["/usr", "/tmp", "/", "/a/b", "relative", "/../etc", "/proc"])
def test_a_mount_point_must_be_one_new_top_level_folder(point):
    with pytest.raises(ValueError, match="mount point"):
        check_mount_point(point)


def test_no_sandbox_means_inconclusive_never_an_unsandboxed_run(tmp_path):
    marker = tmp_path / "ran"
    box = BubblewrapSandbox(bwrap="/nonexistent/bwrap")
    result = py(box, f"open({str(marker)!r}, 'w').write('ran')\n")
    assert result.status == "inconclusive" and "no sandbox" in result.reason and not marker.exists()


def test_availability_is_probed_once_per_sandbox_not_per_run():
    class Counted(BubblewrapSandbox):
        probes = 0

        def available(self) -> tuple[bool, str]:
            Counted.probes += 1
            return False, "counted"

    box = Counted()
    assert [box.run({}, ["true"]).status for _ in range(3)] == ["inconclusive"] * 3
    assert Counted.probes == 1


def test_isolation_says_how_the_current_user_is_confined():
    text = BubblewrapSandbox().isolation()
    expected = "drops root to uid 65534" if os.geteuid() == 0 else "your uid, mapped to 65534"
    assert expected in text and "no network" in text


def test_where_proc_cannot_be_mounted_the_sandbox_runs_without_one():
    # Inside a Docker container the kernel refuses bwrap's fresh /proc; this stand-in bwrap
    # refuses it the same way and otherwise runs the real one. (Its folder must be reachable by
    # uid 65534, which pytest's tmp_path is not when the tests run as root.)
    require_bwrap()
    with tempfile.TemporaryDirectory(prefix="ingot-fake-bwrap-") as folder:
        fake = Path(folder) / "bwrap"
        fake.write_text(
            '#!/bin/sh\nfor a in "$@"; do [ "$a" = --proc ] && '
            '{ echo "bwrap: Can\'t mount proc on /newroot/proc: Operation not permitted" >&2; '
            "exit 1; }; done\n"
            f'exec {shutil.which("bwrap")} "$@"\n'
        )
        fake.chmod(0o755)
        Path(folder).chmod(0o755)
        box = BubblewrapSandbox(bwrap=str(fake), limits=Limits(wall_s=5))
        assert box.available() == (True, "bubblewrap") and "no /proc" in box.isolation()
        result = py(box, "import os\nprint(os.path.exists('/proc/self'), os.getuid())\n")
    assert result.stdout.split() == ["False", "65534"]
