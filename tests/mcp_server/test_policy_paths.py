"""`paths` patterns as gitignore patterns (pathspec) against the fnmatch globs they replaced.

The old matcher and walk are kept below verbatim from `git show 40e3b32:mcp_server/policy.py`.
Where the old one was right the two agree (a table of patterns and paths, and walks of real
trees); where it was wrong the new one gives git's own answer, checked with `git check-ignore`:
`*` no longer crosses a `/` (`src/*.sql` is not `src/a/b.sql`), `**/` may match no folder,
`/x` anchors at the cwd, `dir/` is everything under it, `!` excludes, and a hidden folder (or
`node_modules`) a pattern names is walked (`.github/workflows/*.yml`); one no pattern names
still is not.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mcp_server.policy import PATHS_SCAN_LIMIT, PolicyInvalid, compile_paths, parse_policy
from mcp_server.policy import _scan_for_match as scan_for_match


def old_glob_match(rel: str, name: str, pattern: str) -> bool:
    """Glob semantics callers expect: `**/` also matches at the top, a bare pattern any file name."""
    return (
        fnmatch.fnmatch(rel, pattern)
        or (pattern.startswith("**/") and fnmatch.fnmatch(rel, pattern[3:]))
        or ("/" not in pattern and fnmatch.fnmatch(name, pattern))
    )


def old_matches(patterns: tuple[str, ...], rel: str) -> bool:
    return any(old_glob_match(rel, rel.rsplit("/", 1)[-1], p) for p in patterns)


def old_scan_for_match(cwd: str, patterns: tuple[str, ...]) -> bool | None:
    """Walk at most PATHS_SCAN_LIMIT entries (files and folders) under `cwd`; None when it cannot
    be read here (a name too long, no permission) or is too big to say."""
    root = Path(cwd)
    try:
        if not root.is_dir():
            return None
    except (OSError, ValueError):  # ENAMETOOLONG, EACCES, an embedded NUL: the folder is unreadable
        return None
    looked = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "node_modules"]
        looked += 1  # a tree of empty folders costs a walk too
        if looked >= PATHS_SCAN_LIMIT:
            return None
        rel_dir = Path(dirpath).relative_to(root)
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if any(old_glob_match(rel, name, p) for p in patterns):
                return True
            looked += 1
            if looked >= PATHS_SCAN_LIMIT:
                return None
    return False


# (patterns, path, matches): the old glob was right on every one of these.
AGREED = [
    (("*.sql",), "a.sql", True),
    (("*.sql",), "db/migrations/001.sql", True),  # no slash: a file name at any depth
    (("*.sql",), "a.sqlx", False),
    (("*.SQL",), "a.sql", False),
    (("**/*.sql",), "a.sql", True),  # `**/` at the top
    (("**/*.sql",), "x/y/a.sql", True),
    (("src/*.sql",), "src/a.sql", True),
    (("src/*.sql",), "lib/a.sql", False),
    (("src/*.sql",), "a.sql", False),
    (("docs/*.md",), "other/docs/a.md", False),  # a slash anchors the pattern at the cwd
    (("src/**/*.ts",), "src/a/b/c.ts", True),
    (("terraform/*.tf",), "terraform/main.tf", True),
    (("Dockerfile",), "Dockerfile", True),
    (("Dockerfile",), "app/Dockerfile", True),
    (("Dockerfile",), "Dockerfile.dev", False),
    (("?.py",), "a.py", True),
    (("?.py",), "ab.py", False),
    (("[ab].py",), "b.py", True),
    (("[ab].py",), "c.py", False),
    (("*.test.js",), "web/y.test.js", True),
    ((".env",), ".env", True),  # a hidden file at the top was always looked at
    (("*.tf", "*.sql"), "q.sql", True),
    (("*.tf", "*.sql"), "q.py", False),
]
# (patterns, path, what git says): the old glob said the opposite.
CORRECTED = [
    (("src/*.sql",), "src/a/b.sql", False),  # fnmatch's `*` crossed the `/`
    (("a/*/c.txt",), "a/b/x/c.txt", False),
    (("src/**/*.sql",), "src/a.sql", True),  # `/**/` may be no folder at all
    (("/Makefile",), "Makefile", True),  # anchored at the cwd
    (("docs/",), "docs/guide/a.md", True),  # a folder: everything under it
    (("*.sql", "!vendor/*.sql"), "vendor/a.sql", False),  # `!` excludes
]


def git_says(tmp_path: Path, patterns: tuple[str, ...], path: str) -> bool:
    """Whether git itself counts `path` as matched by these patterns, as a .gitignore."""
    repo = tmp_path / "oracle"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("\n".join(patterns) + "\n")
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text("")
    done = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=repo)
    assert done.returncode in (0, 1), done
    return done.returncode == 0


@pytest.mark.parametrize(("patterns", "path", "expected"), AGREED)
def test_the_gitignore_matcher_agrees_with_the_old_glob_where_it_was_right(patterns, path, expected):
    assert old_matches(patterns, path) is expected
    assert compile_paths(patterns).matches(path) is expected


@pytest.mark.parametrize(("patterns", "path", "expected"), CORRECTED)
def test_where_the_old_glob_was_wrong_the_matcher_gives_gits_answer(patterns, path, expected, tmp_path):
    assert old_matches(patterns, path) is not expected
    assert compile_paths(patterns).matches(path) is expected
    assert git_says(tmp_path, patterns, path) is expected


def tree(root: Path, *files: str) -> str:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    return str(root)


# (patterns, the only file under the cwd, found): walks on which the old and new agree.
WALKS_AGREED = [
    (("**/*.sql",), "db/migrations/001.sql", True),
    (("*.tf",), "db/migrations/001.sql", False),
    (("**/*.yml",), ".github/workflows/ci.yml", False),  # a hidden folder no pattern names
    (("*.js",), "node_modules/left-pad/index.js", False),
    (("*.js",), "web/.cache/bundle.js", False),
]
# (patterns, the only file under the cwd, found): the old walk never looked where the pattern said.
WALKS_CORRECTED = [
    ((".github/workflows/*.yml",), ".github/workflows/ci.yml", True),
    (("**/.config/*.toml",), "pkg/.config/tool.toml", True),
    (("node_modules/**/*.js",), "node_modules/left-pad/index.js", True),
    (("src/*.sql",), "src/a/b.sql", False),
]


@pytest.mark.parametrize(("patterns", "file", "found"), WALKS_AGREED)
def test_a_walk_of_a_real_tree_agrees_with_the_old_walk_where_it_was_right(patterns, file, found, tmp_path):
    cwd = tree(tmp_path / "project", file)
    assert old_scan_for_match(cwd, patterns) is found
    assert scan_for_match(cwd, patterns) is found


@pytest.mark.parametrize(("patterns", "file", "found"), WALKS_CORRECTED)
def test_a_walk_goes_into_the_hidden_folders_a_pattern_names(patterns, file, found, tmp_path):
    cwd = tree(tmp_path / "project", file)
    assert old_scan_for_match(cwd, patterns) is not found
    assert scan_for_match(cwd, patterns) is found


def test_a_named_hidden_folder_opens_only_for_the_pattern_that_names_it(tmp_path):
    cwd = tree(tmp_path / "project", ".github/workflows/ci.yml", ".github/scripts/lint.sql")
    assert scan_for_match(cwd, (".github/workflows/*.yml", "*.sql")) is True
    assert scan_for_match(cwd, (".github/workflows/*.py", "*.sql")) is False  # *.sql names no .github


@pytest.mark.parametrize(("pattern", "message"), [("#schema.sql", "comment"), ("!", "not a gitignore")])
def test_a_pattern_gitignore_cannot_read_disables_the_skill_naming_it(pattern, message):
    with pytest.raises(PolicyInvalid, match=message):
        parse_policy({"paths": [pattern]})
