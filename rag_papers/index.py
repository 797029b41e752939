"""Index stage, the read side: an open data directory that searches and reads papers.

Three stores, one source of truth:
- the SQLite registry (``rag_papers.registry``) decides what exists. A paper is visible
  only once its chunks are stored, so a killed ingest leaves the previous index usable
  and a rerun resumes where it stopped;
- two Chroma collections (``rag_papers.vectors``, embedded or server): chunk vectors,
  and one head vector per paper, with flat metadata for filters (texts are in the
  registry), and two more of the same for an optional second embedding model
  (``embed_model_2``). Hits whose paper is not in the registry are ignored;
- a tantivy keyword index over whole papers for BM25 (``rag_papers.keyword``), derived
  from the registry's titles and abstracts and rebuilt from them when it lacks papers.

Writes (ingest, remove, repair, clear) are ``rag_papers.ingest.Ingester``'s; ``Index``
keeps thin methods that hand them over, and notices other processes' writes.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.corpus import Paper
from rag_papers.embedding import Embedder, check_model_installed, load_embedder
from rag_papers.ingest import Ingester, IngestReport, RepairReport, sync_keyword
from rag_papers.keyword import (
    KeywordIndexError,
    KeywordStore,
    damaged_files,
    keyword_tokens,
    useful_terms,
    writer_lock_free,
)
from rag_papers.registry import connect, in_batches, move_damaged_registry_aside, open_registry, row_to_paper
from rag_papers.vectors import VectorStore, VectorStoreError, kinds

# ``Index.browse``'s sorts, each served by an index of the registry (papers_title, registry.BROWSE_INDEXES).
BROWSE_ORDER = {"title": "title", "year": "year DESC, title", "venue": "venue IS NULL, venue, title"}

# A keyword index holding more papers than this beyond the registry's (a large removal cut short) is
# rebuilt by a reader rather than searched for that many extra hits.
KEYWORD_SURPLUS_MAX = 1000


class Index:
    """An open data directory, read side: ``nearest``, ``keyword``, ``get``, ``passages``; writes go to ``Ingester``."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        *,
        rebuild: bool = False,
        embedder2: Embedder | None = None,
    ) -> None:
        """Open (or create) the data directory's registry; ``embedder2``: a loaded ``embed_model_2`` (tests share one).

        A registry SQLite cannot read stops here with one line naming the file and the way
        out; with ``rebuild`` (``ingest --rebuild``) it is set aside and a fresh one started.
        """
        self.settings = settings
        self.notes_at_open: list[str] = []
        try:
            settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RagPapersError(f"cannot create the data directory {settings.home}: {exc.strerror or exc}") from None
        if rebuild:  # a damaged registry (header or pages) is renamed, never deleted, and a new one started
            moved = move_damaged_registry_aside(settings)
            self.notes_at_open = [moved] if moved else []
        self.db = open_registry(settings.db_path)
        # Reads from other threads (a search's keyword side, UI request threads) get their own
        # connections: CPython 3.12+ cannot step one connection from two threads at once
        # (cpython#118172), and with separate connections their reads do not take turns.
        self._owner = threading.get_ident()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        # Shared by every search on this index; a task in it must never wait on another task in it.
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rag-papers-search")
        self._embedder = embedder
        self._embedder2 = embedder2
        self.vectors = VectorStore(settings)
        self._vec_lock = _ReadWriteLock()  # searches read the vector store; a reopen waits for them
        self.notes: list[str] = list(
            self.notes_at_open
        )  # what a write did besides its job (a store set aside, papers re-embedded)
        self._watch_lock = threading.Lock()
        self._watch_db: sqlite3.Connection | None = None
        self._watched_at = -1e9
        self._data_version: int | None = None
        self._seen_state: tuple[int, int, str] | None = None
        self._reopen_wanted = False
        self._reopened_at = -1e9
        self._count_value, self._count_at = 0, -1e9
        self._stats_memo: tuple[list[str], int, float, list[tuple[str, int]]] | None = None
        self._kw: KeywordStore | None = None
        self._kw_lock = threading.Lock()
        self._kw_checked_at = -2e9  # the _count_at of the last check of the keyword index
        self._kw_extra = 0  # papers the keyword index holds beyond the registry's (a write in progress)
        self.writer = Ingester(self)

    # ---- lazy heavy parts
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder(self.settings)
        return self._embedder

    @property
    def embedder2(self) -> Embedder | None:
        """The second embedding model (``embed_model_2``, on the same backend), or None when none is set."""
        if not self.settings.embed_model_2:
            return None
        if self._embedder2 is None:
            self._embedder2 = load_embedder(self.settings, model=self.settings.embed_model_2)
        return self._embedder2

    def embedders(self) -> list[Embedder]:
        """The models in use, by number: ``[embedder]`` or ``[embedder, embedder2]`` (``nearest``'s ``model``)."""
        second = self.embedder2
        return [self.embedder] if second is None else [self.embedder, second]

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def store(self) -> Any:
        """The chunk vectors' Chroma collection (created on first use)."""
        return self.vectors.collection("chunks")

    @property
    def doc_store(self) -> Any:
        """One vector per paper (title + abstract head): the whole-paper view that chunks lack."""
        return self.vectors.collection("docs")

    def recorded_second_model(self) -> str | None:
        """The second embedding model this index holds vectors of (whatever the settings say), or None."""
        return self._meta("embed_model_2")

    def check_model(self) -> None:
        """Fail early (before loading anything heavy) if the registry was built with another model.

        The second model likewise, except that one may be added to an index that has none (the next
        ``ingest`` or ``repair`` embeds every paper with it), and that an index built with one may be
        searched without it. Its packages are checked here too, so
        a missing mpnet is one line before any work rather than after it.
        """
        built_with = self._meta("embed_model")
        if built_with and built_with != self.settings.embed_model:
            raise RagPapersError(
                f"the index was built with embedding model {built_with!r} but {self.settings.embed_model!r} is "
                "configured: re-ingest with `rag-papers ingest --rebuild` or set embed_model back"
            )
        second, wanted = self._meta("embed_model_2"), self.settings.embed_model_2
        # None configured on an index built with a second model: search with the first model alone (the
        # default preset beside `--preset quality` on one index). Papers ingested meanwhile lack the second
        # model's vectors until an ingest or repair with it configured adds them (vector_gaps says so).
        if second and wanted and second != wanted:
            raise RagPapersError(
                f"the index was built with second embedding model {second!r} but embed_model_2 is {wanted!r}: "
                "re-ingest with `rag-papers ingest --rebuild` or set embed_model_2 back"
            )
        if wanted:
            check_model_installed(wanted)
        if self.settings.chroma_url:
            self.store  # noqa: B018 - also checks the server's collection
            if wanted and second:
                self.vectors.collection("chunks2")

    # ---- reading
    def count(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM papers").fetchone()[0])

    def _count_cached(self) -> int:
        """COUNT(*) scans an index: fine per command, too slow per query at millions of rows."""
        self._watch()
        now = time.monotonic()
        if now - self._count_at > 10:
            self._count_value, self._count_at = self.count(), now
        return self._count_value

    def get(self, ids: Sequence[str]) -> dict[str, Paper]:
        out: dict[str, Paper] = {}
        for part, marks in in_batches(list(dict.fromkeys(ids))):
            srcs: dict[str, list[str]] = {}
            for s in self._conn().execute(
                f"SELECT paper_id, file, loc FROM sources WHERE paper_id IN ({marks}) ORDER BY file, loc", part
            ):
                srcs.setdefault(s["paper_id"], []).append(f"{s['file']}:{s['loc']}")
            for row in self._conn().execute(f"SELECT * FROM papers WHERE id IN ({marks})", part):
                out[row["id"]] = row_to_paper(row, srcs.get(row["id"], []))
        return out

    def papers(self) -> Iterator[Paper]:
        """All papers in ingest order, streamed."""
        last = -1
        while True:
            rows = (
                self._conn()
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
        conn = self._conn()
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
        kw = self._keyword_index()
        return kw.matches(terms, n + self._kw_extra)

    def name_df(self, name: str) -> int:
        """How many indexed papers contain every word of ``name`` (0: no abstract mentions it)."""
        found = self.keyword_matches(name, 1)
        return found[0] if found is not None else 0

    def sample(self, n: int) -> list[Paper]:
        """Up to ``n`` papers spread evenly over the registry in ingest order: the same ones for the same index."""
        max_seq = int(self._conn().execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0])
        if not max_seq or n < 1:
            return []
        seqs = sorted({1 + (max_seq - 1) * k // max(n - 1, 1) for k in range(n)})
        rows = self._conn().execute(
            "SELECT * FROM papers WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq", (json.dumps(seqs),)
        )
        return [row_to_paper(r, []) for r in rows]

    def field_values(self, column: str) -> list[Any]:
        if column not in ("year", "venue"):
            raise ValueError(column)
        return [
            r[0]
            for r in self._conn().execute(f"SELECT DISTINCT {column} FROM papers WHERE {column} IS NOT NULL ORDER BY 1")
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
        total = self._count_cached()
        if total == 0:
            return [], []
        self._reopen_if_needed()
        try:
            return self._nearest_both(query_vec, n, total, where, model)
        except VectorStoreError as exc:
            # Another process dropped or set aside the collections this process still holds (a
            # rebuild, a repair): reopen once and search again before calling anything damaged.
            if "does not exist" not in str(exc):
                raise
            with self._vec_lock.write():
                self.vectors.reopen()
            return self._nearest_both(query_vec, n, total, where, model)

    def _nearest_both(
        self, query_vec: list[float], n: int, total: int, where: dict[str, Any] | None, model: int = 0
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """(chunk hits, head hits). The two collections are searched at once: chromadb's HNSW search
        runs without the GIL, and on 2 cores the pair measured faster than one after the other at scale
        (docs/design-notes.md)."""
        if model and not self.settings.embed_model_2:
            raise RagPapersError("nearest(model=1) needs a second embedding model: set embed_model_2")
        chunks_of, docs_of = kinds(model)
        with self._vec_lock.read():
            docs = self.pool().submit(self.vectors.nearest, docs_of, query_vec, min(max(n, 10), total), where)
            try:
                chunk_hits = self.vectors.nearest(chunks_of, query_vec, min(max(n * 3, 30), 4 * total + 10), where)
            finally:
                doc_hits = docs.result()
        return chunk_hits, doc_hits

    def pool(self) -> ThreadPoolExecutor:
        """Two worker threads, shared by all searches on this index, for their independent reads
        (the keyword side, the second vector store). Tasks must not wait on other tasks."""
        return self._threads

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection for reads: the main one in the thread that opened the index."""
        if threading.get_ident() == self._owner:
            return self.db
        conn: sqlite3.Connection | None = getattr(self._local, "db", None)
        if conn is None:
            conn = self._local.db = connect(self.settings.db_path, mmap=True)
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def passages(self, chunk_ids: Sequence[str], titles: dict[str, str] | None = None) -> dict[str, str]:
        """Chunk texts by vector id ("<paper id>:<chunk number>"), without the title they were embedded with.

        From the registry's ``chunks`` table; indexes written before it existed keep their
        texts as Chroma documents (``titles``, paper id -> title, strips the prefix there).
        """
        wanted = list(dict.fromkeys(chunk_ids))
        out: dict[str, str] = {}
        for part, marks in in_batches(list({vid.rpartition(":")[0] for vid in wanted})):
            for pid, i, text in self._conn().execute(
                f"SELECT paper_id, i, text FROM chunks WHERE paper_id IN ({marks})", part
            ):
                out[f"{pid}:{i}"] = text
        out = {vid: out[vid] for vid in wanted if vid in out}
        older = [vid for vid in wanted if vid not in out]
        if older:
            with self._vec_lock.read():
                older_texts = self.vectors.documents(older)
            for vid, text in older_texts.items():  # neither place: the caller uses the abstract
                title = (titles or {}).get(vid.rpartition(":")[0], "")
                out[vid] = text[len(title) + 2 :] if title and text.startswith(title) else text
        return out

    # ---- keyword index (tantivy, derived from the registry)
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
        kw = self._keyword_index()
        scored = kw.search([(t, 1.0) for t in terms], n + self._kw_extra)
        if not scored:
            return []
        marks = ",".join("?" * len(scored))
        ids = dict(
            self._conn()
            .execute(
                f"SELECT seq, id FROM papers INDEXED BY papers_seq_id WHERE seq IN ({marks})", [r for r, _ in scored]
            )
            .fetchall()
        )
        return [(ids[r], sc) for r, sc in scored if sc > 0 and r in ids][:n]

    @property
    def kw_store(self) -> KeywordStore:
        """The tantivy keyword index, its files checked against tantivy's checksums before it is opened
        (``verify_keyword``). One damaged or that tantivy cannot open is derived data only: it is deleted
        and started empty, and rebuilt from the registry (``_keyword_index``, or the write under way)."""
        if self._kw is None:
            self.verify_keyword()
        assert self._kw is not None
        return self._kw

    def verify_keyword(self, full: bool = False) -> list[str]:
        """Check the keyword index's files (``keyword.damaged_files``; ``full``: every file, as ``repair`` does)
        and open it; a damaged one is replaced by an empty one. Returns the damaged files' names.

        Replacing it takes tantivy's writer lock first: while another process writes the index, this
        one cannot, and says so in one line naming ``repair`` instead of reading damaged files.
        """
        path = self.settings.keyword_path
        bad = damaged_files(path, full=full)
        if not bad:
            if self._kw is None:
                try:
                    self._kw = KeywordStore(path)
                except ValueError:  # not tantivy's at all (a stray folder): derived data, started afresh
                    bad = ["meta.json"]
            if not bad:
                return []
        if self._kw is not None:
            self._kw.close()
            self._kw = None
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        with writer_lock_free(path) as free:
            if not free:
                raise KeywordIndexError(
                    f"the keyword index {path} is damaged ({shown} failed tantivy's checksums) and another "
                    "rag-papers process is writing it: when it has finished, run `rag-papers repair`"
                )
            try:
                for child in path.iterdir():
                    if not child.name.startswith(".tantivy-"):  # tantivy's lock files (the one held here among them)
                        if child.is_dir():
                            shutil.rmtree(child)
                        else:
                            child.unlink()
            except OSError as exc:
                raise KeywordIndexError(
                    f"the keyword index {path} is damaged ({shown} failed tantivy's checksums) and cannot be "
                    f"replaced here ({exc.strerror or exc}): run `rag-papers repair` where the data directory "
                    "can be written"
                ) from None
            self._kw = KeywordStore(path)
        self._kw_checked_at = -2e9  # compared with the registry (and rebuilt from it) at the next search
        self.notes.append(
            f"the keyword index {path} was damaged ({shown} failed tantivy's checksums): rebuilt it from the registry"
        )
        return bad

    def keyword_state(self, count: int | None = None) -> tuple[int, int]:
        """(papers, largest seq) of the registry: what the keyword index holds when it is in step.

        ``count``: the paper count when the caller has just read it (COUNT(*) scans an index).
        """
        max_seq = int(self._conn().execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0])
        return (self.count() if count is None else count), max_seq

    def _keyword_index(self) -> KeywordStore:
        """The keyword index, checked against the registry whenever the paper count is re-read.

        Ahead of the registry (an ingest between its keyword and registry commits, or killed
        there; a removal cut short) it is searched as it is, for that many more hits, unless it
        is far ahead (``KEYWORD_SURPLUS_MAX``). Behind it (its files lost or damaged) or far
        ahead, a reader rebuilds it from the registry if no write holds the index; otherwise
        that write does, and searches meanwhile miss the papers it lacks.
        """
        count = self._count_cached()
        with self._kw_lock:
            if self._kw_checked_at == self._count_at:
                return self.kw_store
            kw = self.kw_store
            kw.index.reload()  # another process may have rebuilt it without touching the registry
            have, want = kw.state(), self.keyword_state(count)
            if have[0] < want[0] or have[1] < want[1] or have[0] - want[0] > KEYWORD_SURPLUS_MAX:
                self._rebuild_keyword_if_free()
                have = kw.state()
            self._kw_extra = max(0, have[0] - want[0])
            self._kw_checked_at = self._count_at
            return kw

    @property
    def keyword_surplus(self) -> int:
        """Papers the keyword index holds beyond the registry's (a write between its two commits, or killed there)."""
        self._keyword_index()
        return self._kw_extra

    def _rebuild_keyword_if_free(self) -> None:
        """Rebuild the keyword index here when no write holds it (this process's or another's)."""
        kw = self.kw_store
        if kw.writing:
            return  # this process's own write is under way: it syncs the index itself
        try:
            kw.lock()
        except (RagPapersError, ValueError, OSError):
            return  # another process writes (and syncs it), or the data directory is read-only
        try:
            with closing(connect(self.settings.db_path)) as db:
                sync_keyword(self, db, show_progress=False)
        except (RagPapersError, ValueError, OSError, sqlite3.Error):
            pass  # a read-only registry, a full disk: searches go on with what the index has
        finally:
            kw.close()

    def term_stats(self, query: str) -> tuple[int, list[tuple[str, int]]]:
        """(papers, [(term, papers containing it)]) for the query's stemmed terms.

        From the keyword index (``KeywordStore.doc_freqs``). The last answer is kept: a search
        may ask twice (the retriever, then ``keyword``).
        """
        return self.stem_stats(list(dict.fromkeys(keyword_tokens(query))))

    def stem_stats(self, terms: list[str]) -> tuple[int, list[tuple[str, int]]]:
        """``term_stats`` for terms already stemmed (stemming twice can change a stem: embed -> emb)."""
        n_docs = self._count_cached()
        if not terms or not n_docs:
            return n_docs, []
        memo = self._stats_memo
        if memo is not None and memo[0] == terms and memo[1] == n_docs and memo[2] == self._count_at:
            return n_docs, memo[3]
        df = self._keyword_index().doc_freqs(terms)
        stats = [(t, df.get(t, 0)) for t in terms]
        self._stats_memo = (terms, n_docs, self._count_at, stats)
        return n_docs, stats

    # ---- other processes' writes
    def _watch(self) -> None:
        """Notice another process's writes (an ingest or repair beside a running UI).

        ``PRAGMA data_version`` changes when another connection commits; then the counts
        are re-read and, if papers came or went or the vector store was rebuilt (the
        ``vector_epoch`` in ``meta``), the embedded store is marked for reopening: chromadb
        keeps each collection's HNSW index in memory and does not see vectors another
        process adds until it opens the store afresh. Never blocks on the vector store
        (it runs in the search pool too): ``_reopen_if_needed`` does the reopening, on the
        searching thread. Checked at most every ``WATCH_SECONDS``.
        """
        with self._watch_lock:
            now = time.monotonic()
            if now - self._watched_at < WATCH_SECONDS:
                return
            self._watched_at = now
            if self._watch_db is None:
                self._watch_db = connect(self.settings.db_path)
            version = int(self._watch_db.execute("PRAGMA data_version").fetchone()[0])
            if version == self._data_version:
                return
            self._data_version = version
            row = self._watch_db.execute(
                "SELECT COUNT(*), COALESCE(MAX(seq), 0), (SELECT value FROM meta WHERE key='vector_epoch') FROM papers"
            ).fetchone()
            state = (int(row[0]), int(row[1]), str(row[2] or ""))
            self._count_value, self._count_at = state[0], now  # just read: no second COUNT(*)
            if self._seen_state is None or state == self._seen_state:  # the first look, or nothing came or went
                self._seen_state = state
                return
            self._seen_state = state
            if self._kw is not None:
                self._kw.index.reload()
            if not self.settings.chroma_url:
                self._reopen_wanted = True

    def _reopen_if_needed(self) -> None:
        """Reopen the embedded vector store if ``_watch`` asked for it, at most every ``REOPEN_SECONDS``.

        Reopening reloads the HNSW indexes from disk (slow for a large store), so beside a
        long ingest that commits every few seconds a reader catches up at this pace, not per batch.
        """
        if not self._reopen_wanted or time.monotonic() - self._reopened_at < REOPEN_SECONDS:
            return
        with self._vec_lock.write():
            if self._reopen_wanted:
                self._reopen_wanted = False
                self._reopened_at = time.monotonic()
                self.vectors.reopen()

    # ---- vectors: derived data, checked against the registry and rebuilt from it
    def vector_gaps(self, sample: int = 64) -> str | None:
        """Why the vector store in use lacks vectors the registry says exist, or None.

        Counts first, then a sample of papers spread over the registry (and its newest):
        a store switched to a server, or a Chroma folder deleted and recreated, can have
        the right collection names but not this registry's vectors. More vectors than
        papers is normal (a running ingest writes vectors before registering papers). With
        ``embed_model_2`` set, its collections are checked the same way.
        """
        n = self.count()
        if n == 0:
            return None
        for model in self.vectors.models():
            have = self.vectors.count(kinds(model)[1])
            if have < n:
                where = (
                    "it holds"
                    if model == 0
                    else f"its collections for embed_model_2 {self.settings.embed_model_2!r} hold"
                )
                return f"{where} vectors for {have:,} papers, the registry has {n:,}"
        max_seq = int(self._conn().execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0])
        seqs = sorted(
            {1 + (max_seq - 1) * k // max(sample - 1, 1) for k in range(sample)}
            | set(range(max(1, max_seq - 7), max_seq + 1))
        )
        marks = ",".join("?" * len(seqs))
        ids = [r[0] for r in self._conn().execute(f"SELECT id FROM papers WHERE seq IN ({marks})", seqs)]
        for model in self.vectors.models():
            chunks_of, docs_of = kinds(model)
            docs = self.vectors.existing(docs_of, [f"{pid}:doc" for pid in ids])
            chunks = self.vectors.existing(chunks_of, [f"{pid}:0" for pid in ids])
            missing = [pid for pid in ids if f"{pid}:doc" not in docs or f"{pid}:0" not in chunks]
            if missing:
                of = "" if model == 0 else f" for embed_model_2 {self.settings.embed_model_2!r}"
                return f"{len(missing)} of {len(ids)} sampled papers have no vectors{of} in it"
        return None

    def check_vectors(self) -> None:
        """For commands that read (search, ask, chat): fail in one line if the store cannot serve this registry."""
        self.vectors.probe()
        why = self.vector_gaps()
        if why:  # a rebuild or removal in another process may be between its two writes: look again
            time.sleep(0.5)
            why = self.vector_gaps()
        if why:
            # The same store as this command's: a server is named, or `repair` would fill the embedded one.
            repair = (
                f"rag-papers repair --chroma-url {self.settings.chroma_url}"
                if self.vectors.server
                else "rag-papers repair"
            )
            raise VectorStoreError(
                f"the vector store at {self.vectors.location} does not match the registry {self.settings.db_path} "
                f"({why}): run `{repair}` to embed the missing papers from the registry"
            )

    # ---- writes: the ingest stage's
    def ingest(self, paths: Iterable[Path], rebuild: bool = False, show_progress: bool = True) -> IngestReport:
        """Sync the index with these files (``Ingester.ingest``)."""
        return self.writer.ingest(paths, rebuild, show_progress)

    def remove(self, paper_ids: Sequence[str]) -> int:
        return self.writer.remove(paper_ids)

    def repair(self, show_progress: bool = True) -> RepairReport:
        """Rebuild the derived stores from the registry (``Ingester.repair``)."""
        return self.writer.repair(show_progress)

    def clear(self) -> None:
        self.writer.clear()

    def forget_counts(self) -> None:
        """After a write: the paper count and the keyword index's state are read afresh at the next search."""
        self._count_at = -1e9
        self._kw_checked_at = -2e9

    def release_writer(self) -> None:
        """The tantivy writer's lock is held for one write operation only (another Index may write next)."""
        if self._kw is not None:
            self._kw.close()

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        self.release_writer()
        self.vectors.close()
        if self._watch_db is not None:
            self._watch_db.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        with closing(self.db):
            pass


WATCH_SECONDS = 2.0  # how often a long-running reader looks for other processes' writes
REOPEN_SECONDS = 10.0  # how often, at most, it reopens the embedded vector store to see them


class _ReadWriteLock:
    """Many searches at once, or one vector-store reopen with no search in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._readers:
                self._cond.wait()
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()
