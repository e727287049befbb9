"""The routing-impact cell names its inputs by the SHA-256 of their RFC 8785 (JCS) form, so any
JCS implementation recomputes the same digest from the same cases: UTF-8, no spaces, strings
escaped only where JSON must. The seen and traffic digests do not depend on order or repeats.

Deliberate difference from before (`json.dumps`, ASCII escapes and ", " separators): a digest
recorded by the old code is not the new one for the same inputs; nothing compares them, they are
recorded for a reader.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import rfc8785

from optimize.measure.impact import LabelledCase, routing_impact
from optimize.search.describe import router_with
from tests.conftest import BUNDLED_SKILLS

SKILL = "release-notes"
TASKS = [
    "Draft release notes for v3.1",
    'Notes with "quotes", a \\ backslash and a tab\there',
    "Résumé des changements — version 2.4 ✓",
    "控制台日志摘要",
]
TRAFFIC = ["Summarise the release", "Write a commit message", "Summarise the release", "Café notes"]
SEEN = ["b-key", "a-key", "c-key"]


def jcs_sha256(value: list[str]) -> str:
    """RFC 8785 for an array of strings, written out: compact, UTF-8, minimal escapes."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


@pytest.fixture
def routers(tmp_path, library_factory):
    shutil.copytree(BUNDLED_SKILLS, tmp_path / "skills")
    library = library_factory(tmp_path / "skills")
    return router_with(library, SKILL, None), router_with(library, SKILL, "Writes release notes.")


def inputs(champion, candidate, tasks, traffic, seen) -> dict:
    cases = [LabelledCase(task, SKILL, f"task set {SKILL}") for task in tasks]
    return routing_impact(SKILL, champion, candidate, cases, traffic, seen=seen)["inputs"]


def test_each_input_digest_is_the_sha256_of_its_canonical_json(routers):
    got = inputs(*routers, TASKS, TRAFFIC, SEEN)
    assert got["cases_sha256"] == jcs_sha256(TASKS) == hashlib.sha256(rfc8785.dumps(TASKS)).hexdigest()
    assert got["seen_sha256"] == jcs_sha256(sorted(SEEN))
    assert got["traffic_sha256"] == jcs_sha256(sorted(set(TRAFFIC)))
    # Not the old json.dumps bytes: ASCII escapes and ", " separators give another digest.
    assert got["cases_sha256"] != hashlib.sha256(json.dumps(TASKS).encode()).hexdigest()


def test_the_seen_and_traffic_digests_ignore_order_and_repeats(routers):
    first = inputs(*routers, TASKS, TRAFFIC, SEEN)
    again = inputs(*routers, TASKS, list(reversed(TRAFFIC)) + TRAFFIC[:1], list(reversed(SEEN)))
    assert first == again
