"""The search index over the served skills: dense vectors and BM25, rebuilt incrementally.

Per skill it holds three kinds of vectors (name + description; name + description + the opening
of the body; each sentence of a description that has several) and two BM25 fields (name +
description; body), and scores a query against all of them in one pass. Vectors come from a
content-keyed cache, so rebuilding after an edit embeds only the edited skill. BM25 statistics
are global, so the lexical side is rebuilt whole (milliseconds at 1k skills). Ranking and
decisions live in router.py; this module only produces raw component scores.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from mcp_server.embedding import CachedEmbedder, text_digest
from mcp_server.registry import Skill

BODY_OPENING_CHARS = 1500  # the tokenizer truncates at 256 tokens anyway
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(`])")
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_STOP = frozenset(STOPWORDS_EN)
_stemmer = Stemmer.Stemmer("english")


def humanise(name: str) -> str:
    return name.replace("-", " ")


def description_text(skill: Skill) -> str:
    return f"{humanise(skill.name)}: {skill.description}"


def body_text(skill: Skill) -> str:
    return f"{humanise(skill.name)}: {skill.description}\n{skill.body[:BODY_OPENING_CHARS]}"


def sentence_texts(skill: Skill) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_SPLIT.split(skill.description) if len(p.strip()) > 3]
    return [f"{humanise(skill.name)}: {p}" for p in parts] or [description_text(skill)]


def terms(text: str) -> list[str]:
    """Lower-cased, stop-word-free, stemmed word tokens (the BM25 vocabulary)."""
    return _stemmer.stemWords([w for w in _TOKEN.findall(text.lower()) if w not in _STOP])


def _bm25(documents: list[list[str]]) -> bm25s.BM25:
    index = bm25s.BM25(k1=1.5, b=0.75)
    index.index(documents, show_progress=False)
    return index


COMPONENTS = frozenset(("dense_description", "dense_body", "dense_sentence", "bm25_description", "bm25_body"))


def _lexical_many(index: bm25s.BM25 | None, queries: list[list[str]], n: int) -> np.ndarray:
    """BM25 scores of many queries in one sparse product (the same sums `get_scores` makes)."""
    from scipy import sparse

    if index is None:
        return np.zeros((len(queries), n), dtype=np.float32)
    vocab, matrix = index.vocab_dict, index.scores
    tokens = len(matrix["indptr"]) - 1
    rows, cols = [], []
    for row, query in enumerate(queries):
        for term in query:
            column = vocab.get(term)
            if column is not None and column < tokens:
                rows.append(row)
                cols.append(column)
    counts = sparse.csr_matrix(
        (np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(queries), tokens)
    )
    scores = sparse.csr_matrix((matrix["data"], matrix["indices"], matrix["indptr"]), shape=(tokens, n))
    return np.asarray((counts @ scores).todense(), dtype=np.float32)


@dataclass(frozen=True)
class Scores:
    """Raw per-skill component scores, aligned with `Index.names` (last axis).

    One query gives 1-d rows; `Index.score_many` gives (queries x skills) matrices."""

    dense_description: np.ndarray
    dense_body: np.ndarray
    dense_sentence: np.ndarray
    bm25_description: np.ndarray
    bm25_body: np.ndarray


class Index:
    """Immutable snapshot of the searchable library; build a new one to change it."""

    def __init__(
        self, skills: Mapping[str, Skill], embedder: CachedEmbedder, previous: Index | None = None
    ) -> None:
        self.names: tuple[str, ...] = tuple(sorted(skills))
        self._matrix = np.zeros((0, embedder.dim), dtype=np.float32)
        self._rows: dict[str, int] = {}  # text digest -> row of _matrix
        self._tokens: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
        self._vocabularies: dict[str, frozenset[str]] = {}
        self._library_vocabulary: frozenset[str] | None = None
        self._body_terms: dict[tuple[str, str], int] = (
            dict(previous._body_terms) if previous is not None else {}
        )
        self.skills = {name: skills[name] for name in self.names}
        ordered = [self.skills[n] for n in self.names]
        dim = embedder.dim
        if not ordered:
            self._desc = self._body = self._sent = np.zeros((0, dim), dtype=np.float32)
            self._sent_owner = self._sent_skills = np.zeros(0, dtype=np.int64)
            self._bm25_desc = self._bm25_body = None
            return
        sentences: list[str] = []
        owners: list[int] = []
        for i, skill in enumerate(ordered):
            texts = sentence_texts(skill)
            if texts != [description_text(skill)]:  # one sentence: its vector is the description's
                sentences += texts
                owners += [i] * len(texts)
        texts = [description_text(s) for s in ordered] + [body_text(s) for s in ordered] + sentences
        vectors = self._embed(texts, embedder, previous)
        n = len(ordered)
        self._desc, self._body, self._sent = vectors[:n], vectors[n : 2 * n], vectors[2 * n :]
        self._sent_owner = np.asarray(owners, dtype=np.int64)
        self._sent_starts = np.flatnonzero(np.r_[True, np.diff(self._sent_owner) != 0])[: len(owners)]
        self._sent_skills = np.unique(self._sent_owner)  # skills with sentence rows, ascending
        self._tokens = self._tokenise(ordered, previous)
        self._bm25_desc = _bm25([self._tokens[(s.name, s.revision)][0] for s in ordered])
        self._bm25_body = _bm25([self._tokens[(s.name, s.revision)][1] for s in ordered])

    @staticmethod
    def _tokenise(
        ordered: list[Skill], previous: Index | None
    ) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
        """BM25 terms of each skill's (name + description, body), reused when the revision is unchanged."""
        known = previous._tokens if previous is not None else {}
        return {
            (s.name, s.revision): known.get((s.name, s.revision))
            or (terms(f"{humanise(s.name)} {s.description}"), terms(s.body))
            for s in ordered
        }

    def _embed(self, texts: list[str], embedder: CachedEmbedder, previous: Index | None) -> np.ndarray:
        """Vectors for `texts`, reusing the previous snapshot's rows so an edit embeds only itself."""
        digests = [text_digest(t) for t in texts]
        old_rows = previous._rows if previous is not None else {}
        matrix = np.empty((len(texts), embedder.dim), dtype=np.float32)
        take_from = [old_rows.get(d, -1) for d in digests]
        reused = np.fromiter((r >= 0 for r in take_from), dtype=bool, count=len(texts))
        if reused.any() and previous is not None:
            matrix[reused] = previous._matrix[np.asarray(take_from)[reused]]
        missing = {d: t for d, t, hit in zip(digests, texts, reused, strict=True) if not hit}
        if missing:
            fresh = dict(zip(missing, embedder.embed(list(missing.values())), strict=True))
            for row in np.flatnonzero(~reused):
                matrix[row] = fresh[digests[row]]
        self._matrix = matrix
        self._rows = {d: i for i, d in enumerate(digests)}
        return matrix

    def vocabulary(self, name: str) -> frozenset[str]:
        """Every BM25 term of the skill's name, description and body (cached per snapshot)."""
        cached = self._vocabularies.get(name)
        if cached is None:
            skill = self.skills[name]
            description, body = self._tokens[(skill.name, skill.revision)]
            cached = self._vocabularies[name] = frozenset(description) | frozenset(body)
        return cached

    def description_similarity(self, vector: np.ndarray) -> dict[str, float]:
        """Cosine of `vector` with every skill's description vector (the first rows of the matrix)."""
        scores = self._desc @ vector if len(self.names) else np.zeros(0)
        return {name: float(score) for name, score in zip(self.names, scores, strict=True)}

    def library_vocabulary(self) -> frozenset[str]:
        """Every BM25 term of every skill (cached per snapshot)."""
        if self._library_vocabulary is None:
            known = self._bm25_desc.vocab_dict if self._bm25_desc is not None else {}
            body = self._bm25_body.vocab_dict if self._bm25_body is not None else {}
            self._library_vocabulary = frozenset(known) | frozenset(body)
        return self._library_vocabulary

    def unknown_share(self, query_terms: list[str]) -> float:
        """Share of the task's terms that appear nowhere in the library (1.0 for an empty task)."""
        if not query_terms:
            return 1.0
        known = self.library_vocabulary()
        return sum(t not in known for t in query_terms) / len(query_terms)

    def __len__(self) -> int:
        return len(self.names)

    def body_terms(self, name: str) -> int:
        """How many BM25 terms of the skill's body its name and description do not already have.

        A body that only repeats its description (or is a bare heading) carries no evidence of
        its own; the router treats such a skill as body-less and scores it on what it has."""
        skill = self.skills[name]
        key = (skill.name, skill.revision)
        count = self._body_terms.get(key)
        if count is None:
            description, body = self._tokens[key]
            known = set(description)
            count = self._body_terms[key] = sum(1 for t in body if t not in known)
        return count

    def score_many(
        self,
        query_vectors: np.ndarray,
        query_terms: list[list[str]],
        want: frozenset[str] = COMPONENTS,
    ) -> Scores:
        """`score` for many queries at once, as (queries x skills) matrices; components not in
        `want` are left as zeros (calibration skips what the procedure gives no weight)."""
        n, q = len(self.names), len(query_terms)
        zeros = np.zeros((q, n), dtype=np.float32)
        if n == 0 or q == 0:
            return Scores(zeros, zeros, zeros, zeros, zeros)
        sentence = "dense_sentence" in want
        description = query_vectors @ self._desc.T if "dense_description" in want or sentence else zeros
        return Scores(
            dense_description=description if "dense_description" in want else zeros,
            dense_body=query_vectors @ self._body.T if "dense_body" in want else zeros,
            dense_sentence=self._best_sentence(description, query_vectors) if sentence else zeros,
            bm25_description=(
                _lexical_many(self._bm25_desc, query_terms, n) if "bm25_description" in want else zeros
            ),
            bm25_body=_lexical_many(self._bm25_body, query_terms, n) if "bm25_body" in want else zeros,
        )

    def score(
        self, query_vector: np.ndarray, query_terms: list[str], want: frozenset[str] = COMPONENTS
    ) -> Scores:
        """Every skill's component scores for one query; components not in `want` are zeros."""
        n = len(self.names)
        zeros = np.zeros(n, dtype=np.float32)
        if n == 0:
            return Scores(zeros, zeros, zeros, zeros, zeros)
        sentence = "dense_sentence" in want
        description = self._desc @ query_vector if "dense_description" in want or sentence else zeros
        return Scores(
            dense_description=description if "dense_description" in want else zeros,
            dense_body=self._body @ query_vector if "dense_body" in want else zeros,
            dense_sentence=self._best_sentence(description, query_vector) if sentence else zeros,
            bm25_description=(
                self._lexical(self._bm25_desc, query_terms, n) if "bm25_description" in want else zeros
            ),
            bm25_body=self._lexical(self._bm25_body, query_terms, n) if "bm25_body" in want else zeros,
        )

    def _best_sentence(self, description: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Each skill's best description-sentence cosine (last axis): the description's own cosine
        for one-sentence descriptions (the same text, so the same vector), which keep no rows."""
        best = description.copy()
        if len(self._sent_skills):
            sentences = query @ self._sent.T
            best[..., self._sent_skills] = np.maximum.reduceat(sentences, self._sent_starts, axis=-1)
        return best

    def dense_vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(description vectors, body-opening vectors, which skills have a one-sentence
        description), rows in `names` order: what ranking.py folds into one matrix."""
        single = np.ones(len(self.names), dtype=bool)
        single[self._sent_skills] = False
        return self._desc, self._body, single

    def sentence_vectors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, bounds, vectors) of the skills whose description has several sentences: skill
        `rows[j]`'s sentence vectors are `vectors[bounds[j]:bounds[j + 1]]` (rows ascending)."""
        return self._sent_skills, self._sentence_bounds, self._sent

    @functools.cached_property
    def _sentence_bounds(self) -> np.ndarray:
        return np.r_[self._sent_starts if len(self._sent_skills) else [], len(self._sent)].astype(np.int64)

    @functools.cached_property
    def sentence_spread(self) -> tuple[np.ndarray, np.ndarray]:
        """(centroid, radius) of each multi-sentence skill's sentence vectors, in
        `sentence_vectors` order: every sentence lies within the radius of the centroid.
        Computed once per snapshot, slot by slot (descriptions have a few sentences each)."""
        bounds = self._sentence_bounds
        starts, sizes = bounds[:-1], np.diff(bounds)
        total = np.zeros((len(starts), self._sent.shape[1]), dtype=np.float32)
        radius = np.zeros(len(starts), dtype=np.float32)
        slots = range(int(sizes.max()) if len(sizes) else 0)
        for k in slots:
            has = np.flatnonzero(sizes > k)
            total[has] += self._sent[starts[has] + k]
        centroids = total / np.maximum(sizes, 1)[:, None].astype(np.float32)
        for k in slots:
            has = np.flatnonzero(sizes > k)
            gap = self._sent[starts[has] + k] - centroids[has]
            radius[has] = np.maximum(radius[has], np.sqrt(np.einsum("ij,ij->i", gap, gap)))
        return centroids, radius

    def lexical(self, component: str, query_terms: list[str]) -> np.ndarray:
        """One BM25 component ("bm25_description" or "bm25_body") for every skill."""
        field = self._bm25_desc if component == "bm25_description" else self._bm25_body
        return self._lexical(field, query_terms, len(self.names))

    @staticmethod
    def _lexical(index: bm25s.BM25 | None, query_terms: list[str], n: int) -> np.ndarray:
        known = [t for t in query_terms if index is not None and t in index.vocab_dict]
        if not known:
            return np.zeros(n, dtype=np.float32)
        return np.asarray(index.get_scores(known), dtype=np.float32)
