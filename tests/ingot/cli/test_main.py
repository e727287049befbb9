"""The `ingot` command line, run as a real process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from fastmcp import Client

from tests.conftest import BUNDLED_SKILLS, free_port, wait_for, write_skill

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def bundled(tmp_path: Path) -> Path:
    """A copy of the bundled skills: a test's state home must never claim the repository's own root."""
    root = tmp_path / "bundled-skills"
    if not root.exists():
        shutil.copytree(BUNDLED_SKILLS, root)
    return root


def ingot(
    *args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None, **env_vars: str
) -> subprocess.CompletedProcess:
    """Run the CLI in `cwd`; its state goes to the state home of the roots it is given."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "INGOT_HOME"},
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
        **env_vars,
    }
    return subprocess.run(
        [sys.executable, "-m", "ingot.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_route_prints_the_decision_and_its_components(tmp_path):
    done = ingot(
        "route",
        "--skills",
        str(bundled(tmp_path)),
        "--json",
        "Draft release notes for 2.0 from the merged pull requests",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    decision = json.loads(done.stdout)
    assert decision["match"] == "release-notes" and len(decision["revision"]) == 64
    assert "bm25_description" in decision["components"]
    text = ingot("route", "--skills", str(bundled(tmp_path)), "Explain the offside rule", cwd=tmp_path)
    assert text.stdout.startswith("novel:")


def test_skills_lists_revisions_and_skipped_folders_with_reasons(tmp_path):
    write_skill(tmp_path / "root", "fine", "A fine skill.")
    write_skill(tmp_path / "root", "wrong-name", "Mismatch.", folder="other-folder")
    write_skill(
        tmp_path / "root", "held", "Blocked.", extra="metadata:\n  skill-router:\n    trust: blocked\n"
    )
    done = ingot("skills", "--skills", str(tmp_path / "root"), cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("fine  ")
    assert "SKIPPED" in done.stdout and "must equal the folder name" in done.stdout
    assert "NOT SERVED held " in done.stdout and "trust: blocked" in done.stdout
    assert not any(line.startswith("held ") for line in done.stdout.splitlines())


def test_bench_routing_prints_json_metrics(tmp_path):
    done = ingot(
        "bench",
        "routing",
        "--skills",
        str(bundled(tmp_path)),
        "--cases",
        str(FIXTURES / "bundled_cases.jsonl"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["n"] == 10 and report["skills"] == 7
    assert {"top1", "recall_at_3", "no_route_rate", "false_route_rate", "mcp_route_and_load_ms"} <= set(
        report
    )
    assert report["top1"] == 1.0 and report["no_route_rate"] == 1.0 and report["recall_at_3"] == 1.0
    assert report["calibration"]["related_at"] == 0.35


def calibrate(tmp_path: Path, cases: Path | str) -> subprocess.CompletedProcess:
    """`ingot calibrate` on a copy of the bundled skills, scored on `cases`."""
    return ingot("calibrate", "--skills", str(bundled(tmp_path)), "--cases", str(cases), cwd=tmp_path)


def test_calibrate_prints_the_derived_rule_and_scores_labelled_cases(tmp_path):
    done = calibrate(tmp_path, str(FIXTURES / "bundled_cases.jsonl"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    derived = report["derived"]
    assert report["skills"] == 7 and derived["pseudo_queries"] >= 7
    assert derived["background_anchor"] < derived["related_threshold"] < derived["own_anchor"]
    assert 0.0 <= derived["no_route_background"] <= 1.0 and 0.0 <= derived["route_own"] <= 1.0
    assert report["cases"]["measured"]["top1"] == 1.0
    assert report["cases"]["refinement"]["suggested"].startswith("ROUTE_RELATED_THRESHOLD=")


def test_calibrate_refuses_a_bad_cases_file_with_one_line(tmp_path):
    (tmp_path / "cases.jsonl").write_text('{"task": "ok", "expected": null}\nnot json\n')
    done = calibrate(tmp_path, str(tmp_path / "cases.jsonl"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'cases.jsonl'}:2: not a routing case "
        "(Expecting value: line 1 column 1 (char 0)); "
        "see `ingot bench routing --help`"
    ]


def test_calibrate_refuses_a_cases_file_that_is_not_text_with_one_line(tmp_path):
    (tmp_path / "cases.jsonl").write_bytes(b'{"task": "ok"}\n\x9d\xff\x00 binary')
    done = calibrate(tmp_path, str(tmp_path / "cases.jsonl"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'cases.jsonl'} is not UTF-8 text (byte 15); a cases file is JSON lines"
    ]


def test_the_threshold_calibrate_suggests_is_one_ingot_accepts(tmp_path):
    """Cases whose nulls score high pick a related threshold above the match threshold: the
    suggestion raises both, so copying it as it is starts a router instead of a settings error."""
    cases = tmp_path / "cases.jsonl"
    rows = [
        ("my postgres query is slow, how do I read the explain plan", "postgres-query-tuning"),
        ("Draft release notes for v3.1 from the merged pull requests", "release-notes"),
        ("my postgres query is slow", None),
        ("write release notes", None),
    ]
    cases.write_text("".join(json.dumps({"task": t, "expected": e}) + "\n" for t, e in rows))
    skills = str(bundled(tmp_path))
    done = calibrate(tmp_path, cases)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    suggested = report["cases"]["refinement"]["suggested"]
    settings = dict(pair.split("=") for pair in suggested.split())
    related = float(settings["ROUTE_RELATED_THRESHOLD"])
    assert 0.0 <= related <= 2.0
    assert related > report["derived"]["tau_match"]  # these cases do pick one above it
    assert float(settings["ROUTE_MATCH_THRESHOLD"]) == related
    routed = ingot("route", "--skills", skills, "--json", rows[0][0], cwd=tmp_path, **settings)
    assert routed.returncode == 0, routed.stderr
    assert "cases_naming_skills_not_in_the_library" not in report["cases"]
    with cases.open("a") as more:
        more.write(json.dumps({"task": "tune my query", "expected": "postgres-tuning"}) + "\n")
    again = json.loads(calibrate(tmp_path, cases).stdout)
    assert again["cases"]["cases_naming_skills_not_in_the_library"] == {
        "count": 1,
        "skills": ["postgres-tuning"],
    }


def test_route_refuses_a_min_score_that_is_not_a_number_in_range(tmp_path):
    skills = str(bundled(tmp_path))
    for value, why in (("nan", "must be a number from -1 to 2, not nan"), ("5", "5.0 is not in the range")):
        done = ingot(
            "route", "--skills", skills, f"--min-score={value}", "--json", "slow postgres", cwd=tmp_path
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and why in lines[0], lines


def test_a_bad_setting_is_one_clear_error_with_exit_code_2(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("MCP_PORT=seventy\n")
    done = ingot("route", "anything", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("Error: invalid settings: MCP_PORT")


def test_serving_on_a_public_address_without_allowed_hosts_or_a_ui_token_is_refused(tmp_path):
    done = ingot("serve", "--skills", str(bundled(tmp_path)), "--host", "0.0.0.0", cwd=tmp_path)
    assert (
        done.returncode == 2 and "refusing to bind the UI on 0.0.0.0 without an access token" in done.stderr
    )
    done = ingot("serve", "--skills", str(bundled(tmp_path)), "--host", "0.0.0.0", "--no-ui", cwd=tmp_path)
    assert done.returncode == 2 and "refusing to bind MCP on 0.0.0.0" in done.stderr
    done = ingot("ui", "--skills", str(bundled(tmp_path)), "--host", "0.0.0.0", cwd=tmp_path)
    assert (
        done.returncode == 2 and "refusing to bind the UI on 0.0.0.0 without an access token" in done.stderr
    )


def test_serve_answers_mcp_and_ui_then_stops_on_sigterm(tmp_path):
    mcp_port, ui_port = free_port(), free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    output = tmp_path / "serve.log"  # a file, not a pipe: nobody reads a pipe while it serves
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingot.cli",
            "serve",
            "--skills",
            str(bundled(tmp_path)),
            "--mcp-port",
            str(mcp_port),
            "--ui-port",
            str(ui_port),
        ],
        cwd=tmp_path,
        env=env,
        stdout=output.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:

        async def route() -> dict:
            async with Client(f"http://127.0.0.1:{mcp_port}/mcp") as client:
                result = await client.call_tool("route_and_load", {"task": "write a blameless postmortem"})
                return result.structured_content

        def up() -> dict | None:
            if process.poll() is not None:  # e.g. a port taken between free_port() and the bind
                raise AssertionError(f"ingot serve exited early:\n{output.read_text()[-3000:]}")
            try:
                return asyncio.run(route())
            except Exception:
                return None

        assert wait_for(up, timeout=60, interval=0.2)["match"] == "incident-postmortem"
        import httpx

        ui = f"http://127.0.0.1:{ui_port}"
        assert httpx.get(f"{ui}/library").status_code == 401  # not signed in: not even a page
        # The one line that lets a person in: a one-time link, and where the token is kept.
        said = re.search(
            r"ingot: sign in to the UI: (\S+) \(works once; after that, /login takes the token in (\S+)\)",
            output.read_text(),
        )
        assert said and said.group(1).startswith(f"{ui}/login/"), output.read_text()
        token_file = Path(said.group(2))
        assert token_file.name == "ui-token" and token_file.stat().st_mode & 0o777 == 0o600
        assert said.group(1).rsplit("/", 1)[1] not in token_file.read_text()  # the link is not the token
        with httpx.Client() as browser:
            assert browser.get(said.group(1)).status_code == 303
            page = browser.get(f"{ui}/library")
            assert page.status_code == 200 and "incident-postmortem" in page.text
            assert "Changes to review" in browser.get(f"{ui}/", follow_redirects=True).text
        assert httpx.get(said.group(1)).status_code == 401  # used: dead
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
