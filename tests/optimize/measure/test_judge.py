"""The judge against the scripted model server: validated grades, ensembles, position bias."""

from __future__ import annotations

import pytest

from ingot.errors import ConfigError
from optimize.measure.execcheck import ExecResult
from optimize.measure.judge import Judge
from optimize.models.endpoints import LLMConfig, make_endpoint
from optimize.models.llm import LLMClient
from tests.scripted_llm import grade_json, scripted_llm


@pytest.fixture
def server():
    with scripted_llm() as state:
        yield state


def judge_for(server, models=("judge-a",), teacher="teacher-model") -> Judge:
    config = LLMConfig({"judge": make_endpoint("judge", server.url, None, models[0])})
    return Judge(LLMClient(config), models, teacher)


def test_a_grade_is_validated_json_with_every_dimension(server):
    server.add(user_contains="ANSWER:", reply=grade_json(0.8, True))
    grade = judge_for(server).grade("Add two numbers", "def add(a, b): return a + b")
    assert (
        grade.passed
        and grade.score == pytest.approx(0.8)
        and set(grade.dimensions) == {"correctness", "completeness", "instruction_following", "efficiency"}
    )
    assert server.chat_requests()[0].body["response_format"] == {"type": "json_object"}


def test_the_judge_must_differ_from_the_teacher(server):
    with pytest.raises(ConfigError, match="must differ from the teacher"):
        judge_for(server, models=("teacher-model",), teacher="teacher-model")


def test_an_ensemble_averages_scores_and_takes_the_majority(server):
    server.add(model="judge-a", reply=grade_json(1.0, True))
    server.add(model="judge-b", reply=grade_json(0.5, True))
    server.add(model="judge-c", reply=grade_json(0.0, False))
    grade = judge_for(server, models=("judge-a", "judge-b", "judge-c")).grade("task", "answer")
    assert (
        grade.score == pytest.approx(0.5)
        and grade.passed
        and grade.judges == ("judge-a", "judge-b", "judge-c")
    )


def test_a_failed_execution_check_is_ground_truth(server):
    server.add(user_contains="FAILED", reply=grade_json(0.9, True))
    failed = ExecResult("failed", "exit code 1")
    grade = judge_for(server).grade("Sort a list", "sorted(x, reverse=True)", check=failed)
    assert not grade.passed
    assert "Ground truth" in server.chat_requests()[0].body["messages"][0]["content"]


def test_a_verdict_that_flips_with_the_order_is_a_tie(server):
    server.add(user_contains="SECOND ANSWER", reply='{"winner": "first", "rationale": "first is better"}')
    judge = judge_for(server)
    preference = judge.compare("task", "answer A", "answer B")
    assert preference.winner == "tie" and not preference.consistent and len(preference.calls) == 2


def test_a_consistent_verdict_survives_both_orders(server):
    server.add(
        system_contains=None,
        user_contains="FIRST ANSWER:\nthe good one",
        reply='{"winner": "first", "rationale": "r"}',
    )
    server.add(user_contains="SECOND ANSWER:\nthe good one", reply='{"winner": "second", "rationale": "r"}')
    preference = judge_for(server).compare("task", "the good one", "the weak one")
    assert preference.winner == "a" and preference.consistent
