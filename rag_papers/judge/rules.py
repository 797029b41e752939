"""The rule judge: whether the abstracts answer a question, decided offline on every answer.

Its parts, in the order they decide:
- retrieval found nothing relevant (``SearchResult.relevant``), unless the question asks papers only for a property
  they state of themselves ("Which papers link their code?") and one states it: refused before any LLM is asked;
- an everyday question (``everyday``: nearer one of ``rag_papers/words/everyday.txt`` than any abstract, by
  ``coverage.everyday_margin``) that passed the floor on an everyday word it shares with an abstract: refused too;
- a loose match (``loose``: relevance under ``coverage.loose_match`` with no close sentence, or a technical question
  whose papers stand barely above the index's field, ``coverage.flat_lift``) whose every name is in no indexed
  abstract: refused too;
- otherwise the question's aspects (names, facet, descriptions: ``aspects.py``) are checked against the papers the
  answer reads, or, with no LLM, the sentences it quotes (``quotes.py``); what they leave out is the line said first.

Every threshold is a field of ``Settings.coverage`` or ``Settings.quoting``; the cues are ``cues.toml``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.corpus import Paper, quotable_sentences
from rag_papers.judge.aspects import Analysis, Coverage, analyse, decide, states_facet
from rag_papers.judge.base import Addresses, PaperVerdict, Verdict
from rag_papers.judge.quotes import candidates, extractive
from rag_papers.judge.words import DESCRIPTION, NAME
from rag_papers.paths import load_words

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder
    from rag_papers.judge.question import Question
    from rag_papers.retrieve import Hit, SearchResult


# The everyday questions' vectors, per embedding model (embedded once a process): ``nearest_everyday``.
_EVERYDAY: dict[int, tuple[object, Any]] = {}


def nearest_everyday(embedder: TextEmbedder, query_vec: list[float]) -> float:
    """The query's best cosine to the everyday questions (``rag_papers/words/everyday.txt``), by ``embedder``, the
    model that embedded ``query_vec``."""
    import numpy as np

    held = _EVERYDAY.get(id(embedder))
    if held is None or held[0] is not embedder:
        texts = sorted(load_words("everyday"))
        vecs = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
        tiny = np.finfo(np.float32).tiny
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), tiny)
        held = _EVERYDAY[id(embedder)] = (embedder, vecs)
    q = np.asarray(query_vec, dtype=np.float32)
    q /= max(float(np.linalg.norm(q)), float(np.finfo(np.float32).tiny))
    return float(np.max(held[1] @ q))


def judged_hits(result: SearchResult, top_k: int) -> list[Hit]:
    """The ``top_k`` best hits by the fused score, as retrieval decided relevance on them (a reranker's order aside)."""
    return sorted(result.results, key=lambda h: (-h.score, h.id))[:top_k]


class RuleJudge:
    """Today's rules behind the judge interface. ``quoting``: the answer quotes sentences (no LLM), so the verdict
    says which; otherwise it says which papers a model reads, and what of the question they leave out by names and
    facets (descriptions are the model's to judge: its prompt asks it to say what the abstracts don't answer)."""

    name = "rules"
    phase = ""

    def __init__(
        self,
        settings: Settings,
        embedder: TextEmbedder | None,
        names_df: Callable[[str], int] | None,
        quoting: bool,
    ) -> None:
        self.settings = settings
        self.embedder = embedder
        self.names_df = names_df  # papers of the index holding a name (``Index.name_df``)
        self.quoting = quoting

    # ------------------------------------------------------------------ the verdict
    def judge(self, question: Question, candidates: SearchResult) -> Verdict:
        early = self.before_reading(question, candidates)
        if early is not None:
            return early
        if self.quoting:
            return self._quote(question, candidates)
        return self.read(question, candidates)

    def before_reading(self, q: Question, result: SearchResult) -> Verdict | None:
        """A refusal decided before any abstract is read (by the rules, or by a model): nothing relevant, the
        filters left nothing, or a loose match on everyday words alone. None: the abstracts are to be judged."""
        relevant, _ = self.relevant(q, result)
        off = self.settings.coverage.off
        loose = relevant and "unknown-names" not in off and self.loose(q, result)
        unknown = self._unknown_names(q, every=True) if loose else None
        if relevant and unknown is None:
            if self.everyday(result):
                return Verdict(
                    self.name,
                    refused=True,
                    kind="everyday",
                    reason="an everyday question, nearer everyday questions than any indexed abstract: no LLM called",
                    caveat="The question reads as an everyday one, not one the indexed abstracts are about",
                )
            return None
        if unknown is not None:
            unknown.loose = True
            return Verdict(
                self.name,
                refused=True,
                kind="unknown-names",
                reason="a loose match, and no indexed abstract has the question's names: no LLM called",
                caveat=unknown.line(),
                uncovered=[a.text for a in unknown.uncovered],
            )
        if result.filtered_out:
            why = result.filter_reason or "no paper passes them"
            return Verdict(
                self.name,
                refused=True,
                kind="filtered",
                reason=f"the filters excluded every paper: {why}; no LLM called",
            )
        # Names no indexed abstract contains say why, and say it first: "No indexed abstract mentions DoRA".
        nowhere = self._unknown_names(q)
        return Verdict(
            self.name,
            refused=True,
            kind="irrelevant",
            reason="not relevant: no LLM called",
            caveat=nowhere.line() if nowhere else None,
            uncovered=[a.text for a in nowhere.uncovered] if nowhere else [],
        )

    def relevant(self, q: Question, result: SearchResult) -> tuple[bool, list[str]]:
        """Retrieval's relevance, and the papers above its floor; for a question that asks papers only for a property
        they state of themselves ("Which papers link their code?"), a paper stating it is the evidence instead,
        however far its words are from the question's (read round 23: relevance 0.26)."""
        if result.relevant or not result.results or not q.only_facet or "only-facet" in self.settings.coverage.off:
            return result.relevant, list(result.above_floor)
        states = states_facet(q.text, q.only_facet, [], self.settings.coverage)
        judged = judged_hits(result, self.settings.top_k)
        stated = [
            h.id
            for h in judged
            if h.id in result.papers and any(map(states, quotable_sentences(result.papers[h.id].abstract, True)))
        ]
        return bool(stated), stated or list(result.above_floor)

    def everyday(self, result: SearchResult) -> bool:
        """Whether the question is an everyday one that passed the floor on an everyday word it shares with an
        abstract ("a good board game for a family" and the game-theory paper; read rounds 1 and 33): its cosine to
        the nearest everyday question exceeds its best paper's by more than ``everyday_margin``, while no paper
        matches it closely (``everyday_best``). Relative to the index: a question an abstract is about stands nearer
        that abstract."""
        c = self.settings.coverage
        if not c.everyday_margin or self.embedder is None or result.query_vec is None or not result.results:
            return False
        best = max(h.dense_score for h in judged_hits(result, self.settings.top_k))
        if best >= c.everyday_best:
            return False
        return nearest_everyday(self.embedder, result.query_vec) - best > c.everyday_margin

    def loose(self, q: Question, result: SearchResult) -> bool:
        """Whether the papers were found relevant only just: hybrid relevance under ``loose_match``; or a topic no
        abstract is about, asked in technical words, whose nearest papers stand barely above the field
        (``flat_lift``: "Which papers tackle over-smoothing in deep graph neural networks?"), unless it names
        something an indexed abstract has. (A close sentence of the first papers once spared the first: it did not
        pay for itself on the read questions, eval/results/ablation-final.md.)"""
        s, c = self.settings, self.settings.coverage
        if not s.fused_relevance:
            return False  # another scale: the floor is the only call
        relevant, _ = self.relevant(q, result)
        loose = result.relevance < c.loose_match
        flat = result.lift is not None and result.lift < c.flat_lift and q.technical(c)
        return relevant and (loose or (flat and not self._anchored(q)))

    def _anchored(self, q: Question) -> bool:
        """Whether the question names something an indexed abstract has ("what does ABBA claim?"): it asks about that
        paper, not about a topic, however far its words are from the abstract's."""
        if self.names_df is None:
            return False
        return any(self.names_df(n) > 0 for n in q.named)

    def _unknown_names(self, q: Question, every: bool = False) -> Coverage | None:
        """The question's names that no indexed abstract contains (document frequency 0), if any. With ``every``,
        only when none of its names is in an indexed abstract: one that is anchors the question in the corpus ("a
        LoRA alternative named like a Swedish band")."""
        if self.names_df is None:
            return None
        analysis = analyse(q, [], None, self.names_df, rules=self.settings.coverage)
        analysis.evidence = [ev for ev in analysis.evidence if ev.aspect.kind == NAME]
        cov = decide(analysis, [])  # without the names asked only as a likeness ("Mamba-style")
        if every and any(a.df != 0 for a in cov.aspects):
            return None
        cov.aspects = [a for a in cov.aspects if a.df == 0]
        return cov if cov.uncovered else None

    def source_limit(self, q: Question, result: SearchResult) -> int:
        """The papers an answer may read: ``context_papers``, or for a "which papers" list every retrieved one."""
        if q.listing:
            return max(self.settings.context_papers, len(result.results))
        return self.settings.context_papers

    def read(self, q: Question, result: SearchResult) -> Verdict:
        """The papers a model reads (the first ``context_papers`` worth showing it), and what of the question they
        leave out by names and facets."""
        s = self.settings
        used = candidates(result, s.context_papers, s.source_min_ratio, q, s.coverage)
        analysis = analyse(q, [(p.title, p.abstract) for _, p in used], None, self.names_df, rules=s.coverage)
        analysis.evidence = [ev for ev in analysis.evidence if ev.aspect.kind != DESCRIPTION]
        coverage = decide(analysis, list(range(1, len(used) + 1)))
        coverage.loose = self.loose(q, result)
        return Verdict(
            self.name,
            caveat=coverage.line(),
            uncovered=[a.text for a in coverage.uncovered],
            read=[h.id for h, _ in used],
            papers=[self._paper(analysis, n, h, []) for n, (h, _) in enumerate(used, 1)],
            loose=coverage.loose,
        )

    def _quote(self, q: Question, result: SearchResult) -> Verdict:
        s = self.settings
        if self.embedder is None:  # quoting ranks sentences by meaning: Engine always passes the index's model
            raise RagPapersError("extractive answers need the index's embedding model")
        used = candidates(result, self.source_limit(q, result), s.source_min_ratio, q, s.coverage)
        _, above_floor = self.relevant(q, result)
        plan = extractive(q, used, self.embedder, self.names_df, s.quoting, s.coverage, above_floor)
        coverage = plan.coverage
        coverage.loose = self.loose(q, result) and not plan.refused and not plan.by_facet
        uncovered = [a.text for a in coverage.uncovered]
        if plan.refused:  # no sentence of any source matches the question: nothing to quote
            line = coverage.line()
            return Verdict(
                self.name,
                refused=True,
                kind="nothing-close",
                reason=f"{line} and nothing in the retrieved abstracts is close"
                if line
                else "no sentence of the retrieved abstracts matches the question closely enough",
                uncovered=uncovered,
            )
        ids = [h.id for h, _ in used]
        quoted: dict[int, list[str]] = {}
        for n, sentence in plan.lines:
            quoted.setdefault(n, []).append(sentence)
        analysis = plan.analysis
        return Verdict(
            self.name,
            caveat=coverage.line(),
            uncovered=uncovered,
            read=ids,
            papers=[self._paper(analysis, n, h, quoted.get(n, [])) for n, (h, _) in enumerate(used, 1)],
            quotes=[(ids[n - 1], sentence) for n, sentence in plan.lines],
            listing=plan.listing,
            titled=plan.listing or bool(coverage.sides),
            loose=coverage.loose,
        )

    def _paper(self, analysis: Analysis | None, n: int, hit: Hit, evidence: list[str]) -> PaperVerdict:
        """Source ``n`` on its own: the aspects it leaves out (``partly``), its quoted sentences as evidence."""
        missing = [a.text for a in decide(analysis, [n]).missing] if analysis is not None else []
        addresses: Addresses = "partly" if missing else "yes"
        return PaperVerdict(hit.id, addresses, round(hit.score, 4), evidence, missing, self.name)

    def paper_verdict(self, q: Question, hit: Hit, paper: Paper) -> PaperVerdict:
        """One paper judged by the rules alone: what an LLM judge falls back to when its verdict on it fails."""
        analysis = analyse(q, [(paper.title, paper.abstract)], None, self.names_df, rules=self.settings.coverage)
        analysis.evidence = [ev for ev in analysis.evidence if ev.aspect.kind != DESCRIPTION]
        return self._paper(analysis, 1, hit, [])
