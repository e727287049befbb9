"""One state home per set of skills roots, found the same way from any folder, by real processes."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import pytest
import rfc8785

from ingot.errors import ConfigError
from ingot.home import claim_path, default_home, establish, locate
from optimize.control.changes import ChangeControl
from tests.conftest import BUNDLED_SKILLS
from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import body_rewrite, ready_body


@pytest.fixture
def library(tmp_path):
    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    return root


def proposed(root) -> tuple[ChangeControl, str]:
    home = establish((root,))
    control = ChangeControl(home.path, home.roots)
    files = body_rewrite(root, "release-notes")
    change, _ = control.propose("release-notes", "optimizer", files, ready_body())
    return control, change.id


def test_the_home_sits_beside_the_root_and_holds_no_file_inside_it(library):
    home = establish((library,))
    assert home.path == library.parent / ".ingot" / "skills" == default_home(library)
    assert json.loads(claim_path(library).read_text())["home"] == str(home.path)
    assert not any(p.name.startswith(".ingot") for p in library.iterdir())


def test_a_root_reached_through_a_symlink_has_the_same_home_and_lock(library, tmp_path):
    control, change_id = proposed(library)
    linked = tmp_path / "elsewhere"
    linked.symlink_to(library.parent, target_is_directory=True)
    home = establish((linked / "skills",))
    assert home.path == control.runs_dir and home.roots == (library,)
    listed = ingot("pending", "--skills", str(linked / "skills"), cwd=tmp_path)
    assert listed.returncode == 0 and change_id in listed.stdout, listed.stderr
    assert not (linked / ".ingot" / "elsewhere").exists()  # no second state home


def test_a_default_home_inside_a_git_work_tree_is_ignored_by_git_key_and_all(library):
    top = library.parent
    subprocess.run(["git", "init", "-q"], cwd=top, check=True)
    proposed(library)  # the home now holds a chain and its key
    assert (default_home(library) / "audit.key").exists()
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=top, capture_output=True, text=True
    ).stdout
    assert listed and ".ingot" not in listed and "audit.key" not in listed, listed
    subprocess.run(["git", "add", "-A"], cwd=top, check=True)
    staged = subprocess.run(
        ["git", "diff", "--cached", "--name-only"], cwd=top, capture_output=True, text=True
    )
    assert "audit.key" not in staged.stdout and staged.stdout.startswith("skills/")


def test_two_folders_see_the_same_pending_change(library, tmp_path):
    _, change_id = proposed(library)
    for folder in ("a", "b/c"):
        cwd = tmp_path / folder
        cwd.mkdir(parents=True)
        relative = shutil.os.path.relpath(library, cwd)
        listed = ingot("pending", "--skills", relative, cwd=cwd)
        assert listed.returncode == 0 and change_id in listed.stdout, listed.stderr


def test_processes_started_in_different_folders_are_one_writer(library, tmp_path):
    control, change_id = proposed(library)
    folders = [tmp_path / "one", tmp_path / "two"]
    for folder in folders:
        folder.mkdir()
    command = [sys.executable, "-m", "ingot.cli", "approve", "release-notes", "--change", change_id]
    approvers = [
        subprocess.Popen(
            [*command, "--skills", str(library)],
            cwd=folders[i % 2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**shutil.os.environ, "HF_HUB_OFFLINE": "1"},
        )
        for i in range(6)
    ]
    results = [(p.wait(timeout=180), p.stderr.read()) for p in approvers]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 3, 3, 3, 3, 3], results
    promotions = [e for e in control.audit.entries() if e.get("action") == "promote" and e.get("outcome")]
    assert len(promotions) == 1 and control.audit.verify().ok


def test_a_root_managed_by_one_home_is_refused_from_another(library, tmp_path):
    establish((library,))
    done = ingot("pending", "--skills", str(library), cwd=tmp_path, INGOT_HOME=str(tmp_path / "elsewhere"))
    assert done.returncode == 2 and f"managed by the state home {default_home(library)}" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "elsewhere").exists()


def test_a_home_refuses_another_set_of_roots(library, tmp_path):
    other = tmp_path / "lib" / "more"
    other.mkdir()
    establish((library,))
    with pytest.raises(ConfigError, match="manages the skills roots"):
        locate((library, other))
    with pytest.raises(ConfigError, match="managed by the state home"):
        establish((other, library))


def test_a_missing_root_is_one_clear_error(tmp_path):
    done = ingot("status", "--skills", str(tmp_path / "nope"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "does not exist" in done.stderr


def test_the_retired_runs_dir_setting_says_how_to_move(library, tmp_path):
    done = ingot("pending", "--skills", str(library), cwd=tmp_path, RUNS_DIR="runs")
    assert (
        done.returncode == 2
        and "RUNS_DIR is no longer read" in done.stderr
        and "ingot migrate" in done.stderr
    )


def _legacy_chain(folder) -> str:
    """Two lines written the way an Ingot without keys wrote them."""
    folder.mkdir(parents=True)
    prev, out = "0" * 64, []
    for seq in (1, 2):
        record = {
            "schema": 1,
            "seq": seq,
            "time": "2026-10-01T00:00:00+00:00",
            "prev": prev,
            "action": "reject",
        }
        record["hash"] = prev = hashlib.sha256(rfc8785.dumps(record)).hexdigest()
        out.append(rfc8785.dumps(record) + b"\n")
    (folder / "audit.jsonl").write_bytes(b"".join(out))
    (folder / "audit.head").write_text(json.dumps({"seq": 2, "hash": prev}))
    (folder / "traces.jsonl").write_text("")
    return prev


def test_state_from_an_older_ingot_is_found_moved_and_keyed(library, tmp_path):
    cwd = tmp_path / "work"
    legacy_head = _legacy_chain(cwd / "runs")
    refused = ingot("status", "--skills", str(library), cwd=cwd)
    assert refused.returncode == 2 and "ingot migrate --from" in refused.stderr
    moved = ingot("migrate", "--from", "runs", "--skills", str(library), cwd=cwd)
    assert moved.returncode == 0, moved.stderr
    assert "audit.jsonl" in moved.stdout and legacy_head[:16] in moved.stdout
    home = default_home(library)
    assert (home / "audit.key").exists() and (home / "traces.jsonl").exists()
    assert not (cwd / "runs" / "audit.jsonl").exists()
    verify = ingot("audit", "verify", "--skills", str(library), cwd=cwd)
    assert verify.returncode == 0 and "ok: 3 lines" in verify.stdout
    status = ingot("status", "--skills", str(library), cwd=cwd)
    assert status.returncode == 0, status.stderr


def test_an_unkeyed_chain_in_place_blocks_changes_until_adopted(library, tmp_path):
    home = tmp_path / "old-runs"
    _legacy_chain(home)
    env = {"INGOT_HOME": str(home)}
    status = ingot("status", "--skills", str(library), cwd=tmp_path, **env)
    assert status.returncode == 1 and "ingot migrate" in status.stdout
    assert ingot("migrate", "--skills", str(library), cwd=tmp_path, **env).returncode == 0
    assert ingot("audit", "verify", "--skills", str(library), cwd=tmp_path, **env).returncode == 0
