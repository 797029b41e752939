"""Index stage, the read side: searches and reads of the papers in an open data directory (a ``Store``).

Nearest vectors, BM25 over the keyword index, papers by id, a page of papers, chunk texts. Writes
(ingest, remove, repair, clear) are ``rag_papers.ingest.Ingester``'s, over the same ``Store``: this
module does not know them, and notices their effects through the store (its counts, its watch on other
processes' writes). What the stores are and how they agree: ``rag_papers.store``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, Unpack

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.corpus import Paper
from rag_papers.embedding import Embedder
from rag_papers.keyword import keyword_tokens, useful_terms
from rag_papers.registry import in_batches, read_papers, row_to_paper
from rag_papers.store import Store, StoreOptions
from rag_papers.vectors import VectorStoreError, kinds

_T = TypeVar("_T")

# ``Index.browse``'s sorts, each served by an index of the registry (papers_title, registry.BROWSE_INDEXES).
BROWSE_ORDER = {"title": "title", "year": "year DESC, title", "venue": "venue IS NULL, venue, title"}


class Index:
    """Reads of an open data directory: ``nearest``, ``keyword``, ``get``, ``passages``; writes are ``Ingester``'s."""

    def __init__(self, settings: Settings, *, store: Store | None = None, **open_with: Unpack[StoreOptions]) -> None:
        """Read ``store``, or a ``Store`` opened here on ``settings`` with ``open_with`` (``Store``'s options).
        Either way ``close`` closes it: a writer that shares it (``Ingester(index.store)``) is done before
        the index is.
        """
        if store is None:
            store = Store(settings, **open_with)
        elif any(open_with.values()):
            raise ValueError("give an open store, or what to open one with, not both")
        self.store = store
        self.settings = settings
        # Shared by every search on this index; a task in it must never wait on another task in it.
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rag-papers-search")
        self._stats_memo: tuple[list[str], int, float, list[tuple[str, int]]] | None = None

    # ---- the query side of the models (the store loads them)
    @property
    def embedder(self) -> Embedder:
        return self.store.embedder

    @property
    def embedder2(self) -> Embedder | None:
        """The second embedding model (``embed_model_2``), or None when none is set."""
        return self.store.embedder2

    # ---- reading
    def count(self) -> int:
        return self.store.count()

    def get(self, ids: Sequence[str]) -> dict[str, Paper]:
        return read_papers(self.store.conn(), ids)

    def papers(self) -> Iterator[Paper]:
        """All papers in ingest order, streamed."""
        last = -1
        while True:
            rows = (
                self.store.conn()
                .execute("SELECT id, seq FROM papers WHERE seq > ? ORDER BY seq LIMIT 1000", (last,))
                .fetchall()
            )
            if not rows:
                return
            got = self.get([r["id"] for r in rows])
            for r in rows:
                if r["id"] in got:
                    yield got[r["id"]]
            last = rows[-1]["seq"]

    def browse(self, sort: str, offset: int, limit: int, seqs: Sequence[int] | None = None) -> list[Paper]:
        """A page of papers (no sources), sorted: ``limit`` of them from ``offset`` on.

        ``sort``: "title" (A-Z), "year" (newest first, papers without one last) or "venue" (A-Z, papers
        without one last), titles breaking ties; "relevance" keeps the order of ``seqs``. ``seqs``: only
        these papers (keyword matches, ``keyword_matches``), else every paper. Each sort walks an index of
        the registry (``registry.BROWSE_INDEXES``), so a page costs the same at any size, the offset aside.
        """
        if seqs is None and sort == "relevance":
            sort = "title"
        order = BROWSE_ORDER.get(sort)
        if order is None and sort != "relevance":
            raise ValueError(sort)
        conn = self.store.conn()
        if seqs is None:
            sql = f"SELECT rowid FROM papers ORDER BY {order} LIMIT ? OFFSET ?"
            args: tuple[Any, ...] = (limit, offset)
        elif order is None:
            sql = "SELECT p.rowid FROM json_each(?) j JOIN papers p ON p.seq = j.value ORDER BY j.key LIMIT ? OFFSET ?"
            args = (json.dumps(list(seqs)), limit, offset)
        else:
            sql = f"SELECT rowid FROM papers WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY {order} LIMIT ? OFFSET ?"
            args = (json.dumps(list(seqs)), limit, offset)
        rowids = [r[0] for r in conn.execute(sql, args)]
        if not rowids:
            return []
        marks = ",".join("?" * len(rowids))
        rows = {r["rowid"]: r for r in conn.execute(f"SELECT rowid, * FROM papers WHERE rowid IN ({marks})", rowids)}
        return [row_to_paper(rows[r], []) for r in rowids if r in rows]

    def keyword_matches(self, query: str, n: int) -> tuple[int, list[int]] | None:
        """(papers whose title or abstract has every word of ``query``, the seqs of the ``n`` best by BM25).

        Words as the keyword index stores them (``keyword_tokens``: stemmed, stop words dropped); None
        when the query has no such word. The keyword index walks its postings, never the registry.
        """
        terms = list(dict.fromkeys(keyword_tokens(query)))
        if not terms:
            return None
        kw, extra = self.store.keyword_index()
        return kw.matches(terms, n + extra)

    def name_df(self, name: str) -> int:
        """How many indexed papers contain every word of ``name`` (0: no abstract mentions it)."""
        found = self.keyword_matches(name, 1)
        return found[0] if found is not None else 0

    def sample(self, n: int) -> list[Paper]:
        """Up to ``n`` papers spread evenly over the registry in ingest order: the same ones for the same index."""
        max_seq = self.store.max_seq()
        if not max_seq or n < 1:
            return []
        seqs = sorted({1 + (max_seq - 1) * k // max(n - 1, 1) for k in range(n)})
        rows = self.store.conn().execute(
            "SELECT * FROM papers WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq", (json.dumps(seqs),)
        )
        return [row_to_paper(r, []) for r in rows]

    def head_vectors(self, paper_ids: Sequence[str], model: int = 0) -> dict[str, list[float]]:
        """Each paper's whole-paper vector as ingest stored it (its head: title and opening), by paper id; papers
        without one (a half-ingested paper) are left out."""
        if not paper_ids or self.store.count_cached() == 0:
            return {}
        _, docs_of = kinds(model)

        def read() -> dict[str, list[float]]:
            with self.store.vector_lock.read():
                return self.store.vectors.embeddings(docs_of, [f"{pid}:doc" for pid in paper_ids])

        return {vid.rpartition(":")[0]: vec for vid, vec in self._reopening(read).items()}

    def field_values(self, column: str) -> list[Any]:
        if column not in ("year", "venue"):
            raise ValueError(column)
        return [
            r[0]
            for r in self.store.conn().execute(
                f"SELECT DISTINCT {column} FROM papers WHERE {column} IS NOT NULL ORDER BY 1"
            )
        ]

    def nearest(
        self, query_vec: list[float], n: int, where: dict[str, Any] | None = None, model: int = 0
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """(chunk hits, head hits) as (vector id, cosine) for ``n`` papers' worth of candidates.

        ``model``: 0 searches ``embed_model``'s collections, 1 ``embed_model_2``'s (``query_vec``
        then comes from ``embedder2``).

        How the two combine into a paper's score is the retrieve stage's decision
        (``retrieve.dense_hits``). Vectors of half-ingested papers may be among these: the
        caller reads the registry rows of its winners anyway and skips papers without one.
        """
        total = self.store.count_cached()
        if total == 0:
            return [], []
        return self._reopening(lambda: self._nearest_both(query_vec, n, total, where, model))

    def _reopening(self, read: Callable[[], _T]) -> _T:
        """``read()`` from the vector store, again once after reopening it if another process dropped or set aside
        the collections this process still holds (a rebuild, a repair), before calling anything damaged."""
        self.store.reopen_if_needed()
        try:
            return read()
        except VectorStoreError as exc:
            if "does not exist" not in str(exc):
                raise
            self.store.reopen_vectors()
            return read()

    def _nearest_both(
        self, query_vec: list[float], n: int, total: int, where: dict[str, Any] | None, model: int = 0
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """(chunk hits, head hits). The two collections are searched at once: chromadb's HNSW search
        runs without the GIL, and on 2 cores the pair measured faster than one after the other at scale
        (docs/design-notes.md)."""
        if model and not self.settings.embed_model_2:
            raise RagPapersError("nearest(model=1) needs a second embedding model: set embed_model_2")
        chunks_of, docs_of = kinds(model)
        vectors = self.store.vectors
        with self.store.vector_lock.read():
            docs = self.pool().submit(vectors.nearest, docs_of, query_vec, min(max(n, 10), total), where)
            try:
                chunk_hits = vectors.nearest(chunks_of, query_vec, min(max(n * 3, 30), 4 * total + 10), where)
            finally:
                doc_hits = docs.result()
        return chunk_hits, doc_hits

    def pool(self) -> ThreadPoolExecutor:
        """Two worker threads, shared by all searches on this index, for their independent reads
        (the keyword side, the second vector store). Tasks must not wait on other tasks."""
        return self._threads

    def passages(self, chunk_ids: Sequence[str], titles: dict[str, str] | None = None) -> dict[str, str]:
        """Chunk texts by vector id ("<paper id>:<chunk number>"), without the title they were embedded with.

        From the registry's ``chunks`` table; indexes written before it existed keep their
        texts as Chroma documents (``titles``, paper id -> title, strips the prefix there).
        """
        wanted = list(dict.fromkeys(chunk_ids))
        out: dict[str, str] = {}
        for part, marks in in_batches(list({vid.rpartition(":")[0] for vid in wanted})):
            for pid, i, text in self.store.conn().execute(
                f"SELECT paper_id, i, text FROM chunks WHERE paper_id IN ({marks})", part
            ):
                out[f"{pid}:{i}"] = text
        out = {vid: out[vid] for vid in wanted if vid in out}
        older = [vid for vid in wanted if vid not in out]
        if older:
            with self.store.vector_lock.read():
                older_texts = self.store.vectors.documents(older)
            for vid, text in older_texts.items():  # neither place: the caller uses the abstract
                title = (titles or {}).get(vid.rpartition(":")[0], "")
                out[vid] = text[len(title) + 2 :] if title and text.startswith(title) else text
        return out

    # ---- keyword search (tantivy, kept in step with the registry by the store)
    def keyword(self, query: str, n: int) -> list[tuple[str, float]]:
        """Top papers by BM25 over the query's specific terms (``useful_terms``): ``keyword_terms`` for a query."""
        n_docs, stats = self.term_stats(query)
        return self.keyword_terms(useful_terms(stats, n_docs, self.settings.keyword_max_df), n)

    def keyword_terms(self, terms: Sequence[str], n: int) -> list[tuple[str, float]]:
        """(paper id, BM25) of the ``n`` best papers for these stemmed terms, best first.

        tantivy's BM25 (k1=1.2, b=0.75, Lucene's idf from its own counts) over stemmed title
        + abstract. Which terms count is the retrieve stage's decision. Papers the registry
        does not have (a batch an ingest has not registered yet) are skipped.
        """
        if not terms:
            return []
        kw, extra = self.store.keyword_index()
        scored = kw.search([(t, 1.0) for t in terms], n + extra)
        if not scored:
            return []
        marks = ",".join("?" * len(scored))
        ids = dict(
            self.store.conn()
            .execute(
                f"SELECT seq, id FROM papers INDEXED BY papers_seq_id WHERE seq IN ({marks})", [r for r, _ in scored]
            )
            .fetchall()
        )
        return [(ids[r], sc) for r, sc in scored if sc > 0 and r in ids][:n]

    def term_stats(self, query: str) -> tuple[int, list[tuple[str, int]]]:
        """(papers, [(term, papers containing it)]) for the query's stemmed terms.

        From the keyword index (``KeywordStore.doc_freqs``). The last answer is kept: a search
        may ask twice (the retriever, then ``keyword``).
        """
        return self.stem_stats(list(dict.fromkeys(keyword_tokens(query))))

    def stem_stats(self, terms: list[str]) -> tuple[int, list[tuple[str, int]]]:
        """``term_stats`` for terms already stemmed (stemming twice can change a stem: embed -> emb)."""
        n_docs = self.store.count_cached()
        if not terms or not n_docs:
            return n_docs, []
        memo = self._stats_memo
        if memo is not None and memo[0] == terms and memo[1] == n_docs and memo[2] == self.store.counted_at:
            return n_docs, memo[3]
        df = self.store.keyword_index()[0].doc_freqs(terms)
        stats = [(t, df.get(t, 0)) for t in terms]
        self._stats_memo = (terms, n_docs, self.store.counted_at, stats)
        return n_docs, stats

    def close(self) -> None:
        """Stop the search threads, then close the store (this index's, or the one it was given)."""
        self._threads.shutdown(wait=True)
        self.store.close()
