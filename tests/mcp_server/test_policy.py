"""Routing policy: metadata parsing and compatibility checks against the caller's context."""

from __future__ import annotations

import pytest

from mcp_server.policy import CallerContext, Policy, PolicyInvalid, check, may_read, parse_policy


def test_metadata_lists_accept_comma_strings_and_yaml_lists():
    policy = parse_policy(
        {
            "platforms": "Linux, macOS",
            "requires-tools": ["bash", "git"],
            "priority": "7",
            "trust": "Trusted",
            "author": "ignored",
        }
    )
    assert policy.platforms == ("linux", "darwin")
    assert policy.requires_tools == ("bash", "git")
    assert (policy.priority, policy.trust) == (7, "trusted")


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"priority": "high"}, "integer"),
        ({"priority": "1000"}, "between"),
        ({"trust": "maybe"}, "trusted, unverified, blocked"),
        ({"activation": 3}, "auto, manual"),
        ({"platforms": {"os": "linux"}}, "comma-separated"),
    ],
)
def test_malformed_metadata_is_rejected_with_the_reason(metadata, message):
    with pytest.raises(PolicyInvalid, match=message):
        parse_policy(metadata)


def test_blocked_and_manual_skills_are_never_routable():
    assert check(Policy(trust="blocked"), CallerContext())[0] == "trust: blocked"
    assert check(Policy(activation="manual"), CallerContext())[0] == "activation: manual"


def test_constraints_use_the_callers_context_and_unknown_context_is_reported_unchecked():
    policy = Policy(
        harnesses=("codex",), platforms=("darwin",), requires_tools=("bash",), requires_mcps=("github",)
    )
    assert check(policy, CallerContext()) == (None, ("harness", "platform", "tools", "mcps"))
    assert check(policy, CallerContext(harness="claude-code"))[0] == "harness"
    assert check(policy, CallerContext(platform="linux"))[0] == "platform"
    assert check(policy, CallerContext(available_tools=("python",)))[0] == "tools"
    assert check(policy, CallerContext(available_mcps=()))[0] == "mcps"
    full = CallerContext(
        harness="Codex", platform="macos", available_tools=("bash", "x"), available_mcps=("github",)
    )
    assert check(policy, full) == (None, ())


def test_project_scope_is_matched_against_the_callers_cwd(tmp_path):
    policy = Policy(projects=(str(tmp_path / "billing"),))
    assert check(policy, CallerContext(cwd=str(tmp_path / "billing" / "src")))[0] is None
    assert check(policy, CallerContext(cwd=str(tmp_path / "billing-old")))[0] == "project"
    # `..` is resolved before comparing, both ways.
    escape = str(tmp_path / "billing" / ".." / ".." / "etc")
    assert check(policy, CallerContext(cwd=escape))[0] == "project"
    assert check(policy, CallerContext(cwd=str(tmp_path / "other" / ".." / "billing")))[0] is None


def test_path_patterns_look_for_matching_files_under_the_callers_cwd(tmp_path):
    (tmp_path / "db" / "migrations").mkdir(parents=True)
    (tmp_path / "db" / "migrations" / "001.sql").write_text("select 1;")
    policy = Policy(paths=("**/*.sql",))
    assert check(policy, CallerContext(cwd=str(tmp_path), may_read_cwd=True))[0] is None
    top = tmp_path / "top"
    top.mkdir()
    (top / "schema.sql").write_text("create table t();")
    assert (
        check(policy, CallerContext(cwd=str(top), may_read_cwd=True))[0] is None
    )  # `**/` matches at the top too
    assert check(Policy(paths=("*.tf",)), CallerContext(cwd=str(tmp_path), may_read_cwd=True))[0] == "paths"
    assert check(policy, CallerContext(cwd="/no/such/dir", may_read_cwd=True)) == (None, ("paths",))
    # Not allowed to look (the default): unchecked, whatever is on disk.
    assert check(Policy(paths=("*.tf",)), CallerContext(cwd=str(tmp_path))) == (None, ("paths",))


def test_a_cwd_the_server_cannot_read_leaves_paths_unchecked_instead_of_failing(tmp_path):
    policy = Policy(paths=("**/*.sql",))
    too_long = str(tmp_path) + "/a" * 3000  # ENAMETOOLONG from the file system, not an answer
    assert check(policy, CallerContext(cwd=too_long, may_read_cwd=True)) == (None, ("paths",))


def test_a_tree_of_empty_folders_is_walked_only_up_to_the_limit(tmp_path):
    import mcp_server.policy as policy_mod

    tree = tmp_path / "tree"
    for i in range(policy_mod.PATHS_SCAN_LIMIT + 60):
        (tree / f"d{i:04}").mkdir(parents=True)
    ctx = CallerContext(cwd=str(tree), may_read_cwd=True)
    # Folders and no file: without counting folders it would walk them all and say "no match".
    assert check(Policy(paths=("**/*.sql",)), ctx) == (None, ("paths",))  # too big to say
    # The same folder spelt otherwise is the same cache entry: one walk, however it is spelt.
    cached = set(policy_mod._paths_cache)
    again = CallerContext(cwd=str(tree) + "/.", may_read_cwd=True)
    assert check(Policy(paths=("**/*.sql",)), again) == (None, ("paths",))
    assert set(policy_mod._paths_cache) == cached and (str(tree.resolve()), ("**/*.sql",)) in cached


def test_may_read_only_under_allowed_roots_with_links_resolved(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "proj").mkdir(parents=True)
    outside.mkdir()
    (allowed / "escape").symlink_to(outside)
    roots = (allowed.resolve(),)
    assert may_read(str(allowed / "proj"), roots) and may_read(str(allowed), roots)
    assert not may_read(str(outside), roots) and not may_read(str(allowed / "escape"), roots)
    assert not may_read(str(allowed / ".." / "outside"), roots) and not may_read(str(allowed / "proj"), ())


def test_the_peer_skill_router_block_is_read_as_an_alias_of_our_keys():
    policy = parse_policy(
        {
            "skill-router": {
                "trust": "trusted",
                "required_tools": ["bash", "git"],
                "platforms": ["macos"],
                "activation": "manual",
                "harnesses": "Claude-Code",
                "priority": 7,
                "conflicts": ["old-skill"],
            }
        }
    )
    assert policy == Policy(
        harnesses=("claude-code",),
        platforms=("darwin",),
        requires_tools=("bash", "git"),
        trust="trusted",
        activation="manual",
        priority=7,
        conflicts=("old-skill",),
    )


def test_our_keys_win_over_the_peer_block_but_a_peer_block_is_never_overridden():
    both = parse_policy({"priority": "2", "skill-router": {"priority": 9, "platforms": "linux"}})
    assert (both.priority, both.platforms) == (2, ("linux",))
    blocked = parse_policy({"trust": "trusted", "skill-router": {"trust": "blocked"}})
    assert blocked.trust == "blocked"
    assert check(blocked, CallerContext())[0] == "trust: blocked"
    assert parse_policy({"trust": "blocked", "skill-router": {"trust": "trusted"}}).trust == "blocked"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"trust": "blocked", "sandbox": "strict"}, "does not enforce \\(sandbox\\)"),
        ("trust: blocked", "must be a mapping"),
        ({"trust": "maybe"}, "metadata.skill-router.trust must be one of"),
        ({"trust": 5}, "metadata.skill-router.trust must be one of"),
        ({"priority": "high"}, "metadata.skill-router.priority must be an integer"),
        ({"platforms": 7}, "metadata.skill-router.platforms must be a comma-separated string"),
    ],
)
def test_a_peer_block_ingot_cannot_honour_disables_the_skill_with_a_reason(block, message):
    with pytest.raises(PolicyInvalid, match=message):
        parse_policy({"skill-router": block})


def test_a_misspelt_peer_block_is_read_too_so_its_block_is_never_ignored():
    for key in ("skill_router", "Skill-Router"):
        assert parse_policy({key: {"trust": "blocked"}}).trust == "blocked"
    with pytest.raises(PolicyInvalid, match="2 peer routing blocks"):
        parse_policy({"skill-router": {"trust": "trusted"}, "skill_router": {"trust": "blocked"}})
