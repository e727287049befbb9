"""The served skill library: registry + router kept in step, and refreshed when files change.

Every front end (MCP tools, skill:// resources, CLI, UI) asks this one object. A reload re-reads
only the folders whose files changed, then swaps in a new router index; requests in flight keep
the snapshot they started with, so a request never sees half an update. A watcher thread
(watchfiles, inotify on Linux) triggers reloads within milliseconds of an edit. With a `pin`
(LIVE_EDITS=quarantine), only approved revisions are served, whatever the folders hold.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingot.errors import SkillNotFound
from mcp_server.calibration import LibraryCalibration, Procedure
from mcp_server.decision import Candidate, RouteResult
from mcp_server.embedding import CachedEmbedder
from mcp_server.index import body_text, description_text, sentence_texts
from mcp_server.policy import CallerContext
from mcp_server.registry import (
    Limits,
    Problem,
    Registry,
    ReloadReport,
    Skill,
    parse_skill_md,
)
from mcp_server.router import Router
from mcp_server.skillfiles import read_served_file

log = logging.getLogger(__name__)
WATCH_TICK_S = 0.1  # how often the watcher wakes with no events (root checks, stop requests)
RESCAN_S = 30.0  # full rescan interval, a safety net under the file watch


# Which skills may be served, and at which revision (LIVE_EDITS=quarantine: only approved ones,
# see optimize/control/approved.py); given the skills on disk and the roots, returns those to serve.
Pin = Callable[[Mapping[str, Skill], tuple[Path, ...]], Mapping[str, Skill]]


def _same(a: Mapping[str, Skill], b: Mapping[str, Skill]) -> bool:
    return a.keys() == b.keys() and all(
        a[n].revision == b[n].revision and a[n].folder == b[n].folder for n in a
    )


@dataclass(frozen=True)
class Similarity:
    """How close a would-be description is to every served skill's: as routed (with the name) and
    as text alone (a verbatim copy under another name scores 1.0 here)."""

    named: Mapping[str, float]
    alone: Mapping[str, float]


@dataclass(frozen=True)
class ServedChange:
    """How one reload changed what is served (names; `changed` at another revision or folder)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    before: Mapping[str, Skill]  # the served snapshot before the reload, for the old files' URIs


def _served_change(before: Mapping[str, Skill], after: Mapping[str, Skill]) -> ServedChange | None:
    changed = tuple(
        sorted(
            n
            for n in after
            if n in before and (after[n].revision, after[n].folder) != (before[n].revision, before[n].folder)
        )
    )
    added = tuple(sorted(set(after) - set(before)))
    removed = tuple(sorted(set(before) - set(after)))
    return ServedChange(added, removed, changed, before) if added or removed or changed else None


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
        procedure: Procedure | None = None,
        pin: Pin | None = None,
    ) -> None:
        self.roots = tuple(Path(r).expanduser().absolute() for r in roots)
        self._pin = pin
        self._registry = Registry(self.roots, limits or Limits())
        self._router = Router(embedder, procedure or Procedure())
        self._reload_lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._stale = True  # the router snapshot lags the registry (first load, or a failed update)
        self._listeners: list[Callable[[ServedChange], None]] = []

    def on_served_change(self, listener: Callable[[ServedChange], None]) -> None:
        """Call `listener` (from the reloading thread) after every reload that changed what is
        served: the MCP server tells connected hosts their skill lists changed."""
        self._listeners.append(listener)

    def reload(self, changed: Iterable[Path] | None = None, defer_calibration: bool = False) -> ReloadReport:
        """Re-read changed skill folders (all, or those holding `changed` paths) and re-index.

        The served set is the router's snapshot, published in one step after indexing, so the
        body, revision and policy a caller gets always come from the same reload. If indexing
        fails, the previous snapshot keeps serving and the next reload rebuilds it.
        `defer_calibration` (the watcher's edits) re-derives the routing rule off the serving
        path (see Router.update); explicit reloads derive it before returning."""
        with self._reload_lock:
            report = self._registry.reload(changed)
            if report.added or report.changed or report.removed or self._stale or self._pin:
                skills = self._registry.skills()
                if self._pin is not None:
                    skills = self._pin(skills, self.roots)
                    if not self._stale and _same(skills, self._router.served()):
                        return report  # an edit Ingot does not serve: nothing to re-index
                self._stale = True
                before = self._router.served()
                disabled = self._router.update(skills, defer_calibration)
                self._stale = False
                for name, reason in disabled.items():
                    log.warning("skill %r disabled by its routing metadata: %s", name, reason)
                change = _served_change(before, self._router.served())
                if change is not None:
                    self._tell(change)
            return report

    def _tell(self, change: ServedChange) -> None:
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:  # a listener must never fail a reload
                log.exception("a served-change listener failed")

    def current(self) -> Library:
        """This library re-read from disk first (only changed folders), for callers that must see
        a change made a moment ago, such as approval's collision re-check."""
        self.reload()
        return self

    def on_disk(self) -> Hashable:
        """`Registry.state` of the last reload: it changes whenever a skill folder does, served or
        not (a pinned library still reads the edits it does not serve)."""
        return self._registry.state()

    def status(self) -> LibraryStatus:
        return LibraryStatus(
            len(self.skills()), tuple(self._registry.problems()), self._router.disabled, self.roots
        )

    def skills(self) -> Mapping[str, Skill]:
        """Every skill in the served snapshot (blocked and manual ones included; see `get`)."""
        return self._router.served()

    def get(self, name: str) -> Skill:
        """The served revision of `name`; blocked and disabled skills are never handed out."""
        skill = self._router.served().get(name)
        if skill is None:
            if name in self._router.disabled:
                raise SkillNotFound(f"skill {name!r} is disabled: {self._router.disabled[name]}")
            shown = repr(name) if len(name) <= 80 else f"{name[:60]!r}… ({len(name)} characters)"
            raise SkillNotFound(f"no skill named {shown} is served; call suggest_skills(task) to find one")
        policy = self._router.policy(name)
        if policy is not None and policy.trust == "blocked":
            raise SkillNotFound(f"skill {name!r} is marked trust: blocked and is not served")
        return skill

    def read_file(self, name: str, path: str) -> bytes:
        """One file of the served revision, verified against its manifest entry."""
        return read_served_file(self.get(name), path)

    def route(
        self, task: str, context: CallerContext | None = None, k: int = 5, min_score: float | None = None
    ) -> RouteResult:
        return self._router.route(task, context, k, min_score)

    def calibration(self) -> LibraryCalibration | None:
        """The decision rule derived for the served snapshot (None while the library is empty)."""
        return self._router.calibration

    def calibrating(self) -> bool:
        """True while an edit's routing rule is still being re-derived in the background."""
        return self._router.calibrating()

    def router_with(self, overrides: Mapping[str, Skill | None]) -> Router:
        """A private router over the served skills with some replaced in memory, or left out
        where the override is None (what-if scoring)."""
        router = Router(self._router.embedder, self._router.procedure)
        skills = {**self._router.served(), **overrides}
        router.update({name: skill for name, skill in skills.items() if skill is not None})
        return router

    def model_digest(self) -> str:
        """The embedding model's digest: what routing decisions were computed with."""
        return self._router.embedder.model_digest

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors for `texts` with the served model (for clustering traffic, not routing)."""
        return self._router.embedder.embed(texts)

    def prewarm(self, name: str, files: Mapping[str, bytes]) -> None:
        """Embed a candidate's texts into the vector cache now, so promoting it is fast later."""
        _, description, body, meta = parse_skill_md(files["SKILL.md"].decode("utf-8"), name)
        skill = Skill(name, description, body, Path("."), Path("."), "", (), meta, meta.get("metadata") or {})
        self._router.embedder.embed([description_text(skill), body_text(skill), *sentence_texts(skill)])

    def similar_descriptions(self, name: str, description: str) -> dict[str, float]:
        return self._router.similar_descriptions(name, description)

    def similarity(self, name: str, description: str) -> Similarity:
        """`description` against every served skill's, with names (as the router sees it) and
        alone (served descriptions come from the vector cache; only the new text is embedded)."""
        served = dict(self._router.served())
        alone: dict[str, float] = {}
        if served:
            names = sorted(served)
            vectors = self._router.embedder.embed([description, *(served[n].description for n in names)])
            alone = {n: float(vectors[0] @ v) for n, v in zip(names, vectors[1:], strict=True)}
        return Similarity(self.similar_descriptions(name, description), alone)

    def suggest(
        self, task: str, k: int = 5, context: CallerContext | None = None, min_score: float | None = None
    ) -> list[Candidate]:
        return self._router.suggest(task, k, context, min_score)

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

    def _root_identity(self) -> tuple[tuple[int, int] | None, ...]:
        identity = []
        for root in self.roots:
            try:
                info = os.stat(root)
                identity.append((info.st_dev, info.st_ino))
            except OSError:
                identity.append(None)
        return tuple(identity)

    def _watch(self, ready: threading.Event) -> None:
        """Watch the roots; restart the watch when a root is created, replaced or removed.

        inotify follows a folder, not a path: after `mv new skills` the old watch would see
        nothing. So every tick compares each root's (device, inode), and a full rescan also runs
        every RESCAN_S seconds as a safety net for anything a watch cannot see."""
        import watchfiles

        while not self._stop.is_set():
            identity = self._root_identity()
            existing = [str(r) for r, i in zip(self.roots, identity, strict=True) if i is not None]
            self._safe_reload(None)  # catches whatever happened while (re)starting the watch
            ready.set()
            if not existing:
                if self._stop.wait(WATCH_TICK_S * 10):
                    return
                continue
            last_rescan = time.monotonic()
            for changes in watchfiles.watch(
                *existing,
                stop_event=self._stop,
                debounce=400,
                step=10,  # ms of quiet that ends a batch of events
                rust_timeout=int(WATCH_TICK_S * 1000),
                yield_on_timeout=True,
                raise_interrupt=False,
            ):
                if changes:
                    self._safe_reload({Path(path) for _, path in changes})
                if self._root_identity() != identity:
                    log.info("a skills root was created, replaced or removed; restarting the watch")
                    break
                if time.monotonic() - last_rescan > RESCAN_S:
                    self._safe_reload(None)
                    last_rescan = time.monotonic()

    def _safe_reload(self, changed: set[Path] | None) -> None:
        try:
            report = self.reload(changed, defer_calibration=True)
            if report.added or report.changed or report.removed:
                log.info("skills reloaded: %s", report.counts())
        except Exception:  # a watcher must survive anything one reload throws
            log.exception("reload after a file change failed; serving the previous index")
