"""What one browser session owns: its conversation as the UI shows it (kept in a ``gr.State``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_papers.answer import Answer
from rag_papers.chat import ChatSession
from rag_papers.corpus import Paper
from rag_papers.retrieve import Hit

BUSY_SECONDS = 600.0  # a pending exchange older than this no longer blocks new questions


@dataclass
class Exchange:
    """One question and what the UI showed for it: an answer, a paper list or an error."""

    question: str
    mode: str  # "answer" or "search"
    standalone: str = ""
    text: str = ""
    # The papers in the panel, numbered: an answer's sources (``Answer.sources``) or the search's hits.
    items: list[Hit] = field(default_factory=list)
    papers: dict[str, Paper] = field(default_factory=dict, repr=False)  # their abstracts (``SearchResult.papers``)
    answer: Answer | None = None
    relevant: bool = True
    refused: bool = False
    error: str = ""
    stopped: bool = False
    footer: str = ""
    notice: str = ""
    filters: str = ""  # the filters active when it was asked, in words ("keyword 'x'"), or ""
    done: bool = False
    claimed: bool = False  # a worker step has taken it (guards against a double run)
    started: float = field(default_factory=time.monotonic)
    phase: str = ""  # what the answer waits for (``AnswerStream.phase``), shown until text arrives
    # A thinking model's reasoning (``AnswerStream.reasoning``), shown folded apart from the answer, and for how
    # long it has reasoned; never in ``text``, the export or the history's answer.
    reasoning: str = ""
    thinking_s: float = 0.0
    # Seconds spent waiting behind other sessions: for a place in the answer queue, then for the model
    # (another answer holds it). Shown apart from the first-token time, which it is taken out of.
    queued: float = 0.0
    again: bool = False  # asked again by the retry icon (regenerate): its footer says so
    stream: Any = field(default=None, repr=False, compare=False)  # the running AnswerStream, for Stop


@dataclass
class UIState:
    """Everything one browser session owns; lives in a ``gr.State``."""

    session: ChatSession
    exchanges: list[Exchange] = field(default_factory=list)
    view: tuple[int, int] | None = None  # (exchange index, source number) shown in the panel
    show_rewrite: bool = False
    chat_id: str | None = None  # its key in the browser's history (``history.py``), once it has one
    export_dirs: list[Path] = field(default_factory=list)  # this chat's exports (deleted with it)
    regenerate: bool = False  # the next question accepted is the last one asked again (the retry icon)

    def busy(self) -> bool:
        """A question is still being answered (stale ones, e.g. a closed tab, stop counting)."""
        if not self.exchanges:
            return False
        last = self.exchanges[-1]
        return not last.done and time.monotonic() - last.started < BUSY_SECONDS
