"""Decides and is the only writer: changes (the API), pending, evidence, gate, quarantine, status,
audit chain, lock, and `promote.py`, the only code that writes a skills root.

May import `measure/` (admission checks, re-verification at approval) and the serving core.
Must not import `search/`, the agent or any front end."""
