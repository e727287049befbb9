"""What `ingot bench latency` times: deterministic synthetic libraries and tasks, or a real
library's own cases' tasks.

A `TaskSource` gives `count` distinct tasks for a seed; different seeds never share a task, so no
timed task is a query-cache hit for a task another measurement already embedded. Synthetic skills
and tasks are built from the same four word lists, so tasks land near (not on) skills.
Also used by tests and scripts that need a library of a given size.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from pathlib import Path

from ingot.errors import ConfigError

VERBS = [
    "migrate",
    "audit",
    "document",
    "benchmark",
    "refactor",
    "monitor",
    "deploy",
    "validate",
    "summarise",
    "design",
    "debug",
    "secure",
    "translate",
    "profile",
    "schedule",
    "review",
]
OBJECTS = [
    "invoices",
    "Kubernetes manifests",
    "GraphQL schemas",
    "Terraform modules",
    "sales reports",
    "React components",
    "Kafka topics",
    "Excel workbooks",
    "OAuth flows",
    "Jupyter notebooks",
    "S3 buckets",
    "Rust crates",
    "Android builds",
    "payroll exports",
    "REST endpoints",
    "Grafana dashboards",
    "legal contracts",
    "marketing emails",
    "SQL migrations",
    "GPU jobs",
]
DOMAINS = [
    "fintech",
    "healthcare",
    "retail",
    "logistics",
    "gaming",
    "education",
    "insurance",
    "energy",
    "media",
    "travel",
    "biotech",
    "government",
    "telecom",
    "automotive",
]
TOOLS = [
    "Python",
    "Go",
    "TypeScript",
    "Bash",
    "Ansible",
    "dbt",
    "Airflow",
    "Spark",
    "Helm",
    "pandas",
    "Playwright",
    "OpenTelemetry",
    "Postgres",
    "Redis",
    "ffmpeg",
    "LaTeX",
]


def synthetic_skill(i: int) -> tuple[str, str, str]:
    rng = random.Random(i)
    verb, obj, domain, tool = rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(DOMAINS), rng.choice(TOOLS)
    verb2, obj2 = rng.choice(VERBS), rng.choice(OBJECTS)
    name = f"{verb}-{obj.split()[0].lower()}-{domain}-{i}"
    description = (
        f"{verb.capitalize()} {obj} for {domain} teams with {tool} (variant {i}). "
        f"Use when the user asks to {verb2} {obj2} or mentions {tool} and {domain}."
    )
    steps = "\n".join(
        f"{n}. {rng.choice(VERBS).capitalize()} the {rng.choice(OBJECTS)} with {rng.choice(TOOLS)}."
        for n in range(1, 7)
    )
    body = f"# {verb.capitalize()} {obj}\n\n## When to use\n\n{description}\n\n## Steps\n\n{steps}\n"
    return name, description, body


def write_library(folder: Path, size: int) -> list[str]:
    names = []
    for i in range(size):
        name, description, body = synthetic_skill(i)
        path = folder / name
        path.mkdir(parents=True)
        (path / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description!r}\n---\n{body}")
        names.append(name)
    return names


QUERY_BLOCK = 600  # tasks reserved per seed; seeds up to 110 fit in the 71,680 combinations


def queries(count: int, seed: int) -> list[str]:
    """`count` distinct tasks; different seeds never share a task, so no timing is a cache hit."""
    combos = list(itertools.product(VERBS, OBJECTS, DOMAINS, TOOLS))
    random.Random(12345).shuffle(combos)
    if count > QUERY_BLOCK:
        raise ValueError(f"at most {QUERY_BLOCK} queries per measurement")
    chosen = combos[seed * QUERY_BLOCK : seed * QUERY_BLOCK + count]
    return [
        f"Please {v} our {o} for the {d} project using {t}; the team needs it reviewed before "
        f"Friday's release and documented for the on-call engineers."
        for v, o, d, t in chosen
    ]


TaskSource = Callable[[int, int], list[str]]  # (count, seed) -> distinct tasks; seeds never share one
SEEDS = (0, 1, 2, 3, 4, 6, 7, 102, 103)  # every seed a measurement asks for (see the callers)


def case_tasks(path: Path, count: int) -> tuple[TaskSource, int]:
    """A cases file's distinct tasks as a TaskSource, and the count per measurement it can give:
    each seed gets its own block, so no timed task repeats one another measurement warmed."""
    from ingot.bench.routing import load_cases

    tasks = sorted({case.task for case in load_cases(path)})
    random.Random(12345).shuffle(tasks)
    per_seed = min(count, len(tasks) // len(SEEDS))
    if per_seed < 5:
        raise ConfigError(
            f"{path} has {len(tasks)} distinct tasks; the latency bench needs at least {5 * len(SEEDS)}"
        )

    def take(n: int, seed: int) -> list[str]:
        block = SEEDS.index(seed)
        return tasks[block * per_seed : block * per_seed + min(n, per_seed)]

    return take, per_seed
