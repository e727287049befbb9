"""Library: incremental re-indexing and picking up edits on disk without a restart."""

from __future__ import annotations

import pytest

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


class FlakyEmbedder:
    """A real model behind the Embedder seam that can be told to fail (like a full disk)."""

    def __init__(self, inner) -> None:
        self.inner, self.fail = inner, False

    @property
    def model_digest(self) -> str:
        return self.inner.model_digest

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts):
        if self.fail:
            raise OSError(28, "No space left on device")
        return self.inner.embed(texts)


def test_a_failed_reindex_keeps_serving_one_consistent_snapshot_and_retries(tmp_path, embedder):
    from mcp_server.embedding import CachedEmbedder

    flaky = FlakyEmbedder(embedder._inner)
    library = Library((tmp_path,), CachedEmbedder(flaky, None))
    write_skill(tmp_path, "notes", "Writes meeting notes.", "# Notes\n\nVersion one body.\n")
    library.reload()
    old = library.get("notes")
    write_skill(
        tmp_path,
        "notes",
        "Writes meeting notes.",
        "# Notes\n\nVersion two body.\n",
        extra="metadata:\n  trust: blocked\n",
    )
    flaky.fail = True
    with pytest.raises(OSError, match="No space left"):
        library.reload()
    flaky.fail = False
    # Still the old snapshot everywhere: body, revision and policy agree.
    assert library.get("notes").revision == old.revision
    assert library.route("write meeting notes").skill.revision == old.revision
    library.reload()  # nothing new on disk, but the failed update is retried
    with pytest.raises(Exception, match="trust: blocked"):
        library.get("notes")


def test_a_replaced_root_is_still_watched(tmp_path, library_factory):
    root = tmp_path / "skills"
    write_skill(root, "notes", "Writes meeting notes.")
    library = library_factory(root)
    library.start_watching()
    fresh = tmp_path / "fresh"
    write_skill(fresh, "notes", "Writes meeting notes and action items.")
    root.rename(tmp_path / "old")
    fresh.rename(root)
    wait_for(lambda: library.get("notes").description == "Writes meeting notes and action items.")
    write_skill(root, "notes", "Version three.")
    wait_for(lambda: library.get("notes").description == "Version three.")
