"""Progress of long work: the step record and its line, and how the CLI shows it on a terminal.

The commands' plain lines (stderr not a terminal) are in test_progress_cli.py; the UI's live
run page in tests/ui/test_runs.py."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from ingot.progress import Step, Steps, parse
from tests.conftest import wait_for


def test_a_step_line_reads_as_a_person_says_it_and_parses_back():
    counted = Step(3, 5, "held-out A/B", 6, 24, "judgements")
    assert counted.line() == "step 3 of 5: held-out A/B 6/24 judgements"
    assert parse(f"evaluate pdf: {counted.line()}") == counted
    bare = Step(1, 5, "checks")
    assert bare.line() == "step 1 of 5: checks" and parse(bare.line()) == bare
    assert parse("a stepladder of 3 steps") is None and parse("evaluated chg-0123: blocked") is None
    assert counted.fraction == (2 + 6 / 24) / 5 and Step(5, 5, "replay", 4, 4).fraction == 1.0


def test_steps_are_numbered_from_the_plan_and_an_unplanned_one_grows_the_count():
    seen: list[str] = []
    steps = Steps(["checks", "held-out A/B"], lambda step: seen.append(step.line()))
    steps.begin("checks")
    count = steps.begin("held-out A/B")
    count(1, 3, "judgements")
    steps.begin("replay")  # not planned: the count grows rather than lies
    assert seen == [
        "step 1 of 2: checks",
        "step 2 of 2: held-out A/B",
        "step 2 of 2: held-out A/B 1/3 judgements",
        "step 3 of 3: replay",
    ]


DRAW = """
from ingot.cli.progress import progress
from ingot.progress import Steps
with progress("evaluate pdf") as on_step:
    steps = Steps(["checks", "held-out A/B"], on_step)
    steps.begin("checks")
    count = steps.begin("held-out A/B")
    for done in range(4):
        count(done, 3, "judgements")
print("result on stdout", flush=True)
"""


def test_on_a_terminal_each_step_draws_a_bar_on_stderr_and_stdout_keeps_only_the_result():
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # as a real one
    try:
        child = subprocess.Popen(  # noqa: S603 - this interpreter, a fixed script
            [sys.executable, "-c", DRAW],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,  # a terminal
            text=True,
        )
        os.close(secondary)
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        stdout = child.communicate(timeout=60)[0]
    finally:
        os.close(primary)
    wait_for(lambda: child.returncode is not None)
    shown = drawn.decode()
    assert "evaluate pdf [1/2] checks" in shown
    assert "evaluate pdf [2/2] held-out A/B" in shown and "3/3 judgements" in shown
    assert "step 2 of 2" not in shown  # a bar, not the plain lines
    assert stdout == "result on stdout\n"
