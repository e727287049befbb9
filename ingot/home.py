"""Where Ingot keeps the state of a set of skills roots: one state home per set, found the same
way from any folder, by every command, the MCP server and the UI.

The home of roots `(R1, R2, ...)` is `INGOT_HOME` when set, else `<R1's parent>/.ingot/<R1's
name>/` (R1, the primary root, receives new skills). It holds the audit chain and its key, the
change lock, pending changes, evidence, snapshots, traces and caches. Beside every root managed
by a home sits a claim, `<root's parent>/.ingot/<root's name>.claim`, naming that home; a process
that would manage a claimed root from another home, or a home with another set of roots, is
refused with the command that fixes it. So two processes that write one root share one home,
and with it one lock: one writer. Roots and homes are resolved to real paths (a root reached
through a symlink is the same root). Every folder Ingot keeps state in gets a `.gitignore` of
`*`, so a default home inside the skills' git repository is never committed (nor its key).
Only `establish` writes (the home, its record, the claims); a command that only reads finds the
home with `for_reading`, which creates nothing, so reading a library never claims its roots.
Nothing is ever written inside a skills root (that is the job of optimize/control/promote/).
Ground floor: imports only `ingot.errors`.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ingot.errors import ConfigError

SCHEMA_VERSION = 1
HOME_FILE = "home.json"
LEGACY_FOLDER = "runs"  # where Ingot kept its state, relative to the current folder, before homes


@dataclass(frozen=True)
class StateHome:
    """A resolved state home and the skills roots it manages (absolute, primary first)."""

    path: Path
    roots: tuple[Path, ...]

    @property
    def exists(self) -> bool:
        return (self.path / HOME_FILE).is_file()


def default_home(primary: Path) -> Path:
    return primary.parent / ".ingot" / primary.name


def claim_path(root: Path) -> Path:
    return root.parent / ".ingot" / f"{root.name}.claim"


def _absolute(roots: tuple[Path, ...]) -> tuple[Path, ...]:
    if not roots:
        raise ConfigError("no skills root is configured: pass --skills DIR or set SKILLS_DIRS")
    # Real paths: a root reached through a symlink is the same root, with the same home and lock.
    out = tuple(Path(os.path.realpath(Path(r).expanduser())) for r in roots)
    if len(set(out)) != len(out):
        raise ConfigError(f"a skills root is listed twice: {', '.join(map(str, out))}")
    return out


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is unreadable ({exc}); restore it or remove it to start afresh") from exc
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"{path} is not a version-{SCHEMA_VERSION} Ingot record; restore or remove it")
    return data


def _claimed_home(root: Path) -> Path | None:
    data = _read_json(claim_path(root))
    return Path(str(data["home"])) if data and data.get("home") else None


def _recorded_roots(home: Path) -> tuple[Path, ...] | None:
    data = _read_json(home / HOME_FILE)
    if data is None:
        return None
    return tuple(Path(os.path.normpath(home / str(r))) for r in data.get("roots", []))


def locate(roots: tuple[Path, ...], explicit: Path | None = None) -> StateHome:
    """The home of `roots`, checked against every claim and the home's own record; creates
    nothing. Raises `ConfigError` when the roots belong to another home or another set."""
    absolute = _absolute(roots)
    home = (
        Path(os.path.realpath(Path(explicit).expanduser()))
        if explicit
        else (_claimed_home(absolute[0]) or default_home(absolute[0]))
    )
    for root in absolute:
        claimed = _claimed_home(root)
        if claimed is not None and claimed != home:
            managed = _recorded_roots(claimed)
            raise ConfigError(
                f"skills root {root} is managed by the state home {claimed}"
                + (f" (roots: {', '.join(map(str, managed))})" if managed else "")
                + f", not {home}: pass the same --skills roots in the same order"
                + (", or set INGOT_HOME to it" if explicit else "")
            )
    recorded = _recorded_roots(home)
    if recorded is not None and recorded != absolute:
        raise ConfigError(
            f"the state home {home} manages the skills roots {', '.join(map(str, recorded))}, not "
            f"{', '.join(map(str, absolute))}: pass those roots (in that order), or use another "
            "INGOT_HOME for a different set (its history will not carry over)"
        )
    return StateHome(home, absolute)


def establish(
    roots: tuple[Path, ...], explicit: Path | None = None, cwd: Path | None = None, check_legacy: bool = True
) -> StateHome:
    """`locate`, then create the home, its record and the claims if they do not exist yet.

    The roots must exist. A new home is refused while state from an older Ingot sits in
    `<cwd>/runs`, with the command that moves it (`ingot migrate --from ...`, which passes
    `check_legacy=False`)."""
    home = locate(roots, explicit)
    for root in home.roots:
        if not root.is_dir():
            raise ConfigError(
                f"skills root {root} does not exist or is not a folder: create it, or fix "
                "--skills / SKILLS_DIRS"
            )
    if check_legacy:
        _refuse_legacy(home, cwd)
    try:
        _create(home)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the state home {home.path} or its claims: {exc.strerror or exc}; make "
            f"{home.roots[0].parent} writable, or set INGOT_HOME to a folder you own"
        ) from exc
    return locate(roots, explicit)  # re-check: another process may have claimed a root meanwhile


def for_reading(roots: tuple[Path, ...], explicit: Path | None = None, cwd: Path | None = None) -> StateHome:
    """`locate`, for a command that only reads: creates nothing, claims nothing, and the home may
    not exist yet (the reader then answers from what is on disk: no history, nothing pending).
    Refuses, as `establish` does, a home that does not exist yet while an older Ingot's state
    sits in `<cwd>/runs`: that state, not an empty one, is the answer."""
    home = locate(roots, explicit)
    _refuse_legacy(home, cwd)
    return home


def lost_state(home: StateHome) -> Path | None:
    """A claim naming `home` that anchors an audit line (optimize/control/audit_anchors.py writes
    one per append) while `home` itself does not exist: its state was deleted or moved, which
    must not be read as a fresh start. None when the home exists or no claim remembers a line."""
    if home.exists:
        return None
    for root in home.roots:
        data = _read_json(claim_path(root))
        if data and data.get("audit") and Path(str(data.get("home"))) == home.path:
            return claim_path(root)
    return None


def _refuse_legacy(home: StateHome, cwd: Path | None) -> None:
    if home.exists:
        return
    legacy = legacy_state(cwd or Path.cwd())
    if legacy is not None and legacy != home.path:
        raise ConfigError(
            f"found state from an older Ingot in {legacy} (it kept state per folder); move it into "
            f"this library's state home with `ingot migrate --from {legacy}`, or set "
            f"INGOT_HOME={legacy} to keep it where it is"
        )


def _create(home: StateHome) -> None:
    home.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _ignore(home.path)
    relative = [os.path.relpath(r, home.path) for r in home.roots]
    _write_once(home.path / HOME_FILE, {"schema_version": SCHEMA_VERSION, "roots": relative})
    for root in home.roots:
        claim = claim_path(root)
        claim.parent.mkdir(parents=True, exist_ok=True)
        _ignore(claim.parent)
        _write_once(claim, {"schema_version": SCHEMA_VERSION, "home": str(home.path)})


def _ignore(folder: Path) -> None:
    """A `.gitignore` of `*` in a folder Ingot keeps state in: a home or a claim folder inside a
    git work tree (the default, beside a skills root in its repository) is never committed by a
    `git add -A`, and with it `audit.key`."""
    ignore = folder / ".gitignore"
    if not ignore.exists():
        _write_text_once(ignore, "# Ingot's state (audit key, chain, claims): never commit it.\n*\n")


def _write_once(path: Path, data: dict) -> None:
    """Create `path`, complete, with `data` unless it exists: written to a temp file, then
    hard-linked into place (of two racing creators one wins; a crash never leaves half a file)."""
    _write_text_once(path, json.dumps(data, indent=1))


def _write_text_once(path: Path, text: str) -> None:
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), 0o644)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def legacy_state(cwd: Path) -> Path | None:
    """`<cwd>/runs` if it holds an older Ingot's change-control state (an audit chain or
    pending changes), else None."""
    folder = Path(os.path.abspath(cwd / LEGACY_FOLDER))
    if (folder / HOME_FILE).exists():
        return None  # already a state home (INGOT_HOME=runs)
    has_audit = (folder / "audit.jsonl").is_file()
    has_pending = (folder / "pending").is_dir() and any((folder / "pending").glob("*.json"))
    return folder if has_audit or has_pending else None
