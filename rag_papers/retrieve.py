"""Retrieve stage: dense + keyword evidence fused into ranked papers, and the relevance call.

Why not llama-index's ``QueryFusionRetriever``: its modes (reciprocal rank, relative
score, dist-based score) normalise each retriever's scores *within* the candidate list,
so a BM25 list made of weak, common-word matches gets the same say as a confident one.
Each score here keeps an absolute meaning: dense is a cosine, keyword is the share of
the query's *specific* idf mass a paper matches (generic words count for nothing), so
the keyword side only pulls a paper up when the words it shares are telling. The
alternatives (z-score, min-max, tuned reciprocal-rank, a learned linear fusion) were
fitted on eval/qa.jsonl's dev part and scored on its test part (eval/README.md); this
one was kept. Absolute scores also decide ``relevant``.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rag_papers import RagPapersError
from rag_papers.config import Settings, TopK, Year, validation_message
from rag_papers.corpus import Paper, quotable_sentences, safe_text, sentences
from rag_papers.index import Index
from rag_papers.keyword import BM25_K1, keyword_query, keyword_tokens, lucene_idf, paper_text, useful_terms
from rag_papers.store import passage_text
from rag_papers.venues import venue_key

if TYPE_CHECKING:
    from rag_papers.rerank import Scored


@dataclass
class DenseHit:
    paper_id: str
    score: float
    chunk_id: str  # the best-matching chunk: ``Index.passages`` gives its text


def dense_hits(chunk_hits: list[tuple[str, float]], doc_hits: list[tuple[str, float]], n: int) -> list[DenseHit]:
    """Top papers by the mean of two cosines: the paper's head vector and its best chunk.

    The head (title + opening, the first chunk) carries the gist; the best chunk lets a
    match in the tail count too. On eval/qa.jsonl's dev part the mean tied the best chunk on
    paraphrases and beat it on multi-paper questions; the head alone was worse.
    """
    best_chunk: dict[str, tuple[float, str]] = {}
    for vid, cos in chunk_hits:  # chunk ids are "<paper id>:<chunk number>"
        pid = vid.rpartition(":")[0]
        if pid not in best_chunk or cos > best_chunk[pid][0]:
            best_chunk[pid] = (cos, vid)
    doc_score = {vid.rpartition(":")[0]: cos for vid, cos in doc_hits}  # "<paper id>:doc"
    chunk_floor = min((c for c, _ in best_chunk.values()), default=0.0)
    doc_floor = min(doc_score.values(), default=0.0)
    hits = []
    for pid in {*best_chunk, *doc_score}:
        d = doc_score.get(pid, doc_floor)
        c, vid = best_chunk.get(pid, (max(chunk_floor, d), f"{pid}:0"))  # the head is a chunk too
        hits.append(DenseHit(pid, (c + d) / 2, vid))
    hits.sort(key=lambda h: (-h.score, h.paper_id))
    return hits[:n]


def combine_dense(per_model: list[list[DenseHit]]) -> list[DenseHit]:
    """One dense ranking from several embedding models' (``dense_hits`` per model, model 0 first).

    Two models' cosines live on different scales (mpnet's spread is not MiniLM's), so each
    model's paper scores are z-scored over its own candidate pool (population std, 1 when
    the pool is flat) and the z-scores averaged per paper; a paper missing from a model's
    pool gets that model's lowest z. The average is mapped back onto model 0's scale for
    this query (z * std0 + mean0), so the absolute floors downstream (``min_dense``,
    ``min_score``) keep a cosine-like meaning. A paper keeps model 0's best chunk, or model
    1's where model 0 lacks the paper. Models with an empty pool have no say; the first
    non-empty one sets the scale. With one model, or identical ones, the scores come back
    unchanged (up to rounding).
    """
    pools = [hits for hits in per_model if hits]
    if not pools:
        return []
    stats: list[tuple[dict[str, float], float, float, float]] = []  # (z by paper, lowest z, mean, std)
    for hits in pools:
        scores = [h.score for h in hits]
        mean = sum(scores) / len(scores)
        std = (sum((x - mean) ** 2 for x in scores) / len(scores)) ** 0.5 or 1.0
        z = {h.paper_id: (h.score - mean) / std for h in hits}
        stats.append((z, min(z.values()), mean, std))
    chunk_of: dict[str, str] = {}
    for hits in reversed(pools):  # model 0's chunk wins: written last
        chunk_of.update({h.paper_id: h.chunk_id for h in hits})
    _, _, mean0, std0 = stats[0]
    out = []
    for pid, chunk in chunk_of.items():
        z_avg = sum(z.get(pid, low) for z, low, _, _ in stats) / len(stats)
        out.append(DenseHit(pid, z_avg * std0 + mean0, chunk))
    out.sort(key=lambda h: (-h.score, h.paper_id))
    return out


# Under filters, a query word found in no paper read so far is looked up among at most this many papers
# that contain it to see whether any passes the filters (``Retriever._coverage_within``).
FILTERED_TERM_SCAN = 500
# The papers whose sentences ``sentence_match`` reads: the first three by the fused score, as studied.
SENTENCE_PAPERS = 3


@dataclass
class Filters:
    """Optional restrictions, applied to both retrievers."""

    year_min: int | None = None
    year_max: int | None = None
    venue: str | None = None
    keyword: str | None = None

    def active(self) -> bool:
        return any(v not in (None, "") for v in asdict(self).values())

    def problem(self) -> str | None:
        """Why these filters can match no paper whatever the index holds (an empty year range), else None.

        The CLI refuses such filters before loading anything; the retriever reports them as
        having excluded every paper without searching.
        """
        if self.year_min is not None and self.year_max is not None and self.year_min > self.year_max:
            return f"the year range {self.year_min} to {self.year_max} is empty (the minimum is after the maximum)"
        return None

    def years(self) -> str:
        """The year filter in words ("year 2030 or later"), or "" when there is none."""
        lo, hi = self.year_min, self.year_max
        if lo is not None and hi is not None:
            return f"year {lo}" if lo == hi else f"years {lo} to {hi}"
        if lo is not None:
            return f"year {lo} or later"
        return f"year {hi} or earlier" if hi is not None else ""

    def parts(self) -> list[str]:
        """Each active filter in words: ["year 2030 or later", "venue 'NOPE'"] (the UI's chips)."""
        parts = [self.years()]
        if self.venue:
            parts.append(f"venue {self.venue!r}")
        if self.keyword:
            parts.append(f"keyword {self.keyword!r}")
        return [p for p in parts if p]

    def describe(self) -> str:
        """The active filters in words, for messages: "year 2030 or later, venue 'NOPE'"."""
        return ", ".join(self.parts())

    def chroma_where(self, venues: Iterable[str] = ()) -> dict[str, Any]:
        """The vector store's ``where`` for the year and venue filters (the keyword one is ``accepts``' alone).

        Chroma compares strings exactly, while ``accepts`` ignores a venue's case: ``venues`` (the indexed
        ones) turns the venue asked for into every spelling of it the index holds, so both paths agree.
        """
        clauses: list[dict[str, Any]] = []
        if self.year_min is not None:
            clauses.append({"year": {"$gte": self.year_min}})
        if self.year_max is not None:
            clauses.append({"year": {"$lte": self.year_max}})
        if self.venue:
            spellings = sorted({v for v in venues if venue_key(v) == venue_key(self.venue)}) or [self.venue]
            clauses.append({"venue": spellings[0]} if len(spellings) == 1 else {"venue": {"$in": spellings}})
        if not clauses:
            return {}
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def accepts(self, paper: Paper) -> bool:
        if self.year_min is not None and (paper.year is None or paper.year < self.year_min):
            return False
        if self.year_max is not None and (paper.year is None or paper.year > self.year_max):
            return False
        if self.venue and venue_key(paper.venue or "") != venue_key(self.venue):
            return False
        if self.keyword:
            text = f"{paper.title} {paper.abstract}"
            if not all(_whole_word(w).search(text) for w in self.keyword.split()):
                return False
        return True


class SearchRequest(BaseModel):
    """A search as a caller states it: the CLI's flags, the /search API's parameters.

    One set of rules for both, checked before anything is searched: ``top_k`` is the ``top_k``
    setting's own type (``config.TopK``), a year a ``config.Year``, venue and keyword text. So
    ``top_k`` 0 or -3, ``year_min`` "abc" or a venue that is an object are refused in words,
    instead of reaching the stores (which blamed themselves) or being quietly replaced.
    """

    model_config = ConfigDict(extra="forbid")

    query: str | None = None
    top_k: TopK | None = None
    year_min: Year | None = None
    year_max: Year | None = None
    venue: str | None = None
    keyword: str | None = None

    @classmethod
    def problems(cls, **given: Any) -> dict[str, str]:
        """What is wrong with each bad parameter, by name ({} when the request is good)."""
        try:
            cls(**given)
        except ValidationError as exc:
            out: dict[str, str] = {}
            for err in exc.errors():
                name = str(err["loc"][0]) if err["loc"] else "request"
                out[name] = "; ".join(m for m in (out.get(name), validation_message([err])) if m)
            return out
        return {}

    @classmethod
    def checked(cls, **given: Any) -> SearchRequest:
        """The request, or a ``RagPapersError`` naming each bad parameter and its rule."""
        bad = cls.problems(**given)
        if bad:
            raise RagPapersError(f"bad search parameters: {'; '.join(bad.values())}")
        return cls(**given)

    def filters(self) -> Filters:
        return Filters(self.year_min, self.year_max, self.venue or None, self.keyword or None)


@functools.lru_cache(maxsize=64)
def _whole_word(word: str) -> re.Pattern[str]:
    """``word`` as a whole word in any case: the keyword "RNA" must not match "learnable" (issue 28)."""
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)


# The two JSON shapes of a hit, in the key order the CLI and the API have always printed.
_RESULT_KEYS = ("id", "title", "score", "dense_score", "keyword_score", "passage", "year", "venue", "rerank_score")
_SOURCE_KEYS = ("n", "id", "title", "score", "passage", "year", "venue")


@dataclass
class Hit:
    """One retrieved paper: a search result, an answer's source and a paper in the UI's panel.

    One record for all three, so no stage copies fields into a shape of its own: an answer's
    sources are its hits, numbered (``n``) and marked ``cited``, and the UI shows those.
    """

    id: str
    title: str
    score: float
    dense_score: float
    keyword_score: float
    passage: str
    year: int | None = None
    venue: str | None = None
    rerank_score: float | None = None  # the reranker's score, for the candidates it rescored (rag_papers/rerank.py)
    n: int = 0  # its number, the [n] that cites it, once numbered as a source or a listed match; 0 before
    cited: bool = False  # the answer whose source it is cites it

    def numbered(self, n: int, cited: bool = False) -> Hit:
        """A copy numbered ``n``: the search result's own hit stays unnumbered, whoever lists it."""
        return replace(self, n=n, cited=cited)

    def to_dict(self) -> dict[str, Any]:
        """A search result (``search --json``, the API's ``/search``)."""
        return {k: getattr(self, k) for k in _RESULT_KEYS}

    def source_dict(self) -> dict[str, Any]:
        """An answer's source (``ask --json``, the API's ``/ask``)."""
        return {k: getattr(self, k) for k in _SOURCE_KEYS}


@dataclass
class SearchResult:
    query: str
    results: list[Hit]
    relevant: bool
    timings: dict[str, float] = field(default_factory=dict)
    papers: dict[str, Paper] = field(default_factory=dict, repr=False)
    relevance: float = 0.0  # the evidence ``relevant`` thresholds (see ``Retriever.relevance``)
    # True when the filters, not the query, left nothing: every candidate was rejected by them (or
    # they cannot match at all). Then "the abstracts don't cover this" would be the wrong message.
    filtered_out: bool = False
    filter_reason: str | None = None  # what excluded them, in words, when ``filtered_out``
    # The hits that reach the relevance floor on their own (a "which papers" answer lists each of them).
    above_floor: list[str] = field(default_factory=list)
    # In the band where one sentence may decide (``Retriever._sentence_band``: just under the floor): the best
    # cosine of a quotable sentence of the first papers to the question; None where it was not looked at.
    sentence_match: float | None = None
    # The query's vector (first model) as the search embedded it, for ``Engine.lift``: not embedded twice per ask.
    query_vec: list[float] | None = field(default=None, repr=False, compare=False)
    # How far the first papers stand above the index's field (``Engine.lift``), set by an ask: the judge reads it.
    lift: float | None = None
    filters: str | None = None  # the filters that were on, in words (``Filters.describe``), else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "results": [h.to_dict() for h in self.results],
            "relevant": self.relevant,
            "relevance": self.relevance,
            "sentence_match": self.sentence_match,
            "filtered_out": self.filtered_out,
            "filter_reason": self.filter_reason,
            "timings": self.timings,
        }


class Retriever:
    """Hybrid retrieval over an ``Index``; ``settings.retrieval`` picks hybrid, dense or bm25."""

    def __init__(self, index: Index, settings: Settings) -> None:
        self.index = index
        self.settings = settings

    def search(
        self, query: str, top_k: int | None = None, filters: Filters | None = None, names: Sequence[str] = ()
    ) -> SearchResult:
        """The ``top_k`` best papers for ``query``, with retrieval's own evidence of relevance; whether they answer a
        question is the judge's (``rag_papers.judge``). ``names``: the query's names, as chat parsed it (a name of
        several words is known to a filtered search only whole)."""
        s = self.settings
        # Escape sequences and control characters are not words: search for the text the user sees.
        query = safe_text(query, newlines=False)
        if not query.strip():  # the nearest papers to nothing are arbitrary: refuse, as every caller should
            raise RagPapersError("empty query: give the words to search for")
        k = max(1, top_k or s.top_k)
        filters = filters or Filters()
        if filters.problem():
            return SearchResult(query, [], False, {"total_ms": 0.0}, filtered_out=True, filter_reason=filters.problem())
        mode = s.retrieval
        widen = 4 if filters.active() else 1  # filters reject some candidates: look further down
        pool = max(s.candidates, k) * widen
        timings: dict[str, float] = {}
        t0 = time.perf_counter()

        # The keyword side needs no query vector: in hybrid mode it runs in a worker thread (with
        # its own SQLite connection) while the query is embedded and the vector stores are
        # searched; SQLite, onnxruntime and chromadb's HNSW search release the GIL.
        kw_side = self.index.pool().submit(self._keyword_side, query, pool) if mode == "hybrid" else None

        dense: dict[str, tuple[float, str]] = {}
        vec: list[float] | None = None  # the query's vector (first model), for the sentence evidence too
        where = filters.chroma_where([str(v) for v in self.index.field_values("venue") if v] if filters.venue else ())
        if mode in ("hybrid", "dense"):
            second = self.index.embedder2
            # The second model embeds the query in a worker thread while the first does here.
            vec2 = self.index.pool().submit(second.embed_query, query) if second is not None else None
            vec = self.index.embedder.embed_query(query)
            vecs = [vec] if vec2 is None else [vec, vec2.result()]
            timings["embed_ms"] = _ms(t0)
            t1 = time.perf_counter()
            per_model = [
                dense_hits(*self.index.nearest(v, pool, where=where, model=m), pool) for m, v in enumerate(vecs)
            ]
            for dh in per_model[0] if len(per_model) == 1 else combine_dense(per_model):
                dense[dh.paper_id] = (dh.score, dh.chunk_id)
            timings["dense_ms"] = _ms(t1)

        keyword: dict[str, float] = {}
        coverage = 1.0  # share of the query's squared idf mass in words the corpus knows (_keyword_side)
        if kw_side is not None:
            keyword, coverage, timings["keyword_ms"] = kw_side.result()
        elif mode == "bm25":
            keyword, coverage, timings["keyword_ms"] = self._keyword_side(query, pool)

        t1 = time.perf_counter()
        w = {"hybrid": s.dense_weight, "dense": 1.0, "bm25": 0.0}[mode]
        dense_floor = min((d for d, _ in dense.values()), default=0.0)  # for papers only the keyword side found
        scored: Scored = []
        for pid in dict.fromkeys([*dense, *keyword]):
            d = dense[pid][0] if pid in dense else dense_floor
            kw = keyword.get(pid, 0.0)
            scored.append((round(_fused(w, d, kw), 4), pid, d, kw))
        scored.sort(key=lambda x: (-x[0], x[1]))
        # --- reranker hook (rag_papers/rerank.py): with settings.reranker set, a cross-encoder reorders the
        # top rerank_candidates of ``scored`` that pass the filters; the rest keep their fused order after them.
        rerank_scores: dict[str, float] = {}
        if s.reranker:
            from rag_papers.rerank import rerank_scored

            t2 = time.perf_counter()
            n = s.rerank_candidates
            candidates: dict[str, Paper] = {}
            chosen, _ = self._passing(scored, n, n * widen, filters, candidates)
            # The passage scored is the paper's title and abstract, as ingest embeds them.
            pairs = [
                (pid, passage_text(candidates[pid].title, candidates[pid].abstract))
                for pid in (scored[i][1] for i in chosen)
            ]
            scored, rerank_scores = rerank_scored(s, query, scored, pairs)
            timings["rerank_ms"] = _ms(t2) if scored else 0.0
        # --- end of the reranker hook
        # Registry rows only for the winners (``_passing``); ``papers``: every row read, for ``_coverage_within``.
        papers: dict[str, Paper] = {}
        chosen, rejected = self._passing(scored, k, k * widen, filters, papers)  # rejected: turned away by the filters
        hits = [
            Hit(
                id=pid,
                title=papers[pid].title,
                score=score,
                dense_score=round(d, 4),
                keyword_score=round(kw, 4),
                passage="",  # the best chunk's text, fetched below for the winners only
                year=papers[pid].year,
                venue=papers[pid].venue,
                rerank_score=rerank_scores.get(pid),
            )
            for score, pid, d, kw in (scored[i] for i in chosen)
        ]
        chunk_of = {h.id: dense[h.id][1] for h in hits if h.id in dense}
        texts = self.index.passages(list(chunk_of.values()), {h.id: h.title for h in hits})
        for h in hits:
            h.passage = texts.get(chunk_of.get(h.id, "")) or _first_sentences(papers[h.id].abstract)
        if filters.active() and hits and mode != "dense":
            # Relevance is decided on the papers the filters keep: a word only filtered-out papers
            # contain is not known to this search (what ABBA claims is no question for BAM).
            coverage = self._coverage_within(query, names, filters, papers)
        # Decided on the value reported, and on the ``top_k`` best hits by the fused score however many were asked
        # for: eval ranks ten deep for recall@10 and must refuse what the app refuses at its own depth (a paper
        # ranked 6th can hold the best cosine). By the fused score, not a reranker's order: that stays the decision.
        judged = sorted(hits, key=lambda h: (-h.score, h.id))[: s.top_k]
        relevance = round(self.relevance(judged, coverage), 4)
        relevant = bool(hits) and relevance >= self.floor()
        above_floor = [h.id for h in hits if self.relevance([h], coverage) >= self.floor()]
        sentence = None
        if hits and vec is not None and self._sentence_band(relevance, relevant):
            t2 = time.perf_counter()
            best = self._best_sentences(vec, judged[:SENTENCE_PAPERS], papers)
            sentence = round(max(best.values(), default=0.0), 4)
            if not relevant and sentence >= s.sentence_match:
                relevant = True
                above_floor = [pid for pid, cos in best.items() if cos >= s.sentence_match]
            timings["sentence_ms"] = _ms(t2)
        # Nothing left because of the filters: candidates were turned away, or the vector store's
        # filter (year, venue) matched no vector at all in a non-empty index.
        excluded = (
            not hits
            and filters.active()
            and (rejected > 0 or (bool(where) and mode != "bm25" and not dense and self.index.count() > 0))
        )
        timings["fuse_ms"] = _ms(t1)
        timings["total_ms"] = _ms(t0)
        return SearchResult(
            query,
            hits,
            relevant,
            timings,
            {h.id: papers[h.id] for h in hits},
            relevance,
            filtered_out=excluded,
            filter_reason=self.filter_reason(filters) if excluded else None,
            above_floor=above_floor,
            sentence_match=sentence,
            query_vec=vec,
            filters=filters.describe() if filters.active() else None,
        )

    def _sentence_band(self, relevance: float, relevant: bool) -> bool:
        """Whether one sentence may decide: a result just under the floor may still pass on it (``sentence_match``).
        Hybrid only, as the band is in the hybrid relevance's units, and never where a reranker's floor decides."""
        s = self.settings
        if relevant or not s.fused_relevance:
            return False
        return bool(s.sentence_match) and s.sentence_match_from <= relevance < s.min_score

    def _best_sentences(self, vec: list[float], hits: list[Hit], papers: dict[str, Paper]) -> dict[str, float]:
        """Paper id -> the best cosine of its quotable sentences to the query vector ``vec``.

        Why sentences: a question about one claim of an abstract, asked in other words, matches that claim's
        sentence while its match with the whole abstract is diluted by the rest (and its lay words are unknown
        to the keyword index, which lowers the coverage term); an everyday question near the floor matches no
        sentence that closely. The sentences are those an answer quotes, so what passes has a quote."""
        import numpy as np

        texts = [(h.id, t) for h in hits for t in quotable_sentences(papers[h.id].abstract)]
        if not texts:
            return {}
        sims = np.asarray(self.index.embedder.embed_documents([t for _, t in texts])) @ np.asarray(vec)
        best: dict[str, float] = {}
        for (pid, _), cos in zip(texts, sims):
            best[pid] = max(best.get(pid, -1.0), float(cos))
        return best

    def _passing(
        self, scored: Scored, want: int, step: int, filters: Filters, papers: dict[str, Paper]
    ) -> tuple[list[int], int]:
        """(positions in ``scored`` of its first ``want`` candidates that are registered and pass the filters,
        how many the filters turned away before the last of them).

        The one place a search reads candidates' registry rows: in rank order, ``step`` candidates at a
        time (k, or 4k under filters), until ``want`` pass, each row read kept in ``papers``. Reading all
        ~100 candidates' rows was most of the fusion time on a large index (docs/design-notes.md).
        """
        chosen: list[int] = []
        rejected = 0
        for start in range(0, len(scored), step):
            part = range(start, min(start + step, len(scored)))
            papers.update(self.index.get([scored[i][1] for i in part]))
            for i in part:
                if len(chosen) == want:
                    break
                paper = papers.get(scored[i][1])
                if paper is None:
                    continue
                if not filters.accepts(paper):
                    rejected += 1
                    continue
                chosen.append(i)
            if len(chosen) == want:
                break
        return chosen, rejected

    def filter_reason(self, filters: Filters) -> str:
        """Why the filters left no paper, as precisely as the index can say cheaply.

        A year range or venue that no indexed paper has is named as such (from the registry's
        distinct values); otherwise the papers that match the query all failed the filters.
        """
        if filters.problem():
            return str(filters.problem())
        if filters.year_min is not None or filters.year_max is not None:
            years = [int(y) for y in self.index.field_values("year") if y is not None]
            lo, hi = filters.year_min, filters.year_max
            if not any((lo is None or y >= lo) and (hi is None or y <= hi) for y in years):
                known = f"indexed years: {min(years)} to {max(years)}" if years else "no indexed paper has a year"
                return f"no indexed paper is from {filters.years()} ({known})"
        if filters.venue:
            venues = [str(v) for v in self.index.field_values("venue") if v]
            if venue_key(filters.venue) not in {venue_key(v) for v in venues}:
                shown = ", ".join(venues[:5]) + (", ..." if len(venues) > 5 else "")
                return f"no indexed paper is from venue {filters.venue!r} (indexed venues: {shown or 'none'})"
        return f"none of the papers that match the query passes the filters ({filters.describe()})"

    def _keyword_side(self, query: str, pool: int) -> tuple[dict[str, float], float, float]:
        """(paper id -> specificity-weighted keyword share, coverage, milliseconds).

        A paper's share is the part of the query's specific idf mass it matches, each term
        saturated as BM25 saturates it: its BM25 over the specific terms (in at most
        ``keyword_max_df`` of the papers) divided by (k1 + 1) x the idf of those terms plus
        the idf of the query words no paper has. Generic words count for nothing, and a
        query mostly made of words the corpus lacks matches little of itself.

        ``coverage``: the share of the query's squared idf that the corpus knows, the
        relevance evidence's second part (``relevance``).
        """
        t0 = time.perf_counter()
        n_docs, stats = self.index.term_stats(keyword_query(query))
        if not stats or not n_docs:
            return {}, 0.0, _ms(t0)
        idf = {t: lucene_idf(n_docs, df) for t, df in stats}
        every = sum(v * v for v in idf.values())
        coverage = sum(idf[t] ** 2 for t, df in stats if df) / every if every else 0.0
        terms = useful_terms(stats, n_docs, self.settings.keyword_max_df)
        if not terms and self.settings.retrieval == "bm25":  # keyword-only: common words are all there is
            terms = [t for t, df in stats if df]
        mass = (BM25_K1 + 1) * (sum(idf[t] for t in terms) + sum(idf[t] for t, df in stats if not df))
        keyword: dict[str, float] = {}
        if terms and mass > 0:
            for pid, score in self.index.keyword_terms(terms, pool):
                keyword[pid] = min(1.0, score / mass)
        return keyword, coverage, _ms(t0)

    def _coverage_within(self, query: str, names: Sequence[str], filters: Filters, seen: dict[str, Paper]) -> float:
        """``coverage`` counting a word as known only when a paper the filters keep contains it.

        The papers already read (``seen``) answer for most words; a word none of them has is
        looked up in the keyword index, among its papers (at most ``FILTERED_TERM_SCAN``). A word
        in more papers than that counts as known: one of them almost surely passes, and so
        common a word weighs little in the coverage anyway.
        """
        n_docs, stats = self.index.term_stats(keyword_query(query))
        if not stats or not n_docs:
            return 0.0
        idf = {t: lucene_idf(n_docs, df) for t, df in stats}
        every = sum(v * v for v in idf.values())
        kept_docs = [set(paper_text(p.title, p.abstract).split()) for p in seen.values() if filters.accepts(p)]
        kept = set().union(*kept_docs)
        # A name of several words ("Meta-PlanGPT-2") is known only whole: a kept paper naming another
        # PlanGPT does not know this one, and each of its words counts as unknown.
        unknown: set[str] = set()
        for name in names:
            stems = [t for t in keyword_tokens(name) if t in idf]
            if len(stems) > 1 and not self._kept_paper_has(stems, filters, kept_docs):
                unknown.update(stems)
        known = 0.0
        for term, df in stats:
            if term in unknown or not df:
                continue
            if term in kept or df > FILTERED_TERM_SCAN or self._kept_paper_has([term], filters):
                known += idf[term] ** 2
        return known / every if every else 0.0

    def _kept_paper_has(self, stems: list[str], filters: Filters, read: list[set[str]] | None = None) -> bool:
        """Whether a paper the filters keep has every one of ``stems`` (the papers ``read`` first, then the
        keyword index's best ``FILTERED_TERM_SCAN`` for them)."""
        if any(all(t in doc for t in stems) for doc in read or []):
            return True
        ids = [pid for pid, _ in self.index.keyword_terms(stems, FILTERED_TERM_SCAN)]
        return any(
            filters.accepts(p) and all(t in set(paper_text(p.title, p.abstract).split()) for t in stems)
            for p in self.index.get(ids).values()
        )

    def relevance(self, hits: list[Hit], coverage: float = 1.0) -> float:
        """Evidence, not an LLM: the score that must reach ``floor()`` for a result to count as relevant.

        Hybrid: the best cosine plus ``coverage_weight`` x the share of the question's
        (squared) idf mass that the corpus knows, so a question whose rarest words no
        abstract contains needs a closer match. Fitted on eval/qa.jsonl's dev part with
        the floor (``rag-papers eval`` refits the floor on any Q&A file); the combination
        was chosen among others there (eval/README.md).
        """
        if not hits:
            return 0.0
        s = self.settings
        if s.reranker and s.min_rerank is not None:  # the reranker's best score decides (rag_papers/rerank.py)
            return max((h.rerank_score for h in hits if h.rerank_score is not None), default=0.0)
        if s.retrieval == "bm25":  # the best share, wherever a reranker put it
            return max(h.keyword_score for h in hits)
        best = max(h.dense_score for h in hits)
        if s.retrieval == "dense":
            return best
        return best + s.coverage_weight * coverage

    def floor(self) -> float:
        s = self.settings
        if s.reranker and s.min_rerank is not None:
            return s.min_rerank
        return {"bm25": s.min_bm25, "dense": s.min_dense, "hybrid": s.min_score}[s.retrieval]


def _fused(w: float, dense: float, keyword: float) -> float:
    """One score from a cosine and a specificity-weighted keyword share."""
    return w * dense + (1 - w) * keyword


def _ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 2)


def _first_sentences(text: str, n: int = 2) -> str:
    return " ".join(sentences(text)[:n])
