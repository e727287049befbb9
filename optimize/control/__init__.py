"""Decides and is the only writer: changes (the API), proposals (a candidate's way in) and verify
(approval's re-checks), pending, evidence, kinds (what a change changes, which cells apply),
gate (each measured cell's rules), passport (the verdict), quarantine and names, status, audit
chain (audit, audit_verify), lock, goldens_admin, earned autonomy and its autopilot, the candidate
inbox, protected roots (approved, guard), git history (gitrepo), and the `promote/` package, the
only code that writes a skills root.

May import `measure/` (admission checks, re-verification at approval) and the serving core.
Must not import `search/`, the agent or any front end."""
