"""What change control, a primary's pushes and a replica add to a server's /metrics.

Each function returns a gauge source for mcp_server/metrics.py: read at scrape time from the
state on disk (the audit chain, the pending queue, git-push.json, a replica's sync.json), so the
numbers are what `ingot status` would say at that moment. Wired by the serving front ends."""

from __future__ import annotations

from collections.abc import Iterator

from mcp_server.metrics import Gauge, GaugeSource
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import GitRepo
from optimize.control.pushes import read_state
from optimize.control.replica import ReplicaConfig, replica_status


def change_control(control: ChangeControl) -> GaugeSource:
    """Pending changes, the audit chain's state and length, and unpushed commits."""

    def gauges() -> Iterator[Gauge]:
        changes, unreadable = control.queue.scan()
        yield Gauge("ingot_changes_pending", "Changes waiting for a decision.", len(changes))
        yield Gauge("ingot_changes_unreadable", "Pending records that cannot be read.", len(unreadable))
        chain = control.audit.verify()
        yield Gauge("ingot_audit_chain_ok", "1 when the audit chain verifies, else 0.", float(chain.ok))
        yield Gauge("ingot_audit_chain_lines", "Lines in the audit chain.", chain.lines)
        remote = control.git.push_remote
        if remote and control.git.enabled:
            for root in control.roots:
                repo = GitRepo.of(root)
                head = repo.head() if repo is not None else None
                if head is None:
                    continue
                state = read_state(control.runs_dir, remote)
                since = f"{state.pushed}..{head}" if state and state.pushed else head
                unpushed = int(repo.text("rev-list", "--count", since) or 0)
                labels = (("remote", remote), ("root", str(root)))
                yield Gauge(
                    "ingot_git_unpushed_commits", "Commits not on GIT_PUSH_REMOTE yet.", unpushed, labels
                )

    return gauges


def replica(config: ReplicaConfig) -> GaugeSource:
    """The verified commit, refused commits, lag and whether the last fetch failed."""

    def gauges() -> Iterator[Gauge]:
        state = replica_status(config)
        if state.served:
            yield Gauge(
                "ingot_replica_verified_commit_info",
                "The commit this replica verified last and serves.",
                1,
                (("commit", state.served), ("remote", state.remote), ("branch", state.branch)),
            )
        yield Gauge(
            "ingot_replica_refused_commits", "Distinct commits this replica refused.", state.refused_total
        )
        yield Gauge(
            "ingot_replica_lag_seconds", "Seconds behind the remote (0: serving its tip).", state.lag_s
        )
        yield Gauge(
            "ingot_replica_fetch_failing", "1 when the last fetch failed, else 0.", float(bool(state.error))
        )

    return gauges
