"""Does late interaction (MaxSim over the shipped model's token vectors) help routing? Prints JSON.

    python scripts/bench_late_interaction.py --skills ../shared/corpus-tools/skills \
        --cases ../shared/corpus-tools/cases.jsonl

For every case the router ranks the library as shipped and keeps its top 10. MaxSim is the mean,
over the task's tokens, of each token's best cosine with any token of a candidate's description
(the same int8 MiniLM, its token outputs before pooling; [CLS]/[SEP] dropped). Reported: ranking
top-1 with the top 10 re-ranked by ranking + beta x MaxSim, and how well the leader's calibrated
score, MaxSim, and the score plus gamma x MaxSim separate right leaders from null requests (AUC).
The router keeps no token vectors because this did not pay (docs/routing-measurements.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.routing import load_cases  # noqa: E402
from mcp_server.embedding import default_model_files, load_embedder  # noqa: E402
from mcp_server.index import description_text  # noqa: E402
from mcp_server.library import Library  # noqa: E402

TOP = 10
BETAS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
GAMMAS = (0.0, 0.5, 1.0, 2.0)


class TokenVectors:
    """The shipped model's per-token output vectors, unit length, [CLS] and [SEP] dropped."""

    def __init__(self) -> None:
        files = default_model_files()
        self.tokenizer = Tokenizer.from_file(str(files.tokenizer))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=256)
        self.session = ort.InferenceSession(str(files.model), providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def __call__(self, text: str) -> np.ndarray:
        ids = np.array([self.tokenizer.encode(text).ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feeds)[0][0][1:-1]
        return hidden / np.linalg.norm(hidden, axis=1, keepdims=True)


def auc(positive: list[float], negative: list[float]) -> float | None:
    if not positive or not negative:
        return None
    p, n = np.array(positive)[:, None], np.array(negative)[None, :]
    return round(float((p > n).mean() + 0.5 * (p == n).mean()), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=Path, required=True)
    parser.add_argument("--cases", type=Path, required=True)
    args = parser.parse_args()
    library = Library((args.skills,), load_embedder(None, None, None))
    library.reload()
    skills, tokens, documents = library.skills(), TokenVectors(), {}
    rows = []
    for case in load_cases(args.cases):
        ranked = library.route(case.task, k=TOP).ranked[:TOP]
        if not ranked:
            continue
        query = tokens(case.task)
        for c in ranked:
            if c.name not in documents:
                documents[c.name] = tokens(description_text(skills[c.name]))
        maxsim = [float((query @ documents[c.name].T).max(axis=1).mean()) for c in ranked]
        rows.append((case, ranked, maxsim))
    reranked: dict[str, dict] = {}
    confidence_auc: dict[str, float | None] = {}
    for beta in BETAS:
        hits, right_scores, null_scores, right_sims, null_sims = [], [], [], [], []
        for case, ranked, maxsim in rows:
            lead = int(
                np.argmax([c.components["ranking"] + beta * m for c, m in zip(ranked, maxsim, strict=True)])
            )
            if case.expected:
                hits.append(ranked[lead].name in case.right)
                if ranked[lead].name in case.right:
                    right_scores.append(ranked[lead].score)
                    right_sims.append(maxsim[lead])
            else:
                null_scores.append(ranked[lead].score)
                null_sims.append(maxsim[lead])
        reranked[str(beta)] = {
            "ranking_top1": round(float(np.mean(hits)), 4) if hits else None,
            "auc_calibrated_score": auc(right_scores, null_scores),
            "auc_maxsim": auc(right_sims, null_sims),
        }
    for gamma in GAMMAS:
        right = [r[0].score + gamma * m[0] for c, r, m in rows if c.expected and r[0].name in c.right]
        null = [r[0].score + gamma * m[0] for c, r, m in rows if not c.expected]
        confidence_auc[str(gamma)] = auc(right, null)
    report = {
        "skills": len(skills),
        "cases": len(rows),
        "reranked": reranked,
        "confidence_auc": confidence_auc,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
