"""What an answer may read and quote, by the rules: the candidate papers, and with no LLM the sentences to quote.

Quoting is judging: a sentence is quoted because it addresses the question, and what the quoted sentences leave
out is the line said first. So the plan is made here, by the rule judge (``rules.RuleJudge``), and the answer
stage only formats it. The thresholds are ``Settings.quoting``'s and ``Settings.coverage``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rag_papers.config import CoverageSettings, QuotingSettings
from rag_papers.corpus import Paper, plain_text, quotable_sentences
from rag_papers.judge import words
from rag_papers.judge.aspects import (
    Analysis,
    Aspect,
    Coverage,
    addresses,
    analyse,
    decide,
    facet_topic,
    name_found,
    topic_text,
)
from rag_papers.judge.words import CODE, DESCRIPTION, LISTED_BY_FACET, NAME
from rag_papers.keyword import paper_text

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder
    from rag_papers.judge.question import Question
    from rag_papers.retrieve import Hit, SearchResult


def candidates(
    result: SearchResult, limit: int, min_ratio: float, q: Question | None, rules: CoverageSettings
) -> list[tuple[Hit, Paper]]:
    """The first ``limit`` (``context_papers``) retrieved papers worth showing the model.

    The search already stopped at ``top_k``, so at most min(top_k, context_papers) come back; weak
    matches far below the best are left out, as they only invite bad citations, unless question ``q`` names
    them ("... the same kind of thing as K-Flow?": K-Flow's paper, ranked second, is what it asks about).
    """
    top = result.results[0].score if result.results else 0.0
    if q is not None and q.listed_by_facet:
        min_ratio = 0.0  # "which papers link their code?": a paper's property, not how close its topic is
    named = named_papers(q, result, rules) if q is not None else set()
    return [
        (h, result.papers[h.id])
        for h in result.results[:limit]
        if h.id in result.papers and (h is result.results[0] or h.score >= min_ratio * top or h.id in named)
    ]


def named_papers(q: Question, result: SearchResult, rules: CoverageSettings) -> set[str]:
    """The retrieved papers that have a name the question uses (not the field's, not a likeness), for a name
    that at most ``coverage.named_at_most`` of them have ("Transformer" names none in particular)."""
    names = list(q.named)
    hits = [h for h in result.results if h.id in result.papers]
    if not names or not hits:
        return set()
    srcs = [(result.papers[h.id].title, result.papers[h.id].abstract) for h in hits]
    toks = [set(paper_text(t, a).split()) for t, a in srcs]
    out: set[str] = set()
    for name in names:
        found = name_found(name, srcs, toks, q.text, rules)
        if 0 < len(found) <= rules.named_at_most:
            out.update(hits[n - 1].id for n in found)
    return out


# Contribution or result ("we propose", "outperforms", "12% faster") versus background ("X has become",
# "However, existing methods ..."): a prior on which sentence of a paper to quote, never a filter (cues.toml).
_CONTRIBUTION, _BACKGROUND = words._CUE["contribution"], words._CUE["background"]


def sentence_prior(sentence: str) -> int:
    """+1 for a sentence that states a contribution or a result, -1 for background, else 0."""
    if _CONTRIBUTION.search(sentence):
        return 1
    return -1 if _BACKGROUND.search(sentence) else 0


@dataclass
class Candidate:
    n: int  # the source it is from, numbered as ``used``
    text: str
    cos: float  # to the question, by the embedder the index searches with
    prior: int  # ``sentence_prior``


@dataclass
class QuotePlan:
    lines: list[tuple[int, str]]  # (source n, sentence), in answer order
    listing: bool
    coverage: Coverage = field(default_factory=Coverage)  # what the quoted abstracts address
    refused: bool = False
    # A list picked by the property asked of it ("which papers link their code?"): every line states it, so a
    # loose topical match is no caveat.
    by_facet: bool = False
    analysis: Analysis | None = None  # the question's aspects in the sources, as planned on

    @property
    def caveat(self) -> str | None:
        """The line said first when part of the question is not addressed (``Coverage.line``)."""
        return None if self.refused else self.coverage.line()


def quote_candidates(
    question: str,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder,
    min_score: float = 0.0,
    keep: Sequence[int] = (),
    links: bool = False,
) -> list[Candidate]:
    """Every quotable sentence of the sources (the first, ``keep`` and those scoring ``min_score`` or more: no
    other can be quoted, so their sentences are not embedded), with its cosine to the question and its prior;
    with ``links``, the sentences that link code too."""
    import numpy as np

    cands = [
        (n, s)
        for n, (h, p) in enumerate(used, 1)
        if n == 1 or n in keep or h.score >= min_score
        for s in quotable_sentences(p.abstract, links)
    ]
    if not cands and used:
        cands = [(1, " ".join(plain_text(used[0][1].abstract).split()))]
    if not cands:
        return []
    q = np.asarray(embedder.embed_query(question))
    sims = np.asarray(embedder.embed_documents([s for _, s in cands])) @ q
    return [Candidate(n, s, float(cos), sentence_prior(s)) for (n, s), cos in zip(cands, sims)]


def plan_quotes(
    used: list[tuple[Hit, Paper]],
    cands: list[Candidate],
    analysis: Analysis,
    rules: QuotingSettings,
    above_floor: Sequence[str] | None = None,
) -> QuotePlan:
    """Which sentences to quote, what of the question they leave unaddressed, and whether to refuse.

    A paper is quoted only when its retrieval score is close to the best paper's and its best
    sentence itself matches the question (a cosine floor, and a share of the best sentence's
    cosine): a paper retrieved on one shared phrase is otherwise quoted with a sentence about
    something else; the paper retrieval ranks first is always quoted, with its best sentence. The question's
    shape changes that:

    - "which papers ..." lists every paper above the retrieval floor (``above_floor``) with a
      sentence that matches, one line each;
    - a comparison quotes the paper of each compared side;
    - a question about limitations, data or results quotes a sentence that states it, where a
      quoted paper has one (else the coverage line says the abstracts don't).

    Nothing matching at all is a refusal. Within a paper, the prior breaks near ties towards what the paper does or finds.
    """
    listing = analysis.q.listing
    every = listing  # a list of every paper above the floor, not only the closest few
    coverage_rules = analysis.rules
    if not used or not cands:
        return QuotePlan([], listing, refused=True)
    if listing and analysis.facet in LISTED_BY_FACET:  # ``listed_by_facet``, on the facet analysed once
        plan = _listed_by_facet(cands, analysis)
        if plan is not None:
            return plan
    top_score = used[0][0].score
    # The papers the question names, a comparison's sides first (Engine.ask retrieved each side on its own): each
    # is quoted, however close its sentence is.
    named = named_sources(analysis) if "named-sources" not in coverage_rules.off else []
    if every and above_floor is not None:
        floor_ids = set(above_floor)
        close = [n for n, (h, _) in enumerate(used, 1) if n == 1 or h.id in floor_ids]
    else:
        close = [n for n, (h, _) in enumerate(used, 1) if n == 1 or h.score >= rules.paper_ratio * top_score]
    close = list(dict.fromkeys([*named, *close]))
    best = max((c.cos for c in cands if c.n in close), default=0.0)
    if best < rules.floor:
        return QuotePlan([], listing, refused=True)
    bar = rules.list_floor if every else max(rules.floor, rules.ratio * best)
    states = analysis.facet_test()
    lines: list[tuple[int, str]] = []
    quoted: list[int] = []
    for n in close:
        if not every and n not in named and len(quoted) >= rules.papers:
            continue
        own = [c for c in cands if c.n == n]
        ranked = sorted(own, key=lambda c: -(c.cos + rules.prior * c.prior))
        stated = [c for c in ranked if states(c.text)]
        if n in named:
            take = ranked[:1]  # each compared paper speaks for itself, however close its sentence is
        elif listing:  # one line a paper
            take = [c for c in ranked[:1] if c.cos >= bar]
        else:
            take = [c for c in ranked if c.cos >= bar][: 2 if not quoted else 1]
        if n == 1 and not take:
            # The paper retrieval ranks first is always quoted: the fused ranking judges the paper better than one
            # sentence's cosine does (lay questions: their best sentence is far from the question's words).
            take = ranked[:1]
        if stated and take and stated[0] not in take and "facet-first" not in coverage_rules.off:
            take = [stated[0], *take][:2]  # the facet asked for, stated, comes first
        if not take:
            continue
        order = {c.text: i for i, c in enumerate(own)}
        lines.extend((n, c.text) for c in sorted(take, key=lambda c: order[c.text]))
        quoted.append(n)
    coverage = decide(analysis, quoted)
    coverage.listing = listing
    return QuotePlan(lines, listing, coverage)


def _listed_by_facet(cands: list[Candidate], analysis: Analysis) -> QuotePlan | None:
    """ "Which papers link their code?": every retrieved paper with a sentence that states it, one line each, in
    retrieval order; None when no paper does (then the list is planned as any other, and the coverage line says
    the facet is missing).

    A topic asked with it ("papers on speech recognition that release code") is asked too: only the papers that
    address it are listed, and when none does, those stating the facet are the closest, after a line saying the
    topic is missing."""
    states = analysis.facet_test()
    stated: dict[int, str] = {}
    for c in sorted(cands, key=lambda c: -c.cos):
        if c.n not in stated and states(c.text):
            stated[c.n] = c.text
    if not stated:
        return None
    # the stated papers that address each topic aspect, read once
    addressed = {
        ev.aspect.text: {n for n in stated if addresses(ev, n, analysis.rules)} for ev in facet_topic(analysis)
    }
    on_topic = [n for n in sorted(stated) if all(n in ns for ns in addressed.values())]
    quoted = on_topic or sorted(stated)
    coverage = decide(analysis, quoted)
    if not on_topic:  # the topic asked with the facet, which no paper stating it addresses, is said missing
        missing = [text for text, ns in addressed.items() if not ns]
        shown = {a.text: a for a in coverage.aspects}
        for text in missing:
            if text in shown:
                shown[text].covered, shown[text].text = False, topic_text(text, analysis.facet)
            else:
                coverage.aspects.append(Aspect(topic_text(text, analysis.facet), DESCRIPTION))
    coverage.listing = True
    return QuotePlan([(n, stated[n]) for n in quoted], True, coverage, by_facet=True)


def analyse_sources(
    q: Question,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder | None,
    names_df: Callable[[str], int] | None,
    rules: CoverageSettings,
) -> Analysis:
    """``aspects.analyse`` over the answer's sources."""
    return analyse(q, [(p.title, p.abstract) for _, p in used], embedder, names_df, rules=rules)


def named_sources(analysis: Analysis) -> list[int]:
    """The sources (1-based) quoted because the question names them: for each name it uses (not the field's, not
    a likeness, unless a comparison's side), the first retrieved source that has it; a comparison's sides first."""
    names = [e for e in analysis.evidence if e.aspect.kind == NAME and e.found]
    names.sort(key=lambda e: e.aspect.text not in analysis.sides)
    picked = [min(e.found) for e in names if e.aspect.text in analysis.sides or e.aspect.text not in analysis.q.ignored]
    return list(dict.fromkeys(picked))


def prepare_quotes(
    q: Question,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder,
    names_df: Callable[[str], int] | None,
    min_score: float,
    rules: CoverageSettings,
    above_floor: Sequence[str] | None = None,
) -> tuple[Analysis, list[Candidate]]:
    """What ``plan_quotes`` decides on: the question's aspects in the sources, and the quotable sentences
    (of the sources scoring ``min_score`` or more, the papers the question names, a comparison's sides among them,
    and a list's papers above the floor)."""
    analysis = analyse_sources(q, used, embedder, names_df, rules)
    sides = named_sources(analysis)
    floor_ids = set(above_floor or ())
    if q.listed_by_facet:  # every retrieved paper may state it
        return analysis, quote_candidates(q.text, used, embedder, keep=range(1, len(used) + 1), links=True)
    listed = [n for n, (h, _) in enumerate(used, 1) if h.id in floor_ids] if q.listing else []
    return analysis, quote_candidates(q.text, used, embedder, min_score, [*sides, *listed], analysis.facet == CODE)


def extractive(
    q: Question,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder,
    names_df: Callable[[str], int] | None,
    quoting: QuotingSettings,
    coverage: CoverageSettings,
    above_floor: Sequence[str] | None = None,
) -> QuotePlan:
    """No LLM: the sentences of the top papers that match the question, each to be cited (``plan_quotes``)."""
    top = used[0][0].score if used else 0.0
    analysis, cands = prepare_quotes(q, used, embedder, names_df, quoting.paper_ratio * top, coverage, above_floor)
    plan = plan_quotes(used, cands, analysis, quoting, above_floor)
    plan.analysis = analysis
    return plan
