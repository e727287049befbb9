"""The replay verdict's rules, as pure functions of a replay cell's per-golden findings. One
golden's verdict: BLOCK for a regression established by L0 evidence or by L2 and L3 agreeing, on
a complete replay, in something the controls (the unchanged champion replayed the same way) do
not also show; WARN for a contested or partial finding, a replay that did not finish, a world
fact that moved without corroboration, or a golden the unchanged champion itself fails every
time (stale); PASS otherwise. The live revision replayed alone (`ingot replay`, no controls): a
difference on a golden one of whose recorded calls answered differently (the world moved,
model-free: provenance.py) is stale, a WARN that is not the revision's, unless its replay with
every call answered as recorded regressed too; a BLOCK there is a model or harness change, and
`cause` says which world and which serving model it was found with. The change's coverage: an
instruction it alters that no blessed run exercised (shown by no replay, and not ruled wording
only or exercised by a model), or that nothing could decide, is a WARN "not exercised by any
blessed run"; coverage missing from a cell that replayed a change is a WARN too, never a PASS. A
model's ruling decides an instruction only where the model-free comparison (wording.py,
recomputed here from the instruction's text) finds nothing but wording: where it finds another
action, object, recipient, number, unit, negation, comparative or quantifier, only a replay
showing it exercises the instruction, whatever the model said. The cell's verdict is the worst
of its goldens' and its coverage's. The cell records every input here, and replay_rule.py
recomputes the verdict from them with these same functions, so a verdict can always be
re-derived from the bundle alone; `model_rulings` names each model ruling it rests on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from optimize.measure.wording import differences

ORDER = {"PASS": 0, "WARN": 1, "BLOCK": 2}
# How people read a replay: the cell in the passport's words, each golden as what became of it.
# PASS / WARN / BLOCK stay the replay's record (evidence.json); nobody is shown them.
STATE_OF = {"PASS": "pass", "WARN": "missing", "BLOCK": "fail"}
FINDING_OF = {"PASS": "held", "WARN": "undecided", "BLOCK": "regressed"}
SAID = {
    "PASS": "pass: every blessed run held",
    "WARN": "missing: the replays could not decide",
    "BLOCK": "fail: a blessed run regressed",
}


def blamed(signature: Iterable[str], controls: Sequence[Mapping[str, Any]]) -> set[str]:
    """What the candidate's finding shows that no failing control shows too."""
    shown = {s for c in controls if c.get("verdict") != "pass" for s in c.get("signature") or ()}
    return set(signature) - shown


def world_moved(entry: Mapping[str, Any]) -> bool:
    """Whether a recorded call of the golden answered differently in the replays (a world value
    moved, listed as a fact or tracked by provenance): model-free, from the entry alone."""
    return bool(entry.get("moved_calls") or entry.get("drift"))


def moves(entry: Mapping[str, Any]) -> list[str]:
    """What moved, value by value (from what to what, from which call), then any call that
    answered differently without a value of the answer in it."""
    drift = [d for d in entry.get("drift") or () if isinstance(d, Mapping)]
    said = []
    for d in drift:
        call = f"{d.get('tool')} step {d['step']}" if d.get("step") else str(d.get("tool"))
        said.append(f"{d.get('label')} {d.get('old')} -> {d.get('new') or 'unreadable'} ({call})")
    with_values = {d.get("step") for d in drift}
    said += [
        f"{c.get('tool')} step {c.get('step')} answers differently"
        for c in entry.get("moved_calls") or ()
        if isinstance(c, Mapping) and c.get("step") not in with_values
    ]
    return said


def is_stale(entry: Mapping[str, Any], alone: bool) -> bool:
    """The live revision replayed alone on a golden whose world moved: the golden records a world
    that is gone (re-bless it), and a difference is not the revision's, unless the revision,
    replayed once more with every call answered as recorded (`recorded_world`), regressed
    there too: then the move does not explain it (see `cause`)."""
    again = entry.get("recorded_world")
    failed_as_recorded = isinstance(again, Mapping) and again.get("verdict_found") == "regressed"
    return alone and world_moved(entry) and not failed_as_recorded


def cause(entry: Mapping[str, Any]) -> str:
    """Why the live revision, replayed alone, regressed on a golden, model-free: the world as it
    was (every world tool answered as recorded, or the recorded answers replayed after it moved),
    and which serving model the golden was recorded with against the one replayed."""
    if world_moved(entry):
        world = (
            f"the world moved ({'; '.join(moves(entry))}), but replayed with every call answered as "
            "recorded it regressed too"
        )
    else:
        world = "the world is unchanged (every world tool answered as recorded)"
    recorded, serving = entry.get("recorded_model"), entry.get("serving_model")
    if recorded and serving and recorded != serving:
        model = f"the serving model changed (recorded with {recorded}, replayed with {serving})"
    elif recorded and serving:
        model = (
            f"the serving model is the one recorded ({serving}): the harness or the model's behaviour changed"
        )
    else:
        model = "a model or harness change"
    return f"{world}: {model}"


def golden_verdict(entry: Mapping[str, Any], alone: bool = False) -> tuple[str, str]:
    """(PASS | WARN | BLOCK, why) for one golden's entry in a replay cell. `alone`: the live
    revision replayed with no unchanged champion (`ingot replay`), where a golden whose world
    moved is stale (a difference on it is a WARN, never a BLOCK) and a BLOCK says the world
    was unchanged."""
    stale = is_stale(entry, alone)
    if stale and entry.get("verdict_found") in ("regressed", "contested"):
        return "WARN", (
            f"stale: the world moved since it was recorded ({'; '.join(moves(entry))}), so the "
            "difference is not blamed on the live revision: re-bless it"
        )
    verdict, why = _finding(entry)
    drift = entry.get("drift") or ()
    # A value that moved without corroboration caps the verdict at WARN whether a world fact
    # listed it or provenance tracked it: either way the replay was judged against a guess.
    unconfirmed = [d for d in drift if d.get("ruling") != "world moved"]
    controls = entry.get("controls") or ()
    if unconfirmed and verdict == "PASS":
        labels = ", ".join(f"{d.get('label')} {d.get('old')} -> {d.get('new')}" for d in unconfirmed)
        verdict, why = "WARN", f"a world value changed without corroboration ({labels})"
    elif verdict == "PASS" and controls and all(c.get("verdict") != "pass" for c in controls):
        verdict = "WARN"
        why = "the unchanged champion fails this golden in every control (stale: re-bless or retire it)"
    if stale:
        why += f"; stale: the world moved since it was recorded ({'; '.join(moves(entry))}): re-bless it"
    elif alone and verdict == "BLOCK":
        why += f"; {cause(entry)}"
    return verdict, why


def _finding(entry: Mapping[str, Any]) -> tuple[str, str]:
    found = entry.get("verdict_found")
    if found == "pass":
        return "PASS", entry.get("note") or "passes"
    if found == "error":
        return "WARN", f"the replay did not finish: {entry.get('note') or 'no answer'}"
    if found not in ("regressed", "contested"):
        return "BLOCK", f"unknown finding {found!r} (malformed replay cell)"
    controls = entry.get("controls") or ()
    rest = blamed(entry.get("signature") or (), controls)
    failing = sum(c.get("verdict") != "pass" for c in controls)
    if failing and not rest:
        return (
            "PASS",
            f"the unchanged champion shows the same difference in {failing} of {len(controls)} controls",
        )
    if found == "contested":
        return "WARN", f"contested: {entry.get('note') or 'the judges did not settle it'}"
    if entry.get("evidence") not in ("L0", "L2+L3"):
        return "WARN", "a regression without L0 evidence or L2 and L3 agreeing"
    if entry.get("partial"):
        return "WARN", "regressed, but the replay was partial (world contact was unavailable)"
    cited = entry.get("cited") or {}
    where = f" at {cited.get('run')} step {cited.get('step')}: {cited.get('quote')!r}" if cited else ""
    return "BLOCK", f"regressed ({entry.get('evidence')}){where}"


def cell_verdict(goldens: Sequence[Mapping[str, Any]], alone: bool = False) -> tuple[str, list[str]]:
    """The worst golden verdict and one reason line per golden that did not pass."""
    verdict, reasons = "PASS", []
    for entry in goldens:
        found, why = golden_verdict(entry, alone)
        if ORDER[found] > ORDER[verdict]:
            verdict = found
        if found != "PASS":
            reasons.append(f"{entry.get('id')}: {why}")  # `why` says what became of it
    return verdict, reasons


def instruction_differences(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """What the model-free comparison finds the instruction changes besides wording: recomputed
    from its recorded text (a bundle cannot claim less), else as the entry records it."""
    old, new = entry.get("old"), entry.get("new")
    if isinstance(old, str) and isinstance(new, str) and (old or new):
        return differences(old, new)
    return tuple(str(d) for d in entry.get("differences") or ())


def instruction_status(entry: Mapping[str, Any]) -> tuple[str, str]:
    """(exercised | wording | not exercised, why) for one altered instruction of a coverage
    block: model-free evidence first (a replay showed it; what it changes besides wording), then
    the model's ruling, only where the model-free comparison finds nothing but wording."""
    served, shown = list(entry.get("served_to") or ()), list(entry.get("shown_by") or ())
    if shown:
        return "exercised", f"shown by the replay of {', '.join(shown)} (model-free)"
    if not served:
        return "not exercised", "no blessed run was served it (model-free: its file never reached a run)"
    ruling = entry.get("model")
    differs = instruction_differences(entry)
    if differs:
        said = ""
        if isinstance(ruling, Mapping):
            word = "wording only" if ruling.get("behaviour") == "unchanged" else "a change in behaviour"
            by = f"{ruling.get('tier')} ({ruling.get('model')})"
            said = f"; {by} ruled it {word}, which decides nothing here"
        what = "; ".join(differs) if entry.get("kind") == "changed" else f"{entry.get('kind')} instruction"
        return "not exercised", f"no replay showed it, and it is more than wording (model-free: {what}){said}"
    if not isinstance(ruling, Mapping):
        return "not exercised", "no replay showed it and no model could rule whether it is wording only"
    by = f"{ruling.get('tier')} ({ruling.get('model')})"
    if ruling.get("behaviour") == "unchanged":
        return "wording", f"wording only, ruled by {by}: {ruling.get('rationale') or ''}".rstrip(": ")
    exercised = [g for g in ruling.get("exercised_by") or () if g in served]
    if exercised:
        return "exercised", f"{by} rules that {', '.join(exercised)} call for it, though no replay showed it"
    return "not exercised", f"it changes behaviour ({by}) in no situation a blessed run has"


def model_rulings(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every model ruling a measured replay cell's verdict rests on, each with what it decided,
    its tier, model and prompt digest (None in a bundle recorded before digests were): the judge
    tiers that ruled on a golden decided above L0; the failing controls' when they changed the
    golden's verdict (excused a difference, or made it stale); the coverage ruling of each
    instruction whose status the model decided (wording only, or exercised by a run it named)."""
    out: list[dict[str, Any]] = []

    def add(what: str, decision: Mapping[str, Any], ruling: Any) -> None:
        out.append(
            {
                "decides": what,
                "tier": decision.get("tier"),
                "model": decision.get("model"),
                "ruling": ruling,
                "prompt_digest": decision.get("prompt_digest"),
            }
        )

    for entry in _mappings(block.get("goldens")):
        for d in _mappings(entry.get("decisions")) if entry.get("tier") != "L0" else ():
            if d.get("model") and d.get("verdict") != "skipped":
                add(f"golden {entry.get('id')}", d, d.get("verdict"))
        if golden_verdict(entry) != golden_verdict({**entry, "controls": []}):
            for n, control in enumerate(_mappings(entry.get("controls")), 1):
                for d in _mappings(control.get("decisions")) if control.get("verdict") != "pass" else ():
                    if d.get("model") and d.get("verdict") != "skipped":
                        add(f"golden {entry.get('id')} (control {n})", d, d.get("verdict"))
    coverage = block.get("coverage")
    for entry in _mappings(coverage.get("instructions")) if isinstance(coverage, Mapping) else ():
        ruling = entry.get("model")
        status, _ = instruction_status(entry)
        if isinstance(ruling, Mapping) and not entry.get("shown_by") and status != "not exercised":
            add(f"instruction {entry.get('id')}", ruling, "wording only" if status == "wording" else status)
    return out


def _mappings(items: Any) -> list[Mapping[str, Any]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list | tuple) else []


def ruling_text(ruling: Mapping[str, Any]) -> str:
    """One of `model_rulings` as a person reads it (the CLI and the review card say the same)."""
    digest = ruling.get("prompt_digest")
    known = isinstance(digest, str) and digest
    said = f"prompt sha256 {digest[:12]}" if known else "no prompt digest recorded"
    by = f"{ruling.get('tier')} ({ruling.get('model')})"
    return f"{ruling.get('decides')}: {by} ruled {ruling.get('ruling')}; {said}"


def said_rulings(block: Mapping[str, Any]) -> list[str]:
    """`model_rulings` as the lines people read; none for a cell too malformed to read (its
    verdict, recomputed by replay_rule.py, already says so)."""
    try:
        return [ruling_text(r) for r in model_rulings(block)]
    except (TypeError, ValueError, KeyError, AttributeError):
        return []


def coverage_verdict(coverage: Any, replayed_a_change: bool = True) -> tuple[str, list[str], list[str]]:
    """(PASS | WARN | BLOCK, reasons, labels of the instructions not exercised) for a cell's
    coverage block. Missing where a change was replayed: WARN; malformed: BLOCK."""
    if coverage is None:
        if not replayed_a_change:
            return "PASS", [], []
        return (
            "WARN",
            ["the change's coverage was not recorded (measured before coverage existed): re-evaluate"],
            [],
        )
    if not isinstance(coverage, Mapping):
        raise ValueError(f"coverage {coverage!r}")
    if coverage.get("status") == "not_applicable":
        return "PASS", [], []
    if coverage.get("status") != "measured" or not isinstance(coverage.get("instructions"), list):
        raise ValueError("coverage without its instructions")
    missing, named = [], []
    for entry in coverage["instructions"]:
        status, _ = instruction_status(entry)
        if status == "not exercised":
            label = str(entry.get("label") or entry.get("id"))
            differs = instruction_differences(entry) if entry.get("kind") == "changed" else ()
            missing.append(label)
            named.append(f"{label} (it changes {'; '.join(differs)})" if differs else label)
    if not missing:
        return "PASS", [], []
    return "WARN", [f"not exercised by any blessed run: {'; '.join(named)}"], missing


def replay_cell_verdict(
    block: Mapping[str, Any], of_a_change: bool = False
) -> tuple[str, list[str], list[str]]:
    """The verdict of a measured replay cell from its goldens and its coverage: (verdict,
    reasons, instructions not exercised). Raises (KeyError, ValueError, ...) when malformed.
    The live revision replayed alone (no champion) has the stale rule; `of_a_change` (approval
    recomputing a change's cell) never does, whatever the block says."""
    alone = not of_a_change and "champion_revision" in block and block["champion_revision"] is None
    verdict, reasons = cell_verdict(block["goldens"], alone)
    found, why, missing = coverage_verdict(block.get("coverage"), block.get("champion_revision") is not None)
    if ORDER[found] > ORDER[verdict]:
        verdict = found
    return verdict, why + reasons, missing
