"""Evidence and change control: everything between "an agent proposed a change" and "it is served".

Four rooms, read in this order, each importing only the ones before it (tests/test_layout.py):
- `models/`  talks to models and records it: the one client, ledger, cassettes, prompts, traces.
- `measure/` produces evidence and never decides: task sets, judges, A/B, sandboxed checks, mining.
- `control/` decides and is the only writer: pending queue, evidence bundles, gate, quarantine,
             audit chain, lock and `promote.py`, the only code that writes a skills root.
- `search/`  proposes candidates and never promotes: best-of-N, descriptions, the loop; it hands
             results to control only through `ChangeControl.propose`."""
