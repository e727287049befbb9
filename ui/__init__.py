"""The review UI (front end, FastAPI): the review queue and cards with evidence, passport, risk
and lifecycle, a confirming approve / reject, history with every change's lifecycle, trust and
rollback, skill pages, the library with try-routing, the Traces page (bless goldens), and
background optimize runs.

Adds no decision logic: every action calls `optimize.control` (`ChangeControl`), like the CLI."""
