"""Embedding: the bundled offline model, its checksum, and the content-keyed vector cache."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ingot.errors import EmbeddingModelError
from mcp_server.embedding import default_model_files, load_embedder


def test_vectors_are_unit_length_deterministic_and_semantic(embedder):
    vectors = embedder.embed(["slow SQL query", "speed up a database query", "bake sourdough bread"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert np.allclose(embedder.embed(["slow SQL query"])[0], vectors[0], atol=1e-6)


def test_batching_gives_the_same_vectors_as_one_at_a_time(embedder):
    texts = [f"text number {i} " * (i + 1) for i in range(20)]
    together = embedder._inner.embed(texts)
    alone = np.vstack([embedder._inner.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


def test_the_model_burns_no_cpu_between_queries(embedder):
    """Worker threads may spin during a run but must stop at its end: a server waits between
    requests, and spinning threads would take the core its scoring (and everything else) needs."""
    import time

    burned = []
    for i in range(7):
        embedder._inner.embed([f"find the cheapest flight to city number {i} next week"])
        start = time.process_time()
        time.sleep(0.1)
        burned.append(time.process_time() - start)
    # A spinning pool burns most of the idle 100 ms (measured: 35 ms of every 50); a sleeping one ~0.
    assert sorted(burned)[3] < 0.02, burned


def test_a_model_file_with_the_wrong_checksum_fails_loudly(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    files = default_model_files()
    shutil.copy(files.tokenizer, folder / "tokenizer.json")
    data = bytearray(files.model.read_bytes())
    data[1000] ^= 0xFF
    (folder / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(EmbeddingModelError, match="expected"):
        load_embedder(folder, files.model_sha256, None)


def test_a_missing_model_folder_says_what_to_set(tmp_path):
    with pytest.raises(EmbeddingModelError, match="EMBED_MODEL_DIR"):
        load_embedder(tmp_path / "nowhere", None, None)


def test_a_restart_re_embeds_nothing_that_did_not_change(tmp_path):
    cache = tmp_path / "vectors.sqlite"
    first = load_embedder(None, None, cache)
    first.embed(["alpha", "beta"])
    assert first.computed == 2
    second = load_embedder(None, None, cache)  # a new process would build exactly this
    second.embed(["alpha", "beta", "gamma"])
    assert second.computed == 1
