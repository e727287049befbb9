"""Promote a verified candidate into a skills root, or roll one back: the promotion module.

The only code that writes a skills root. This package's public surface; the work is split by
responsibility across its modules (see each one's docstring). Whether a candidate is good
enough is decided in gate.py and changes.py, not here.
Guarantee: at every instant each skill is served at exactly one complete revision.
"""

from optimize.control.promote.promoter import (
    ABSENT,
    STAGE_PREFIX,
    Outcome,
    Promoter,
    StepHook,
    check_skill_name,
    commit_message,
    tree_revision,
)

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
