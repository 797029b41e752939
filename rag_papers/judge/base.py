"""The judge interface: whether the retrieved abstracts answer a question, and what of it they leave out.

One interface for every judge (after PaperQA2, where the LLM scores each piece of evidence before it answers): the
rules, which run offline on every answer, and the user's LLM, when there is one. The answer stage reads only the
``Verdict``: which papers to read (or, with no LLM, which sentences to quote), whether to refuse, and the line
said first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from rag_papers.judge.question import Question
    from rag_papers.retrieve import SearchResult

Addresses = Literal["yes", "partly", "no"]


@dataclass
class PaperVerdict:
    """One retrieved paper, judged: whether it addresses the question, how well, and by what."""

    id: str
    addresses: Addresses
    score: float  # 0 to 1: the rules' best sentence cosine (or retrieval score), the LLM's 0-10 over 10
    evidence: list[str] = field(default_factory=list)  # the sentences that address it
    uncovered: list[str] = field(default_factory=list)  # the question's aspects this paper leaves out
    by: str = "rules"  # who judged it: "rules", "llm", or "rules" after the LLM's verdict failed (``Verdict.notes``)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    """A judge's decision for one question over its candidates (``Judge.judge``).

    ``refused``: no paper addresses the question (``kind`` says why: ``irrelevant``, ``filtered``, ``unknown-names``,
    ``nothing-close``, ``judged``; ``reason`` in words). ``caveat``: the line said first ("The abstracts don't mention
    DoRA"), and ``uncovered`` its parts. ``read``: the papers the answer reads or quotes, in order; ``quotes``: with
    no LLM, the (paper id, sentence) lines to quote.
    """

    judge: str
    refused: bool = False
    kind: str = ""
    reason: str = ""
    caveat: str | None = None
    uncovered: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    papers: list[PaperVerdict] = field(default_factory=list)
    quotes: list[tuple[str, str]] = field(default_factory=list)
    listing: bool = False  # a list of papers, one line each
    titled: bool = False  # each quote under its paper's title (a list, or a comparison's sides)
    loose: bool = False  # the papers match the question only loosely
    notes: list[str] = field(default_factory=list)  # what the answer says of the judging (a fallback to the rules)

    def papers_dict(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.papers]


class Judge(Protocol):
    """Decides, for a question and what retrieval found, which abstracts address it (``Verdict``).

    ``candidates`` is the search's result: its ranked papers and retrieval's own evidence (relevance, the best
    sentence, how far the first paper stands above the index's field). ``phase`` says what ``judge`` asks a model
    to do, for a UI ("judging 5 abstracts"; "" when it asks none); ``name`` is what an answer reports as its judge.
    """

    @property
    def name(self) -> str: ...

    @property
    def phase(self) -> str: ...

    def judge(self, question: Question, candidates: SearchResult) -> Verdict: ...
