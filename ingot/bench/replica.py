"""`ingot bench replica`: how fast a signed change reaches replicas, and what verifying costs.

Everything is built in a temporary folder from real parts: a primary whose skills root is a git
work tree with an SSH signing key (ssh-keygen), a bare remote, and replicas.
- approve_to_served_s: `replicas` processes of `ingot serve --replica REMOTE` at
  REPLICA_INTERVAL_S=`interval_s`; `rounds` approvals on the primary (alternately a body change,
  whose missing evidence the bench accepts with a reason, and a rollback), each timed from the
  moment approval starts to the moment the last replica's `get_skill` answers with the new revision
  (polled every 20 ms over MCP); p50 and max over rounds, and over every replica's own wait. The
  floor is the interval: a replica that just synced waits up to one interval before it looks.
- sync_ms at each size of a synthetic library: the first sync (a baseline of every skill checked
  and written), a sync that verifies one new promotion, and a sync with nothing new (the fetch);
  medians of `rounds` syncs, in this process.
Prints JSON; medians and maxima, never one run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fastmcp import Client

from ingot.bench.percentiles import percentiles
from ingot.bench.served import free_port
from ingot.bench.workload import write_library
from ingot.errors import ConfigError
from ingot.progress import OnStep, Steps
from ingot.settings import Settings
from mcp_server.registry import Limits
from optimize.control.baseline import sign_baseline
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import GitHistory
from optimize.control.replica import Replica, ReplicaConfig

POLL_S = 0.02


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost"}
    env |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(f"git {args[0]} failed in the bench's primary: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Primary:
    folder: Path
    root: Path
    remote: Path
    allowed: Path
    control: ChangeControl

    def change(self, skill: str, round_: int) -> str:
        """A body change approved with its missing evidence accepted; its revision."""
        folder = self.root / skill
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        files["SKILL.md"] += f"\nRound {round_}: check the result once more.\n".encode()
        change, _ = self.control.propose(skill, "operator", files, {})
        passport = self.control.passport(change)
        missing = [c.name for c in passport.cells if c.state == "missing"] if passport else []
        self.control.approve(
            skill, "bench", change.id, accept_missing="bench: distribution only", accepting=missing
        )
        return change.candidate_revision


def primary(folder: Path, skills: Path) -> Primary:
    """A primary on a copy of `skills`, committed, pushed, baselined and pushed again."""
    key = folder / "signing_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key), "-C", "bench"], check=True)
    allowed = folder / "allowed_signers"
    allowed.write_text(f"bench {(folder / 'signing_key.pub').read_text()}")
    top, remote = folder / "primary", folder / "remote.git"
    root = top / "skills"
    shutil.copytree(skills, root)
    _git(folder, "init", "-q", "--bare", "-b", "main", str(remote))
    _git(top, "init", "-q", "-b", "main")
    _git(top, "add", "-A")
    _git(top, "commit", "-qm", "skills")
    _git(top, "remote", "add", "origin", str(remote))
    _git(top, "push", "-q", "origin", "main")
    control = ChangeControl(folder / "home", (root,), git=GitHistory(True, "origin", key))
    sign_baseline(control, "bench")
    control.promoter.commits.wait_for_pushes(120)
    return Primary(folder, root, remote, allowed, control)


async def _revision(url: str, skill: str) -> str | None:
    async with Client(url) as client:
        result = await client.call_tool("get_skill", {"name": skill}, raise_on_error=False)
        return None if result.is_error else result.structured_content["revision"]


def _served(url: str, skill: str) -> str | None:
    try:
        return asyncio.run(_revision(url, skill))
    except Exception:  # not listening yet
        return None


def _replicas(lead: Primary, count: int, interval_s: float) -> list[tuple[subprocess.Popen, str]]:
    nodes = []
    for n in range(count):
        home, port = lead.folder / f"replica-{n}", free_port()
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("INGOT_", "REPLICA_", "SKILLS_"))}
        env |= {
            "INGOT_HOME": str(home),
            "REPLICA_ALLOWED_SIGNERS": str(lead.allowed),
            "REPLICA_INTERVAL_S": str(interval_s),
            "HF_HUB_OFFLINE": "1",
            "LOG_LEVEL": "WARNING",
        }
        command = [
            sys.executable,
            "-m",
            "ingot.cli",
            "serve",
            "--replica",
            str(lead.remote),
            "--mcp-port",
            str(port),
        ]
        with (home / "serve.log").open("wb") as log:
            process = subprocess.Popen(command, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=log)
        nodes.append((process, f"http://127.0.0.1:{port}/mcp"))
    return nodes


def _wait(url: str, skill: str, revision: str, deadline_s: float = 120.0) -> float:
    start = time.monotonic()
    while _served(url, skill) != revision:
        if time.monotonic() - start > deadline_s:
            raise ConfigError(f"a replica did not serve {revision[:12]} within {deadline_s:.0f} s")
        time.sleep(POLL_S)
    return time.monotonic()


def propagation(skills: Path, replicas: int, rounds: int, interval_s: float) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="ingot-bench-replica-"))
    nodes: list[tuple[subprocess.Popen, str]] = []
    try:
        lead = primary(folder, skills)
        skill = sorted(p.name for p in lead.root.iterdir() if (p / "SKILL.md").is_file())[0]
        first = lead.control.live_revision(skill)
        assert first is not None
        nodes = _replicas(lead, replicas, interval_s)
        for _, url in nodes:
            _wait(url, skill, first)
        per_round, each = [], []
        for round_ in range(rounds):
            started = time.monotonic()
            if round_ % 2 == 0:
                expected = lead.change(skill, round_)
            else:
                lead.control.rollback(skill, first, "bench", "bench: back")
                expected = first
            lead.control.promoter.commits.wait_for_pushes(120)
            done = [_wait(url, skill, expected) - started for _, url in nodes]
            each += done
            per_round.append(max(done))
        lead.control.promoter.commits.close(60)
        return {
            "replicas": replicas,
            "rounds": rounds,
            "interval_s": interval_s,
            "approve_to_served_on_every_replica_s": {
                "p50": round(statistics.median(per_round), 2),
                "max": round(max(per_round), 2),
            },
            "approve_to_served_per_replica_s": percentiles(each) | {"max": round(max(each), 2)},
        }
    finally:
        for process, _ in nodes:
            process.send_signal(signal.SIGTERM)
        for process, _ in nodes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(folder, ignore_errors=True)


def sync_cost(size: int, rounds: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"ingot-bench-replica-{size}-"))
    try:
        write_library(folder / "library", size)
        lead = primary(folder, folder / "library")
        config = ReplicaConfig(str(lead.remote), "main", lead.allowed, folder / "replica-home", 1.0)
        node = Replica(config, Limits())
        start = time.perf_counter()
        first = node.sync()
        first_ms = (time.perf_counter() - start) * 1000
        if not first.switched:
            raise ConfigError(f"the bench replica did not verify the baseline: {first}")
        skill = sorted(p.name for p in lead.root.iterdir())[size // 2]
        one, idle = [], []
        for round_ in range(rounds):
            lead.change(skill, round_)
            lead.control.promoter.commits.wait_for_pushes(120)
            start = time.perf_counter()
            result = node.sync()
            one.append((time.perf_counter() - start) * 1000)
            if not result.switched:
                raise ConfigError(f"the bench replica refused a genuine promotion: {result}")
            start = time.perf_counter()
            node.sync()
            idle.append((time.perf_counter() - start) * 1000)
        lead.control.promoter.commits.close(60)  # nothing left writing in the folder
        return {
            "skills": size,
            "first_sync_ms": round(first_ms, 1),
            "one_promotion_ms": percentiles(one),
            "nothing_new_ms": percentiles(idle),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(
    settings: Settings,
    replicas: int,
    rounds: int,
    interval_s: float,
    sizes: list[int],
    on_step: OnStep | None = None,
) -> dict:
    """Propagation to `replicas`, then the sync cost per size; each reported to `on_step`."""
    if shutil.which("ssh-keygen") is None or shutil.which("git") is None:
        raise ConfigError("the replica bench needs git and ssh-keygen (openssh-client)")
    if replicas < 1 or rounds < 2:
        raise ConfigError("--replicas must be at least 1 and --rounds at least 2")
    steps = Steps([f"propagation to {replicas} replica(s)", *(f"sync of {n} skills" for n in sizes)], on_step)
    steps.begin(f"propagation to {replicas} replica(s)")
    propagated = propagation(settings.skills_dirs[0], replicas, rounds, interval_s)
    synced = []
    for size in sizes:
        steps.begin(f"sync of {size} skills")
        synced.append(sync_cost(size, rounds))
    return {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "propagation": propagated,
        "sync": synced,
    }
