"""docker-compose.yml beyond `config`: what can be checked without a Docker engine.

No engine runs on these machines, so images are never built or started here. What is checked:
Debian's docker-compose resolves the files (base, sandbox overlay); the state step's own shell
command, run for real, leaves ./runs and ./optimize/tasks owned by the image's user; every Ingot
service's command line is accepted by the real CLI, and `optimize <skill>` (as the README shows
it) reaches the optimizer; the Langfuse profile has the services and versions Langfuse v4's
self-hosting docs require; nothing is published beyond loopback; the Dockerfile's user and
sandbox match what Compose assumes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
INGOT_SERVICES = ("mcp", "ui", "optimize", "optimize-loop", "agent")
LANGFUSE_SERVICES = {"langfuse-web", "langfuse-worker", "postgres", "clickhouse", "redis", "minio"}


def compose_config(*files: str) -> dict:
    if shutil.which("docker-compose") is None:
        pytest.fail(
            "the compose tests need docker-compose: apt-get install docker-compose (.ci/run installs it)"
        )
    args = [arg for f in files for arg in ("-f", str(REPO / f))]
    done = subprocess.run(
        ["docker-compose", *args, "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith(("INGOT_", "LANGFUSE_"))},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


@pytest.fixture(scope="module")
def config() -> dict:
    return compose_config("docker-compose.yml")


def version(tag: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", tag.rsplit(":", 1)[1]))


def test_the_sandbox_overlay_relaxes_only_the_services_that_run_code():
    merged = compose_config("docker-compose.yml", "docker-compose.sandbox.yml")["services"]
    relaxed = {name for name, s in merged.items() if s.get("security_opt")}
    assert relaxed == {"ui", "optimize", "optimize-loop", "agent"}
    assert set(merged["ui"]["security_opt"]) == {"seccomp=unconfined", "apparmor=unconfined"}
    assert merged["ui"]["command"] == ["ui", "--host", "0.0.0.0"]  # the overlay only adds


def test_every_ingot_service_runs_as_the_images_user_after_the_state_step(config):
    services = config["services"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile and "--uid 10001" in dockerfile
    assert re.search(r"apt-get install .*bubblewrap", dockerfile)
    for name in INGOT_SERVICES:
        service = services[name]
        assert service["user"] == "10001:10001", name
        assert service["depends_on"]["state"] == {"condition": "service_completed_successfully"}, name
        mounted = {v.split(":")[1] for v in service["volumes"]}
        assert mounted <= {"/app/skills", "/app/runs", "/app/optimize/tasks", "/app/inbox"}, name
    state = services["state"]
    assert state["user"] == "0:0" and state["environment"]["INGOT_OWNER"] == "10001:10001"
    assert {v.split(":")[1] for v in state["volumes"]} == {"/app/runs", "/app/optimize/tasks", "/app/inbox"}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (CI runs as root)")
def test_the_state_step_leaves_runs_and_tasks_owned_by_the_ingot_user(config, tmp_path):
    state = config["services"]["state"]
    script = state["command"][0].replace("$$", "$").replace("/app/", f"{tmp_path}/app/")
    (tmp_path / "app" / "runs").mkdir(parents=True)  # as the Docker daemon would create it: root's
    (tmp_path / "app" / "runs" / "old.jsonl").write_text("{}\n")
    done = subprocess.run(
        [*state["entrypoint"], script],
        env={"INGOT_OWNER": state["environment"]["INGOT_OWNER"], "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for path in ("app/runs", "app/runs/old.jsonl", "app/optimize/tasks", "app/inbox"):
        info = (tmp_path / path).stat()
        assert (info.st_uid, info.st_gid) == (10001, 10001), path


def test_every_ingot_services_command_line_is_accepted_by_the_cli(config):
    from ingot.cli.main import main as cli

    for name in INGOT_SERVICES:
        service = config["services"][name]
        argv = [*(service.get("entrypoint") or ["ingot"])[1:], *service.get("command", [])]
        if "--help" in argv:
            argv.remove("--help")
            argv.append("the-argument-users-give")
        command = cli.get_command(None, argv[0])
        assert command is not None, f"{name}: no `ingot {argv[0]}`"
        command.make_context(argv[0], argv[1:])  # raises on an unknown option or a missing argument


def test_optimize_as_the_readme_runs_it_reaches_the_optimizer(config, tmp_path):
    """`docker compose run --rm optimize release-notes`, with the service's own environment
    (paths under /app mapped into a temp folder) and no model configured."""
    service = config["services"]["optimize"]
    app = tmp_path / "app"
    shutil.copytree(REPO / "skills", app / "skills")
    env = {k: str(v).replace("/app/", f"{app}/") for k, v in service["environment"].items()}
    env = {k: v for k, v in env.items() if v != ""}
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", *service["entrypoint"][1:], "release-notes"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    # It got past argument parsing and the settings to the teacher, the first model it needs.
    assert done.returncode == 2 and "Usage:" not in done.stderr, done.stdout + done.stderr
    assert done.stderr.startswith("Error: no model configured for the teacher role"), done.stderr


def test_the_langfuse_profile_is_a_v4_stack_as_langfuses_docs_require(config):
    services = config["services"]
    langfuse = {name for name, s in services.items() if "langfuse" in s.get("profiles", [])}
    assert langfuse == LANGFUSE_SERVICES
    assert version(services["langfuse-web"]["image"]) >= (4, 59, 0)
    assert (
        services["langfuse-worker"]["image"].rsplit(":", 1)[1]
        == services["langfuse-web"]["image"].rsplit(":", 1)[1]
    )
    assert version(services["clickhouse"]["image"]) >= (25, 12)
    assert version(services["postgres"]["image"]) >= (15,) and version(services["redis"]["image"]) >= (7,)
    for name in ("langfuse-web", "langfuse-worker"):
        env = services[name]["environment"]
        assert env["CLICKHOUSE_CLUSTER_ENABLED"] == "false" and env["LANGFUSE_S3_EVENT_UPLOAD_BUCKET"]
        assert env["REDIS_HOST"] == "redis" and "@postgres:5432/" in env["DATABASE_URL"]
        needs = {k for k, v in services[name]["depends_on"].items() if v == {"condition": "service_healthy"}}
        assert needs == {"postgres", "clickhouse", "redis", "minio"}
    web = services["langfuse-web"]["environment"]
    assert web["LANGFUSE_INIT_PROJECT_PUBLIC_KEY"] and web["LANGFUSE_INIT_PROJECT_SECRET_KEY"]
    for name in LANGFUSE_SERVICES - {"langfuse-web", "langfuse-worker"}:
        assert "healthcheck" in services[name], name


def test_nothing_is_published_beyond_loopback(config):
    for name, service in config["services"].items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port['published']}"
            assert published.startswith("127.0.0.1:"), f"{name} publishes {port}"


def test_the_serving_process_reads_an_inbox_agents_can_write_to(config):
    mcp = config["services"]["mcp"]
    assert mcp["environment"]["CANDIDATE_ROOTS"] == "/app/inbox"
    assert mcp["environment"]["LIVE_EDITS"] == "serve"  # the default; quarantine is opt-in
    assert any(v.endswith(":/app/inbox") or ":/app/inbox:" in v for v in mcp["volumes"])
    assert "serve" in mcp["command"]  # `ingot serve` runs the inbox, the guard and autonomy
