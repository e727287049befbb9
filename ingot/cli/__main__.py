"""`python -m ingot.cli ...`: the same as the `ingot` console script."""

from ingot.cli.main import run

run()
