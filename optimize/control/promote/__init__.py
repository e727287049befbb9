"""Promote a verified candidate into a skills root, or roll one back: the promotion module.

The only code that writes a skills root. This is the package's public surface: promoter.py runs
the crash-safe sequence, snapshots.py keeps `runs/revisions`, folders.py holds the durable write
and the atomic exchange, layout.py says how a revision's folder is laid out (modes from its
bytes, nothing else) and what a folder holds besides, commits.py records each switch in git.
Whether a candidate is good enough is decided by the passport (passport.py) and changes.py, not
here.
Guarantee: at every instant each skill is served at exactly one complete revision.
"""

from optimize.control.promote.commits import commit_message
from optimize.control.promote.folders import StepHook
from optimize.control.promote.promoter import STAGE_PREFIX, Outcome, Promoter
from optimize.control.promote.snapshots import ABSENT, check_skill_name, tree_revision

__all__ = [
    "ABSENT",
    "STAGE_PREFIX",
    "Outcome",
    "Promoter",
    "StepHook",
    "check_skill_name",
    "commit_message",
    "tree_revision",
]
