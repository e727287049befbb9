"""Task sets: splits, leakage detection and the sealed holdout hash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optimize.measure.taskset import TaskSetError, load_task_set, parse_task_set

SET = """\
train:
  - Clean this CSV
  - {prompt: Dedupe rows, rubric: keep the first}
holdout:
  - prompt: Fix the dates
    check: {fixture: {data.csv: "a\\n1\\n"}, assert: "print(1)"}
routing:
  - {task: tidy my csv, expected: csv}
  - {task: bake bread, expected: null}
"""


def test_a_split_set_parses_with_checks_and_routing(tmp_path):
    (tmp_path / "csv.yaml").write_text(SET)
    tasks = load_task_set(tmp_path, "csv")
    assert [t.prompt for t in tasks.train] == ["Clean this CSV", "Dedupe rows"]
    assert tasks.holdout[0].check.fixture == {"data.csv": "a\n1\n"} and tasks.leakage == ()
    assert [c.expected for c in tasks.routing] == ["csv", None]


def test_a_flat_list_is_leakage_and_can_never_promote():
    tasks = parse_task_set("s", ["one", "two"])
    assert tasks.holdout == () and "no train/holdout split" in tasks.leakage[0]


def test_a_holdout_task_repeated_in_train_is_leakage():
    tasks = parse_task_set("s", {"train": ["Write  the NOTES"], "holdout": ["write the notes", "other"]})
    assert "also appear in train" in tasks.leakage[0]


def test_the_holdout_hash_changes_with_the_holdout_only():
    base = parse_task_set("s", {"train": ["a"], "holdout": ["b", "c"]})
    assert parse_task_set("s", {"train": ["a", "z"], "holdout": ["b", "c"]}).holdout_hash == base.holdout_hash
    assert parse_task_set("s", {"train": ["a"], "holdout": ["b", "c2"]}).holdout_hash != base.holdout_hash


def test_malformed_files_are_clear_errors(tmp_path):
    with pytest.raises(TaskSetError, match="no task set"):
        load_task_set(tmp_path, "missing")
    (tmp_path / "bad.yaml").write_text("train: [\n")
    with pytest.raises(TaskSetError, match="not valid YAML"):
        load_task_set(tmp_path, "bad")
    with pytest.raises(TaskSetError, match="non-empty 'prompt'"):
        parse_task_set("s", {"train": [{"rubric": "x"}], "holdout": ["b"]})


@given(
    st.lists(st.text(alphabet="abc ", min_size=1, max_size=6).filter(str.strip), min_size=1, max_size=8),
    st.lists(st.text(alphabet="abc ", min_size=1, max_size=6).filter(str.strip), min_size=1, max_size=8),
)
def test_no_holdout_task_is_ever_silently_in_train(train, holdout):
    tasks = parse_task_set("s", {"train": train, "holdout": holdout})
    normal = lambda s: " ".join(s.split()).lower()  # noqa: E731
    shared = {normal(t) for t in train} & {normal(t) for t in holdout}
    assert bool(shared) == any("also appear in train" in reason for reason in tasks.leakage)


def test_the_teacher_drafts_a_set_for_review_and_never_overwrites_one(tmp_path, library_factory):
    import json

    from optimize.measure.taskset import draft_task_set
    from tests.conftest import BUNDLED_SKILLS
    from tests.scripted_llm import scripted_llm

    library = library_factory(BUNDLED_SKILLS)
    skill = library.get("release-notes")
    draft = {
        "train": ["Notes for 1.0", "Notes for 1.1"],
        "holdout": ["Notes for 2.0"],
        "routing": [
            {"task": "Draft release notes", "expected": "release-notes"},
            {"task": "Bake bread", "expected": None},
        ],
    }
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps(draft))
        llm = server.client("teacher")
        path = draft_task_set(llm, skill, tmp_path)
        assert path.read_text().startswith("# Drafted by the teacher model")
        tasks = load_task_set(tmp_path, "release-notes")
        assert [t.prompt for t in tasks.holdout] == ["Notes for 2.0"] and tasks.leakage == ()
        with pytest.raises(TaskSetError, match="already exists"):
            draft_task_set(llm, skill, tmp_path)
        leaky = {**draft, "holdout": ["Notes for 1.0"]}
        server.rules.clear()
        server.add(model="teacher-model", reply=json.dumps(leaky))
        with pytest.raises(TaskSetError, match="unusable"):
            draft_task_set(llm, skill, tmp_path / "other")
