"""Chat stage: conversation state and follow-up condensing, on top of retrieve and answer.

Why not llama-index's ``CondensePlusContextChatEngine``: it retrieves and generates in
one call, so there is no place to refuse without calling the LLM or to check citations
against the retrieved sources before they are shown. We keep llama-index for the LLM
and vector-store layers and do the orchestration here.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from rag_papers.answer import Answer, AnswerStream, load_prompt
from rag_papers.config import Settings
from rag_papers.index import Index
from rag_papers.llm import Backend, LLMError, get_backend
from rag_papers.retrieve import Filters, Retriever, SearchResult


class Engine:
    """One loaded index + retriever, shared by the CLI, the UI and the evaluation."""

    def __init__(self, settings: Settings, index: Index | None = None) -> None:
        self.settings = settings
        self.index = index or Index(settings)
        self.index.check_model()
        t0 = time.perf_counter()
        # Open the vector store now (one line if it cannot serve this registry: `rag-papers repair`
        # fixes that) and load the model, so query timings measure queries only.
        self.index.check_vectors()
        self.index.embedder  # noqa: B018
        self.index.embedder2  # noqa: B018 - the second model (embed_model_2), if any
        self.load_ms = round((time.perf_counter() - t0) * 1000, 1)
        self.retriever = Retriever(self.index, settings)

    def search(self, query: str, top_k: int | None = None, filters: Filters | None = None) -> SearchResult:
        return self.retriever.search(query, top_k, filters)

    def backend(self, name: str | None = None, model: str | None = None) -> tuple[Backend, str]:
        return get_backend(self.settings, name, model)

    def ask(
        self,
        question: str,
        backend: Backend,
        backend_note: str = "",
        top_k: int | None = None,
        filters: Filters | None = None,
        search_query: str | None = None,
    ) -> AnswerStream:
        """Retrieve ``top_k`` papers (default ``settings.top_k``) and answer from them.

        One meaning for ``top_k`` everywhere (``search``, ``ask --top-k``, the UI's slider, ``/ask``):
        the papers retrieved. At most ``context_papers`` of them go into the prompt, so an answer
        has at most min(top_k, context_papers) sources; the answer's ``search`` holds all top_k.
        """
        result = self.search(search_query or question, top_k or self.settings.top_k, filters)
        return AnswerStream(
            question, result, backend, self.settings, self.index.embedder, backend_note, self.index.stem_stats
        )


_FOLLOW_UP = re.compile(
    r"^\s*(and|also|but|so|what about|how about|then)\b|\b(it|its|it's|they|them|their|this|that|these|those|"
    r"the paper|the method|the model|the approach|same|above|former|latter)\b",
    re.IGNORECASE,
)


@dataclass
class Turn:
    question: str
    standalone: str
    answer: Answer | None = None


@dataclass
class ChatSession:
    """One conversation. Each UI session gets its own, so histories never mix."""

    engine: Engine
    turns: list[Turn] = field(default_factory=list)

    def reset(self) -> None:
        self.turns.clear()

    def condense(self, question: str, backend: Backend) -> str:
        """Rewrite a follow-up into a standalone question (with the LLM, unless ``backend`` is extractive)."""
        if not self.turns or not _FOLLOW_UP.search(question):
            return question
        last = self.turns[-1]
        if not backend.extractive:
            history = "\n".join(
                f"User: {t.standalone}\nAssistant: {(t.answer.answer if t.answer else '')[:600]}"
                for t in self.turns[-3:]
            )
            prompt = load_prompt(self.engine.settings, "condense").format(history=history, question=question)
            try:
                text = "".join(backend.stream([{"role": "user", "content": prompt}], 80)).strip()
            except LLMError:
                text = ""
            text = text.splitlines()[0].strip().strip('"') if text else ""
            if 3 <= len(text.split()) <= 60:
                return text
        # No LLM (or a useless rewrite): anchor the follow-up to what the last turn was about.
        about = last.standalone
        if last.answer and last.answer.sources and last.answer.citations:
            titles = {s.id: s.title for s in last.answer.sources}
            about = f"{titles.get(last.answer.citations[0], '')}; {last.standalone}"
        return f"{question} (about: {about})"

    def ask(
        self,
        question: str,
        backend: Backend,
        backend_note: str = "",
        top_k: int | None = None,
        filters: Filters | None = None,
    ) -> tuple[str, AnswerStream]:
        """Condense, retrieve, and return (standalone question, answer stream).

        The turn joins the history only once its answer completes: a failed or
        cancelled answer must not steer the next follow-up.
        """
        standalone = self.condense(question, backend)
        stream = self.engine.ask(standalone, backend, backend_note, top_k, filters)

        def record(answer: Answer | None) -> None:
            if answer is not None:
                self.turns.append(Turn(question, standalone, answer))

        stream.on_done = record
        return standalone, stream
