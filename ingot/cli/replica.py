"""`ingot baseline`, `ingot replica sync`, `ingot verify-history`, and `ingot serve --replica`.

The primary signs a baseline (what replicas verify from); a replica syncs, serves what verified
and reports; anyone with the remote and the allowed-signers file verifies the whole record. The
checks themselves are optimize/control/signed_history.py's and replica.py's; this module runs
them, serves, and prints. Registered on the group by `main.py`; imports `options` and `serve`
from the CLI (library.py's `serve` hands a replica's serving to `serve_replica`)."""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from pathlib import Path

import click

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option
from ingot.errors import ConfigError

PUSH_WAIT_S = 30.0  # how long a command that committed waits for its push before exiting
WATCH_S = 0.2  # how often a serving replica looks whether another process (`replica sync`) switched


@click.command()
@skills_option
@click.option("--reason", default=None, help="Why (kept in the audit log and the commit).")
def baseline(skills: tuple[Path, ...], reason: str | None) -> None:
    """Sign every skill as it is committed now as the starting point replicas verify from
    (audited; one commit per repository, changing no file, pushed to GIT_PUSH_REMOTE)."""
    from ingot.runtime import actor, change_control
    from optimize.control.baseline import sign_baseline
    from optimize.control.pushes import read_state

    settings = settings_for(skills)
    setup_logging("WARNING")
    control = change_control(settings)
    made = sign_baseline(control, actor(settings), reason)
    control.promoter.commits.wait_for_pushes(PUSH_WAIT_S)  # (and at exit: pushes.py)
    for done in made:
        click.echo(
            f"baseline {done.commit[:12]} of {done.skills} skills in {done.top} (audit line {done.entry.seq})"
        )
    if settings.git_push_remote:
        state = read_state(control.runs_dir, settings.git_push_remote)
        if state is not None and state.error is None:
            click.echo(f"pushed to {settings.git_push_remote}")
        else:
            why = state.error if state is not None else "no attempt finished yet"
            click.echo(
                f"not pushed to {settings.git_push_remote} yet ({why}); `ingot serve` retries it", err=True
            )


@click.group()
def replica() -> None:
    """A replica: serve a primary's pushed remote, verifying every commit first (`ingot serve
    --replica REMOTE`; `ingot status` reports it)."""


def _replica(remote: str | None, allowed_signers: Path | None, branch: str | None):  # noqa: ANN202
    from ingot.runtime import replica_config, replica_home, skill_limits
    from optimize.control.replica import Replica

    overrides: dict[str, object] = {}
    if remote:
        overrides["replica_remote"] = remote
    if allowed_signers:
        overrides["replica_allowed_signers"] = allowed_signers
    if branch:
        overrides["replica_branch"] = branch
    settings = settings_for(**overrides)
    setup_logging("WARNING")
    config = replica_config(settings, replica_home(settings))
    return config, Replica(config, skill_limits(settings))


_remote = click.option("--remote", default=None, help="The primary's pushed remote (default REPLICA_REMOTE).")
_signers = click.option(
    "--allowed-signers",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="git's allowed-signers file (default REPLICA_ALLOWED_SIGNERS).",
)
_branch = click.option("--branch", default=None, help="The branch to serve (default REPLICA_BRANCH, main).")


@replica.command(name="sync")
@_remote
@_signers
@_branch
def replica_sync(remote: str | None, allowed_signers: Path | None, branch: str | None) -> None:
    """Fetch and verify now; a running `ingot serve --replica` serves the result at its next tick.
    Exits 1 when a commit was refused or the remote could not be read."""
    _, node = _replica(remote, allowed_signers, branch)
    result = node.sync(wait_s=60)
    served = result.served[:12] if result.served else "nothing yet"
    if result.switched:
        click.echo(f"verified and switched: serving {served} (remote at {str(result.fetched)[:12]})")
    elif result.fetched is not None and not result.refused:
        click.echo(f"up to date: serving {served}")
    for commit, why in result.refused:
        click.echo(f"REFUSED {commit[:12]}: {why}", err=True)
    if result.error and not result.refused:
        click.echo(f"Error: {result.error}; still serving {served}", err=True)
    if result.refused or result.error:
        sys.exit(1)


@click.command(name="verify-history")
@skills_option
@click.argument("remote", required=False)
@_signers
@_branch
@click.option("--json", "as_json", is_flag=True, help="Print every commit's check as JSON.")
def verify_history(
    skills: tuple[Path, ...],
    remote: str | None,
    allowed_signers: Path | None,
    branch: str | None,
    as_json: bool,
) -> None:
    """Walk the whole history of REMOTE's branch (default: the skills root's own repository, at
    HEAD) and print, per commit, signature, signer, skill, revision, passport and evidence check.
    Exits 1 at the first commit that fails. Needs only the history and the allowed-signers file."""
    from ingot.runtime import skill_limits
    from optimize.control.replica import RevisionStore
    from optimize.control.signed_history import Verifier, read_commits, walk

    settings = settings_for(skills if remote is None else None)
    setup_logging("WARNING")
    signers = allowed_signers or settings.replica_allowed_signers
    if signers is None or not Path(signers).is_file():
        raise ConfigError(
            "pass --allowed-signers FILE (or set REPLICA_ALLOWED_SIGNERS): the public keys whose "
            "signatures count"
        )
    scratch = Path(tempfile.mkdtemp(prefix="ingot-verify-history-"))
    try:
        repo, tip, notes = _history(settings, remote, branch or settings.replica_branch, scratch)
        store = RevisionStore(scratch / "revisions", skill_limits(settings))
        verifier = Verifier(repo, Path(signers).absolute(), store.export, store.prefetch)
        verifier.notes_ref = notes
        rows, failed, baselines = [], None, 0
        for checked in walk(verifier, read_commits(repo, Path(signers).absolute(), tip)):
            rows.append(_row(repo, notes, checked))
            baselines += checked.commit.action == "baseline" and checked.ok
            failed = checked if not checked.ok else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if as_json:
        print_json({"schema_version": 1, "tip": tip, "ok": failed is None and baselines > 0, "commits": rows})
    else:
        for row in rows:
            click.echo(_line(row))
    if failed is not None:
        click.echo(f"Error: commit {failed.commit.sha[:12]} fails: {failed.problem}", err=True)
        sys.exit(1)
    if not baselines:
        click.echo(
            "Error: no verified baseline in this history: nothing in it is vouched for (`ingot baseline`)",
            err=True,
        )
        sys.exit(1)


def _history(settings, remote: str | None, branch: str, scratch: Path):  # noqa: ANN001, ANN202
    """(repository, tip, notes ref): a fresh bare fetch of REMOTE, or the root's own repository."""
    from optimize.control.gitrepo import NOTES_REF, GitError, GitRepo

    if remote is None:
        repo = GitRepo.of(settings.skills_dirs[0])
        if repo is None or repo.head() is None:
            raise ConfigError(
                f"{settings.skills_dirs[0]} is not in a git repository with commits: name a REMOTE"
            )
        return repo, str(repo.head()), NOTES_REF
    repo = GitRepo(scratch / "repo.git")
    repo.top.mkdir()
    repo.git("init", "--quiet", "--bare")
    try:
        repo.git("fetch", "--quiet", "--no-tags", remote, f"+refs/heads/{branch}:refs/heads/{branch}")
    except GitError as exc:
        raise ConfigError(f"cannot fetch {branch} from {remote}: {exc}") from exc
    repo.run("fetch", "--quiet", "--no-tags", remote, "+refs/notes/*:refs/notes/*")
    return repo, str(repo.resolve(f"refs/heads/{branch}")), NOTES_REF


def _row(repo, notes: str, checked) -> dict:  # noqa: ANN001 - a GitRepo and a Checked
    from optimize.control.signed_history import rederived_passport

    rederived = None
    if checked.evidence == "ok" and checked.commit.trailers.get("Ingot-Evidence"):
        rederived = rederived_passport(repo.note(checked.commit.sha, notes) or b"")
    return {
        "commit": checked.commit.sha,
        "ok": checked.ok,
        "signature": checked.signature,
        "signer": checked.commit.signer,
        "action": checked.commit.action,
        "skill": checked.skill,
        "revision": checked.revision,
        "passport": checked.passport,
        "passport_rederived": rederived,
        "evidence": checked.evidence,
        "note": checked.note,
        "problem": checked.problem,
    }


def _line(row: dict) -> str:
    what = row["note"] or f"{row['action']} {row['skill']} {str(row['revision'])[:12]}"
    passport = ""
    if row["passport"]:
        state, *accepted = row["passport"].split("; ")
        counted = [f"{len(part.split(': ', 1)[1].split(', '))} {part.split(':')[0]}" for part in accepted]
        passport = f"  passport {state}" + "".join(f", {c}" for c in counted)
        if row["passport_rederived"]:
            passport += f" (evidence says {row['passport_rederived']})"
    verdict = "ok" if row["ok"] else f"FAIL: {row['problem']}"
    return (
        f"{row['commit'][:12]}  {row['signature']}{' by ' + row['signer'] if row['signer'] else ''}  {what}"
        f"{passport}  evidence {row['evidence']}  {verdict}"
    )


COMMANDS = (baseline, replica, verify_history)


def replica_library(settings, sync: bool):  # noqa: ANN001, ANN202 - Settings -> (Replica, Library, Event)
    """The library a replica serves (what its last verified sync named), kept following its
    switches; with `sync`, this process also syncs (first now, then every REPLICA_INTERVAL_S)."""
    import threading

    from ingot.runtime import one_blas_thread, procedure_from, replica_config, replica_home, skill_limits
    from mcp_server.embedding import load_embedder
    from mcp_server.library import Library
    from optimize.control.replica import Replica, ReplicaPin

    home = replica_home(settings)
    config = replica_config(settings, home)
    limits = skill_limits(settings)
    node = Replica(config, limits)
    placeholder = config.folder / "root"  # a replica serves only what its pin names: never a folder's edits
    placeholder.mkdir(parents=True, exist_ok=True)
    if sync:
        try:
            _tell(node.sync(wait_s=60), set())
        except Exception:  # (a full disk): serve what verified before; the next tick retries
            logging.getLogger("ingot.replica").exception("the first sync failed; serving what verified")
    embedder = load_embedder(
        settings.embed_model_dir,
        settings.embed_model_sha256,
        home / "cache" / "vectors.sqlite",
        threads=settings.embed_threads,
        backend=settings.embed_backend,
        model=settings.embed_model,
    )
    library = Library((placeholder,), embedder, limits, procedure_from(settings), ReplicaPin(config, limits))
    library.reload()
    one_blas_thread()
    stop = threading.Event()
    follow = threading.Thread(
        target=_follow, args=(node, library, stop, sync), name="ingot-replica", daemon=True
    )
    follow.start()
    return node, library, stop


def serve_replica(settings, sockets: dict) -> None:  # noqa: ANN001 - Settings
    """Serve MCP from the replica's verified library; sync every REPLICA_INTERVAL_S, and switch the
    served library whenever a sync (this process's or `ingot replica sync`'s) verified more."""
    from ingot import metrics_sources
    from ingot.cli.serve import serve as run
    from ingot.cli.serve import tool_limits

    node, library, stop = replica_library(settings, sync=True)
    config = node.config
    served = library.status().skills
    click.echo(
        f"ingot: replica of {config.remote} ({config.branch}), verifying every {config.interval_s:g} s; "
        f"{served} skills served; MCP at http://{settings.bind_host}:{settings.mcp_port}/mcp "
        "(no review UI: decisions are made on the primary)",
        err=True,
    )
    try:
        run(
            library,
            None,
            settings.bind_host,
            settings.mcp_port,
            None,
            settings.allowed_hosts,
            watch=False,
            log_level=settings.log_level.lower(),
            limits=tool_limits(settings),
            sockets=sockets,
            gauges=(metrics_sources.replica(config),),
        )
    finally:
        stop.set()


def _follow(node, library, stop, sync: bool = True) -> None:  # noqa: ANN001 - Replica, Library, Event
    """Sync on the interval (`sync`); reload the library when served.json changed (any process's
    switch: this one's, `ingot serve --replica`'s or `ingot replica sync`'s)."""
    import logging
    import time

    log = logging.getLogger("ingot.replica")
    told: set[str] = set()
    seen = _stamp(node)
    next_sync = time.monotonic() + node.config.interval_s
    while not stop.wait(WATCH_S):
        try:
            if sync and time.monotonic() >= next_sync:
                next_sync = time.monotonic() + node.config.interval_s
                _tell(node.sync(), told, log)
            stamp = _stamp(node)
            if stamp != seen:
                seen = stamp
                library.reload()
        except Exception:  # the replica keeps serving what it verified; the next tick retries
            log.exception("replica sync failed; still serving the last verified library")


def _stamp(node) -> tuple:  # noqa: ANN001 - a Replica
    try:
        info = (node.folder / "served.json").stat()
    except OSError:
        return ()
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def _tell(result, told: set[str], log=None) -> None:  # noqa: ANN001 - SyncResult, Logger
    """Log a switch, and each refused commit and fetch error once (not at every tick)."""
    import logging

    log = log or logging.getLogger("ingot.replica")
    served = result.served[:12] if result.served else "nothing"
    if result.switched:
        log.warning("replica: verified and serving %s", served)
    for commit, why in result.refused:
        if commit not in told:
            told.add(commit)
            log.warning("replica: refused %s: %s; still serving %s", commit[:12], why, served)
    if result.error and not result.refused and result.error not in told:
        told.add(result.error)
        log.warning("replica: %s; still serving %s", result.error, served)
