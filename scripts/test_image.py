"""`make test-image`: build the image on a real engine and run the compose file as a user would.

Every command the README's Docker section shows is run here, against a fresh copy of the
repository owned by an ordinary user (uid 1000 when this runs as root), on free loopback ports:
build -> the image alone -> `up` -> MCP from the host -> the UI's login -> `ingot propose` and
`ingot approve` inside the `ui` container, served by `mcp` -> `rollback` -> `run --rm optimize`
against a scripted model server on the compose network -> the sandbox overlay -> `run --rm agent`
-> the team: ./skills a signed git history, `ingot baseline`, an approval served by the `replica`
profile (scripts/image_team.py) -> `down`, with the host's skills exactly as the audit chain
says. One line per step; the first broken step stops it (exit 1). The numbers it reports (build
time, `up` to the first MCP answer, approve-in-container to served on mcp and on the replica,
image size) are its own measurements. Not run: the Langfuse
profile, whose images cannot be pulled on machines without a registry (README, "what was
verified where"). The engine: DOCKER_HOST, else podman's or Docker's socket, else
scripts/container-engine.sh brings podman up (as root).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from fastmcp import Client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.demo import TASKS  # noqa: E402

IMAGE = "ingot:local"
SOCKETS = ("/run/podman/podman.sock", "/var/run/docker.sock")
TASK = "Draft the release notes for v2.4 from the merged PRs"
USER_UID = 1000  # who "cloned" the repository when this runs as root


class StepFailed(Exception):
    """A step did not do what the README says; the message says what happened."""


@dataclass
class Run:
    """The engine, the compose command and the numbers measured on the way."""

    env: dict[str, str]
    compose: list[str]
    builder: list[str]
    numbers: dict[str, object] = field(default_factory=dict)
    podman: bool = False

    def sh(
        self,
        *args: str,
        cwd: Path | None = None,
        timeout: float = 600,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            list(args),
            cwd=cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise StepFailed(f"`{' '.join(args)}` exited {done.returncode}: {tail(done)}")
        return done


def tail(done: subprocess.CompletedProcess, lines: int = 6) -> str:
    return " | ".join((done.stderr or done.stdout).strip().splitlines()[-lines:])


def step(name: str, action: Callable[[], str]) -> None:
    start = time.monotonic()
    try:
        detail = action()
    except (StepFailed, subprocess.TimeoutExpired, httpx.HTTPError, OSError, AssertionError) as exc:
        print(f"FAIL {name}: {exc}", flush=True)
        raise SystemExit(1) from None
    print(f"ok   {name}: {detail} ({time.monotonic() - start:.1f} s)", flush=True)


def wait(condition: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except (httpx.HTTPError, OSError, RuntimeError, StepFailed) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    raise StepFailed(f"{what} not within {timeout:.0f} s (last: {last})")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the engine ----------------------------------------------------------------------------------


def engine() -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGOT_", "SKILLS_DIRS"))}
    host = env.get("DOCKER_HOST") or next(
        (f"unix://{s}" for s in SOCKETS if Path(s).exists() and pings(f"unix://{s}")), None
    )
    if host is None or not pings(host):
        script = REPO / "scripts" / "container-engine.sh"
        if os.geteuid() != 0:
            raise StepFailed("no container engine answers (DOCKER_HOST, podman or Docker); start one")
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=1800, check=False
        )
        if done.returncode != 0:
            raise StepFailed(f"{script.name} failed: {tail(done)}")
        host = f"unix://{SOCKETS[0]}"
    env["DOCKER_HOST"] = host
    version = (
        httpx.Client(transport=httpx.HTTPTransport(uds=host.removeprefix("unix://")))
        .get("http://engine/version")
        .json()
    )
    podman = any("podman" in str(c.get("Name", "")).lower() for c in version.get("Components", []))
    compose = ["docker", "compose"] if _works(["docker", "compose", "version"], env) else ["docker-compose"]
    builder = ["podman", "build", "--format", "docker"] if podman else ["docker", "build"]
    run = Run(env, compose, builder, podman=podman)
    run.numbers["engine"] = f"{'podman' if podman else 'docker'} {version.get('Version')}"
    return run


def pings(host: str) -> bool:
    try:
        transport = httpx.HTTPTransport(uds=host.removeprefix("unix://"))
        return httpx.Client(transport=transport, timeout=3).get("http://engine/_ping").text == "OK"
    except (httpx.HTTPError, OSError):
        return False


def _works(command: list[str], env: dict[str, str]) -> bool:
    try:
        return subprocess.run(command, env=env, capture_output=True, timeout=30, check=False).returncode == 0
    except OSError:
        return False


# -- the checkout a user has ---------------------------------------------------------------------


def fresh_clone(work: Path) -> tuple[Path, int]:
    """The committed tree (what a clone has), plus uncommitted edits when run in a work tree, owned
    by an ordinary user: the owner a fresh clone has on a developer's machine."""
    target = work / "ingot"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for rel in files:
        source = REPO / rel
        if source.is_file() and not source.is_symlink():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)
    owner = os.geteuid() if os.geteuid() != 0 else USER_UID
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", f"{owner}:{owner}", str(target)], check=True)
    return target, owner


# -- MCP and the UI from the host ------------------------------------------------------------------


def route(url: str) -> dict:
    async def call() -> dict:
        async with Client(url, timeout=30) as client:
            result = await client.call_tool("route_and_load", {"task": TASK})
            return result.structured_content

    return asyncio.run(call())


def served_revision(url: str, skill: str = "release-notes") -> str | None:
    found = route(url)
    return found.get("revision") if found.get("match") == skill else None


def ui_session(base: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30, follow_redirects=False)
    refused = client.get("/review")
    if refused.status_code not in (303, 401):
        raise StepFailed(f"the UI answered {refused.status_code} without the token")
    login = client.post("/login", data={"access_token": token}, headers={"Origin": base})
    if login.status_code != 303:
        raise StepFailed(f"login with the token answered {login.status_code}")
    return client


# -- the steps -------------------------------------------------------------------------------------


def main() -> int:
    run = Run({}, [], [])

    def find_engine() -> str:
        nonlocal run
        run = engine()
        return f"{run.numbers['engine']} at {run.env['DOCKER_HOST']}; compose: {' '.join(run.compose)}"

    step("engine", find_engine)
    work = Path(tempfile.mkdtemp(prefix="ingot-image-"))
    os.chmod(work, 0o755)
    clone, owner = fresh_clone(work)
    project = f"ingot-test-{os.getpid()}"
    mcp_port, ui_port = free_port(), free_port()
    compose_env = {
        "COMPOSE_PROJECT_NAME": project,
        "INGOT_MCP_PORT": str(mcp_port),
        "INGOT_UI_PORT": str(ui_port),
    }
    mcp, ui = f"http://127.0.0.1:{mcp_port}/mcp", f"http://127.0.0.1:{ui_port}"

    def compose(*args: str, files: tuple[str, ...] = (), **kwargs) -> subprocess.CompletedProcess:
        chosen = [a for f in ("docker-compose.yml", *files) for a in ("-f", f)]
        env = {**compose_env, **kwargs.pop("env", {})}
        return run.sh(*run.compose, *chosen, *args, cwd=clone, env=env, **kwargs)

    try:
        step("build", lambda: build(run, clone))
        step("image alone", lambda: image_alone(run))
        step("compose up", lambda: up(run, compose, mcp, owner))
        step("ui login", lambda: login(clone, ui))
        step("approve in the ui container", lambda: approve_in_container(run, compose, mcp))
        step("rollback", lambda: rollback(compose, mcp))
        step("optimize with a scripted model", lambda: optimize(run, compose, clone, ui))
        step("sandbox overlay", lambda: sandbox(run, compose, owner))
        step("agent through mcp", lambda: agent(compose))
        step("optimize-loop", lambda: loop(compose))
        step("replica serves an approval", lambda: team(run, compose, clone, owner))
        step("down", lambda: down(compose, clone, owner))
    finally:
        compose("--profile", "replica", "down", "--volumes", "--remove-orphans", check=False, timeout=180)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    print("numbers: " + json.dumps(run.numbers, sort_keys=True), flush=True)
    return 0


def build(run: Run, clone: Path) -> str:
    start = time.monotonic()
    run.sh(*run.builder, "-t", IMAGE, ".", cwd=clone, timeout=1800)
    seconds = round(time.monotonic() - start, 1)
    inspect = json.loads(run.sh("docker" if not run.podman else "podman", "image", "inspect", IMAGE).stdout)[
        0
    ]
    size_mb = round(inspect["Size"] / 1e6)
    health = (inspect.get("Config") or {}).get("Healthcheck") or inspect.get("Healthcheck")
    if not health:
        raise StepFailed("the image has no HEALTHCHECK (built in OCI format? build with --format docker)")
    run.numbers |= {"build_s": seconds, "image_mb": size_mb}
    return f"{IMAGE}, {size_mb} MB, HEALTHCHECK kept, built in {seconds} s"


def image_alone(run: Run) -> str:
    """`docker run ingot:local`: its default command starts on its own and prints its UI token."""
    tool = "podman" if run.podman else "docker"
    name = f"ingot-alone-{os.getpid()}"
    mcp_port, ui_port = free_port(), free_port()
    run.sh(
        tool,
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        "-p",
        f"127.0.0.1:{mcp_port}:8000",
        "-p",
        f"127.0.0.1:{ui_port}:8080",
        IMAGE,
    )
    try:

        def started() -> str | None:
            out = run.sh(tool, "logs", name, check=False)
            return out.stdout + out.stderr if "UI at" in out.stdout + out.stderr else None

        logs = wait(started, 120, "the image's own `ingot serve`")
        found = re.search(r"access token in \S+ \(shown this once; the file keeps it\): (\S+)", str(logs))
        if not found:
            raise StepFailed(f"no access token printed: {str(logs)[-300:]}")
        wait(lambda: served_revision(f"http://127.0.0.1:{mcp_port}/mcp"), 60, "MCP of the image alone")
        ui_session(f"http://127.0.0.1:{ui_port}", found.group(1)).get("/review").raise_for_status()
        user = run.sh(tool, "exec", name, "id", "-u").stdout.strip()
        health = "not checked"
        if run.podman:
            checked = run.sh("podman", "healthcheck", "run", name, check=False)
            health = "healthy" if checked.returncode == 0 else f"UNHEALTHY ({tail(checked)})"
            if checked.returncode != 0:
                raise StepFailed(f"podman healthcheck: {tail(checked)}")
        return f"`serve` started as uid {user}, printed its UI token once, MCP and UI answer, health {health}"
    finally:
        run.sh(tool, "rm", "-f", name, check=False)


def up(run: Run, compose: Callable, mcp: str, owner: int) -> str:
    start = time.monotonic()
    compose("up", "-d", timeout=600)
    revision = wait(lambda: served_revision(mcp), 180, "MCP answering route_and_load")
    seconds = round(time.monotonic() - start, 1)
    run.numbers["up_to_first_mcp_answer_s"] = seconds
    users = {}
    for name in ("mcp", "ui"):
        status = compose("exec", "-T", name, "cat", "/proc/1/status").stdout
        users[name] = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    if set(users.values()) != {owner}:
        raise StepFailed(f"the services run as {users}, not as the owner of ./skills ({owner})")
    return (
        f"state, mcp, ui up, both serving as uid {owner} (the owner of ./skills); route_and_load from the "
        f"host: release-notes @ {str(revision)[:12]} after {seconds} s"
    )


def login(clone: Path, ui: str) -> str:
    token_file = clone / "runs" / "ui-token"
    token = str(wait(lambda: token_file.exists() and token_file.read_text().strip(), 60, "runs/ui-token"))
    owner = token_file.stat().st_uid
    mode = oct(token_file.stat().st_mode & 0o777)
    wait(lambda: httpx.get(f"{ui}/login", timeout=5).status_code == 200, 120, "the UI answering")
    review = ui_session(ui, token).get("/review")
    review.raise_for_status()
    return f"runs/ui-token (uid {owner}, {mode}) logs in; /review answers {review.status_code}"


def approve_in_container(run: Run, compose: Callable, mcp: str) -> str:
    edit = (
        "rm -rf /tmp/edit && cp -r /app/skills/release-notes /tmp/edit && "
        "echo 'Check every entry against its merged pull request.' >> /tmp/edit/SKILL.md && "
        "ingot propose release-notes --from /tmp/edit"
    )
    proposed = compose("exec", "-T", "ui", "sh", "-c", edit).stdout
    change = re.search(r"pending (chg-[0-9a-f]{12}): body change of release-notes \w+ -> (\w+)", proposed)
    accepting = re.search(r'--accepting "([^"]+)"', proposed)  # the cells it printed as missing
    if not change or "needs-acknowledgement" not in proposed or not accepting:
        raise StepFailed(f"unexpected `ingot propose` output: {proposed[-400:]}")
    refused = compose(
        "exec", "-T", "ui", "ingot", "approve", "release-notes", "--change", change.group(1), check=False
    )
    if refused.returncode != 1 or "needs acknowledgement" not in refused.stderr:
        raise StepFailed(f"approving without a reason was not refused: {tail(refused)}")
    start = time.monotonic()
    compose(
        "exec",
        "-T",
        "ui",
        "ingot",
        "approve",
        "release-notes",
        "--change",
        change.group(1),
        "--accept-missing",
        "make test-image: no model configured",
        "--accepting",
        accepting.group(1),
    )
    new = change.group(2)
    wait(lambda: (served_revision(mcp) or "").startswith(new), 60, f"mcp serving {new}")
    seconds = round(time.monotonic() - start, 2)
    run.numbers["approve_in_container_to_served_s"] = seconds
    return (
        f"{change.group(1)} refused without a reason, approved with one; mcp serves {new} {seconds} s later"
    )


def rollback(compose: Callable, mcp: str) -> str:
    history = compose("exec", "-T", "ui", "ingot", "history", "release-notes").stdout
    live = re.search(r"live (\w{12})", history).group(1)
    older = [
        line.split()[1]
        for line in history.splitlines()
        if line.startswith("snapshot ") and "(live)" not in line
    ]
    compose(
        "exec",
        "-T",
        "ui",
        "ingot",
        "rollback",
        "release-notes",
        older[0][:12],
        "--live",
        live,
        "--reason",
        "make test-image",
    )
    wait(lambda: (served_revision(mcp) or "").startswith(older[0][:12]), 60, "mcp serving the old revision")
    return f"rolled back {live} -> {older[0][:12]}; mcp serves it"


MODELS = """\
services:
  scripted-llm:
    image: ingot:local
    entrypoint: ["python", "/app/scripts/demo.py", "--models-only", "0.0.0.0", "9999"]
    volumes:
      - ./tests:/app/tests:ro
      - ./scripts:/app/scripts:ro
"""
MODEL_ENV = {
    "BASE_URL": "http://scripted-llm:9999/v1",
    "AGENT_MODEL": "agent-model",
    "TEACHER_MODEL": "teacher-model",
    "JUDGE_MODEL": "judge-model",
}


def optimize(run: Run, compose: Callable, clone: Path, ui: str) -> str:
    (clone / "docker-compose.models.yml").write_text(MODELS)
    tasks = clone / "optimize" / "tasks" / "release-notes.yaml"
    tasks.write_text(TASKS)
    os.chown(tasks, tasks.parent.stat().st_uid, tasks.parent.stat().st_gid)
    models = ("docker-compose.models.yml",)
    compose("up", "-d", "scripted-llm", files=models)

    def listening() -> bool:  # its python start and imports take seconds on a loaded machine
        logs = compose("logs", "scripted-llm", files=models, check=False)
        return "scripted model server at" in logs.stdout + logs.stderr

    wait(listening, 120, "the scripted model server")
    done = compose("run", "--rm", "optimize", "release-notes", files=models, env=MODEL_ENV, timeout=900)
    queued = re.search(r"queued (chg-[0-9a-f]{12}) for review \(([\w-]+)\)", done.stdout)
    if not queued:
        raise StepFailed(f"optimize queued nothing: {done.stdout[-400:]}")
    token = (clone / "runs" / "ui-token").read_text().strip()
    card = ui_session(ui, token).get("/review").text
    if f"<code>{queued.group(1)}</code>" not in card:
        raise StepFailed(f"{queued.group(1)} is not on the review page")
    compose(
        "exec",
        "-T",
        "ui",
        "ingot",
        "reject",
        "release-notes",
        "--change",
        queued.group(1),
        "--reason",
        "make test-image: only checked it queues",
    )
    return (
        f"`run --rm optimize release-notes` queued {queued.group(1)} ({queued.group(2)}); "
        "the review page shows it"
    )


CONFINED = """\
import socket, pathlib
from optimize.measure.execcheck import BubblewrapSandbox, run_check
check = '''
import socket, os, pathlib
try:
    socket.create_connection(("mcp", 8000), 2)
    print("NETWORK"); raise SystemExit(1)
except OSError:
    pass
for path in ("/app/skills/x", "/app/runs/x", "/usr/x"):
    try:
        pathlib.Path(path).write_text("x"); print("WROTE", path); raise SystemExit(1)
    except OSError:
        pass
assert not pathlib.Path("/app/runs/audit.key").exists(), "the state home is visible"
assert os.getuid() == 65534, os.getuid()
print("confined")
'''
result = run_check(BubblewrapSandbox(), "print('answer')", {}, check)
print(result.status, result.stdout.strip()[-80:], result.reason)
"""


def sandbox(run: Run, compose: Callable, owner: int) -> str:
    files = ("docker-compose.sandbox.yml",)
    compose("up", "-d", "ui", files=files)  # the overlay's security options on the running service

    def reported() -> str | None:
        out = compose("exec", "-T", "ui", "ingot", "status", files=files, check=False).stdout
        return out if "sandbox:" in out else None

    status = wait(reported, 60, "`ingot status` in the ui container")
    ready = re.search(r"sandbox: (.*)", str(status)).group(1)
    if "ready" not in ready:
        raise StepFailed(f"the sandbox is not ready: {ready}")
    checked = compose(
        "exec", "-T", "-u", f"{owner}:{owner}", "-w", "/app", "ui", "python", "-c", CONFINED, files=files
    ).stdout.strip()
    if not checked.startswith("passed") or "confined" not in checked:
        raise StepFailed(f"the execution check did not run confined: {checked}")
    return (
        f"`exec ui ingot status`: {ready.split(':')[0]}; an execution check ran confined "
        "(no network, read-only, uid 65534)"
    )


def agent(compose: Callable) -> str:
    models = ("docker-compose.models.yml",)
    done = compose("run", "--rm", "agent", TASK, files=models, env=MODEL_ENV, timeout=300)
    if "release-notes" not in done.stdout or "answer" not in done.stdout:
        raise StepFailed(f"the agent did not route and answer: {done.stdout[-400:]}")
    line = next((ln for ln in done.stdout.splitlines() if "release-notes" in ln), "")
    return f"`run --rm agent` through the mcp service: {line.strip()[:90]}"


def loop(compose: Callable) -> str:
    models = ("docker-compose.models.yml",)
    done = compose("run", "--rm", "optimize-loop", files=models, env=MODEL_ENV, timeout=900)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("release-notes")), None)
    if line is None or "error" in line:
        raise StepFailed(f"the loop did not report release-notes cleanly: {done.stdout[-400:]}")
    return f"`run --rm optimize-loop`: {line[:100]}"


def team(run: Run, compose: Callable, clone: Path, owner: int) -> str:
    from scripts.image_team import replica_step

    detail, seconds = replica_step(compose, clone, owner, free_port(), served_revision, wait)
    run.numbers["approve_in_container_to_served_on_replica_s"] = seconds
    return detail


def down(compose: Callable, clone: Path, owner: int) -> str:
    compose(
        "--profile", "replica", "down", "--remove-orphans", files=("docker-compose.models.yml",), timeout=180
    )
    from mcp_server.registry import Registry

    audited: dict[str, str | None] = {}
    for line in (clone / "runs" / "audit.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("action") in ("promote", "rollback") and str(entry.get("outcome", "")).startswith(
            "done"
        ):
            audited[entry["skill"]] = entry.get("to_revision")
    registry = Registry((clone / "skills",))
    registry.reload()
    live = {name: skill.revision for name, skill in registry.skills().items()}
    wrong = {s: (live.get(s), r) for s, r in audited.items() if live.get(s) != r}
    if wrong:
        raise StepFailed(f"the host's skills differ from the audit chain: {wrong}")
    strays = [p for p in (clone / "skills").iterdir() if p.name.startswith(".") and p.name != ".git"]
    foreign = [p for p in (clone / "skills").rglob("*") if p.stat().st_uid != owner]
    writable = [p for p in (clone / "skills").rglob("*") if p.stat().st_mode & 0o002]
    if strays or foreign or writable:
        raise StepFailed(f"left behind {strays}, not the user's {foreign[:3]}, world-writable {writable[:3]}")
    shown = ", ".join(f"{s} {str(r)[:12]}" for s, r in audited.items())
    return (
        f"down; the host's skills are the audited revisions ({shown}), owned by uid {owner}, "
        "none world-writable, no stage folders"
    )


if __name__ == "__main__":
    sys.exit(main())
