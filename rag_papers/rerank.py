"""Optional second retrieval stage: a cross-encoder rescoring the best fused candidates.

The fused score (retrieve.py) reads a query vector and keyword matches separately; a
cross-encoder reads the query and a passage together, which ranks better but costs one
transformer pass per (query, paper) pair. So it only rescores the top ``rerank_candidates``
fused candidates, and only when ``settings.reranker`` names one (default: none, no cost).

Scores are what the model's own ``CrossEncoder.predict`` returns, with the activation the
model's configuration names (a raw logit for ms-marco cross-encoders, a sigmoid in 0..1 for a
model that names none): no extra sigmoid here, so ``min_rerank`` is on the scale of the
model card's examples, and a second squashing cannot flatten a model that already applies one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_papers import RagPapersError
from rag_papers.model_files import hub_snapshot, is_hub_name

if TYPE_CHECKING:
    from rag_papers.config import Settings

# The fused candidate list ``Retriever.search`` sorts: (fused score, paper id, cosine, keyword share).
Scored = list[tuple[float, str, float, float]]

_models: dict[Path, Any] = {}  # one CrossEncoder per model folder, per process
_rerankers: dict[tuple[str, str], Reranker] = {}
_lock = threading.Lock()


class Reranker:
    """A sentence-transformers ``CrossEncoder``, loaded on first use and shared by every search in the process."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name  # the reranker setting it came from
        self.path = path  # the model folder

    def model(self) -> Any:
        """The loaded CrossEncoder (torch and transformers are imported here, not at startup)."""
        with _lock:
            if self.path not in _models:
                _models[self.path] = _load(self.name, self.path)
            return _models[self.path]

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, higher is more relevant; passages past the model's window are truncated by it."""
        if not passages:
            return []
        scores = self.model().predict([(query, p) for p in passages], show_progress_bar=False)
        return [float(x) for x in scores]


def _load(name: str, path: Path) -> Any:
    """Load quietly: transformers' weight-loading bars and reports would break the CLI's one-line output."""
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as transformers_logging

    hf_logging: Any = transformers_logging  # its helpers carry no annotations
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        return CrossEncoder(str(path), local_files_only=True)
    except Exception as exc:  # not a model folder, an architecture transformers lacks, bad weights
        what = " ".join(str(exc).split())[:300]
        raise RagPapersError(
            f"reranker {name!r} could not be loaded from {path} ({type(exc).__name__}: {what}): give a "
            "cross-encoder model folder or hub name (--reranker), or unset reranker"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def resolve_reranker_path(name: str, cache_dir: Path) -> Path:
    """A model folder, or a hub name (downloaded once into the model cache, as embedding models are)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if is_hub_name(name):
        return hub_snapshot(name, cache_dir, what="reranker", flag="--reranker")
    raise RagPapersError(
        f"reranker {name!r} not found: give a cross-encoder model folder, or a hub name such as "
        "cross-encoder/ms-marco-MiniLM-L-6-v2 (downloaded once)"
    )


def load_reranker(settings: Settings) -> Reranker | None:
    """The reranker ``settings.reranker`` names, or None; its folder is found (or fetched) now, the model on first use.

    Commands call it before searching so a hub name that cannot be fetched fails at once, as one line.
    """
    if not settings.reranker:
        return None
    key = (settings.reranker, str(settings.models_dir))
    with _lock:
        found = _rerankers.get(key)
    if found is None:
        found = Reranker(settings.reranker, resolve_reranker_path(settings.reranker, settings.models_dir))
        with _lock:
            found = _rerankers.setdefault(key, found)
    return found


def rerank_scored(
    settings: Settings, query: str, scored: Scored, passages: Sequence[tuple[str, str]]
) -> tuple[Scored, dict[str, float]]:
    """``scored`` with the papers of ``passages`` reordered by the reranker; (the reordered list, paper id ->
    reranker score).

    ``passages``: (paper id, passage) of the candidates to rescore, in fused order: the retriever's choice
    (its top ``rerank_candidates`` that the filters accept) and text, so that this module reads no store.
    Rescored papers come first, best reranker score first (ties: fused order); every other candidate
    follows them in fused order.
    """
    reranker = load_reranker(settings)
    if reranker is None or not scored:
        return scored, {}
    scores = reranker.score(query, [text for _, text in passages])
    by_id = dict(zip((pid for pid, _ in passages), scores))
    top = sorted((c for c in scored if c[1] in by_id), key=lambda c: -by_id[c[1]])  # stable: ties keep fused order
    rest = [c for c in scored if c[1] not in by_id]
    return top + rest, {p: round(s, 4) for p, s in by_id.items()}
