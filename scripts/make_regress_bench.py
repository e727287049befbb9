"""Record the goldens (and their cassettes) of the regression-replay benchmark, blind.

For each skill in ingot/bench/regress_data/bench.yaml: its task is run once, for real, against
the scripted models (tests/regress_sim.py): through the capture proxy from a stand-in harness (an
OpenAI SDK tool loop whose tools answer what bench.yaml says), or by the reference agent over a
real MCP server for `harness: ingot-agent`. The final trace is blessed, and its criteria and
world facts are drafted by the scripted teacher from the golden and the skill alone, left
teacher-drafted: nobody writes a criterion, and the labelled edits (edits.yaml) are not read
here (`load_skills`). The goldens store and the cassette of every model call are written into
regress_data/. Run it again after changing a skill or a task:
`.venv/bin/python scripts/make_regress_bench.py`.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.proxy import build_proxy  # noqa: E402
from agent.run import ReferenceAgent  # noqa: E402
from agent.workspace import revision_of  # noqa: E402
from ingot.bench.regress import DATA, load_skills  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.library import Library  # noqa: E402
from mcp_server.registry import parse_skill_md  # noqa: E402
from optimize.control.changes import ChangeControl  # noqa: E402
from optimize.control.goldens_admin import GoldenAdmin  # noqa: E402
from optimize.measure.golden_criteria import draft_review  # noqa: E402
from optimize.models.cassette import Cassette  # noqa: E402
from optimize.models.traces import LocalTraceStore  # noqa: E402
from tests.conftest import running_asgi, running_mcp, wait_for  # noqa: E402
from tests.regress_sim import harness_prompt, install, run_harness  # noqa: E402
from tests.scripted_llm import scripted_llm  # noqa: E402

ACTOR = "ingot-bench (scripts/make_regress_bench.py)"


def main() -> None:
    bench = load_skills()
    work = Path(tempfile.mkdtemp(prefix="ingot-make-regress-"))
    shutil.copytree(DATA / "skills", work / "skills")
    library = Library((work / "skills",), load_embedder(None, None, work / "vectors.sqlite"))
    library.reload()
    control = ChangeControl(work / "home", (work / "skills",), neighbours=library.current)
    store = LocalTraceStore(work / "home" / "traces.jsonl")
    cassette_path = work / "goldens.jsonl"
    admin = GoldenAdmin(control)
    with scripted_llm() as server:
        install(server)
        teacher = server.client("teacher")
        proxy_cassette = Cassette(cassette_path, "record")
        for name, spec in bench.skills.items():
            files = bench.files(name)
            if spec["harness"] == "ingot-agent":
                llm = server.client("agent", "strong")
                llm.cassette = Cassette(cassette_path, "record")
                with running_mcp(library, control=control) as url:
                    ReferenceAgent(url, llm, store, allow_mutation=False).run(spec["task"])
                record = store.read().records[-1]
            else:
                app = build_proxy(server.url, store, cassette=proxy_cassette, harness=spec["harness"])
                with running_asgi(app, lifespan="off") as proxy:
                    before, sent = len(store.read().records), len(server.chat_requests())
                    tools = {tool: (lambda _a, v=t["answer"]: v) for tool, t in spec["tools"].items()}
                    body = parse_skill_md(files["SKILL.md"].decode(), name)[2]
                    header = f"{name}@{revision_of(files)}"
                    run_harness(f"{proxy}/v1", header, harness_prompt(body), spec["task"], tools)
                    calls = len(server.chat_requests()) - sent
                    wait_for(lambda n=before + calls: len(store.read().records) >= n)
                record = store.read().records[-1]
            stored, _ = admin.bless(record, ACTOR, drafter=lambda golden: draft_review(teacher, golden)[0])
            drafted = "; ".join(c.text for c in stored.review.criteria)
            print(
                f"{name}: {stored.id} ({len(stored.golden.steps)} tool calls); teacher's criteria: {drafted}"
            )
    shutil.rmtree(DATA / "goldens", ignore_errors=True)
    shutil.copytree(work / "home" / "goldens", DATA / "goldens")
    (DATA / "cassettes").mkdir(exist_ok=True)
    shutil.copy(cassette_path, DATA / "cassettes" / "goldens.jsonl")
    print(f"wrote {DATA / 'goldens'} and {DATA / 'cassettes' / 'goldens.jsonl'}")


if __name__ == "__main__":
    main()
