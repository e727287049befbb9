"""`make demo` and the README's loop on it, as a newcomer runs them: scripts/demo.py itself (its
scripted models, its folder, its `env` file, its `ingot serve`), then, in a shell that only
sourced that file, route -> agent run -> propose (evaluated) -> bless the run -> replay ->
evaluate again -> approve -> rollback through the real CLI, reading each step's line. Also: a
second `make demo` starts from a clean copy and says so, a folder that is not a demo's is never
cleared, and a model's HTTP error is one readable line without the request's JSON."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from scripts import demo
from tests.conftest import free_port, wait_for
from tests.scripted_llm import scripted_llm

REPO = Path(__file__).resolve().parents[1]
TASK = "Draft the release notes for v2.4 from the merged PRs"
SKILL = "release-notes"
BIN = Path(sys.executable).parent  # where the venv installed `ingot` (what .demo/env puts on PATH)


def base_env(**extra: str) -> dict[str, str]:
    """This environment without model or state settings of the developer's own."""
    keep = {k: v for k, v in os.environ.items() if not k.endswith(("_MODEL", "API_KEY", "BASE_URL"))}
    keep.pop("INGOT_HOME", None)
    return {**keep, "HF_HUB_OFFLINE": "1", **extra}


@contextmanager
def running_demo(folder: Path) -> Iterator[tuple[list[str], list[str]]]:
    """`python scripts/demo.py` with DEMO_DIR=`folder` on free ports, until its `ingot serve` says
    where it serves; yields its stdout and stderr lines so far (still growing)."""
    env = base_env(DEMO_DIR=str(folder), MCP_PORT=str(free_port()), UI_PORT=str(free_port()))
    process = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "demo.py")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda s=s, into=into: into.extend(s), daemon=True)
        for s, into in ((process.stdout, out), (process.stderr, err))
    ]
    for reader in readers:
        reader.start()
    try:
        wait_for(lambda: any("ingot: MCP at" in line for line in err) or process.poll() is not None, 180)
        assert process.poll() is None, "".join(out + err)
        yield out, err
    finally:
        process.terminate()  # demo.py stops its `ingot serve` on SIGTERM
        process.wait(30)
        for reader in readers:
            reader.join(10)


def sourced(env_file: Path) -> dict[str, str]:
    """The environment a new shell has after `source env_file`, and nothing else of ours."""
    done = subprocess.run(
        ["bash", "-c", f"source {env_file} && env -0"],
        env={"HOME": os.environ.get("HOME", "/tmp"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)


class Shell:
    """The CLI in a new shell after `source .demo/env`, as `python -m ingot.cli` (CI has no
    `ingot` on PATH)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = {**env, "HF_HUB_OFFLINE": "1"}, cwd

    def __call__(self, *args: str, code: int = 0) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ingot.cli", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        return done.stdout if code == 0 else done.stderr


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Iterator[tuple[Path, list[str]]]:
    """One `make demo` for the module: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("made") / "demo"
    with running_demo(folder) as (said, _):
        yield folder, said


def readme_loop() -> list[str]:
    """The commands of README's loop: the bash block after "In another shell", comments dropped."""
    text = (REPO / "README.md").read_text()
    block = text.split("In another shell", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line and line[0] != "#"]


def test_the_readme_loop_runs_end_to_end_on_make_demo(made, tmp_path):
    """README's commands, exactly as written (the ids it leaves to the reader filled in from the
    lines before), then approve and roll back with the commands its text gives."""
    folder, said = made
    assert said[1] == f"demo: copied the bundled skills to {folder}/skills; state in {folder}/home\n"
    assert (
        said[2]
        == f"demo: in another shell, `source {folder}/env` puts `ingot` on PATH and talks to this demo\n"
    )
    commands = readme_loop()
    assert commands[0] == "source .demo/env", commands
    env = sourced(folder / "env")
    assert env["PATH"].split(":")[0] == str(BIN)
    assert shutil.which("ingot", path=env["PATH"]) == str(BIN / "ingot")  # a new shell finds it
    ingot = Shell(env, tmp_path)
    ids: dict[str, str] = {}
    said_by: dict[str, str] = {}
    for command in commands[1:]:
        words = [ids.get(w, w.replace(".demo/", f"{folder}/")) for w in shlex.split(command)]
        if words[0] == "cp":
            assert words[1] == "-r", command
            shutil.copytree(words[2], tmp_path / words[3])
        elif words[0] == "echo":
            assert words[2] == ">>", command
            with (tmp_path / words[3]).open("a") as handle:
                handle.write(words[1] + "\n")
        else:
            assert words[0] == "ingot", command
            said_by[words[1]] = out = ingot(*words[1:])
            if words[1] == "propose":
                ids["CHANGE_ID"] = out.split()[1].rstrip(":")
            if words[1] == "traces":
                ids["TRACE_ID"] = out.split()[0]
    assert [c.split()[1] for c in commands if c.startswith("ingot ")] == [
        "route", "agent", "propose", "traces", "bless", "replay", "evaluate",
    ]  # fmt: skip

    # 1. Route.
    live = re.fullmatch(
        rf"match: {SKILL} @ ([0-9a-f]{{12}}) \(score \d\.\d{{3}}\)", said_by["route"].splitlines()[0]
    )
    assert live, said_by["route"]
    live = live.group(1)
    # 2. A run of the agent, recorded with the revision that served it: what `bless` takes.
    ran = said_by["agent"]
    assert ran.startswith(f"route: match {SKILL} @ {live}") and "model: agent-model" in ran, ran
    # 3. The edit: measured at once; no run is blessed yet, so replay is missing.
    proposed = said_by["propose"]
    pending = re.match(
        rf"pending (chg-[0-9a-f]{{12}}): body change of {SKILL} {live} -> ([0-9a-f]{{12}})", proposed
    )
    assert pending, proposed
    change, new = pending.groups()
    assert f"evaluated {change}: needs-acknowledgement (body change)" in proposed
    assert re.search(r"replay +missing +no blessed goldens for release-notes: bless a good run", proposed)
    # 4. Bless the agent's run: the teacher drafts its criteria.
    traces = said_by["traces"].splitlines()
    assert len(traces) == 1 and f"{SKILL}@{live}  ingot-agent  answer" in traces[0], traces
    blessed = said_by["bless"].splitlines()
    assert re.fullmatch(rf"blessed: g-[0-9a-f]{{12}} for {SKILL}@{live}", blessed[0]), blessed
    assert blessed[1:3] == [
        "criteria: teacher-drafted (drafted by teacher-model)",
        "  c1: drafts release notes for the version the task names",
    ]
    golden = blessed[0].split()[1]
    # 5. Replay: the live revision alone keeps its blessed run.
    replayed = said_by["replay"]
    assert f"  {golden}  held      L0  the same answer" in replayed, replayed
    assert "replay: pass (the passport's replay cell)" in replayed
    # 6. Evaluate the change again: the replay judges now rule on the candidate's run.
    evaluated = said_by["evaluate"]
    assert f"evaluated {change}: ready (body change)" in evaluated, evaluated
    assert re.search(r"replay +pass +every blessed run still passes", evaluated), evaluated
    assert f"approve with: ingot approve {SKILL} --change {change}" in evaluated

    # 7. Approve, with the command README's text gives: ready, so no reason is asked.
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "`ingot approve release-notes --change CHANGE_ID`" in readme
    assert ingot("approve", SKILL, "--change", change) == f"promoted {SKILL}: {live} -> {new}\n"
    assert ingot("route", TASK).startswith(f"match: {SKILL} @ {new} ")
    # 8. Roll back, with the command `ingot history` prints.
    history = ingot("history", SKILL)
    assert f"roll back with: ingot rollback {SKILL} REVISION --live {new}" in history, history
    assert f"snapshot {live}" in history, history
    back = ingot("rollback", SKILL, live, "--live", new, "--reason", "demo: undo")
    assert back == f"rolled back {SKILL}: {new} -> {live}\n"
    assert ingot("route", TASK).startswith(f"match: {SKILL} @ {live} ")


def test_a_model_http_error_is_one_readable_line_without_the_request_json(made, tmp_path):
    """The demo's agent against a model endpoint with no answer for it (the scripted server's
    500): the CLI's line names the endpoint, the role and the provider's message, never the
    request body."""
    folder, _ = made
    with scripted_llm() as server:  # no rules: every call is answered 500
        env = {**sourced(folder / "env"), "BASE_URL": server.url, "LLM_MAX_RETRIES": "0"}
        line = Shell(env, tmp_path)("agent", TASK, code=1).strip()
    assert "\n" not in line and line.startswith(f"Error: {server.url} answered 500 for the agent role"), line
    assert "no scripted rule matches this agent-model request (last user message begins " in line, line
    assert '"messages"' not in line and "\\n" not in line and len(line) < 400, line
    assert "Error code" not in line and "{" not in line, line  # the provider's words, not the SDK's dump


def test_a_second_make_demo_starts_from_a_clean_copy_and_says_what_it_did(tmp_path):
    folder = tmp_path / "demo"
    _, said = demo.setup(folder)
    assert said == f"copied the bundled skills to {folder}/skills; state in {folder}/home"
    stray = folder / "skills" / SKILL / "AGENT-EDIT.md"
    stray.write_text("left by the last demo\n")
    (folder / "home").mkdir()
    _, said = demo.setup(folder, keep=True)
    assert said == f"kept the last demo's skills in {folder}/skills and its state in {folder}/home (KEEP=1)"
    assert stray.exists()
    _, said = demo.setup(folder)
    assert said == (
        f"copied the bundled skills to {folder}/skills; state in {folder}/home "
        "(the last demo's folder was cleared first: KEEP=1 keeps it)"
    )
    assert not stray.exists() and not (folder / "home").exists()
    assert sorted(p.name for p in (folder / "skills").iterdir()) == sorted(
        p.name for p in (REPO / "skills").iterdir()
    )


def test_a_folder_that_is_not_a_demo_is_never_cleared(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(demo.DemoError, match="is not a demo's folder \\(it holds notes.txt\\)"):
        demo.setup(mine)
    assert (mine / "notes.txt").read_text() == "mine\n"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--reset"],
        env=base_env(DEMO_DIR=str(mine)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith(f"demo: {mine} is not a demo's folder"), (
        done.stderr
    )
    assert (mine / "notes.txt").exists()
    demo.setup(tmp_path / "demo")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--reset"],
        env=base_env(DEMO_DIR=str(tmp_path / "demo")),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout == f"demo: removed {tmp_path / 'demo'}\n", done.stderr
    assert not (tmp_path / "demo").exists()


def test_a_demo_still_running_keeps_its_folder_and_a_second_one_says_which_port_is_taken(tmp_path):
    folder = tmp_path / "demo"
    demo.setup(folder)
    stray = folder / "skills" / SKILL / "AGENT-EDIT.md"
    stray.write_text("the running demo's\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "demo.py")],
            env=base_env(DEMO_DIR=str(folder), MCP_PORT=str(port), UI_PORT=str(free_port())),
            capture_output=True,
            text=True,
        )
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr == (
        f"demo: port {port} (MCP_PORT) on 127.0.0.1 is taken (Address already in use): stop what listens "
        "there (a demo still running?), or set MCP_PORT to a free port\n"
    )
    assert stray.exists()
