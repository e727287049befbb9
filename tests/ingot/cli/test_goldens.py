"""The regression-replay commands as real processes: traces, bless, goldens, replay, and
approving a change the replay blocks."""

from __future__ import annotations

import hashlib
import json

import yaml

from optimize.measure.cascade import JudgeTiers
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import ready_body
from tests.regress_sim import NO_FEES_STEP, TIERS, agent, edited, regress_world


def env_for(w, **extra: str) -> dict[str, str]:
    return {
        "INGOT_HOME": str(w.control.runs_dir),
        "SKILLS_DIRS": str(w.root),
        "BASE_URL": w.server.url,
        "AGENT_MODEL": "agent-model",
        "JUDGE_L1_MODEL": TIERS["L1"],
        "JUDGE_L2_MODEL": TIERS["L2"],
        "JUDGE_L3_MODEL": TIERS["L3"],
        "REPLAY_SIDE_EFFECT_TOOLS": "write_file,edit_file,delete,create_skill,send_quote",
        "EXEC_SANDBOX": "none",
        **extra,
    }


def test_traces_bless_goldens_approve_retire_and_replay(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        record = w.record()
        env = env_for(w)
        listed = ingot("traces", "fx-quote", cwd=tmp_path, env=env)
        assert listed.returncode == 0 and record.id in listed.stdout and "answer" in listed.stdout

        # An unknown id is exit 2 (the README's table: an unknown skill, change or revision),
        # one line naming the nearest recorded run.
        typo = record.id[:-1] + ("0" if record.id[-1] != "0" else "1")
        missing = ingot("bless", typo, cwd=tmp_path, env=env)
        assert missing.returncode == 2 and missing.stderr == (
            f"Error: no recorded run {typo!r} (within TRACE_RETENTION_DAYS) (did you mean {record.id!r}?); "
            "`ingot traces` lists them\n"
        )
        blessed = ingot("bless", record.id, cwd=tmp_path, env=env)
        assert blessed.returncode == 0, blessed.stderr
        assert blessed.stdout.startswith("blessed: g-") and "criteria: none" in blessed.stdout
        golden_id = blessed.stdout.split()[1]
        typo = golden_id[:-1] + ("0" if golden_id[-1] != "0" else "1")
        for args in (("show", typo), ("approve", typo), ("retire", typo, "--reason", "r")):
            unknown = ingot("goldens", *args, cwd=tmp_path, env=env)
            assert unknown.returncode == 2 and unknown.stderr == (
                f"Error: no golden {typo!r} (did you mean {golden_id!r}?); "
                "`ingot goldens list --all` lists them\n"
            ), (args, unknown.stderr)

        for args in (("goldens",), ("goldens", "fx-quote"), ("goldens", "list", "fx-quote")):
            shown = ingot(*args, cwd=tmp_path, env=env)
            assert shown.returncode == 0 and golden_id in shown.stdout and "criteria none" in shown.stdout
        draft = yaml.safe_load(ingot("goldens", "show", golden_id, "--yaml", cwd=tmp_path, env=env).stdout)
        assert draft == {"criteria": [], "world_facts": []}
        edits = tmp_path / "criteria.yaml"
        edits.write_text(
            yaml.safe_dump(
                {
                    "criteria": ['keeps "no fees"'],
                    "world_facts": [{"step": 1, "label": "EUR/USD rate", "value": "1.0842"}],
                }
            )
        )
        approved = ingot("goldens", "approve", golden_id, "--from", str(edits), cwd=tmp_path, env=env)
        assert approved.returncode == 0 and "criteria: human-approved by" in approved.stdout
        edits.write_text("criteria: [unclosed")
        bad = ingot("goldens", "approve", golden_id, "--from", str(edits), cwd=tmp_path, env=env)
        assert bad.returncode == 2 and bad.stderr.startswith("Error: ") and len(bad.stderr.splitlines()) == 1

        replayed = ingot("replay", "fx-quote", cwd=tmp_path, env=env)
        assert replayed.returncode == 0, replayed.stderr + replayed.stdout
        assert "live revision alone" in replayed.stdout and "replay: pass" in replayed.stdout
        as_json = json.loads(ingot("replay", "fx-quote", "--json", cwd=tmp_path, env=env).stdout)
        assert as_json["verdict"] == "PASS" and as_json["noise_floor"]["status"] == "not_measured"

        retired = ingot("goldens", "retire", golden_id, "--reason", "task retired", cwd=tmp_path, env=env)
        assert retired.returncode == 0 and "retired" in retired.stdout
        nothing = ingot("replay", "fx-quote", cwd=tmp_path, env=env)
        assert nothing.returncode == 1 and "no blessed goldens for fx-quote" in nothing.stdout
        history = ingot("history", "fx-quote", cwd=tmp_path, env=env)
        assert all(a in history.stdout for a in ("golden-bless", "golden-approve", "golden-retire"))


def test_a_model_change_that_breaks_a_golden_fails_ingot_replay(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        w.bless(w.record(), ['keeps "no fees"'])
        w.server.rules.insert(
            0, w.server.rules[0].__class__(model="agent-model-2", reply="250 EUR is about 271 USD.")
        )
        broken = ingot("replay", "fx-quote", cwd=tmp_path, env=env_for(w, AGENT_MODEL="agent-model-2"))
        assert broken.returncode == 1 and "replay: fail" in broken.stdout  # the new model drops the quote


def test_ingot_replay_names_each_model_ruling_its_verdict_rests_on_with_its_prompt_digest(
    tmp_path, library_factory
):
    def forgets_fees(body: dict) -> str | dict:  # a serving model that follows the skill but step 3
        said = agent(body)
        return said.replace(NO_FEES_STEP[3:].strip(), "").strip() if isinstance(said, str) else said

    with regress_world(tmp_path, library_factory) as w:
        w.bless(w.record(), ['keeps "no fees"'])
        w.server.rules.insert(0, w.server.rules[0].__class__(model="agent-model-2", compute=forgets_fees))
        broken = ingot("replay", "fx-quote", cwd=tmp_path, env=env_for(w, AGENT_MODEL="agent-model-2"))
        assert broken.returncode == 1 and "replay: fail" in broken.stdout, broken.stdout
        sent = {  # the judges' prompts (the rationale, also by L3, comes after and decides nothing)
            r.body["model"]: hashlib.sha256(r.body["messages"][-1]["content"].encode()).hexdigest()
            for r in w.server.chat_requests()
            if "Write the rationale" not in r.body["messages"][-1]["content"]
        }
        named = [line.strip() for line in broken.stdout.splitlines() if "ruled by a model:" in line]
        golden = next(line.split()[0] for line in broken.stdout.splitlines() if line.startswith("  g-"))
        assert named == [
            f"ruled by a model: golden {golden}: {tier} (judge-{tier.lower()}) ruled regressed; "
            f"prompt sha256 {sent['judge-' + tier.lower()][:12]}"
            for tier in ("L2", "L3")
        ]
        as_json = json.loads(
            ingot(
                "replay", "fx-quote", "--json", cwd=tmp_path, env=env_for(w, AGENT_MODEL="agent-model-2")
            ).stdout
        )
        assert [(r["tier"], r["prompt_digest"]) for r in as_json["decided_by"]] == [
            ("L2", sent["judge-l2"]),
            ("L3", sent["judge-l3"]),
        ]


def test_approve_takes_an_override_reason_for_a_blocked_change(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        w.bless(w.record(), ['keeps "no fees"'])
        candidate = edited(w.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', "")
        replay = replay_cell(
            "fx-quote",
            w.files(),
            candidate,
            w.control.runs_dir / "goldens",
            w.server.client("agent", "judge"),
            JudgeTiers(TIERS["L1"], TIERS["L2"], TIERS["L3"]),
            settings=ReplaySettings(side_effects=SIDE_EFFECT_TOOLS | {"send_quote"}),
        )
        measurements = {**ready_body(), "replay": replay}
        change, _ = w.control.propose("fx-quote", "optimizer", candidate, measurements)
        env = env_for(w)
        pending = ingot("pending", cwd=tmp_path, env=env)
        assert pending.stdout.rstrip().endswith("blocked: replay fail"), pending.stdout
        (listed,) = json.loads(ingot("pending", "--json", cwd=tmp_path, env=env).stdout)
        cells = {c["cell"]: c for c in listed["passport"]["cells"]}
        assert listed["passport"]["state"] == "blocked" and cells["replay"]["state"] == "fail"
        assert cells["replay"]["overridable"] and "a blessed run regressed" in cells["replay"]["why"]
        refused = ingot("approve", "fx-quote", "--change", change.id, cwd=tmp_path, env=env)
        assert refused.returncode == 1 and "--override-reason" in refused.stderr
        done = ingot(
            "approve",
            "fx-quote",
            "--change",
            change.id,
            "--override-reason",
            "fees moved to the invoice",
            cwd=tmp_path,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        history = ingot("history", "fx-quote", cwd=tmp_path, env=env)
        assert "overrode failed replay: fees moved to the invoice" in history.stdout
