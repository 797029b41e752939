"""Whether the retrieved abstracts answer the question: one interface, the rules and the user's LLM behind it.

What the rest of the package uses: ``Question`` (a question parsed once), the ``Judge`` interface and its
``Verdict``, and ``pick_judge``. The rules' parts (``aspects``, ``quotes``, ``rules``) and the LLM judge (``model``)
are this package's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_papers import RagPapersError
from rag_papers.judge.base import Judge, Verdict
from rag_papers.judge.question import Question

if TYPE_CHECKING:
    from collections.abc import Callable

    from rag_papers.config import Settings
    from rag_papers.embedding import TextEmbedder
    from rag_papers.llm import Backend

__all__ = ["Judge", "Question", "Verdict", "pick_judge"]

MODEL_JUDGES = ("ollama", "llamacpp")  # the backends ``auto`` asks to judge: they hold a verdict to a JSON schema


def pick_judge(
    settings: Settings,
    backend: Backend,
    embedder: TextEmbedder | None,
    names_df: Callable[[str], int] | None,
) -> Judge:
    """The judge for an answer by ``backend``: ``Settings.judge`` decides. ``rules``: the rules; ``llm``: the backend
    itself; ``auto``: the model when it is one served by Ollama or a GGUF (``MODEL_JUDGES``) and not the packaged demo
    (SmolLM2 judges at chance), else the rules. An answer without an LLM (extractive) is always judged by the rules,
    which pick the sentences it quotes."""
    from rag_papers.judge.rules import RuleJudge

    rules = RuleJudge(settings, embedder, names_df, quoting=backend.extractive)
    wanted = settings.judge
    auto_rules = wanted == "auto" and (backend.demo or backend.name not in MODEL_JUDGES)
    if backend.extractive or wanted == "rules" or auto_rules:
        return rules
    from rag_papers.judge.model import LLMJudge, RerankJudge

    if wanted == "reranker":
        if not settings.reranker:
            raise RagPapersError("judge = reranker needs a cross-encoder: set reranker (a model folder or hub name)")
        return RerankJudge(rules)
    return LLMJudge(backend, rules)
