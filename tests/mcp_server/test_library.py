"""Library: incremental re-indexing and picking up edits on disk without a restart."""

from __future__ import annotations

from mcp_server.embedding import load_embedder
from mcp_server.library import Library
from tests.conftest import BUNDLED_SKILLS, wait_for, write_skill


def test_a_restart_with_a_warm_cache_embeds_nothing(tmp_path):
    cache = tmp_path / "vectors.sqlite"
    Library((BUNDLED_SKILLS,), load_embedder(None, None, cache)).reload()
    embedder = load_embedder(None, None, cache)
    Library((BUNDLED_SKILLS,), embedder).reload()
    assert embedder.computed == 0


def test_an_edit_re_embeds_only_the_edited_skill(tmp_path, embedder):
    for i in range(5):
        write_skill(tmp_path, f"skill-{i}", f"Handles chore number {i} for the team.")
    library = Library((tmp_path,), embedder)
    library.reload()
    before = embedder.computed
    write_skill(tmp_path, "skill-3", "Handles a brand new chore about quarterly tax filings.")
    report = library.reload()
    assert report.changed == ("skill-3",)
    assert 0 < embedder.computed - before <= 3  # description, body opening, one sentence


def test_the_watcher_serves_an_edited_skill_without_a_restart(tmp_path, library_factory):
    write_skill(tmp_path, "notes", "Writes meeting notes.")
    library = library_factory(tmp_path)
    old = library.get("notes").revision
    library.start_watching()
    write_skill(tmp_path, "notes", "Writes meeting notes and action items.")
    wait_for(lambda: library.get("notes").revision != old)
    write_skill(tmp_path, "fresh", "A skill added while serving.")
    wait_for(lambda: "fresh" in library.skills())
