"""The docs as a reader meets them: the site builds without a warning, every link resolves, the
README and ARCHITECTURE stay short, and every shell session a page shows is run and prints what
the page says (tests/transcripts.py, up to ids, ports and times)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.transcripts import Shell, check_page, fences, matches, normalize, sessions, setup_of, workspace

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
READ = [REPO / "README.md", REPO / "ARCHITECTURE.md", *PAGES]  # what a reader reads: links, sessions
WITH_SESSIONS = [p for p in READ if sessions(p)]


def test_the_site_builds_without_a_warning(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
        check=False,
    )
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0 and not warnings, done.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()


def test_every_page_is_in_the_site_navigation():
    nav = (REPO / "mkdocs.yml").read_text()
    missing = [str(p.relative_to(DOCS)) for p in PAGES if str(p.relative_to(DOCS)) not in nav]
    assert not missing, f"add {missing} to mkdocs.yml's nav"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", READ, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_a_file_that_exists(page):
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to files that do not exist: {broken}"


def test_the_readme_is_read_in_ten_minutes_and_architecture_fits_its_budget():
    readme = (REPO / "README.md").read_text().splitlines()
    architecture = (REPO / "ARCHITECTURE.md").read_text().splitlines()
    assert len(readme) <= 300, f"README.md has {len(readme)} lines: move detail into docs/"
    assert len(architecture) <= 450, (
        f"ARCHITECTURE.md has {len(architecture)} lines: move detail into docs/design/"
    )


@pytest.mark.parametrize("page", READ, ids=lambda p: str(p.relative_to(REPO)))
def test_a_session_with_output_is_only_ever_a_console_block(page):
    """A `$ ` line outside a ```console block would be output nobody runs."""
    unrun = [
        f"{page.name}:{start}"
        for lang, start, body in fences(page.read_text())
        if lang != "console" and any(line.startswith("$ ") for line in body)
    ]
    assert not unrun, f"shell sessions that are not ```console blocks, so never executed: {unrun}"


def test_the_host_configs_in_the_docs_are_the_readme_s():
    """tests/ingot/cli/test_stdio.py launches the README's; the hosts page must show the same."""
    marker = re.compile(r"<!-- host: ([\w-]+) -->\n.*?```(\w+)\n(.*?)```", re.S)
    readme = dict(
        (name, (lang, body)) for name, lang, body in marker.findall((REPO / "README.md").read_text())
    )
    hosts = dict((name, (lang, body)) for name, lang, body in marker.findall((DOCS / "hosts.md").read_text()))
    assert readme and hosts == readme


def test_the_passport_table_in_the_design_page_is_architecture_s():
    """test_passport.py keeps ARCHITECTURE.md's copy equal to the code; this keeps the other."""

    def table(text: str) -> list[str]:
        lines = text.splitlines()
        start = lines.index("| cell | create | body | description | both | removal |")
        return lines[start : start + 8]

    design = table((DOCS / "design" / "change-control.md").read_text())
    assert design == table((REPO / "ARCHITECTURE.md").read_text())


def test_normalising_hides_ids_ports_and_times_but_not_words():
    shown = ["pending chg-8c45ae203b18 at 2026-12-03 09:52:13 on http://127.0.0.1:36149/v1 in 12.5 ms"]
    real = ["pending chg-0a1b2c3d4e5f at 2026-12-04T20:19:15+00:00 on http://127.0.0.1:41000/v1 in 3 ms"]
    assert normalize(shown) == normalize(real)
    assert normalize(["pending chg-8c45ae203b18"]) != normalize(["queued chg-8c45ae203b18"])


def test_an_ellipsis_line_stands_for_any_lines_and_nothing_else():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert not matches(["a", "b"], ["a", "b", "c"])


def test_a_session_is_run_and_a_changed_output_is_reported_with_the_real_one(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ ingot history release-note\n"
        "Error: no skill named 'release-note' (did you mean 'release-notes'?)\n[exit 2]\n"
        "$ echo chg-8c45ae203b18 > id && cat id\nchg-0a1b2c3d4e5f\n```\n"
        "```console\n$ ls skills | head -1\nno such skill\n```\n"
    )
    wrong = check_page(page)
    assert [m.step.command for m in wrong] == ["ls skills | head -1"]
    assert "csv-data-cleaning" in str(wrong[0]) and "no such skill" in str(wrong[0])


def test_an_id_the_page_showed_is_typed_as_the_one_the_run_printed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ echo made chg-$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \\n')\n"
        "made chg-8c45ae203b18\n$ echo using chg-8c45ae203b18\nusing chg-8c45ae203b18\n```\n"
    )
    with workspace(setup_of(page)) as (folder, env):
        shell = Shell(folder, env)
        made, using = sessions(page)[0].steps
        real = shell.run(made)[0].split()[-1]
        assert real != "chg-8c45ae203b18" and shell.command(using) == f"echo using {real}"


@pytest.mark.parametrize("page", WITH_SESSIONS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_session_prints_what_the_page_shows(page):
    setup_of(page)  # a bad set-up comment fails here, before anything runs
    wrong = check_page(page)
    assert not wrong, (
        f"{page.relative_to(REPO)}: {len(wrong)} command(s) print something else today "
        f"(`python -m tests.transcripts {page.relative_to(REPO)}` prints the real output):\n\n"
        + "\n\n".join(map(str, wrong))
    )
