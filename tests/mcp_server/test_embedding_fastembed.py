"""The fastembed backend loads the shipped model from local files, with no hub call, and embeds
exactly what the default onnxruntime backend embeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from mcp_server.embedding import load_embedder

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["Please audit our Kafka topics for the retail project using Python", "hello", "Draft a postmortem."]

CHILD = textwrap.dedent(
    """
    import json, socket, sys
    attempts = []
    def hook(event, args):
        if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
            attempts.append(f"{event} {args[1] if len(args) > 1 else args}")
            raise OSError(f"network use during model load: {event}")
    sys.addaudithook(hook)
    from pathlib import Path
    from mcp_server.embedding import load_embedder
    embedder = load_embedder(None, None, Path(sys.argv[1]) / "vectors.sqlite", 1, backend="fastembed")
    vectors = embedder.embed(json.loads(sys.argv[2]))
    print(json.dumps({"attempts": attempts, "digest": embedder.model_digest,
                      "vectors": vectors.tolist()}))
    """
)


def test_fastembed_loads_the_shipped_model_offline_without_any_hub_call(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FASTEMBED"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["attempts"] == []
    assert result["digest"].startswith("fastembed:8199be6f")
    default = load_embedder(None, None, None, 1).embed(TEXTS)
    cosines = (np.asarray(result["vectors"]) * default).sum(axis=1)
    assert np.all(cosines > 0.9999)


def test_an_unusable_fastembed_model_folder_is_one_clear_error(tmp_path):
    import pytest

    from ingot.errors import EmbeddingModelError

    (tmp_path / "model").mkdir()
    with pytest.raises(EmbeddingModelError, match="lacks model.onnx, tokenizer.json, tokenizer_config.json"):
        load_embedder(
            None, None, tmp_path / "vectors.sqlite", 1, backend="fastembed", model=str(tmp_path / "model")
        )
    with pytest.raises(EmbeddingModelError, match="EMBED_MODEL folder .*/absent does not exist"):
        load_embedder(
            None, None, tmp_path / "vectors.sqlite", 1, backend="fastembed", model=str(tmp_path / "absent")
        )


def test_a_fastembed_model_folder_is_checked_against_embed_model_sha256(tmp_path):
    import pytest

    from ingot.errors import EmbeddingModelError
    from mcp_server.embedding_fastembed import shipped_model_folder

    folder = shipped_model_folder(tmp_path / "cache")
    with pytest.raises(EmbeddingModelError, match="expected 0{64}"):
        load_embedder(None, "0" * 64, tmp_path / "vectors.sqlite", 1, backend="fastembed", model=str(folder))


def test_a_model_folder_is_pooled_as_its_pooling_config_says(tmp_path):
    """A CLS-pooled folder (BGE-style) must not be mean-pooled silently; the digest tells them apart."""
    import pytest

    from ingot.errors import EmbeddingModelError
    from mcp_server.embedding_fastembed import POOLING_CONFIG, shipped_model_folder

    shipped = shipped_model_folder(tmp_path / "cache")
    cls_folder = tmp_path / "minilm-cls"
    cls_folder.mkdir()
    for name in ("model.onnx", "tokenizer.json", "tokenizer_config.json"):
        (cls_folder / name).symlink_to((shipped / name).resolve())
    (cls_folder / POOLING_CONFIG).parent.mkdir()
    (cls_folder / POOLING_CONFIG).write_text(json.dumps({"pooling_mode_cls_token": True}))
    mean = load_embedder(None, None, None, 1, backend="fastembed", model=str(shipped))
    cls = load_embedder(None, None, None, 1, backend="fastembed", model=str(cls_folder))
    assert mean.model_digest.endswith(":mean") and cls.model_digest.endswith(":cls")
    cosines = (mean.embed(TEXTS) * cls.embed(TEXTS)).sum(axis=1)
    assert np.all(cosines < 0.99), cosines
    (cls_folder / POOLING_CONFIG).write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True})
    )
    with pytest.raises(EmbeddingModelError, match="exactly one of"):
        load_embedder(None, None, None, 1, backend="fastembed", model=str(cls_folder))


def test_a_model_name_not_on_disk_is_one_error_and_fastembed_logs_nothing(tmp_path, capfd):
    import pytest

    from ingot.errors import EmbeddingModelError

    with pytest.raises(EmbeddingModelError, match="cannot load BAAI/bge-small-en-v1.5 from local files"):
        load_embedder(
            None, None, tmp_path / "vectors.sqlite", 1, backend="fastembed", model="BAAI/bge-small-en-v1.5"
        )
    captured = capfd.readouterr()
    assert "ERROR" not in captured.err and "ERROR" not in captured.out


def test_a_folder_whose_first_output_is_not_per_token_is_one_error_naming_the_other_backend(tmp_path):
    import pytest

    from ingot.errors import EmbeddingModelError
    from tests.tiny_onnx import export_encoder

    folder = tmp_path / "model"
    export_encoder(folder, ["ids", "hidden"])  # fastembed pools the first output, here the input ids
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256}))
    with pytest.raises(EmbeddingModelError, match="pools the model's first output.*EMBED_BACKEND=onnx"):
        load_embedder(None, None, tmp_path / "vectors.sqlite", 1, backend="fastembed", model=str(folder))
    # The default backend pools the per-token output of the same folder.
    assert load_embedder(folder, None, None).embed(["fine"]).shape == (1, 8)


def test_a_dangling_or_stale_model_link_is_pointed_at_the_installed_file_again(tmp_path):
    from mcp_server.embedding_fastembed import link_file

    source = tmp_path / "installed.onnx"
    source.write_bytes(b"weights")
    (tmp_path / "other.onnx").write_bytes(b"other")
    link = tmp_path / "folder" / "model.onnx"
    link.parent.mkdir()
    for old in (tmp_path / "gone.onnx", tmp_path / "other.onnx"):  # dangling, then elsewhere
        link.unlink(missing_ok=True)
        link.symlink_to(old)
        link_file(link, source)
        assert link.resolve() == source.resolve() and link.read_bytes() == b"weights"
    link_file(link, source)  # already right: left as it is
    assert link.resolve() == source.resolve()
