"""The LLM judge: the model that writes the answer first reads each retrieved abstract against the question.

The systems researchers trust decide it this way (PaperQA2 scores each piece of evidence with the LLM before it
answers, and answers "I cannot answer" when none is left). Here the configured model (Ollama or a GGUF) returns a
verdict per paper, held to a JSON schema (Ollama's ``format``, a llama.cpp grammar) so that even a small model cannot
answer in prose. Its verdict decides which papers go into the answer's prompt, the refusal, and ``uncovered``.

What the model cannot judge, the rules do, paper by paper: output that does not parse, a timeout, a refusal to judge,
a verdict naming a paper it was not shown. The answer says so (``Verdict.notes``). The refusals retrieval decides
(nothing relevant, the filters, a loose match on unknown names) come first, by the rules, before any model is asked.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from rag_papers.judge.aspects import Aspect, analyse, decide
from rag_papers.judge.base import Addresses, PaperVerdict, Verdict
from rag_papers.judge.quotes import candidates
from rag_papers.judge.words import DESCRIPTION, FACET
from rag_papers.llm import LLMError
from rag_papers.prompting import judge_messages

if TYPE_CHECKING:
    from rag_papers.corpus import Paper
    from rag_papers.judge.question import Question
    from rag_papers.judge.rules import RuleJudge
    from rag_papers.llm import Backend, Message
    from rag_papers.retrieve import Hit, SearchResult

EVIDENCE_CHARS = 300  # the longest evidence sentence a verdict may copy (a small model may otherwise run on)
MISSING_CHARS = 120


def verdict_schema(count: int) -> dict[str, Any]:
    """The verdict's shape for ``count`` papers, given to Ollama as ``format`` and to llama.cpp as a grammar: one
    entry per paper, a score from a fixed set (llama.cpp's grammar holds an enum, not an integer's bounds), strings
    of bounded length, and nothing else can come back."""
    return {
        "type": "object",
        "properties": {
            "papers": {
                "type": "array",
                "minItems": count,
                "maxItems": count,
                "items": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "integer", "enum": list(range(1, count + 1))},
                        "addresses": {"type": "string", "enum": ["yes", "partly", "no"]},
                        "score": {"type": "integer", "enum": list(range(11))},
                        "evidence": {"type": "string", "maxLength": EVIDENCE_CHARS},
                        "missing": {"type": "string", "maxLength": MISSING_CHARS},
                    },
                    "required": ["n", "addresses", "score", "evidence", "missing"],
                },
            }
        },
        "required": ["papers"],
    }


class _Item(BaseModel):
    n: int
    addresses: Addresses
    score: int = Field(ge=0, le=10)
    evidence: str = ""
    missing: str = ""


class _Reply(BaseModel):
    papers: list[_Item]


CACHE_SIZE = 4096  # verdicts kept per process (each a few hundred bytes)
_CACHE: OrderedDict[tuple[str, ...], PaperVerdict] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_NOTHING = frozenset({"", "no", "none", "nothing", "n/a", "-", "null"})  # "missing": nothing is


def _key(backend: Backend, q: Question, paper: Paper) -> tuple[str, ...]:
    """A verdict's cache key: the model, the question, the paper and its text (an edited abstract is judged again)."""
    digest = hashlib.sha256(f"{paper.title}\n{paper.abstract}".encode()).hexdigest()[:16]
    return (backend.name, backend.model or "", " ".join(q.text.split()), paper.id, digest)


class ModelJudge:
    """A model's verdict on each candidate paper (``_verdicts``), with the rules behind it: the refusals retrieval
    decides first, the papers to judge, and a verdict for each paper the model could not judge."""

    def __init__(self, rules: RuleJudge) -> None:
        self.rules = rules
        self.settings = rules.settings
        self.phase = ""  # "judging N abstracts" once it asks the model (a judge serves one answer)

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _verdicts(self, q: Question, used: list[tuple[Hit, Paper]]) -> tuple[list[PaperVerdict], list[str]]:
        raise NotImplementedError

    def judge(self, question: Question, candidates_: SearchResult) -> Verdict:
        early = self.rules.before_reading(question, candidates_)
        if early is not None:
            return early
        s = self.settings
        used = candidates(candidates_, s.context_papers, s.source_min_ratio, question, s.coverage)
        if not used:
            return self.rules.read(question, candidates_)
        papers, notes = self._verdicts(question, used)
        return self._decide(question, used, papers, notes)

    # ------------------------------------------------------------------ deciding
    def _decide(
        self, q: Question, used: list[tuple[Hit, Paper]], papers: list[PaperVerdict], notes: list[str]
    ) -> Verdict:
        kept = [(n, h, p) for n, ((h, p), v) in enumerate(zip(used, papers), 1) if v.addresses != "no"]
        if not kept:
            return Verdict(
                self.name,
                refused=True,
                kind="judged",
                reason=f"the {self.kind} judge found that none of the {len(used)} abstracts addresses the question",
                papers=papers,
                uncovered=list(dict.fromkeys(m for v in papers for m in v.uncovered))[:3],
                notes=notes,
            )
        # Names and facets the kept papers leave out, by the rules (a name no abstract has is said whatever the
        # model thinks), and what the model says they leave out when none answers the whole question.
        s = self.settings
        analysis = analyse(q, [(p.title, p.abstract) for _, _, p in kept], None, self.rules.names_df, rules=s.coverage)
        analysis.evidence = [ev for ev in analysis.evidence if ev.aspect.kind != DESCRIPTION]
        coverage = decide(analysis, list(range(1, len(kept) + 1)))
        verdicts = {v.id: v for v in papers}
        if not any(verdicts[p.id].addresses == "yes" for _, _, p in kept):
            best = max((verdicts[p.id] for _, _, p in kept), key=lambda v: v.score)
            for missing in best.uncovered or ["part of the question"]:
                coverage.aspects.append(Aspect(missing, FACET))
        return Verdict(
            self.name,
            caveat=coverage.line(),
            uncovered=[a.text for a in coverage.uncovered],
            read=[h.id for _, h, _ in kept],
            papers=papers,
            notes=notes,
        )

    kind = "model"


class LLMJudge(ModelJudge):
    """The configured LLM as the judge, with the rules behind it for what it cannot judge."""

    kind = "LLM"

    def __init__(self, backend: Backend, rules: RuleJudge) -> None:
        super().__init__(rules)
        self.backend = backend

    @property
    def name(self) -> str:
        return f"llm ({self.backend.model or self.backend.name})"

    # ------------------------------------------------------------------ asking the model
    def _verdicts(self, q: Question, used: list[tuple[Hit, Paper]]) -> tuple[list[PaperVerdict], list[str]]:
        """One verdict per paper: cached, else the model's, else (and said so) the rules'."""
        out: dict[str, PaperVerdict] = {}
        with _CACHE_LOCK:
            for _, paper in used:
                hit = _CACHE.get(_key(self.backend, q, paper))
                if hit is not None:
                    _CACHE.move_to_end(_key(self.backend, q, paper))
                    out[paper.id] = hit
        todo = [(h, p) for h, p in used if p.id not in out]
        notes: list[str] = []
        if todo:
            got, why = self._ask(q, todo)
            for h, p in todo:
                if p.id in got:
                    out[p.id] = got[p.id]
                    with _CACHE_LOCK:
                        _CACHE[_key(self.backend, q, p)] = got[p.id]
                        while len(_CACHE) > CACHE_SIZE:
                            _CACHE.popitem(last=False)
                else:
                    out[p.id] = self.rules.paper_verdict(q, h, p)
            missed = len(todo) - len(got)
            if missed:
                what = "abstract" if missed == 1 else "abstracts"
                notes.append(f"the LLM judge {why} for {missed} of {len(used)} {what}: the rules judged them")
        return [out[p.id] for _, p in used], notes

    def _ask(self, q: Question, todo: list[tuple[Hit, Paper]]) -> tuple[dict[str, PaperVerdict], str]:
        """The model's verdicts on ``todo``, by paper id, and (for those missing) why in words."""
        messages: list[Message] = judge_messages(q.text, [p for _, p in todo], self.settings)
        self.backend.load()  # a model that cannot load fails the answer here, in its own words, not as a judge
        self.phase = f"judging {len(todo)} abstract{'s' if len(todo) != 1 else ''}"
        try:
            text = self.backend.structured(
                messages, verdict_schema(len(todo)), self.settings.judge_tokens, self.settings.judge_timeout
            )
        except LLMError as exc:
            return {}, f"failed ({exc})" if "did not answer" not in str(exc) else "timed out"
        return self._parse(text, todo)

    def _parse(self, text: str, todo: list[tuple[Hit, Paper]]) -> tuple[dict[str, PaperVerdict], str]:
        try:
            reply = _Reply.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError, TypeError):
            return {}, "gave no verdict that parses"
        out: dict[str, PaperVerdict] = {}
        unknown = 0
        for item in reply.papers:
            if not 1 <= item.n <= len(todo):
                unknown += 1  # a paper it was not shown: no verdict on any that it was
                continue
            hit, paper = todo[item.n - 1]
            if paper.id in out:
                continue  # the first verdict on a paper counts
            missing = item.missing.strip().rstrip(".")
            evidence = item.evidence.strip()
            out[paper.id] = PaperVerdict(
                paper.id,
                item.addresses,
                round(item.score / 10, 2),
                [evidence] if evidence else [],
                [] if missing.lower() in _NOTHING else [missing[:MISSING_CHARS]],
                "llm",
            )
        if unknown:  # its numbers are not the sources': none of its verdicts can be trusted to be on its paper
            return {}, "named a paper it was not shown"
        if not out:
            return {}, "refused to judge"
        return out, "gave no verdict"


class RerankJudge(ModelJudge):
    """The cross-encoder of the ``reranker`` setting as the judge: a paper addresses the question when the model scores
    (question, title and abstract) at least ``judge_rerank_floor`` (default ``min_rerank``, else 0). Its scores are
    retrieval's own (``Hit.rerank_score``); a paper it did not rescore is judged by the rules."""

    kind = "reranker"

    @property
    def name(self) -> str:
        return f"reranker ({self.settings.reranker})"

    def _verdicts(self, q: Question, used: list[tuple[Hit, Paper]]) -> tuple[list[PaperVerdict], list[str]]:
        s = self.settings
        floor = s.judge_rerank_floor if s.judge_rerank_floor is not None else (s.min_rerank or 0.0)
        out: list[PaperVerdict] = []
        missed = 0
        for hit, paper in used:
            if hit.rerank_score is None:
                missed += 1
                out.append(self.rules.paper_verdict(q, hit, paper))
                continue
            addresses: Addresses = "yes" if hit.rerank_score >= floor else "no"
            out.append(PaperVerdict(paper.id, addresses, round(hit.rerank_score, 4), [], [], "reranker"))
        notes = (
            [f"the reranker did not score {missed} of {len(used)} abstracts: the rules judged them"] if missed else []
        )
        return out, notes
