"""Embedding: the bundled offline model, its checksum, and the content-keyed vector cache."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from tokenizers import Tokenizer

from ingot.errors import EmbeddingModelError
from mcp_server.embedding import default_model_files, load_embedder
from tests.tiny_onnx import export_encoder


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


def _pooled_from(table: np.ndarray, folder, texts: list[str]) -> np.ndarray:
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # the shipped file pads to 128
    rows = [table[tokenizer.encode(text).ids].mean(axis=0) for text in texts]
    return np.array([r / np.linalg.norm(r) for r in rows])


TEXTS = ["route the request", "a much longer request about invoices and refunds"]  # one padded batch


@pytest.mark.parametrize(
    "outputs",
    [
        # the paraphrase-MiniLM-L3-v2 ONNX on PyPI returns input_ids, the mask, then the hidden states
        ["ids", "pooled", "hidden"],
        ["decoy", "last_hidden_state"],  # a known name wins over an earlier rank-3 output
        ["ids", "hidden", "decoy"],  # otherwise the first float rank-3 output
        ["ids", "hidden16"],  # float16 exports are pooled in float32
    ],
    ids=["after-other-outputs", "known-name", "first-rank-3", "float16"],
)
def test_a_model_folder_is_pooled_from_its_per_token_output_whatever_its_position(tmp_path, outputs):
    table = export_encoder(tmp_path / "model", outputs)
    got = load_embedder(tmp_path / "model", None, None).embed(TEXTS)
    assert got == pytest.approx(_pooled_from(table, tmp_path / "model", TEXTS), abs=2e-3)


def test_a_model_pooled_from_a_later_output_is_cached_apart_and_a_first_output_keeps_its_digest(tmp_path):
    export_encoder(tmp_path / "first", ["last_hidden_state", "ids"])
    export_encoder(tmp_path / "later", ["ids", "hidden"])
    first = load_embedder(tmp_path / "first", None, None).model_digest
    later = load_embedder(tmp_path / "later", None, None).model_digest
    assert ":" not in first  # the file's digest alone, as before: its cached vectors stay valid
    assert later.endswith(":hidden")


def test_a_model_without_a_per_token_output_is_one_clear_error(tmp_path):
    export_encoder(tmp_path / "model", ["ids", "pooled"])
    with pytest.raises(EmbeddingModelError, match="no per-token output .* export the encoder"):
        load_embedder(tmp_path / "model", None, None)


def test_a_model_that_does_not_take_an_attention_mask_is_one_clear_error(tmp_path):
    export_encoder(tmp_path / "model", ["hidden"], mask=False)
    with pytest.raises(EmbeddingModelError, match="does not take attention_mask: EMBED_MODEL_DIR needs"):
        load_embedder(tmp_path / "model", None, None)


def test_a_tokenizer_the_model_cannot_take_is_one_clear_error(tmp_path):
    export_encoder(tmp_path / "model", ["hidden"], vocab=100)  # the tokenizer's ids go up to 30521
    with pytest.raises(EmbeddingModelError, match="fails on a probe text .* the tokenizer this model"):
        load_embedder(tmp_path / "model", None, None)


def test_a_tokenizer_file_that_is_not_one_is_one_clear_error(tmp_path):
    export_encoder(tmp_path / "model", ["hidden"])
    (tmp_path / "model" / "tokenizer.json").write_text('{"model": "nothing like a tokenizer"}')
    with pytest.raises(EmbeddingModelError, match="cannot read the tokenizer .* tokenizer.json"):
        load_embedder(tmp_path / "model", None, None)
