"""The optional fastembed backend (`EMBED_BACKEND=fastembed`): the same `Embedder` seam, offline.

`EMBED_MODEL` names a model folder (model.onnx, tokenizer.json, tokenizer_config.json; a model
fastembed knows may instead be named, if it is already in its cache). Empty means the shipped
all-MiniLM-L6-v2 int8: its files are linked into a folder under the vector cache with the
tokenizer_config.json fastembed needs (truncation at 256, as the onnxruntime backend does).
A folder's pooling (mean, CLS or last token) is read from its sentence-transformers
`1_Pooling/config.json`; without one it is mean pooling, as for MiniLM.
Loading never downloads: `local_files_only` is always set, and a missing file is an error that
says what to do. The default backend stays the direct onnxruntime path (embedding.py): measured
here, fastembed's per-query path is slower (ARCHITECTURE.md). Vectors are cached under a digest
that names the backend, so the two backends never share cache rows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ingot.errors import EmbeddingModelError, first_line
from mcp_server.embedding import MAX_TOKENS, ModelFiles, _verified, default_model_files

SHIPPED_NAME = "ingot/all-minilm-l6-v2-int8"
BATCH_SIZE = 16


def link_file(link: Path, source: Path) -> None:
    """Make `link` a symlink to `source`, replacing one that dangles or points elsewhere (the
    package was reinstalled); a model folder built from installed files this way costs no copy."""
    if link.is_symlink() and link.resolve() != source.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(source)


def shipped_model_folder(cache_dir: Path) -> Path:
    """A folder fastembed can load the shipped MiniLM from (links to the installed files)."""
    files: ModelFiles = default_model_files()
    _verified(files.model, files.model_sha256, "embedding model")
    _verified(files.tokenizer, files.tokenizer_sha256, "tokenizer")
    folder = cache_dir / "fastembed-minilm-int8"
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in (("model.onnx", files.model), ("tokenizer.json", files.tokenizer)):
        link_file(folder / name, source)
    config = folder / "tokenizer_config.json"
    wanted = json.dumps({"model_max_length": MAX_TOKENS, "do_lower_case": True})
    if not config.exists() or config.read_text() != wanted:
        config.write_text(wanted)
    return folder


POOLING_CONFIG = "1_Pooling/config.json"  # where a sentence-transformers folder says how it pools
POOLING_KEYS = {"pooling_mode_cls_token": "CLS", "pooling_mode_lasttoken": "LAST_TOKEN"}


def folder_pooling(folder: Path) -> str:
    """How a model folder's token vectors become one vector: CLS, LAST_TOKEN or MEAN (the default,
    and what the shipped MiniLM uses), read from its sentence-transformers pooling config."""
    config = folder / POOLING_CONFIG
    if not config.is_file():
        return "MEAN"
    try:
        modes = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EmbeddingModelError(f"cannot read {config}: {exc}") from None
    if not isinstance(modes, dict):
        raise EmbeddingModelError(f"{config} is not a JSON object of pooling modes")
    chosen = [pooling for key, pooling in POOLING_KEYS.items() if modes.get(key)]
    if modes.get("pooling_mode_mean_tokens"):
        chosen.append("MEAN")
    if len(chosen) != 1:
        raise EmbeddingModelError(
            f"{config} must turn on exactly one of pooling_mode_mean_tokens, pooling_mode_cls_token "
            "and pooling_mode_lasttoken (the ones fastembed can apply)"
        )
    return chosen[0]


def _register(name: str, dim: int, pooling: str = "MEAN") -> None:
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    if any(m["model"].lower() == name.lower() for m in TextEmbedding.list_supported_models()):
        return
    TextEmbedding.add_custom_model(
        model=name,
        pooling=PoolingType[pooling],
        normalization=True,
        sources=ModelSource(hf=name),  # never fetched: every load passes local_files_only
        dim=dim,
        model_file="model.onnx",
    )


FOLDER_FILES = ("model.onnx", "tokenizer.json", "tokenizer_config.json")  # what fastembed reads


def _looks_like_a_path(model: str) -> bool:
    """A folder the user meant (absolute, ~ or ./ ../), as opposed to a name like BAAI/bge-small-en."""
    return model.startswith(("/", "~", "./", "../", ".\\")) or Path(model).is_absolute()


class FastEmbedEmbedder:
    """A sentence embedding model run through fastembed, from local files only."""

    def __init__(
        self,
        model: str | None,
        cache_dir: Path,
        threads: int = 1,
        dim: int = 384,
        model_sha256: str | None = None,
    ) -> None:
        try:
            from fastembed import TextEmbedding
            from loguru import logger
        except ImportError as exc:
            raise EmbeddingModelError(
                "EMBED_BACKEND=fastembed needs the fastembed package: pip install 'ingot[fastembed]'"
            ) from exc
        # fastembed logs its own ERROR lines (through loguru) before raising; the one error line
        # raised below says the same and what to do.
        logger.disable("fastembed")
        folder = Path(model).expanduser() if model and Path(model).expanduser().is_dir() else None
        if model and folder is None and _looks_like_a_path(model):
            raise EmbeddingModelError(
                f"EMBED_MODEL folder {model} does not exist; set it to a folder with model.onnx, "
                "tokenizer.json and tokenizer_config.json, or to a fastembed model name"
            )
        if not model:
            folder = shipped_model_folder(cache_dir)
        kwargs: dict = {"local_files_only": True, "threads": threads, "cache_dir": str(cache_dir)}
        if folder is not None:
            model_file = folder / "model.onnx"
            missing = [f for f in FOLDER_FILES if not (folder / f).is_file()]
            if missing:
                raise EmbeddingModelError(
                    f"EMBED_MODEL folder {folder} lacks {', '.join(missing)}; fastembed needs "
                    f"{', '.join(FOLDER_FILES)} there"
                )
            self._digest = "fastembed:" + _verified(
                model_file, model_sha256 if model else None, "embedding model"
            )
            pooling = folder_pooling(folder)
            name = SHIPPED_NAME if not model else f"local/{folder.name}/{pooling.lower()}"
            self._digest += f":{pooling.lower()}"  # the same weights pooled otherwise are another model
            _register(name, dim, pooling)
            kwargs["specific_model_path"] = str(folder)
        else:
            name = str(model)
            self._digest = f"fastembed:{name}"
        try:
            self._model = TextEmbedding(model_name=name, **kwargs)
        except Exception as exc:  # fastembed raises plain ValueErrors and OSErrors
            where = f"{folder}" if folder is not None else f"fastembed's cache {cache_dir}"
            raise EmbeddingModelError(
                f"fastembed cannot load {model or 'the shipped model'} from local files in {where} "
                f"({exc}); set EMBED_MODEL to a folder with {', '.join(FOLDER_FILES)}"
            ) from exc
        self._lock = threading.Lock()
        try:
            probe = self.embed(["dimension probe"])
        except Exception as exc:  # fastembed pools outputs[0] and raises whatever numpy does
            raise EmbeddingModelError(
                f"fastembed cannot embed with {model or 'the shipped model'} "
                f"({first_line(exc, 200)}): fastembed pools the model's "
                "first output, which must be per token (batch x tokens x dim); for another export "
                "use the default backend (EMBED_BACKEND=onnx) with EMBED_MODEL_DIR"
            ) from None
        self._dim = int(probe.shape[1])

    @property
    def model_digest(self) -> str:
        return self._digest

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, getattr(self, "_dim", 0)), dtype=np.float32)
        with self._lock:
            rows = list(self._model.embed(list(texts), batch_size=BATCH_SIZE))
        return np.vstack(rows).astype(np.float32)
