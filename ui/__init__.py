"""The review UI (front end, FastAPI): review cards with evidence, approve / reject, history and
rollback, the library with try-routing, background optimize runs.

Adds no decision logic: every action calls `optimize.control.changes.ChangeControl`, like the CLI."""
