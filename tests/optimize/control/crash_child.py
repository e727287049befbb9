"""Run one promotion, rollback or restore in a child process, SIGKILLing itself at step N.

    python crash_child.py RUNS ROOT SKILL MODE ARG KILL_AT
MODE promote: ARG is a folder whose files become the candidate. MODE rollback: ARG is a revision.
MODE restore: ARG is the approved revision the guard restores ("none": the folder goes).
MODE removal: an approved removal change (ARG unused): the live skill stops being served.
KILL_AT -1 runs to the end and prints the step names as JSON (to enumerate the kill points).
With CRASH_GIT=1 in the environment, each switch is also a git commit (GIT_HISTORY).
"""

import json
import os
import signal
import sys
from pathlib import Path

from optimize.control.gitrepo import GitHistory
from optimize.control.lock import change_lock
from optimize.control.promote import Promoter


def main() -> None:
    runs, root, skill, mode, arg, kill_at = sys.argv[1:7]
    steps: list[str] = []

    def hook(name: str) -> None:
        if len(steps) == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        steps.append(name)

    git = GitHistory(enabled=os.environ.get("CRASH_GIT") == "1")
    promoter = Promoter(Path(runs), on_step=hook, git=git)
    with change_lock(Path(runs)):
        if mode == "promote":
            folder = Path(arg)
            files = {
                p.relative_to(folder).as_posix(): p.read_bytes()
                for p in sorted(folder.rglob("*"))
                if p.is_file()
            }
            promoter.switch(
                skill,
                Path(root),
                files,
                expected_from=promoter.live_revision(Path(root), skill),
                action="promote",
                actor="crash-test",
            )
        elif mode == "removal":
            promoter.remove(
                skill,
                Path(root),
                expected_from=promoter.live_revision(Path(root), skill),
                actor="crash-test",
                reason="crash test",
                change_id="chg-000000000000",
            )
        elif mode == "restore":
            revision = None if arg == "none" else arg
            promoter.restore(skill, Path(root), revision, actor="crash-test", reason="crash test")
        else:
            promoter.rollback(skill, Path(root), arg, actor="crash-test", reason="crash test")
    print(json.dumps(steps))


if __name__ == "__main__":
    main()
