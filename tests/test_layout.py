"""The floors and rooms of ARCHITECTURE.md's module map, checked on every import in the tree.

Each rule names a package (or module) and the project packages it must not import; imports
inside functions count too. A front end may import the core; the core never imports a front end.
The one documented seam upward is `optimize.measure` using the reference agent (`agent.run`) as
its serving path."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("ingot.cli", "ingot.bench", "ui", "mcp_server.server", "agent.proxy")

# The reference agent's serving path sits below measure, which runs candidates through it.
AGENT_FORBIDS = (
    "optimize.control",
    "optimize.measure",
    "optimize.search",
    "ui",
    "ingot.cli",
    "ingot.runtime",
    "ingot.model_runtime",
    "mcp_server.server",
)

# (module prefix, forbidden import prefixes)
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("ingot.errors", ("ingot.", "mcp_server", "optimize", "agent", "ui")),
    ("ingot.faults", ("ingot.", "mcp_server", "optimize", "agent", "ui")),
    (
        "ingot.settings",
        (
            "ingot.cli",
            "ingot.bench",
            "ingot.runtime",
            "ingot.model_runtime",
            "mcp_server",
            "optimize",
            "agent",
            "ui",
        ),
    ),
    (
        "ingot.fsutil",
        (
            "ingot.cli",
            "ingot.bench",
            "ingot.runtime",
            "ingot.model_runtime",
            "ingot.settings",
            "mcp_server",
            "optimize",
            "agent",
            "ui",
        ),
    ),
    (
        "ingot.home",
        (
            "ingot.cli",
            "ingot.bench",
            "ingot.runtime",
            "ingot.model_runtime",
            "ingot.settings",
            "mcp_server",
            "optimize",
            "agent",
            "ui",
        ),
    ),
    ("ingot.seal", ("ingot.", "mcp_server", "optimize", "agent", "ui")),
    ("ingot.runtime", FRONT_ENDS),
    ("ingot.model_runtime", FRONT_ENDS),
    ("ingot.evaluation", FRONT_ENDS),
    ("ingot.background", ("ingot.", "mcp_server", "optimize", "agent", "ui")),
    ("ingot.progress", ("ingot.", "mcp_server", "optimize", "agent", "ui")),
    ("ingot.bench", ("ingot.cli",)),
    ("ingot.metrics_sources", FRONT_ENDS),
    (
        "mcp_server",
        ("optimize", "agent", "ui", "ingot.cli", "ingot.bench", "ingot.runtime", "ingot.model_runtime"),
    ),
    (
        "optimize.models",
        (
            "optimize.control",
            "optimize.measure",
            "optimize.search",
            "agent",
            "ui",
            "ingot.cli",
            "ingot.runtime",
            "ingot.model_runtime",
            "mcp_server.server",
        ),
    ),
    ("agent.run", AGENT_FORBIDS),
    ("agent.workspace", AGENT_FORBIDS),
    (
        "agent.chat_model",
        (
            "optimize.control",
            "optimize.measure",
            "optimize.search",
            "ui",
            "ingot.cli",
            "ingot.runtime",
            "ingot.model_runtime",
        ),
    ),
    (
        "optimize.measure",
        ("optimize.control", "optimize.search", *FRONT_ENDS, "ingot.runtime", "ingot.model_runtime"),
    ),
    ("optimize.control", ("optimize.search", *FRONT_ENDS, "ingot.runtime", "ingot.model_runtime", "agent")),
    ("optimize.search", (*FRONT_ENDS, "ingot.runtime", "ingot.model_runtime")),
    (
        "ui",
        ("ingot.cli", "ingot.bench", "ingot.runtime", "ingot.model_runtime", "mcp_server.server", "agent"),
    ),
]
# optimize.search reaches change control only through ChangeControl (propose) and the bundle it
# returns, and reports an incident (the loop's mined score below the bar) like any caller.
SEARCH_MAY_USE_FROM_CONTROL = (
    "optimize.control.changes",
    "optimize.control.evidence",
    "optimize.control.autopilot.report_incident",
)
# The exception, not the rule: the MCP front end lives in mcp_server/ and calls change control.
EXEMPT = {"mcp_server.server"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("ingot", "mcp_server", "optimize", "agent", "ui"):
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _under(name: str, prefix: str) -> bool:
    return name == prefix.rstrip(".") or name.startswith(prefix if prefix.endswith(".") else prefix + ".")


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_up_the_floors(module):
    if module in EXEMPT:
        return
    imported = _imports(MODULES[module], module)
    offences = []
    for prefix, forbidden in RULES:
        if not _under(module, prefix):
            continue
        for name in imported:
            if any(_under(name, f) for f in forbidden) and not _under(name, module):
                offences.append(name)
    if _under(module, "optimize.search"):
        offences += [
            n
            for n in imported
            if _under(n, "optimize.control")
            and not any(_under(n, allowed) for allowed in SEARCH_MAY_USE_FROM_CONTROL)
            and not any(a.startswith(f"{n}.") for a in SEARCH_MAY_USE_FROM_CONTROL)  # `from n import a`
        ]
    assert not offences, f"{module} imports {sorted(set(offences))}, which its floor must not"


def test_the_rules_cover_every_module():
    # Package roots and front ends may import the core; every other module falls under a rule.
    roots = {"ingot", "optimize", "agent"}
    uncovered = [
        m
        for m in MODULES
        if not any(_under(m, p) for p, _ in RULES)
        and m not in roots
        and not any(_under(m, f) for f in FRONT_ENDS)
    ]
    assert not uncovered, f"add a rule for {uncovered} (and its room in ARCHITECTURE.md)"


def test_the_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from optimize.control.promote import Promoter\n")
    assert "optimize.control.promote" in _imports(bad, "optimize.measure.bad")
