"""Author-side web research: one cached brief per run for the authors, never the judge; off without a key.

The search API is a real HTTP server on loopback speaking Tavily's `/search` shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from optimize.control import evidence
from optimize.search.pipeline import optimize_body
from optimize.search.research import MAX_BRIEF_CHARS, Researcher
from tests.loopback import QuietHandler, serving

KEY = "tvly-test-secret-123"
RESULTS = [
    {
        "title": "Keep a Changelog",
        "url": "https://keepachangelog.com/",
        "content": "WEB-FACT: group by type.",
    },
    {"title": "Empty", "url": "https://example.org/empty", "content": ""},
    {"title": "Semver", "url": "https://semver.org/", "content": "Breaking changes bump the major."},
]
REWRITE = json.dumps({"body": "# Release notes\n\nNEW-MARK: group changes by theme.\n"})


@dataclass
class FakeSearch:
    status: int = 200
    results: list[dict[str, Any]] = field(default_factory=lambda: list(RESULTS))
    requests: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    url: str = ""


@contextmanager
def fake_search(**kwargs: Any) -> Iterator[FakeSearch]:
    state = FakeSearch(**kwargs)

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append((dict(self.headers), body))
            payload = json.dumps({"query": body.get("query"), "results": state.results}).encode()
            self.send_response(state.status if self.path == "/search" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    with serving(Handler) as state.url:
        yield state


def _teacher_prompts(server) -> list[str]:
    return [
        r.body["messages"][-1]["content"]
        for r in server.chat_requests()
        if r.body["model"] == "teacher-model"
    ]


def _run(world, research) -> tuple[list[str], list[str], dict]:
    server, control, library, llm, judge, tasks, _ = world
    server.requests.clear()
    outcome = optimize_body("release-notes", control, library, llm, judge, tasks, 3, research=research)
    authors = [p for p in _teacher_prompts(server) if "Rewrite the skill" in p]
    judged = [json.dumps(r.body) for r in server.chat_requests() if r.body["model"] == "judge-model"]
    change = control.queue.get("release-notes")
    data = evidence.load(control.runs_dir / change.evidence_path).data
    assert outcome.proposed == change.id
    return authors, judged, data["measurements"]["search"]["research"]


def test_with_a_key_one_cached_brief_reaches_every_author_and_never_the_judge(optimizer_world, tmp_path):
    optimizer_world[0].add(model="teacher-model", user_contains="Rewrite the skill", reply=REWRITE)
    with fake_search() as search:
        research = Researcher(KEY, tmp_path / "research-cache", search.url)
        authors, judged, recorded = _run(optimizer_world, research)
        assert len(search.requests) == 1  # one shared brief for all three authors
        headers, body = search.requests[0]
        assert headers["Authorization"] == f"Bearer {KEY}"
        assert body["query"].startswith("release-notes: Writes release notes")
        assert len(authors) == 3 and all("WEB-FACT" in p for p in authors)
        assert judged and not any("WEB-FACT" in j for j in judged)
        assert recorded["status"] == "fetched"
        assert recorded["sources"] == ["https://keepachangelog.com/", "https://semver.org/"]

        _, _, again = _run(optimizer_world, research)
        assert len(search.requests) == 1 and again["status"] == "cached"  # no second search
    cached = next((tmp_path / "research-cache").iterdir())
    assert cached.stat().st_mode & 0o077 == 0 and KEY not in cached.read_text()


def test_without_a_key_nothing_is_fetched_and_prompts_equal_a_run_whose_search_failed(
    optimizer_world, tmp_path, caplog
):
    optimizer_world[0].add(model="teacher-model", user_contains="Rewrite the skill", reply=REWRITE)
    with fake_search(status=500) as search:
        without, _, off = _run(optimizer_world, Researcher(None, tmp_path / "cache", search.url))
        assert search.requests == [] and off["status"] == "off"
        failed_run, _, failed = _run(optimizer_world, Researcher(KEY, tmp_path / "cache", search.url))
        assert len(search.requests) == 1 and failed["status"] == "failed" and "500" in failed["detail"]
    assert sorted(without) == sorted(failed_run) and not any("WEB SEARCH" in p for p in without)
    assert KEY not in caplog.text


def test_the_description_pass_authors_see_the_brief_too(served_copy, tmp_path):
    from optimize.measure.taskset import RoutingCase
    from optimize.search.describe import propose_description
    from tests.scripted_llm import scripted_llm

    _, library, control, _ = served_copy
    cases = [RoutingCase(f"Write up the outage number {i}", "incident-postmortem") for i in range(4)]
    with fake_search() as search, scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps({"descriptions": ["x" * 2000]}))
        llm = server.client("teacher")
        research = Researcher(KEY, tmp_path / "cache", search.url)
        _, reason = propose_description("incident-postmortem", library, control, llm, cases, 1, research)
        assert "over 1024 characters" in reason
        assert "WEB-FACT" in _teacher_prompts(server)[0] and len(search.requests) == 1


@pytest.mark.parametrize(
    "status, results", [(200, []), (200, "not a list"), (403, RESULTS)], ids=["empty", "garbled", "denied"]
)
def test_a_useless_search_answer_means_no_brief_and_no_cache(tmp_path, status, results):
    with fake_search(status=status, results=results) as search:
        brief = Researcher(KEY, tmp_path / "cache", search.url).brief("pdf", "Fill PDF forms.")
    assert brief.status == "failed" and brief.prompt_section() == ""
    assert not (tmp_path / "cache").exists()


def test_the_brief_is_capped_and_long_queries_are_cut(tmp_path):
    many = [{"title": f"t{i}", "url": f"https://e.org/{i}", "content": "y" * 900} for i in range(10)]
    with fake_search(results=many) as search:
        brief = Researcher(KEY, tmp_path / "cache", search.url).brief("pdf", "z" * 1000)
        assert len(search.requests[0][1]["query"]) <= 400
    assert 0 < len(brief.text) <= MAX_BRIEF_CHARS and len(brief.sources) < 10


def test_an_expired_or_damaged_cached_brief_is_fetched_again(tmp_path):
    cache = tmp_path / "cache"
    with fake_search() as search:
        assert Researcher(KEY, cache, search.url).brief("pdf", "Fill PDF forms.").status == "fetched"
        assert Researcher(KEY, cache, search.url).brief("pdf", "Fill PDF forms.").status == "cached"
        assert Researcher(KEY, cache, search.url, ttl_s=0).brief("pdf", "Fill PDF forms.").status == "fetched"
        next(cache.iterdir()).write_text("{not json")
        assert Researcher(KEY, cache, search.url).brief("pdf", "Fill PDF forms.").status == "fetched"
        assert len(search.requests) == 3
