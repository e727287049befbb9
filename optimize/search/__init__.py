"""Proposes candidates and never promotes: best-of-N body search, description search, research,
the `ingot optimize` pipeline and `ingot loop`.

May use `measure/` and `models/`; reaches `control/` only through `ChangeControl.propose` (and
the evidence bundle it returns). Must not import a front end."""
