"""The Docker sandbox through the real `docker` SDK against a fake Engine API on a unix socket
(no engine runs on these machines): what it asks the engine for, how it classifies what comes
back, and that no container outlives its run."""

from __future__ import annotations

import time

import pytest

from optimize.measure.execcheck import run_check
from optimize.measure.sandbox import Limits
from optimize.measure.sandbox_docker import EXPIRES, LABEL, DockerSandbox
from tests.fake_docker import fake_engine


@pytest.fixture
def engine():
    with fake_engine() as fake:
        yield fake


def box(engine, wall_s: float = 5) -> DockerSandbox:
    return DockerSandbox(limits=Limits(wall_s=wall_s), base_url=engine.url)


def test_a_run_asks_for_an_isolated_container_and_copies_the_files_in(engine):
    engine.behaviour.stdout = b"hello\n"
    result = box(engine).run(
        {"main.py": b"print('hello')\n", "lib/run.sh": b"#!/bin/sh\n"}, ["python3", "main.py"]
    )
    assert (result.status, result.stdout) == ("passed", "hello\n")
    (container,) = engine.created()
    body, host = container.body, container.body["HostConfig"]
    assert body["Image"] == "python:3.11-slim" and body["Cmd"] == ["python3", "main.py"]
    assert body["User"] == "65534:65534" and body["WorkingDir"] == "/work"
    assert body["NetworkDisabled"] is True and host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Tmpfs"] == {"/tmp": "rw,size=64m,mode=1777"}
    assert host["PidsLimit"] == 64 and host["Memory"] == host["MemorySwap"] == 512 << 20
    assert {u["Name"] for u in host["Ulimits"]} == {"cpu", "fsize"}
    assert [(m["Target"], m["Type"]) for m in host["Mounts"]] == [("/work", "volume")]
    assert not any(e.startswith(("API_KEY", "LANGFUSE")) for e in body["Env"])
    assert container.archives["/work"] == {
        "main.py": (b"print('hello')\n", 0o644),
        "lib/run.sh": (b"#!/bin/sh\n", 0o755),
    }


def test_the_container_is_removed_with_its_volumes_after_every_run(engine):
    box(engine).run({"main.py": b""}, ["python3", "main.py"])
    assert engine.containers == {} and len(engine.removed) == 1
    assert engine.count("DELETE", engine.removed[0]) == 1


def test_a_failing_command_is_a_failure_with_its_stderr(engine):
    engine.behaviour.exit_code, engine.behaviour.stderr = 1, b"AssertionError: nope\n"
    result = box(engine).run({"main.py": b""}, ["python3", "main.py"])
    assert (result.status, result.exit_code) == ("failed", 1) and "nope" in result.stderr


def test_a_timeout_kills_and_removes_the_container(engine):
    engine.behaviour.hang = True
    started = time.monotonic()
    result = box(engine, wall_s=1).run({"main.py": b"while True: pass\n"}, ["python3", "main.py"])
    assert result.status == "failed" and "1 s wall-clock" in result.reason
    assert time.monotonic() - started < 10
    (cid,) = engine.removed
    assert engine.count("POST", f"/containers/{cid}/kill") == 1 and engine.containers == {}


def test_the_memory_limit_is_reported_as_such(engine):
    engine.behaviour.exit_code, engine.behaviour.oom_killed = 137, True
    result = box(engine).run({"main.py": b""}, ["python3", "main.py"])
    assert (result.status, result.reason) == ("failed", "killed by the memory limit")


def test_a_missing_image_is_inconclusive_and_says_what_to_pull(engine):
    engine.images.clear()
    result = box(engine).run({"main.py": b""}, ["python3", "main.py"])
    assert result.status == "inconclusive" and "docker pull python:3.11-slim" in result.reason
    assert engine.created() == []


def test_no_engine_is_inconclusive(tmp_path):
    result = DockerSandbox(base_url=f"unix://{tmp_path}/none.sock").run({"main.py": b""}, ["true"])
    assert result.status == "inconclusive" and "no Docker engine answers" in result.reason


@pytest.mark.parametrize("call", ["create", "archive", "start"])
def test_an_engine_that_cannot_start_the_container_is_inconclusive_not_a_failed_answer(engine, call):
    engine.behaviour.refuse[call] = (500, "OCI runtime create failed: exec: python3: not found")
    result = box(engine).run({"main.py": b""}, ["python3", "main.py"])
    assert result.status == "inconclusive" and "could not run the container" in result.reason
    assert engine.containers == {}  # whatever was created is removed


def test_a_container_that_cannot_be_removed_is_left_for_the_orphan_sweep(engine):
    engine.behaviour.refuse["delete"] = (500, "device busy")
    result = box(engine).run({"main.py": b""}, ["python3", "main.py"])
    assert result.status == "passed"
    (left,) = engine.containers.values()
    assert LABEL in left.labels and float(left.labels[EXPIRES]) > time.time()
    engine.behaviour.refuse.clear()
    assert box(engine).remove_orphans(now=float(left.labels[EXPIRES]) + 1) == 1
    assert engine.containers == {}


def test_expired_sandbox_containers_from_a_killed_run_are_removed_at_the_probe(engine):
    past, future = str(int(time.time()) - 5), str(int(time.time()) + 600)
    orphan = engine.add_container({LABEL: "1", EXPIRES: past})
    in_use = engine.add_container({LABEL: "1", EXPIRES: future})
    unrelated = engine.add_container({"com.example": "1"})
    assert box(engine).run({"main.py": b""}, ["python3", "main.py"]).status == "passed"
    assert orphan in engine.removed and set(engine.containers) == {in_use, unrelated}


def test_the_engine_is_probed_once_per_sandbox(engine):
    sandbox = box(engine)
    for _ in range(3):
        sandbox.run({"main.py": b""}, ["python3", "main.py"])
    assert engine.count("GET", "/_ping") == 1 and engine.count("GET", "/images/python:3.11-slim/json") == 3


def test_a_task_check_runs_through_the_docker_backend(engine):
    result = run_check(box(engine), "```python\nx = 1\n```", {"data.csv": "a\n"}, "import answer\n")
    assert result.status == "passed"
    (container,) = [c for c in engine.created()]
    assert set(container.archives["/work"]) == {"data.csv", "answer.py", "check.py"}
    assert container.body["Cmd"] == ["python3", "check.py"]


def test_several_mounts_become_several_volumes(engine):
    box(engine).run_in(
        {"/skill": {"SKILL.md": b"# s\n"}, "/scratch": {"in.txt": b"x"}}, ["sh", "-c", "true"], "/skill"
    )
    (container,) = engine.created()
    assert sorted(m["Target"] for m in container.body["HostConfig"]["Mounts"]) == ["/scratch", "/skill"]
    assert set(container.archives) == {"/skill", "/scratch"} and container.body["WorkingDir"] == "/skill"
