"""`ingot calibrate`: show the decision rule Ingot derived for a library, and how it does on cases.

Registered on the group by `main.py`; this module imports only `options` from the CLI. No labels
are needed: the rule comes from the library (mcp_server/calibration.py). With `--cases`, the
labelled cases are routed in-process and scored like `ingot bench routing`, and the related
threshold the cases themselves would pick is printed as an optional refinement (a setting to
copy, never applied by itself)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import click

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option

NO_ROUTE_GOAL = 0.92  # the refinement keeps at least this share of the cases' null tasks unrouted
SETTABLE = (0.0, 2.0)  # the range ROUTE_*_THRESHOLD accept (ingot/settings.py)


@click.command()
@skills_option
@click.option(
    "--cases",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Labelled routing cases (JSON lines) to score the derived rule on.",
)
def calibrate(skills: tuple[Path, ...], cases: Path | None) -> None:
    """Print the thresholds derived for the library and the rates they give on its pseudo-queries."""
    from ingot.errors import IngotError
    from ingot.runtime import open_library, procedure_from

    settings = settings_for(skills)
    setup_logging("WARNING")
    library = open_library(settings, read_only=True)
    derived = library.calibration()
    if derived is None:
        raise IngotError("no skill is served from these roots, so there is nothing to calibrate")
    report: dict = {
        "schema_version": 1,
        "skills": library.status().skills,
        "procedure": asdict(procedure_from(settings)),
        "derived": derived.summary(),
        "reading": (
            "score = (confidence - background_anchor) / (own_anchor - background_anchor); a skill is "
            "loaded at score >= tau_related and is a match at >= tau_match (or when it leads every "
            "other skill by tau_lead)"
        ),
    }
    if cases is not None:
        report["cases"] = _on_cases(library, cases, derived.tau_match)
    print_json(report)


def _on_cases(library, path: Path, match_threshold: float) -> dict:
    from ingot.bench.routing import load_cases, route_in_process, score

    cases = load_cases(path)
    decisions = route_in_process(library, cases)
    report = {"measured": score(cases, decisions), "refinement": _refine(cases, decisions, match_threshold)}
    known = set(library.skills())
    unknown = sorted({name for case in cases for name in case.right} - known)
    if unknown:  # such a case can only count as a miss: usually a typo or a skill not copied in
        report["cases_naming_skills_not_in_the_library"] = {"count": len(unknown), "skills": unknown[:20]}
    return report


def _refine(cases, decisions, match_threshold: float) -> dict:
    """The related threshold (calibrated scale) that these cases would choose, if any keeps the goal.

    Only thresholds the settings accept (0 to 2) are considered; one above the match threshold is
    suggested with a match threshold to match, so the suggestion can be copied as it is."""
    tops = [(d.names[0] if d.names else None, d.score) for d in decisions]
    positives = sum(1 for c in cases if c.expected)
    nulls = sum(1 for c in cases if not c.expected)
    best = None
    for tau in sorted({s for _, s in tops if SETTABLE[0] <= s <= SETTABLE[1]}):
        top1 = sum(
            1 for c, (n, s) in zip(cases, tops, strict=True) if c.expected and s >= tau and n in c.right
        )
        unrouted = sum(1 for c, (_, s) in zip(cases, tops, strict=True) if not c.expected and s < tau)
        no_route = unrouted / nulls if nulls else None
        if no_route is not None and no_route < NO_ROUTE_GOAL:
            continue
        gain = (top1 / positives if positives else 0.0) + (no_route or 0.0)
        if best is None or gain > best[0]:
            best = (gain, tau, top1, no_route)
    if best is None or not positives or not nulls:
        return {"suggested": None, "why": "the cases need both expected skills and null tasks"}
    _, tau, top1, no_route = best
    related = math.floor(tau * 10000) / 10000
    suggested = f"ROUTE_RELATED_THRESHOLD={related}"
    if related > match_threshold:  # the settings refuse a related threshold above the match one
        suggested += f" ROUTE_MATCH_THRESHOLD={related}"
    return {
        "suggested": suggested,
        "top1": round(top1 / positives, 4),
        "no_route_rate": round(no_route, 4),
        "note": "fitted on these cases only: it is optimistic for them; the default needs no labels",
    }


COMMANDS = (calibrate,)
