"""The Docker sandbox backend (EXEC_SANDBOX=docker), spoken to through the `docker` SDK.

Each run creates a throwaway container (no network, read-only root, tmpfs /tmp, uid 65534, no
capabilities, no-new-privileges, memory / CPU / pids / file-size / CPU-time limits), copies the
files in through the Engine API (so a remote engine works: nothing is bind-mounted from this
host), starts it, waits at most the wall-clock limit, kills it if it overran, reads its output
and removes it with its volumes, whatever happened. Anything the engine gets wrong (no engine,
image not present, create / copy / start refused) is `inconclusive`, never a verdict on the code.
Containers are labelled with an expiry; a probe removes expired ones left by a killed process.
Images are never pulled here: `ingot status` says which one to pull.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tarfile
import time
from collections.abc import Sequence

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound
from docker.types import Mount, Ulimit

from ingot.errors import first_line
from optimize.measure.sandbox import (
    SANDBOX_TMP,
    SANDBOX_UID,
    ExecResult,
    Limits,
    Mounts,
    Sandbox,
    classify,
)

log = logging.getLogger(__name__)
DEFAULT_IMAGE = "python:3.11-slim"
DEFAULT_ENGINE = "unix:///var/run/docker.sock"
LABEL = "ingot.sandbox"
EXPIRES = "ingot.sandbox.expires"  # unix time after which a container is an orphan
GRACE_S = 60  # how long past its wall-clock limit a container may still be in use


def tar_of(files: dict[str, bytes] | Mounts) -> bytes:
    """A tar of `files`, owned by root and read-only to uid 65534 (0644, 0755 for `#!` files)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folders: set[str] = set()
        for rel, data in sorted(files.items()):  # type: ignore[arg-type]
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o755 if data.startswith(b"#!") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class DockerSandbox(Sandbox):
    name = "docker"

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        limits: Limits | None = None,
        base_url: str | None = None,
        api_timeout_s: float = 15.0,
    ) -> None:
        self.image, self.limits = image, limits or Limits()
        self.base_url = base_url or DEFAULT_ENGINE
        self.api_timeout_s = api_timeout_s
        self._client: docker.DockerClient | None = None

    def _engine(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker.DockerClient(base_url=self.base_url, timeout=self.api_timeout_s)
        return self._client

    def available(self) -> tuple[bool, str]:
        try:
            self._engine().ping()
        except (DockerException, requests.RequestException) as exc:
            return False, f"no Docker engine answers at {self.base_url} ({_short(exc)})"
        removed = self.remove_orphans()
        if removed:
            log.warning("removed %d expired sandbox container(s) left by a killed run", removed)
        return True, "docker"

    def isolation(self) -> str:
        return (
            f"docker ({self.image} at {self.base_url}): a throwaway container, no network, "
            "read-only root, private /tmp, uid 65534, no capabilities, no-new-privileges, "
            "memory, CPU, process, file-size and wall-clock limits; the kernel is shared"
        )

    def diagnose(self) -> tuple[bool, str]:
        ok, why = self.ready()
        return self.image_present() if ok else (ok, why)

    def image_present(self) -> tuple[bool, str]:
        """Whether the image is on the engine (never pulled here)."""
        try:
            self._engine().images.get(self.image)
        except ImageNotFound:
            return False, f"image {self.image} is not on the engine: run `docker pull {self.image}`"
        except (DockerException, requests.RequestException) as exc:
            return False, f"the Docker engine failed while checking image {self.image} ({_short(exc)})"
        return True, self.image

    def remove_orphans(self, now: float | None = None) -> int:
        """Remove sandbox containers past their expiry (their run was killed before cleaning up)."""
        now = time.time() if now is None else now
        removed = 0
        try:
            found = self._engine().containers.list(all=True, filters={"label": LABEL}, sparse=True)
        except (DockerException, requests.RequestException) as exc:
            log.warning("could not list sandbox containers: %s", _short(exc))
            return 0
        for container in found:
            labels = container.attrs.get("Labels") or {}
            try:
                expired = float(labels.get(EXPIRES, "0")) < now
            except ValueError:
                expired = True
            if expired and _remove(container):
                removed += 1
        return removed

    def _create(self, mounts: Mounts, argv: Sequence[str], cwd: str, limits: Limits):  # noqa: ANN202
        expires = time.time() + limits.wall_s + GRACE_S
        return self._engine().containers.create(
            self.image,
            command=list(argv),
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
            working_dir=cwd,
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SANDBOX_TMP},
            network_mode="none",
            network_disabled=True,
            read_only=True,
            tmpfs={SANDBOX_TMP: "rw,size=64m,mode=1777"},
            mounts=[Mount(target=point, source=None, type="volume") for point in sorted(mounts)],
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=limits.processes,
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            nano_cpus=1_000_000_000,
            ulimits=[
                Ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s),
                Ulimit(name="fsize", soft=limits.file_bytes, hard=limits.file_bytes),
            ],
            labels={LABEL: "1", EXPIRES: str(int(expires))},
        )

    def _run(self, mounts: Mounts, argv: Sequence[str], cwd: str, limits: Limits) -> ExecResult:
        present, why = self.image_present()
        if not present:
            return ExecResult("inconclusive", f"no sandbox, so not run: {why}")
        container = None
        try:
            container = self._create(mounts, argv, cwd, limits)
            for point, files in mounts.items():
                container.put_archive(point, tar_of(dict(files)))
            start = time.perf_counter()
            container.start()
            return self._finish(container, start, limits)
        except (DockerException, requests.RequestException) as exc:
            return ExecResult("inconclusive", f"the Docker engine could not run the container: {_short(exc)}")
        finally:
            if container is not None and not _remove(container):
                log.warning("sandbox container %s was not removed; a later probe will", container.id[:12])

    def _finish(self, container, start: float, limits: Limits) -> ExecResult:  # noqa: ANN001
        try:
            code = int(container.wait(timeout=limits.wall_s)["StatusCode"])
        except requests.exceptions.ReadTimeout:
            with contextlib.suppress(APIError):  # it exited just now; it is removed next either way
                container.kill()
            out, err = _logs(container)
            reason = f"killed after the {limits.wall_s:g} s wall-clock limit"
            return ExecResult("failed", reason, None, out, err, time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        out, err = _logs(container)
        if code <= 128:
            return classify(code, out.encode(), err.encode(), elapsed, limits)
        container.reload()
        if (container.attrs.get("State") or {}).get("OOMKilled"):
            return ExecResult("failed", "killed by the memory limit", code, out, err, elapsed)
        return ExecResult("failed", f"killed by a resource limit (exit {code})", code, out, err, elapsed)


def _logs(container) -> tuple[str, str]:  # noqa: ANN001
    try:
        out = container.logs(stdout=True, stderr=False)
        err = container.logs(stdout=False, stderr=True)
    except (DockerException, requests.RequestException):
        return "", ""
    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _remove(container) -> bool:  # noqa: ANN001
    try:
        container.remove(force=True, v=True)
    except (DockerException, requests.RequestException) as exc:
        if getattr(exc, "status_code", None) == 404:
            return True
        log.warning("could not remove sandbox container %s: %s", container.id[:12], _short(exc))
        return False
    return True


def _short(exc: BaseException) -> str:
    if isinstance(exc, APIError):
        return f"{exc.status_code}: {exc.explanation or exc}"[:300]
    return first_line(exc)
