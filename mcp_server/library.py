"""The served skill library: registry + router kept in step, and refreshed when files change.

Every front end (MCP tools, skill:// resources, CLI, UI) asks this one object. A reload re-reads
only the folders whose files changed, then swaps in a new router index; requests in flight keep
the snapshot they started with, so a request never sees half an update. A watcher thread
(watchfiles, inotify on Linux) triggers reloads within milliseconds of an edit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ingot.errors import SkillNotFound
from mcp_server.embedding import CachedEmbedder
from mcp_server.policy import CallerContext
from mcp_server.registry import Limits, Problem, Registry, ReloadReport, Skill
from mcp_server.router import Calibration, Candidate, Router, RouteResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LibraryStatus:
    """What is being served right now."""

    skills: int
    invalid: tuple[Problem, ...]
    disabled: Mapping[str, str]
    roots: tuple[Path, ...]


class Library:
    """Registry, router and watcher behind one thread-safe surface."""

    def __init__(
        self,
        roots: tuple[Path, ...],
        embedder: CachedEmbedder,
        limits: Limits | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.roots = tuple(Path(r).expanduser().absolute() for r in roots)
        self._registry = Registry(self.roots, limits or Limits())
        self._router = Router(embedder, calibration or Calibration())
        self._reload_lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.generation = 0  # bumped after each reload that changed the served set

    def reload(self, changed: Iterable[Path] | None = None) -> ReloadReport:
        """Re-read changed skill folders (all, or those holding `changed` paths) and re-index."""
        with self._reload_lock:
            report = self._registry.reload(changed)
            if report.added or report.changed or report.removed or self.generation == 0:
                disabled = self._router.update(self._registry.skills())
                for name, reason in disabled.items():
                    log.warning("skill %r disabled by its routing metadata: %s", name, reason)
                self.generation += 1
            return report

    def status(self) -> LibraryStatus:
        return LibraryStatus(
            len(self._registry.skills()), tuple(self._registry.problems()), self._router.disabled, self.roots
        )

    def skills(self) -> Mapping[str, Skill]:
        return self._registry.skills()

    def get(self, name: str) -> Skill:
        """The served revision of `name`; blocked skills are never handed out."""
        skill = self._registry.skills().get(name)
        if skill is None:
            raise SkillNotFound(f"no skill named {name!r} is served; call suggest_skills(task) to find one")
        policy = self._router.policy(name)
        if policy is not None and policy.trust == "blocked":
            raise SkillNotFound(f"skill {name!r} is marked trust: blocked and is not served")
        if name in self._router.disabled:
            raise SkillNotFound(f"skill {name!r} is disabled: {self._router.disabled[name]}")
        return skill

    def read_file(self, name: str, path: str) -> bytes:
        self.get(name)
        return self._registry.read_file(name, path)

    def route(self, task: str, context: CallerContext | None = None, k: int = 5) -> RouteResult:
        return self._router.route(task, context, k)

    def similar_descriptions(self, name: str, description: str) -> dict[str, float]:
        return self._router.similar_descriptions(name, description)

    def suggest(self, task: str, k: int = 5, context: CallerContext | None = None) -> list[Candidate]:
        return self._router.suggest(task, k, context)

    # -- watching ---------------------------------------------------------------------------

    def start_watching(self, ready_timeout: float = 10.0) -> None:
        """Reload on every change under the roots, in a daemon thread, until `stop_watching`.

        Returns once the watcher is live, so no edit made after this call can be missed."""
        if self._watcher is not None:
            return
        self._stop.clear()
        ready = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, args=(ready,), name="ingot-skill-watcher", daemon=True
        )
        self._watcher.start()
        if not ready.wait(ready_timeout):
            log.warning("file watcher did not start within %.0fs; edits need reload_skills", ready_timeout)

    def stop_watching(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None

    def _watch(self, ready: threading.Event) -> None:
        import watchfiles

        roots = [str(r) for r in self.roots if r.exists()]
        if not roots:
            log.warning("no skills root exists; file watching is off")
            ready.set()
            return
        # The first empty yield (after rust_timeout) proves the watch is live; reload once then to
        # catch edits made while it was starting. debounce caps how long a burst is batched.
        for changes in watchfiles.watch(
            *roots,
            stop_event=self._stop,
            debounce=400,
            step=20,
            rust_timeout=100,
            yield_on_timeout=True,
            raise_interrupt=False,
        ):
            if not changes and ready.is_set():
                continue
            try:
                report = self.reload({Path(path) for _, path in changes} if ready.is_set() else None)
                if report.added or report.changed or report.removed:
                    log.info("skills reloaded: %s", report.counts())
            except Exception:  # a watcher must survive anything one reload throws
                log.exception("reload after a file change failed; serving the previous index")
            ready.set()
