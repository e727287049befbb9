"""L0's side-effect comparison: side-effecting calls the replay dropped or added, counted per call."""

from __future__ import annotations

from types import SimpleNamespace

from optimize.measure.level0 import side_effect_diff
from optimize.measure.replay import ReplayStep


def _run(*calls: tuple[str, dict]) -> SimpleNamespace:
    """Anything with `.steps` of indexed tool calls (Golden and ReplayRun both are)."""
    return SimpleNamespace(
        steps=tuple(ReplayStep(i, n, a, "ok", "recorded") for i, (n, a) in enumerate(calls, 1))
    )


def test_missing_and_extra_side_effects_are_labelled_per_call_and_the_first_missing_is_cited():
    golden = _run(("lookup", {"q": 1}), ("send", {"to": "a"}), ("send", {"to": "a"}), ("pay", {"n": 5}))
    replay = _run(("send", {"to": "a"}), ("lookup", {"q": 2}), ("refund", {"n": 5}), ("send", {"to": "b"}))
    labels, cited = side_effect_diff(golden, replay, frozenset({"send", "pay", "refund"}))
    assert labels == [
        'missing side effect: send({"to": "a"})',  # sent twice, replayed once
        'missing side effect: pay({"n": 5})',
        'extra side effect: refund({"n": 5})',
        'extra side effect: send({"to": "b"})',
    ]
    assert cited == {"run": "golden", "step": 2, "quote": 'send({"to": "a"})'}
    # Only extra ones: the citation is the replay's first.
    labels, cited = side_effect_diff(_run(("lookup", {})), replay, frozenset({"refund"}))
    assert labels == ['extra side effect: refund({"n": 5})']
    assert cited == {"run": "replay", "step": 3, "quote": 'refund({"n": 5})'}
    assert side_effect_diff(golden, golden, frozenset({"send", "pay"})) == ([], None)
