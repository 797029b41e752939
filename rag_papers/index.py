"""Index stage: chunk, embed and store papers; the registry of what is indexed.

Four stores, one source of truth:
- a SQLite registry (papers, their sources, build metadata) decides what exists. A
  paper is visible only once its chunks are stored, so a killed ingest leaves the
  previous index usable and a rerun resumes where it stopped;
- two Chroma collections (embedded or server): chunk vectors, and one head vector per
  paper; vectors only, with flat metadata for filters (texts are in the registry).
  Hits whose paper is not in the registry are ignored;
- an SQLite FTS5 keyword index over whole papers, in the registry's own database, so
  it changes in the same transaction as the paper rows and never needs a rebuild;
- a tantivy copy of it for fast BM25 (``rag_papers.keyword``), written before each
  registry commit and trusted only while it holds exactly the registry's papers.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError
from rag_papers.config import SCHEMA_VERSION, Settings
from rag_papers.corpus import (
    STOPWORDS,
    CorpusError,
    Paper,
    RawRecord,
    content_hash,
    derive_title,
    expand_paths,
    read_file,
    to_paper,
    validate,
)
from rag_papers.embedding import Embedder, load_embedder
from rag_papers.keyword import KeywordStore
from rag_papers.vectors import (
    DiskFullError,
    VectorStore,
    VectorStoreError,
    aside_name,
    disk_full_error,
    free_bytes,
    is_disk_full,
    mb,
    tree_bytes,
)

# Keyword candidates come from the rarest query terms, up to this many postings (see Index.keyword).
KEYWORD_POSTINGS = 5000


# ---------------------------------------------------------------- chunking
def chunk_texts(abstract: str, chunk_tokens: int, overlap: int, tokenize: Callable[[str], list[int]]) -> list[str]:
    """Sentence-aware windows that together cover the whole abstract, each inside the model window."""
    from llama_index.core.node_parser import SentenceSplitter

    splitter = SentenceSplitter(chunk_size=chunk_tokens, chunk_overlap=overlap, tokenizer=tokenize)
    return [c for c in splitter.split_text(abstract) if c.strip()] or [abstract]


def passage_text(title: str, chunk: str) -> str:
    """What gets embedded for one chunk: the chunk led by its paper's title, for context.

    Chunks are as long as the model's window allows, so most abstracts are one head
    chunk plus one tail that overlaps it: every sentence is covered for about 2 embeddings
    a paper. Smaller chunks (96 tokens, 4-5 a paper) measured no better on eval/qa.jsonl
    and cost 2x the ingest time; no overlap (0 or 24 tokens instead of 48) lost 2
    paraphrase hits at 1 for 8-10% fewer tokens.
    """
    return f"{title}. {chunk}"


# ---------------------------------------------------------------- registry
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS papers (
    id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, title TEXT NOT NULL, abstract TEXT NOT NULL,
    year INTEGER, venue TEXT, authors TEXT, url TEXT, n_chunks INTEGER NOT NULL, seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sources (
    paper_id TEXT NOT NULL, file TEXT NOT NULL, loc TEXT NOT NULL, PRIMARY KEY (paper_id, file, loc)
);
CREATE INDEX IF NOT EXISTS sources_file ON sources(file);
CREATE INDEX IF NOT EXISTS papers_title ON papers(title);
CREATE UNIQUE INDEX IF NOT EXISTS papers_seq ON papers(seq);
CREATE INDEX IF NOT EXISTS papers_seq_id ON papers(seq, id);
CREATE VIRTUAL TABLE IF NOT EXISTS papers_fts USING fts5(text, tokenize='unicode61');
CREATE TABLE IF NOT EXISTS pending (paper_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS term_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS papers_fts_delete AFTER DELETE ON papers BEGIN
    DELETE FROM papers_fts WHERE rowid = old.seq;
END;
CREATE TABLE IF NOT EXISTS chunks (
    paper_id TEXT NOT NULL, i INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY (paper_id, i)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS papers_chunks_delete AFTER DELETE ON papers BEGIN
    DELETE FROM chunks WHERE paper_id = old.id;
END;
"""


def _row_to_paper(row: sqlite3.Row, sources: list[str]) -> Paper:
    return Paper(
        id=row["id"],
        title=row["title"],
        abstract=row["abstract"],
        sources=sources,
        year=row["year"],
        venue=row["venue"],
        authors=json.loads(row["authors"]) if row["authors"] else None,
        url=row["url"],
    )


@dataclass
class IngestReport:
    files: int = 0
    records: int = 0
    added: int = 0
    unchanged: int = 0
    removed: int = 0
    duplicates: int = 0
    chunks: int = 0
    seconds: float = 0.0
    total: int = 0
    reembedded: int = 0  # registered papers whose missing vectors this ingest embedded again
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (id in the file, id given), see ``_ingest``
    removed_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "removed_ids"}
        d["renamed"] = [{"id": a, "indexed_as": b} for a, b in self.renamed]
        return d


@dataclass
class RepairReport:
    papers: int = 0
    checked: bool = False  # every paper's vectors were looked up (not only counts and a sample)
    reembedded: int = 0
    chunks: int = 0
    moved_aside: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DenseHit:
    paper_id: str
    score: float
    chunk_id: str  # the best-matching chunk: ``Index.passages`` gives its text


class Index:
    """The indexed corpus: ``ingest``, ``remove``, ``dense``, ``keyword``, ``get``."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None, *, rebuild: bool = False) -> None:
        """Open (or create) the data directory's registry.

        A registry SQLite cannot read stops here with one line naming the file and the way
        out; with ``rebuild`` (``ingest --rebuild``) it is set aside and a fresh one started.
        """
        self.settings = settings
        self.notes_at_open: list[str] = []
        try:
            settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RagPapersError(f"cannot create the data directory {settings.home}: {exc.strerror or exc}") from None
        try:
            self.db = _open_registry(settings.db_path)
        except RegistryError:
            if not rebuild:
                raise
            aside = set_aside(settings.db_path)
            self.db = _open_registry(settings.db_path)
            self.notes_at_open = [f"the registry could not be read: moved it aside to {aside} and started a new one"]
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
        self.vectors = VectorStore(settings)
        self._vec_lock = _ReadWriteLock()  # searches read the vector store; a reopen waits for them
        self._space = SpaceCheck(settings)
        self.notes: list[str] = list(self.notes_at_open)  # what a write did besides its job (a store set aside, papers re-embedded)
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
        self._kw_checked_at = -2e9  # the _count_at of the last check of the tantivy copy
        self._kw_ok = False
        if self._meta("term_df") != "1":
            self._rebuild_term_df()

    # ---- lazy heavy parts
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder(self.settings)
        return self._embedder

    def _rebuild_term_df(self) -> None:
        """Papers per keyword term, recounted from the stored token text (indexes made before the table existed)."""
        counts = _term_counts(r[0] for r in self.db.execute("SELECT text FROM papers_fts"))
        with self.db:
            self.db.execute("DELETE FROM term_df")
            self.db.executemany("INSERT INTO term_df VALUES (?, ?)", counts.items())
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('term_df', '1')")

    def _forget_terms(self, paper_ids: Sequence[str]) -> None:
        """Take these papers out of ``term_df`` (call in the transaction that deletes them)."""
        counts: Counter[str] = Counter()
        for part, marks in _in_batches(paper_ids):
            sql = f"SELECT f.text FROM papers p JOIN papers_fts f ON f.rowid = p.seq WHERE p.id IN ({marks})"
            counts += _term_counts(r[0] for r in self.db.execute(sql, part))
        self.db.executemany("UPDATE term_df SET df = df - ? WHERE term = ?", [(c, t) for t, c in counts.items()])
        self.db.execute("DELETE FROM term_df WHERE df <= 0")

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

    def check_model(self) -> None:
        """Fail early (before loading anything heavy) if the registry was built with another model."""
        built_with = self._meta("embed_model")
        if built_with and built_with != self.settings.embed_model:
            raise RagPapersError(
                f"the index was built with embedding model {built_with!r} but {self.settings.embed_model!r} is "
                "configured: re-ingest with `rag-papers ingest --rebuild` or set embed_model back"
            )
        if self.settings.chroma_url:
            self.store  # noqa: B018 - also checks the server's collection

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
        for part, marks in _in_batches(list(dict.fromkeys(ids))):
            srcs: dict[str, list[str]] = {}
            for s in self._conn().execute(f"SELECT paper_id, file, loc FROM sources WHERE paper_id IN ({marks}) ORDER BY file, loc", part):
                srcs.setdefault(s["paper_id"], []).append(f"{s['file']}:{s['loc']}")
            for row in self._conn().execute(f"SELECT * FROM papers WHERE id IN ({marks})", part):
                out[row["id"]] = _row_to_paper(row, srcs.get(row["id"], []))
        return out

    def papers(self) -> Iterator[Paper]:
        """All papers in ingest order, streamed."""
        last = -1
        while True:
            rows = self._conn().execute("SELECT id, seq FROM papers WHERE seq > ? ORDER BY seq LIMIT 1000", (last,)).fetchall()
            if not rows:
                return
            got = self.get([r["id"] for r in rows])
            for r in rows:
                if r["id"] in got:
                    yield got[r["id"]]
            last = rows[-1]["seq"]

    def field_values(self, column: str) -> list[Any]:
        if column not in ("year", "venue"):
            raise ValueError(column)
        return [r[0] for r in self._conn().execute(f"SELECT DISTINCT {column} FROM papers WHERE {column} IS NOT NULL ORDER BY 1")]

    def dense(self, query_vec: list[float], n: int, where: dict[str, Any] | None = None) -> list[DenseHit]:
        """Top papers by the mean of two cosines: the paper's head vector and its best chunk.

        The head (title + opening, the first chunk) carries the gist; the best chunk lets a
        match in the tail count too. Averaging measured better on eval/qa.jsonl than either.
        """
        total = self._count_cached()
        if total == 0:
            return []
        self._reopen_if_needed()
        try:
            chunk_hits, doc_hits = self._nearest_both(query_vec, n, total, where)
        except VectorStoreError as exc:
            # Another process dropped or set aside the collections this process still holds (a
            # rebuild, a repair): reopen once and search again before calling anything damaged.
            if "does not exist" not in str(exc):
                raise
            with self._vec_lock.write():
                self.vectors.reopen()
            chunk_hits, doc_hits = self._nearest_both(query_vec, n, total, where)
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
        # Vectors of half-ingested papers may be among these: the caller reads the registry rows of
        # its winners anyway and skips papers without one (a lookup here cost 0.6 ms at 100k papers).
        return hits[:n]

    def _nearest_both(
        self, query_vec: list[float], n: int, total: int, where: dict[str, Any] | None
    ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """(chunk hits, head hits). The two collections are searched at once: chromadb's HNSW search
        runs without the GIL, and on 2 cores the pair took 5.0 instead of 6.9 ms at 100k papers (p50)."""
        with self._vec_lock.read():
            docs = self.pool().submit(self.vectors.nearest, "docs", query_vec, min(max(n, 10), total), where)
            try:
                chunk_hits = self.vectors.nearest("chunks", query_vec, min(max(n * 3, 30), 4 * total + 10), where)
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
            conn = self._local.db = _connect(self.settings.db_path, mmap=True)
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
        for part, marks in _in_batches(list({vid.rpartition(":")[0] for vid in wanted})):
            for pid, i, text in self._conn().execute(f"SELECT paper_id, i, text FROM chunks WHERE paper_id IN ({marks})", part):
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

    # ---- keyword index (tantivy, checked against the registry's FTS5 table; FTS5 as the fallback)
    def keyword(self, query: str, n: int) -> list[tuple[str, float]]:
        """Top papers by BM25 (k1=1.2, b=0.75) over stemmed title + abstract, for the query's useful terms.

        From the tantivy copy (``rag_papers.keyword``) while it matches the registry,
        otherwise from FTS5 (``_fts_keyword``): the same formula, except that FTS5's idf
        drops the "1 +" inside the log, and that at scale FTS5 gets candidates from the
        rarest terms only.
        """
        n_docs, stats = self._term_stats(query)
        terms = _useful(stats, n_docs)
        if not terms:
            return []
        df = dict(stats)
        fast = self._fast_keyword()
        if fast is not None:
            # FTS5's idf, with which the relevance floors were calibrated: tantivy's (Lucene's)
            # keeps ln(1 + x), which at 38 papers gave mid-frequency words enough say to cost
            # one lexical and one paraphrase hit at 1 on eval/qa.jsonl.
            scored = fast.search([(t, _fts5_idf(n_docs, df[t]) / _lucene_idf(n_docs, df[t])) for t in terms], n)
        else:
            scored = self._fts_keyword(terms, df, n_docs, n)
        if not scored:
            return []
        marks = ",".join("?" * len(scored))
        ids = dict(self._conn().execute(f"SELECT seq, id FROM papers INDEXED BY papers_seq_id WHERE seq IN ({marks})", [r for r, _ in scored]).fetchall())
        return [(ids[r], sc) for r, sc in scored if sc > 0 and r in ids]

    @property
    def kw_store(self) -> KeywordStore:
        """The tantivy copy. One tantivy cannot open (damaged files) is only a copy: it is deleted and
        started empty, so searches use FTS5 until the next write refills it from the registry."""
        if self._kw is None:
            path = self.settings.keyword_path
            try:
                self._kw = KeywordStore(path)
            except ValueError:
                shutil.rmtree(path, ignore_errors=True)
                self._kw = KeywordStore(path)
        return self._kw

    def _registry_keyword_state(self, count: int | None = None) -> tuple[int, int]:
        """(papers, largest seq) of the registry: what the tantivy copy must hold to be trusted.

        ``count``: the paper count when the caller has just read it (COUNT(*) scans an index).
        """
        max_seq = int(self._conn().execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0])
        return (self.count() if count is None else count), max_seq

    def _fast_keyword(self) -> KeywordStore | None:
        """The tantivy copy if it holds exactly the registry's papers, checked when the paper count is re-read."""
        count = self._count_cached()
        if self._kw_checked_at != self._count_at:
            self._kw_ok = self.kw_store.state() == self._registry_keyword_state(count)
            self._kw_checked_at = self._count_at
        return self._kw if self._kw_ok else None

    def _sync_keyword(self, show_progress: bool = False) -> None:
        """Before a write: rebuild the tantivy copy from the registry's text if the two disagree.

        They disagree after a kill between the copy's commit and the registry's, or after a
        removal cut short, and when an index made before the copy existed is first written.
        """
        kw = self.kw_store
        want = self._registry_keyword_state()
        if kw.state() == want:
            return
        kw.clear()
        progress = _progress(want[0], "keyword index", show_progress and want[0] > 0)
        rows: list[tuple[int, str]] = []
        for row in self.db.execute("SELECT rowid, text FROM papers_fts"):
            rows.append((int(row[0]), row[1]))
            if len(rows) == 2000:
                kw.add(rows)
                if progress is not None:
                    progress.update(len(rows))
                rows = []
        kw.add(rows)
        kw.commit()
        if progress is not None:
            progress.update(len(rows))
            progress.close()
        self._kw_checked_at = -2e9

    def _fts_keyword(self, terms: list[str], df: dict[str, int], n_docs: int, n: int) -> list[tuple[int, float]]:
        """(seq, BM25) from FTS5, for when the tantivy copy is not in step with the registry.

        Why not just ``ORDER BY rank``: FTS5 scores every paper that contains any query
        term, so a term in a third of a 100k corpus costs tens of milliseconds. Candidates
        come from the rarest terms instead (at most ``KEYWORD_POSTINGS`` postings, where
        any paper worth ranking has its best evidence) and are then scored here with all
        terms. When every term fits the budget (any corpus up to a few thousand papers),
        this is FTS5's own ranking.
        """
        chosen: list[str] = []
        postings = 0
        for t in sorted(terms, key=lambda t: (df[t], t)):
            if chosen and postings + df[t] > KEYWORD_POSTINGS:
                break
            chosen.append(t)
            postings += df[t]
        match = " OR ".join(f'"{t}"' for t in chosen)
        if len(chosen) == len(terms):
            scored = [(int(r[0]), -float(r[1])) for r in self._conn().execute(
                "SELECT rowid, rank FROM papers_fts WHERE papers_fts MATCH ? ORDER BY rank LIMIT ?", (match, n))]
        else:
            rows = self._conn().execute(
                "SELECT rowid, text FROM papers_fts WHERE papers_fts MATCH ? ORDER BY rank LIMIT ?", (match, max(2 * n, 100))
            ).fetchall()
            avgdl = self._fts_avgdl() or 1.0
            idf = {t: _fts5_idf(n_docs, df[t]) for t in terms}
            scored = []
            for rowid, text in rows:
                tokens = text.split()
                norm = 1.2 * (1 - 0.75 + 0.75 * len(tokens) / avgdl)
                score = 0.0
                for t, w in idf.items():  # a few query terms: list.count runs in C, unlike a Counter of every token
                    c = tokens.count(t)
                    if c:
                        score += w * c * 2.2 / (c + norm)
                scored.append((int(rowid), score))
            scored.sort(key=lambda x: -x[1])
            scored = scored[:n]
        return scored

    def _fts_avgdl(self) -> float | None:
        """Mean tokens per paper, from FTS5's own totals record (rows, then tokens per column, as varints)."""
        row = self._conn().execute("SELECT block FROM papers_fts_data WHERE id = 1").fetchone()
        if not row or not row[0]:
            return None
        values: list[int] = []
        value = 0
        for i, byte in enumerate(bytes(row[0])):
            if len(values) == 2:
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80 or i == 8:
                values.append(value)
                value = 0
        return values[1] / values[0] if len(values) == 2 and values[0] else None

    def _term_stats(self, query: str) -> tuple[int, list[tuple[str, int]]]:
        """(papers, [(term, papers containing it)]) for the query's stemmed terms.

        Read from ``term_df``, kept in step with the FTS rows at ingest and removal:
        fts5vocab would count a term's papers by walking its postings, O(df) per term.
        The last answer is kept too: a search asks twice (``bm25_max_idf``, ``keyword``).
        """
        terms = list(dict.fromkeys(keyword_tokens(query)))
        n_docs = self._count_cached()
        if not terms or not n_docs:
            return n_docs, []
        memo = self._stats_memo
        if memo is not None and memo[0] == terms and memo[1] == n_docs and memo[2] == self._count_at:
            return n_docs, memo[3]
        marks = ",".join("?" * len(terms))
        df = dict(self._conn().execute(f"SELECT term, df FROM term_df WHERE term IN ({marks})", terms).fetchall())
        stats = [(t, int(df.get(t, 0))) for t in terms]
        self._stats_memo = (terms, n_docs, self._count_at, stats)
        return n_docs, stats

    def bm25_max_idf(self, query: str) -> tuple[float, float]:
        """Sum of the query terms' idf: normalises BM25 scores to "share of the query matched".

        Returns (known, total): the idf mass of the terms the corpus has, and of all
        terms, where a term no paper contains counts with the highest idf. Ranking uses
        the first; the relevance call uses the second, so a question mostly about things
        the corpus never mentions ("boil an egg") does not look like a strong match
        because one of its words ("long") happens to occur.
        """
        n_docs, stats = self._term_stats(query)
        known = total = 0.0
        for _, df in stats:
            idf = _lucene_idf(n_docs, df)
            total += idf
            if df:
                known += idf
        return known, total

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
                self._watch_db = _connect(self.settings.db_path)
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

        Reopening reloads the HNSW indexes from disk (seconds at a million vectors), so beside a
        long ingest that commits every few seconds a reader catches up at this pace, not per batch.
        """
        if not self._reopen_wanted or time.monotonic() - self._reopened_at < REOPEN_SECONDS:
            return
        with self._vec_lock.write():
            if self._reopen_wanted:
                self._reopen_wanted = False
                self._reopened_at = time.monotonic()
                self.vectors.reopen()

    def _bump_vector_epoch(self) -> None:
        """Tell readers in other processes that the vector store was rebuilt or set aside (see ``_watch``)."""
        with self._registry_write(), self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('vector_epoch', ?)", (f"{time.time():.6f}",))

    # ---- vectors: derived data, checked against the registry and rebuilt from it
    def vector_gaps(self, sample: int = 64) -> str | None:
        """Why the vector store in use lacks vectors the registry says exist, or None.

        Counts first, then a sample of papers spread over the registry (and its newest):
        a store switched to a server, or a Chroma folder deleted and recreated, can have
        the right collection names but not this registry's vectors. More vectors than
        papers is normal (a running ingest writes vectors before registering papers).
        """
        n = self.count()
        if n == 0:
            return None
        have = self.vectors.count("docs")
        if have < n:
            return f"it holds vectors for {have:,} papers, the registry has {n:,}"
        max_seq = int(self._conn().execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0])
        seqs = sorted({1 + (max_seq - 1) * k // max(sample - 1, 1) for k in range(sample)} | set(range(max(1, max_seq - 7), max_seq + 1)))
        marks = ",".join("?" * len(seqs))
        ids = [r[0] for r in self._conn().execute(f"SELECT id FROM papers WHERE seq IN ({marks})", seqs)]
        docs = self.vectors.existing("docs", [f"{pid}:doc" for pid in ids])
        chunks = self.vectors.existing("chunks", [f"{pid}:0" for pid in ids])
        missing = [pid for pid in ids if f"{pid}:doc" not in docs or f"{pid}:0" not in chunks]
        if missing:
            return f"{len(missing)} of {len(ids)} sampled papers have no vectors in it"
        return None

    def check_vectors(self) -> None:
        """For commands that read (search, ask, chat): fail in one line if the store cannot serve this registry."""
        self.vectors.probe()
        why = self.vector_gaps()
        if why:  # a rebuild or removal in another process may be between its two writes: look again
            time.sleep(0.5)
            why = self.vector_gaps()
        if why:
            raise VectorStoreError(
                f"the vector store at {self.vectors.location} does not match the registry {self.settings.db_path} "
                f"({why}): run `rag-papers repair` to embed the missing papers from the registry"
            )

    def repair(self, show_progress: bool = True) -> RepairReport:
        """Make the derived stores whole again from the registry alone (no corpus files needed).

        A vector store chromadb cannot read is set aside and rebuilt; papers whose vectors
        the store in use lacks are re-embedded from their registered chunk texts; the
        keyword copy is rebuilt if it is out of step.
        """
        try:
            self.kw_store.lock()
            return self._repair(show_progress, full=True)
        finally:
            self._release_writer()

    def _repair(self, show_progress: bool, full: bool) -> RepairReport:
        """``full``: check every paper; otherwise only when the counts or a sample say something is missing."""
        t0 = time.perf_counter()
        report = RepairReport(papers=self.count())
        try:
            self.vectors.probe()
        except VectorStoreError as exc:
            if not exc.damaged:
                raise  # busy, slow or away: nothing to rebuild, and nothing is set aside for it
            self.vectors.reopen()  # once more from a fresh client before deciding
            try:
                self.vectors.probe()
            except VectorStoreError as again:
                if not again.damaged:
                    raise
                if self.settings.chroma_url and not full:
                    raise  # a server's collections are deleted only by an explicit `repair`
                report.moved_aside = self.vectors.move_aside()
                self.notes.append(f"{report.moved_aside}; rebuilding it from the registry")
                self._bump_vector_epoch()
        self.check_model()
        self._drop_unfinished()
        self._sync_keyword(show_progress)
        if full or report.moved_aside or self.vector_gaps() is not None:
            report.checked = True
            progress = _progress(report.papers, "repair vectors", show_progress and report.papers > 0)
            batch_size = max(8, self.settings.embed_batch_size // 2)
            last = 0
            while True:
                rows = self.db.execute("SELECT id, seq FROM papers WHERE seq > ? ORDER BY seq LIMIT ?", (last, batch_size)).fetchall()
                if not rows:
                    break
                last = int(rows[-1]["seq"])
                ids = [r["id"] for r in rows]
                lacking = self._lacking_vectors(ids)
                if lacking:
                    report.reembedded += len(lacking)
                    report.chunks += self._reembed(lacking)
                if progress is not None:
                    progress.update(len(rows))
            if progress is not None:
                progress.close()
            if report.reembedded:
                self._bump_vector_epoch()  # readers in other processes reopen the store to see them
                self.notes.append(
                    f"re-embedded {report.reembedded:,} papers ({report.chunks:,} chunks) from the registry into "
                    f"the vector store at {self.vectors.location}"
                )
        report.seconds = round(time.perf_counter() - t0, 3)
        return report

    def _lacking_vectors(self, ids: list[str]) -> list[str]:
        """Which of these registered papers miss their head vector or any chunk vector."""
        n_chunks = {r["id"]: int(r["n_chunks"]) for part, marks in _in_batches(ids)
                    for r in self.db.execute(f"SELECT id, n_chunks FROM papers WHERE id IN ({marks})", part)}
        docs = self.vectors.existing("docs", [f"{pid}:doc" for pid in ids])
        chunks = self.vectors.existing("chunks", [f"{pid}:{i}" for pid in ids for i in range(n_chunks.get(pid, 1))])
        return [pid for pid in ids
                if f"{pid}:doc" not in docs or any(f"{pid}:{i}" not in chunks for i in range(n_chunks.get(pid, 1)))]

    def _reembed(self, paper_ids: list[str]) -> int:
        """Embed these registered papers again from their chunk texts (re-chunking any that have none)."""
        papers = self.get(paper_ids)
        texts: dict[str, list[str]] = {}
        for part, marks in _in_batches(paper_ids):
            for pid, _, text in self.db.execute(f"SELECT paper_id, i, text FROM chunks WHERE paper_id IN ({marks}) ORDER BY paper_id, i", part):
                texts.setdefault(pid, []).append(text)
        passages: list[tuple[Paper, int, str]] = []
        for pid in paper_ids:
            paper = papers.get(pid)
            if paper is None:
                continue
            chunks = texts.get(pid)
            if not chunks:  # an index written before the registry kept chunk texts: chunk it again
                chunks = chunk_texts(paper.abstract, self.settings.chunk_tokens, self.settings.chunk_overlap,
                                     self.embedder.count_tokens)
                self.vectors.delete_papers([pid])  # its old chunk vectors may number more than the new chunks
                with self._registry_write(), self.db:
                    self.db.execute("DELETE FROM chunks WHERE paper_id=?", (pid,))
                    self.db.executemany("INSERT INTO chunks VALUES (?,?,?)", [(pid, i, c) for i, c in enumerate(chunks)])
                    self.db.execute("UPDATE papers SET n_chunks=? WHERE id=?", (len(chunks), pid))
            passages.extend((paper, i, chunk) for i, chunk in enumerate(chunks))
        if passages:
            space = self._space.check([p for p in papers.values()], passages, self.embedder.dim)
            self._write_vectors(passages)
            space.done()
        return len(passages)

    # ---- writing
    def _unique_title(self, abstract: str, wanted: str, pid: str, derived: bool) -> str:
        """A title no other lasting paper has.

        Papers this ingest is about to drop (their files are being re-read and their text
        is gone) don't count: an edited abstract keeps the title a fresh ingest gives it.
        """
        taken_sql = (
            "SELECT 1 FROM papers p WHERE p.title=? AND p.id<>? AND ("
            " p.hash IN (SELECT hash FROM incoming)"
            " OR EXISTS (SELECT 1 FROM sources s WHERE s.paper_id=p.id AND s.file NOT IN (SELECT file FROM ingest_files))"
            " OR NOT EXISTS (SELECT 1 FROM sources s WHERE s.paper_id=p.id)) LIMIT 1"
        )
        title = wanted
        extra = 0
        while self.db.execute(taken_sql, (title, pid)).fetchone():
            extra += 1
            title = derive_title(abstract, extra) if derived and extra <= 2 else f"{wanted} [{pid[:6]}]"
            if extra > 3:
                break
        return title

    def _store_batch(self, batch: list[Paper], progress: Any) -> int:
        """Embed a batch and write it: vectors to Chroma, then text, FTS rows and counts to the registry.

        Vectors go to the collection with flat metadata (ids, paper, chunk, year, venue),
        not through llama-index's ``ChromaVectorStore.add``: that stores each chunk's text as a
        Chroma document (which Chroma also indexes for ``where_document``) plus llama-index's
        node JSON in its metadata, several times the time and disk per vector (docs/).
        Chunk texts live in the registry's ``chunks`` table, written in the same
        transaction as the paper.
        """
        passages: list[tuple[Paper, int, str]] = []
        for paper in batch:
            for i, chunk in enumerate(chunk_texts(paper.abstract, self.settings.chunk_tokens,
                                                  self.settings.chunk_overlap, self.embedder.count_tokens)):
                passages.append((paper, i, chunk))
        space = self._space.check(batch, passages, self.embedder.dim)
        # Intent first: if we die between the vector writes and the registry commit below,
        # the next ingest finds these ids in ``pending`` and deletes their vectors.
        try:
            with self.db:
                self.db.executemany("INSERT OR IGNORE INTO pending VALUES (?)", [(p.id,) for p in batch])
        except sqlite3.Error as exc:
            raise registry_error(self.settings.db_path, exc) from None
        self._write_vectors(passages)
        first = int(self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0]) + 1
        tokens_of = [keyword_tokens(f"{paper.title}. {paper.abstract}") for paper in batch]
        # The tantivy copy before the registry: a kill in between leaves the copy ahead, which
        # the next write notices (``_sync_keyword``) and searches meanwhile do not trust.
        try:
            self.kw_store.add((first + k, " ".join(tokens)) for k, tokens in enumerate(tokens_of))
            self.kw_store.commit()
        except Exception as exc:  # tantivy raises ValueError with the OS error in its text
            if is_disk_full(exc):
                raise disk_full_error(self.settings.home, "writing the keyword index") from None
            raise
        terms: Counter[str] = Counter()
        with self._registry_write(), self.db:
            for seq, paper, tokens in zip(range(first, first + len(batch)), batch, tokens_of):
                chunk_rows = [(paper.id, i, chunk) for p, i, chunk in passages if p is paper]
                n_chunks = len(chunk_rows)
                self.db.execute(
                    "INSERT INTO papers (id, hash, title, abstract, year, venue, authors, url, n_chunks, seq) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (paper.id, content_hash(paper.abstract), paper.title, paper.abstract, paper.year, paper.venue,
                     json.dumps(paper.authors) if paper.authors else None, paper.url, n_chunks, seq),
                )
                terms.update(set(tokens))
                self.db.execute("INSERT INTO papers_fts (rowid, text) VALUES (?, ?)", (seq, " ".join(tokens)))
                self.db.executemany("INSERT INTO chunks VALUES (?,?,?)", chunk_rows)
                for src in paper.sources:
                    file, _, loc = src.rpartition(":")
                    self.db.execute("INSERT OR IGNORE INTO sources VALUES (?,?,?)", (paper.id, file, loc))
            self.db.executemany(
                "INSERT INTO term_df VALUES (?, ?) ON CONFLICT(term) DO UPDATE SET df = df + excluded.df",
                terms.items(),
            )
            self.db.executemany("DELETE FROM pending WHERE paper_id=?", [(p.id,) for p in batch])
        self._count_at = -1e9
        space.done()
        if progress is not None:
            progress.update(len(batch))
        return len(passages)

    def _write_vectors(self, passages: list[tuple[Paper, int, str]]) -> None:
        """Embed (title + chunk) passages and upsert their chunk vectors and, for chunk 0, head vectors."""
        vectors = self.embedder.embed_array([passage_text(paper.title, chunk) for paper, _, chunk in passages])
        heads = [k for k, (_, i, _) in enumerate(passages) if i == 0]
        self.vectors.upsert("chunks", [f"{p.id}:{i}" for p, i, _ in passages], vectors,
                            [_node_meta(p, i) for p, i, _ in passages])
        # The paper's head (title + opening) doubles as its whole-paper vector: no extra embedding.
        self.vectors.upsert("docs", [f"{passages[k][0].id}:doc" for k in heads], vectors[heads],
                            [_node_meta(passages[k][0], -1) for k in heads])

    @contextmanager
    def _registry_write(self) -> Iterator[None]:
        """SQLite errors of a registry write as one line (the transaction itself rolls back)."""
        try:
            yield
        except sqlite3.Error as exc:
            raise registry_error(self.settings.db_path, exc) from None

    def ingest(self, paths: Iterable[Path], rebuild: bool = False, show_progress: bool = True) -> IngestReport:
        """Sync the index with these files: new abstracts added, vanished ones removed.

        Each file is validated in full before anything is written, so bad input never
        touches the index. Papers from files not named here are left alone.
        """
        try:
            return self._ingest(paths, rebuild, show_progress)
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        """The tantivy writer's lock is held for one write operation only (another Index may write next)."""
        if self._kw is not None:
            self._kw.close()

    def _ingest(self, paths: Iterable[Path], rebuild: bool, show_progress: bool) -> IngestReport:
        t0 = time.perf_counter()
        files = expand_paths(paths)
        report = IngestReport(files=len(files))
        with self._registry_write(), self.db:
            for table in ("incoming (hash TEXT PRIMARY KEY)", "ingest_files (file TEXT PRIMARY KEY)",
                          "incoming_ids (id TEXT PRIMARY KEY, hash TEXT NOT NULL, source TEXT NOT NULL)"):
                self.db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table}")
            for table in ("incoming", "ingest_files", "incoming_ids"):
                self.db.execute(f"DELETE FROM {table}")
            self.db.executemany("INSERT OR IGNORE INTO ingest_files VALUES (?)", [(str(f.resolve()),) for f in files])

        def note(rec: RawRecord) -> None:
            h = content_hash(rec.abstract)
            self.db.execute("INSERT OR IGNORE INTO incoming VALUES (?)", (h,))
            if rec.id is None:
                return
            # One id for two different abstracts in one ingest is an error in the input, not
            # something to guess about (kept in SQLite: an ingest may carry millions of ids).
            row = self.db.execute("SELECT hash, source FROM incoming_ids WHERE id=?", (rec.id,)).fetchone()
            if row is None:
                self.db.execute("INSERT INTO incoming_ids VALUES (?,?,?)", (rec.id, h, rec.source))
            elif row["hash"] != h:
                raise CorpusError(
                    f"{rec.source}: id {rec.id!r} is already used by {row['source']} for a different abstract; "
                    "give each abstract its own id (or drop the id to use content hashes)"
                )

        # One validating pass before any write; it also notes which texts are still wanted.
        try:
            n_records = validate(files, note)
        finally:
            self.db.commit()  # only the temp tables were written
        self.kw_store.lock()  # a second writer is refused here, before anything is written
        if rebuild:
            self.clear()
        self.check_model()
        # Vectors are derived data: a store that cannot be read is set aside and rebuilt, and
        # registered papers it lacks (a switched store, a folder deleted by hand) are embedded
        # again from the registry, before anything new is added.
        report.reembedded = self._repair(show_progress, full=False).reembedded
        with self._registry_write(), self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (self.settings.embed_model,))
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS seen (paper_id TEXT, file TEXT, loc TEXT)")
            self.db.execute("CREATE INDEX IF NOT EXISTS temp.seen_paper ON seen(paper_id)")
            self.db.execute("DELETE FROM seen")
        progress = _progress(n_records, "ingest", show_progress)
        batch: list[Paper] = []
        batch_keys: dict[str, Paper] = {}
        batch_size = max(8, self.settings.embed_batch_size // 2)
        for file in files:
            key_file = str(file.resolve())
            for rec in read_file(file):
                report.records += 1
                h = content_hash(rec.abstract)
                loc = rec.source.rpartition(":")[2]
                row = self.db.execute("SELECT id FROM papers WHERE hash=?", (h,)).fetchone()
                pid = row["id"] if row is not None else batch_keys[h].id if h in batch_keys else None
                if pid is not None:
                    if self.db.execute("SELECT 1 FROM seen WHERE paper_id=? LIMIT 1", (pid,)).fetchone():
                        report.duplicates += 1
                    else:
                        report.unchanged += 1
                    if progress is not None:
                        progress.update(1)
                else:
                    paper = to_paper(rec)
                    paper.sources = [f"{key_file}:{loc}"]
                    if any(p.id == paper.id for p in batch) or self.db.execute(
                            "SELECT 1 FROM papers WHERE id=?", (paper.id,)).fetchone():
                        # The id belongs to an indexed paper with other text (an earlier ingest, or the
                        # old version of an edited abstract, which this sync drops at its end): ids stay
                        # unique, and the report says which paper got which id.
                        renamed = f"{paper.id}-{h[:8]}"
                        report.renamed.append((paper.id, renamed))
                        paper.id = renamed
                    paper.title = self._unique_title(paper.abstract, paper.title, paper.id, rec.title is None)
                    if any(p.title == paper.title for p in batch):
                        paper.title = f"{paper.title} [{paper.id[:6]}]"
                    pid = paper.id
                    batch.append(paper)
                    batch_keys[h] = paper
                    if len(batch) >= batch_size:
                        report.chunks += self._store_batch(batch, progress)
                        report.added += len(batch)
                        batch, batch_keys = [], {}
                self.db.execute("INSERT INTO seen VALUES (?,?,?)", (pid, key_file, loc))
        if batch:
            report.chunks += self._store_batch(batch, progress)
            report.added += len(batch)
        if progress is not None:
            progress.close()
        removed = self._sync_sources([str(f.resolve()) for f in files])
        report.removed = len(removed)
        report.removed_ids = removed
        report.total = self.count()
        report.seconds = round(time.perf_counter() - t0, 3)
        return report

    def _drop_unfinished(self) -> None:
        """Delete vectors a killed ingest wrote for papers it never registered.

        A rerun over the same file overwrites them anyway; this also covers the file
        having changed (or not being ingested again) in the meantime.
        """
        stray = [r[0] for r in self.db.execute("SELECT paper_id FROM pending WHERE paper_id NOT IN (SELECT id FROM papers)")]
        if stray:
            self._delete_vectors(stray)
        with self.db:
            self.db.execute("DELETE FROM pending")

    def _sync_sources(self, files: list[str]) -> list[str]:
        """Make the sources of these files exactly what was just read; drop papers left with none."""
        marks = ",".join("?" * len(files))
        with self.db:
            self.db.execute(f"DELETE FROM sources WHERE file IN ({marks})", files)
            self.db.execute("INSERT OR IGNORE INTO sources SELECT paper_id, file, loc FROM seen")
            rows = self.db.execute("SELECT id, seq FROM papers WHERE id NOT IN (SELECT paper_id FROM sources)").fetchall()
            orphans = [r[0] for r in rows]
            self._forget_terms(orphans)
            for part, marks in _in_batches(orphans):
                self.db.execute(f"DELETE FROM papers WHERE id IN ({marks})", part)
        self._deleted([r[1] for r in rows], orphans)
        return orphans

    def _delete_vectors(self, paper_ids: list[str]) -> None:
        self.vectors.delete_papers(paper_ids)

    def _deleted(self, seqs: list[int], paper_ids: list[str]) -> None:
        """After the registry's delete has committed: drop the papers' vectors and keyword copies.

        Until the keyword copy commits, its count differs from the registry's and searches do not trust it.
        """
        self._count_at = -1e9
        self._delete_vectors(paper_ids)
        if seqs:
            self.kw_store.delete(seqs)
            self.kw_store.commit()

    def remove(self, paper_ids: Sequence[str]) -> int:
        try:
            return self._remove(paper_ids)
        finally:
            self._release_writer()

    def _remove(self, paper_ids: Sequence[str]) -> int:
        self.kw_store.lock()
        rows = [(r[0], int(r[1])) for part, marks in _in_batches(list(dict.fromkeys(paper_ids)))
                for r in self.db.execute(f"SELECT id, seq FROM papers WHERE id IN ({marks})", part)]
        known = [pid for pid, _ in rows]
        self._sync_keyword()
        with self.db:
            self._forget_terms(known)
            for pid in known:
                self.db.execute("DELETE FROM sources WHERE paper_id=?", (pid,))
                self.db.execute("DELETE FROM papers WHERE id=?", (pid,))
        self._deleted([seq for _, seq in rows], known)
        return len(known)

    def clear(self) -> None:
        """Drop everything (``ingest --rebuild``). Holds the keyword writer until the ingest releases it."""
        self.kw_store.lock()
        try:
            self.vectors.drop()
        except VectorStoreError as exc:
            if not exc.damaged:
                raise
            self.notes.append(self.vectors.move_aside())
        with self._registry_write(), self.db:
            self.db.execute("DELETE FROM sources")
            self.db.execute("DELETE FROM papers")
            self.db.execute("DELETE FROM meta")
            self.db.execute("DELETE FROM papers_fts")
            self.db.execute("DELETE FROM chunks")
            self.db.execute("DELETE FROM pending")
            self.db.execute("DELETE FROM term_df")
            self.db.execute("INSERT INTO meta VALUES ('term_df', '1')")
            self.db.execute("INSERT INTO meta VALUES ('vector_epoch', ?)", (f"{time.time():.6f}",))
        self.kw_store.clear()
        self._count_at = -1e9

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        self._release_writer()
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


class SpaceCheck:
    """Stop an ingest cleanly before a batch that may not fit in the data directory.

    A write that runs out of space part way can leave chromadb's files unreadable (a
    cut-short HNSW pickle) and even keep chromadb from opening the store for reading,
    so the check comes before each batch, while everything can still be read. The
    estimate is deliberately generous: per vector, three times its float32 size plus
    1 kB (HNSW graph, Chroma's own write-ahead log, metadata); per character of text,
    10 bytes (the abstract, its chunks, keyword postings, SQLite's WAL); doubled. On top,
    ``min_free_mb`` and room for the stores' bursts: an HNSW resize rewrites a quarter
    of the store, a tantivy merge needs up to the keyword copy's size again.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.written = 0  # papers whose vectors this process wrote, for the message

    def check(self, papers: Sequence[Paper], passages: Sequence[tuple[Paper, int, str]], dim: int) -> _SpaceTicket:
        s = self.settings
        chars = sum(len(p.abstract) + len(p.title) for p in papers) + sum(len(c) for _, _, c in passages)
        estimate = len(passages) * 2 * (dim * 4 * 3 + 1024) + chars * 10 + len(papers) * 2048
        headroom = s.min_free_mb * 1_000_000 + tree_bytes(s.keyword_path)
        if not s.chroma_url:
            headroom += tree_bytes(s.chroma_dir) // 4
        need = 2 * estimate + headroom
        free = free_bytes(s.home)
        if free < need:
            done = f"{self.written:,} papers were written before stopping and" if self.written else "nothing was written and"
            raise DiskFullError(
                f"not enough free space in {s.home}: the next batch of {len(papers)} abstracts needs about {mb(need)} "
                f"(with {mb(headroom)} kept free for the stores' own growth) and {mb(free)} are free; {done} the "
                "index is intact: free some space (or move the data directory with RAG_PAPERS_HOME) and rerun "
                "`rag-papers ingest` to continue"
            )
        return _SpaceTicket(self, len(papers))


@dataclass
class _SpaceTicket:
    check: SpaceCheck
    papers: int

    def done(self) -> None:
        self.check.written += self.papers


class RegistryError(RagPapersError):
    """The registry file cannot be read: the message names it and the way out."""


def registry_error(path: Path, exc: sqlite3.Error) -> RagPapersError:
    """One line for an SQLite failure on the registry; only a file SQLite says is damaged counts as damaged."""
    text = str(exc)
    low = text.lower()
    if "full" in low or "no space" in low:
        from rag_papers.vectors import disk_full_error

        return disk_full_error(path.parent, "writing the registry")
    if "locked" in low or "busy" in low:
        return RagPapersError(f"the registry {path} is locked by another rag-papers process; wait for it to finish")
    if "readonly" in low or "read-only" in low:
        return RagPapersError(f"the registry {path} is read-only ({text}): check the data directory's permissions")
    if "unable to open" in low:
        return RagPapersError(f"cannot open the registry {path} ({text}): check the data directory's permissions")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return RegistryError(
            f"the registry {path} is damaged ({text}): restore it from a backup, or rebuild the index from your "
            "corpus files with `rag-papers ingest --rebuild [FILES]` (the damaged file is kept aside)"
        )
    return RagPapersError(f"the registry {path} failed ({text})")


def _check_registry_file(path: Path) -> None:
    """Catch a registry cut short before SQLite reads past its end (a file system that ran out, a bad copy).

    The header records the database size in pages; a file shorter than that lost its tail.
    Cheap (one 100-byte read), unlike ``PRAGMA quick_check``, which reads every page.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(100)
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if not head:
        return
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise RegistryError(
            f"the registry {path} is not an SQLite database (damaged or overwritten): restore it from a backup, "
            "or rebuild the index from your corpus files with `rag-papers ingest --rebuild [FILES]`"
        )
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96]  # the in-header size is only kept by SQLite >= 3.7.0 writers
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return  # a checkpoint cut short (a full disk) leaves the main file short: the WAL still has the pages
    if valid and pages and size < pages * page:
        raise RegistryError(
            f"the registry {path} is damaged (cut short: {size:,} of {pages * page:,} bytes): restore it from a "
            "backup, or rebuild the index from your corpus files with `rag-papers ingest --rebuild [FILES]`"
        )


def _open_registry(path: Path) -> sqlite3.Connection:
    _check_registry_file(path)
    db: sqlite3.Connection | None = None
    try:
        db = _connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_SCHEMA)
        return db
    except sqlite3.Error as exc:
        if db is not None:
            db.close()
        raise registry_error(path, exc) from None


def set_aside(path: Path) -> Path:
    """Rename a damaged registry (and its -wal/-shm files) so a fresh one can be made; never delete it."""
    dest = aside_name(path)
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, Path(f"{dest}{suffix}"))
    return dest


def _connect(path: Path, mmap: bool = False) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, timeout=30)
    db.row_factory = sqlite3.Row
    if mmap:
        # Read pages through a memory map (SQLite caps it at 2 GiB) instead of a read() call per
        # page: at 100k papers a cold search touches ~1,000 pages of FTS postings and rows, and
        # this cut the keyword side of a fresh process's searches from 11.5 to 7.0 ms (p50).
        # Only for the search threads' read connections: mapped pages count as the process's
        # memory, and on the ingest connection they took a 100k ingest's peak RSS to 2,049 MB.
        db.execute("PRAGMA mmap_size=4294967296")
    return db


def _node_meta(paper: Paper, chunk: int) -> dict[str, Any]:
    """Flat metadata Chroma can filter on (``document_id``: the key deletes use, as llama-index names it)."""
    meta: dict[str, Any] = {"paper_id": paper.id, "document_id": paper.id, "chunk": chunk}
    if paper.year is not None:
        meta["year"] = paper.year
    if paper.venue:
        meta["venue"] = paper.venue
    return meta


_STEMMER: Any = None
# Runs of 2+ letters or digits: underscores split words, as in FTS5's unicode61 tokenizer,
# so our per-term counts (term_df) and FTS5's matching see the same words.
_WORD = re.compile(r"[^\W_]{2,}")


_ACRONYM_PLURAL = re.compile(r"\b([A-Z][A-Z0-9]*[A-Z])s\b")


def _in_batches(ids: Sequence[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """Slices of ``ids`` with their ``?,?,...`` placeholders: SQLite caps the parameters of one statement."""
    for start in range(0, len(ids), size):
        part = list(ids[start : start + size])
        yield part, ",".join("?" * len(part))


def _term_counts(texts: Iterable[str]) -> Counter[str]:
    """Papers per term, over stored keyword texts (space-joined ``keyword_tokens``)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(set(text.split()))
    return counts


def _fts5_idf(n_docs: int, df: int) -> float:
    """FTS5's bm25() idf: zero-or-less (a word in half the papers or more) becomes 1e-6."""
    return max(math.log((n_docs - df + 0.5) / (df + 0.5)), 1e-6)


def _lucene_idf(n_docs: int, df: int) -> float:
    """Lucene's (and tantivy's) idf: never negative."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def _useful(stats: list[tuple[str, int]], n_docs: int) -> list[str]:
    """Known terms, minus those in most papers (FTS5 gives them ~zero idf; they only cost time)."""
    known = [(t, df) for t, df in stats if df]
    rare = [t for t, df in known if df <= n_docs / 2]
    return rare or [t for t, _ in known]


def keyword_tokens(text: str) -> list[str]:
    """Lower-cased, stop-word-free, Snowball-stemmed words: what the keyword index stores and matches.

    Acronym plurals are singularised first (LLMs -> LLM, GNNs -> GNN): the stemmer
    would leave "llms" and "llm" as two different words.
    """
    text = _ACRONYM_PLURAL.sub(r"\1", text)
    stem = _stemmer().stemWords
    return list(stem([w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]))



def _stemmer() -> Any:
    global _STEMMER
    if _STEMMER is None:
        import Stemmer

        _STEMMER = Stemmer.Stemmer("english")
    return _STEMMER


def _progress(total: int, desc: str, enabled: bool) -> Any:
    """tqdm on stderr with rate and ETA; silent when not wanted or not a terminal in tests."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="abstract", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

