"""`ingot bless` says why a golden has no drafted criteria, from the real setting: a teacher that
is configured is never reported missing."""

from __future__ import annotations

from tests.ingot.cli.test_goldens import env_for
from tests.ingot.cli.test_main import ingot
from tests.regress_sim import regress_world


def test_bless_without_a_draft_names_the_configured_teacher_instead_of_calling_it_missing(
    tmp_path, library_factory
):
    with regress_world(tmp_path, library_factory) as w:
        record = w.record()
        env = env_for(w, TEACHER_MODEL="teacher-model")
        blessed = ingot("bless", record.id, "--no-draft", cwd=tmp_path, env=env)
        assert blessed.returncode == 0, blessed.stderr
        assert "no teacher" not in blessed.stdout
        assert "not drafted: --no-draft (the teacher teacher-model was not asked)" in blessed.stdout
