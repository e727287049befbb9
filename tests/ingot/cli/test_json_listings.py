"""Every listing command prints, with `--json`, the same facts its text shows a person.

Each command runs twice as a real process on one managed library (a promoted change, a pending
one, a trace, a golden, an autonomy ceiling, one skipped folder): once for the text, once with
`--json`. The JSON must parse, carry a schema version where it is an object, and name exactly the
skills, ids and states the text names; on a root no command ever managed, the JSON lists are
empty rather than missing."""

from __future__ import annotations

import json
import re

import pytest

from tests.ingot.cli import worlds
from tests.ingot.cli.worlds import INVALID, SKILL, World


@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory, embedder) -> World:
    return worlds.managed(tmp_path_factory.mktemp("managed"), embedder)


def both(world: World, *args: str) -> tuple[list[str], object]:
    """The text lines and the parsed JSON of one command; both runs must agree on the exit code."""
    text = worlds.ingot(world, *args)
    as_json = worlds.ingot(world, *args, "--json")
    assert text.returncode == as_json.returncode == 0, (args, text.stderr, as_json.stderr)
    assert "Traceback" not in text.stderr + as_json.stderr
    return text.stdout.splitlines(), json.loads(as_json.stdout)


def test_skills_json_lists_the_served_and_the_skipped_folders_the_text_lists(managed):
    lines, data = both(managed, "skills")
    served = [line.split()[0] for line in lines if not line.startswith("SKIPPED")]
    assert [s["name"] for s in data["served"]] == served and SKILL in served
    for entry in data["served"]:
        assert re.fullmatch(r"[0-9a-f]{64}", entry["revision"])
        assert any(line.split()[:2] == [entry["name"], entry["revision"][:12]] for line in lines)
    (skipped,) = data["skipped"]
    assert skipped["folder"].endswith(f"/{INVALID}") and "must equal the folder name" in skipped["reason"]
    assert [line for line in lines if line.startswith("SKIPPED")] == [
        f"SKIPPED {skipped['folder']}: {skipped['reason']}"
    ]
    assert data["schema_version"] == 1


def test_status_json_reports_each_skill_state_and_the_chain_as_the_text_does(managed):
    lines, data = both(managed, "status")
    by_name = {s["name"]: s for s in data["skills"]}
    for line in lines:
        name, *rest = line.split()
        if name in by_name:
            skill = by_name.pop(name)
            assert rest[0] == skill["live_revision"][:15]
            assert (f"pending {skill['pending']}" in line) == (skill["pending"] is not None)
    assert by_name == {}  # every skill in the JSON was a line of the text
    assert {s["name"]: s["state"] for s in data["skills"]}[SKILL] == "ok"
    assert f"audit: ok ({data['audit']['lines']} lines, head {data['audit']['head'][:16]})" in lines
    assert any(line.startswith(f"SKIPPED {managed.root / INVALID}") for line in lines)
    assert data["ok"] is True and data["schema_version"] == 1


def test_history_json_holds_every_event_and_snapshot_the_text_shows(managed):
    lines, data = both(managed, "history", SKILL)
    events = [line.split() for line in lines if re.match(r"\s+\d+\s", line)]
    assert [(int(e[0]), e[3]) for e in events] == [(ev["seq"], ev["action"]) for ev in data["events"]]
    snapshots = [line.split()[1] for line in lines if line.startswith("snapshot ")]
    assert snapshots == [s if isinstance(s, str) else s["revision"] for s in data["snapshots"]]
    assert lines[0].startswith(f"{SKILL}: live {data['live_revision'][:12]}")


def test_traces_json_lists_the_ids_bless_takes(managed):
    lines, data = both(managed, "traces")
    assert [line.split()[0] for line in lines] == [t["id"] for t in data["traces"]]
    (trace,) = data["traces"]
    assert (trace["skill"], trace["route"], trace["task"]) == (SKILL, "match", worlds.TASK)
    assert data["total"] == 1 and data["unreadable_lines"] == 0


def test_pending_json_names_the_change_and_its_passport_state(managed):
    lines, data = both(managed, "pending")
    (line,) = lines
    (change,) = data
    assert change["change"] == managed.change and line.split()[:2] == [SKILL, managed.change]
    state = change["passport"]["state"]
    assert state == "needs-acknowledgement" and f"  {state}: " in line
    missing = [c["cell"] for c in change["passport"]["cells"] if c["state"] == "missing"]
    assert missing and all(f"{cell} missing" in line for cell in missing)


def test_goldens_list_json_lists_the_goldens_the_text_lists(managed):
    lines, data = both(managed, "goldens", "list")
    assert [line.split()[0] for line in lines] == [g["id"] for g in data["goldens"]] == [managed.golden]
    assert data["goldens"][0]["state"] == "active" and data["unreadable"] == []


def test_autonomy_json_gives_each_class_its_level_streak_and_ceiling(managed):
    lines, data = both(managed, "autonomy", "show")
    rows = [line.split() for line in lines]
    assert [(r[0], r[1], r[2], r[6]) for r in rows] == [
        (c["skill"], c["class"], c["level"], c["ceiling"]) for c in data["classes"]
    ]
    assert [r[4] for r in rows] == [f"{c['streak']}/{data['streak_needed']}" for c in data["classes"]]


@pytest.mark.parametrize(
    ("args", "lists"),
    [
        (("skills",), ("served", "skipped")),
        (("status",), ("skills", "invalid", "unaudited_pending")),
        (("traces",), ("traces",)),
        (("goldens", "list"), ("goldens",)),
        (("autonomy", "show"), ("classes",)),
    ],
)
def test_on_a_root_never_managed_the_json_lists_are_there_and_hold_only_what_is_on_disk(
    tmp_path, args, lists
):
    world = worlds.fresh(tmp_path)
    done = worlds.ingot(world, *args, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    for key in lists:
        assert isinstance(data[key], list), key
    if args[0] in ("traces", "goldens", "autonomy"):
        assert all(data[key] == [] for key in lists)
    assert not world.home.exists()
