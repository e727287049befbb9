"""The `ingot` command line (top floor): `main.py` builds the group from one module per area.

Owns argument parsing and the one place errors become `Error: ...` lines and exit codes.
Imports the ground floor (`ingot.errors`, `settings`, `runtime`) and the front ends it starts;
nothing outside `ingot/cli` imports it."""
