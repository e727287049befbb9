"""docker-compose.yml beyond `config`: what can be checked without starting containers.

The image is built and the compose file run for real by `make test-image` (scripts/test_image.py,
on a container engine; CI runs it after this suite). What is checked here, in the unit suite:
Debian's docker-compose resolves the files (base, sandbox overlay); every Ingot service starts as
root only for scripts/container-user.sh to drop to the owner of ./skills, after the state step
(run for real here on a temp folder) handed it the state folders; every Ingot service's command
line is accepted by the real CLI, and `optimize <skill>` (as the README shows it) reaches the
optimizer; the Langfuse profile matches Langfuse's own compose file service by service, where it
differs only as stated; nothing is published beyond loopback.
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
INGOT_SERVICES = ("mcp", "ui", "optimize", "optimize-loop", "agent", "replica")
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


def test_every_ingot_service_drops_to_the_owner_of_skills_after_the_state_step(config):
    services = config["services"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile and "--uid 10001" in dockerfile  # the image alone
    assert "install -m 0755 scripts/container-user.sh /usr/local/sbin/ingot" in dockerfile
    assert re.search(r"apt-get install .*bubblewrap", dockerfile)
    for name in INGOT_SERVICES:
        service = services[name]
        assert service["user"] == "0:0", name  # only for `ingot` to drop to the owner at once
        assert service["environment"]["INGOT_UID"] == "" and service["environment"]["INGOT_GID"] == ""
        assert service["depends_on"]["state"] == {"condition": "service_completed_successfully"}, name
        mounted = {v.split(":")[1] for v in service["volumes"]}
        assert "/app/skills" in mounted, name  # whose owner they run as
        assert mounted <= {"/app/skills", "/app/runs", "/app/optimize/tasks", "/app/inbox", "/app/team"}, name
        if name == "replica":  # ./skills only to run as its owner: read-only, and its own state home
            assert "./skills:/app/skills:ro" in [v.replace(str(REPO), ".") for v in service["volumes"]]
            assert service["environment"]["INGOT_HOME"] == "/app/team/replica"
            assert service["environment"]["REPLICA_REMOTE"] == "/app/team/remote.git"
    state = services["state"]
    assert state["user"] == "0:0" and state["entrypoint"] == ["/usr/local/sbin/ingot", "--prepare"]
    assert {v.split(":")[1] for v in state["volumes"]} == {
        "/app/skills",
        "/app/runs",
        "/app/optimize/tasks",
        "/app/inbox",
        "/app/team",
    }


def _prepare(tmp_path: Path, skills_owner: int, **env: str) -> subprocess.CompletedProcess:
    """scripts/container-user.sh --prepare, run for real as root, on a temp copy of /app."""
    app = tmp_path / "app"
    (app / "skills" / "demo").mkdir(parents=True)
    (app / "skills" / "demo" / "SKILL.md").write_text("---\nname: demo\ndescription: d\n---\nbody\n")
    subprocess.run(["chown", "-R", f"{skills_owner}:{skills_owner}", str(app / "skills")], check=True)
    (app / "runs").mkdir()  # as the engine creates a missing bind mount: root's
    (app / "runs" / "old.jsonl").write_text("{}\n")
    script = (REPO / "scripts" / "container-user.sh").read_text().replace("/app/", f"{app}/")
    return subprocess.run(
        ["sh", "-c", script, "container-user.sh", "--prepare"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (CI runs as root)")
def test_the_state_step_hands_the_state_folders_to_the_owner_of_skills(tmp_path):
    done = _prepare(tmp_path, 1000)
    assert done.returncode == 0 and "run as 1000:1000" in done.stdout, done.stderr
    for path in ("app/runs", "app/runs/old.jsonl", "app/optimize/tasks", "app/inbox", "app/skills/demo"):
        info = (tmp_path / path).stat()
        assert (info.st_uid, info.st_gid) == (1000, 1000), path
        assert not info.st_mode & 0o002, path  # never world-writable


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (CI runs as root)")
def test_a_clone_owned_by_root_is_handed_to_the_images_user_never_served_as_root(tmp_path):
    done = _prepare(tmp_path, 0)
    assert done.returncode == 0 and "run as 10001:10001" in done.stdout, done.stderr
    for path in ("app/runs", "app/skills", "app/skills/demo/SKILL.md"):
        assert (tmp_path / path).stat().st_uid == 10001, path
    chosen = _prepare(tmp_path / "other", 1000, INGOT_UID="2000", INGOT_GID="2000")
    assert "run as 2000:2000" in chosen.stdout and (tmp_path / "other/app/runs").stat().st_uid == 2000
    assert (tmp_path / "other/app/skills").stat().st_uid == 1000  # a chosen user never takes ./skills


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


# Langfuse's own docker-compose.yml (github.com/langfuse/langfuse, main; the file its self-hosting
# guide uses), read service by service: the image each service runs, what it mounts, the settings
# the web and worker containers need. Written down here, not copied: the test compares ours to it.
LANGFUSE_UPSTREAM = {
    "langfuse-worker": {"image": "langfuse/langfuse-worker", "mounts": set()},
    "langfuse-web": {"image": "langfuse/langfuse", "mounts": set()},
    "clickhouse": {
        "image": "clickhouse/clickhouse-server",
        "mounts": {"/var/lib/clickhouse", "/var/log/clickhouse-server"},
    },
    "minio": {"image": "cgr.dev/chainguard/minio", "mounts": {"/data"}},
    "redis": {"image": "redis", "mounts": set()},
    "postgres": {"image": "postgres", "mounts": {"/var/lib/postgresql/data"}},
}
LANGFUSE_APP_SETTINGS = {  # both containers, as upstream's shared worker environment
    "DATABASE_URL",
    "SALT",
    "ENCRYPTION_KEY",
    "CLICKHOUSE_MIGRATION_URL",
    "CLICKHOUSE_URL",
    "CLICKHOUSE_USER",
    "CLICKHOUSE_PASSWORD",
    "LANGFUSE_S3_EVENT_UPLOAD_BUCKET",
    "LANGFUSE_S3_EVENT_UPLOAD_ENDPOINT",
    "LANGFUSE_S3_EVENT_UPLOAD_ACCESS_KEY_ID",
    "LANGFUSE_S3_EVENT_UPLOAD_SECRET_ACCESS_KEY",
    "LANGFUSE_S3_EVENT_UPLOAD_FORCE_PATH_STYLE",
    "LANGFUSE_S3_MEDIA_UPLOAD_BUCKET",
    "LANGFUSE_S3_MEDIA_UPLOAD_ENDPOINT",
    "REDIS_HOST",
    "REDIS_PORT",
    "REDIS_AUTH",
    "NEXTAUTH_URL",
}
# Where ours deliberately differs from upstream, and why (each is asserted below):
# - images carry versions (4.59.0+ for the SDK 5 Ingot pins; ClickHouse 25.12+, Postgres 17);
# - Redis keeps Langfuse's ingestion queue on a volume (upstream loses queued events on restart);
# - every port is published on 127.0.0.1 only (upstream publishes web 3000 and minio 9090 on all
#   interfaces).


def _image(ref: str) -> str:
    return ref.split(":", 1)[0].removeprefix("docker.io/").removeprefix("library/")


def test_the_langfuse_profile_matches_langfuses_own_compose_service_by_service(config):
    services = config["services"]
    langfuse = {name for name, s in services.items() if "langfuse" in s.get("profiles", [])}
    assert langfuse == set(LANGFUSE_UPSTREAM) == LANGFUSE_SERVICES
    for name, upstream in LANGFUSE_UPSTREAM.items():
        ours = services[name]
        assert _image(ours["image"]) == upstream["image"], name
        mounts = {v["target"] if isinstance(v, dict) else v.split(":")[1] for v in ours.get("volumes", [])}
        expected = upstream["mounts"] | ({"/data"} if name == "redis" else set())
        assert mounts == expected, (name, mounts)
        assert "healthcheck" in ours or name == "langfuse-worker", name
    assert "--appendonly" in services["redis"]["command"]  # the volume holds an append-only file
    for name in ("langfuse-web", "langfuse-worker"):
        env = services[name]["environment"]
        assert set(env) >= LANGFUSE_APP_SETTINGS, (name, LANGFUSE_APP_SETTINGS - set(env))
        assert env["CLICKHOUSE_CLUSTER_ENABLED"] == "false" and env["REDIS_HOST"] == "redis"
        assert "@postgres:5432/" in env["DATABASE_URL"]
        needs = {k for k, v in services[name]["depends_on"].items() if v == {"condition": "service_healthy"}}
        assert needs == {"postgres", "clickhouse", "redis", "minio"}
        assert env["LANGFUSE_S3_EVENT_UPLOAD_ENDPOINT"] == "http://minio:9000", name  # both, in the network
    # Media uploads: the worker talks to MinIO inside the network; only the web container hands
    # browsers a URL, which must be the address published to the host.
    assert (
        services["langfuse-worker"]["environment"]["LANGFUSE_S3_MEDIA_UPLOAD_ENDPOINT"] == "http://minio:9000"
    )
    assert (
        services["langfuse-web"]["environment"]["LANGFUSE_S3_MEDIA_UPLOAD_ENDPOINT"]
        == "http://localhost:9090"
    )
    assert "127.0.0.1:9090:9000" in services["minio"]["ports"][0].replace('"', "") or any(
        str(p.get("published")) == "9090" for p in services["minio"]["ports"] if isinstance(p, dict)
    )
    assert version(services["langfuse-web"]["image"]) >= (4, 59, 0)
    assert (
        services["langfuse-worker"]["image"].rsplit(":", 1)[1]
        == services["langfuse-web"]["image"].rsplit(":", 1)[1]
    )
    assert version(services["clickhouse"]["image"]) >= (25, 12)
    assert version(services["postgres"]["image"]) >= (15,) and version(services["redis"]["image"]) >= (7,)
    web = services["langfuse-web"]["environment"]
    assert web["LANGFUSE_INIT_PROJECT_PUBLIC_KEY"] and web["LANGFUSE_INIT_PROJECT_SECRET_KEY"]


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
