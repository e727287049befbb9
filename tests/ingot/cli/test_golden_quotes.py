"""World-fact quotes through `ingot goldens` as real processes: `show --yaml` gives them to edit,
`approve` (as drafted, or `--from` the edited YAML) keeps them."""

from __future__ import annotations

import yaml

from tests.ingot.cli.test_goldens import env_for
from tests.ingot.cli.test_main import ingot
from tests.regress_sim import regress_world


def test_show_yaml_gives_a_facts_quotes_and_approving_as_drafted_keeps_them(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        record = w.record()
        quote = next(line for line in record.answer.splitlines() if "1.0842" in line).strip()
        fact = {"step": 1, "label": "EUR/USD rate", "value": "1.0842", "quotes": [quote]}
        stored = w.bless(record, ['keeps "no fees"'], [fact])
        env = env_for(w)
        shown = ingot("goldens", "show", stored.id, "--yaml", cwd=tmp_path, env=env)
        assert yaml.safe_load(shown.stdout) == {"criteria": ['keeps "no fees"'], "world_facts": [fact]}
        again = ingot("goldens", "approve", stored.id, cwd=tmp_path, env=env)
        assert again.returncode == 0, again.stderr
        assert f"quoted in the answer: {quote!r}" in again.stdout
        assert w.admin.store.find(stored.id).review.facts[0].quotes == (quote,)
        edits = tmp_path / "facts.yaml"
        edits.write_text(yaml.safe_dump({"criteria": ["x"], "world_facts": [{**fact, "quotes": ["nope"]}]}))
        refused = ingot("goldens", "approve", stored.id, "--from", str(edits), cwd=tmp_path, env=env)
        assert refused.returncode == 1 and "'nope' is not in the answer" in refused.stderr
