"""Evidence and change control: everything between "an agent proposed a change" and "it is served".

Four rooms, read in this order, each importing only the ones before it (tests/test_layout.py):
- `models/`  talks to models and records it: the one client, ledger, cassettes, redaction,
             prompts, traces (local or Langfuse).
- `measure/` produces evidence and never decides: task sets, judges, A/B, routing impact,
             sandboxed checks, mining, goldens and regression replay.
- `control/` decides and is the only writer: pending queue, evidence bundles, change kinds, passport,
             audit chain, lock, earned autonomy, the candidate inbox, protected roots, git
             history, and `promote/`, the only code that writes a skills root.
- `search/`  proposes candidates and never promotes: best-of-N, descriptions, the loop; it hands
             results to control only through `ChangeControl.propose`."""
