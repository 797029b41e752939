"""Store: one open data directory, what both its readers (``Index``) and its writers (``Ingester``) stand on.

Three stores, one source of truth:
- the SQLite registry (``rag_papers.registry``) decides what exists. A paper is visible
  only once its chunks are stored, so a killed ingest leaves the previous index usable
  and a rerun resumes where it stopped;
- two Chroma collections (``rag_papers.vectors``, embedded or server): chunk vectors,
  and one head vector per paper, with flat metadata for filters (texts are in the
  registry), and two more of the same for an optional second embedding model
  (``embed_model_2``). Hits whose paper is not in the registry are ignored;
- a tantivy keyword index over whole papers for BM25 (``rag_papers.keyword``), derived
  from the registry's titles and abstracts and rebuilt from them when it lacks papers
  (``sync_keyword``).

A ``Store`` holds them open with the embedding models, and keeps what a write changes and a read
trusts: the cached paper count (``forget_counts``), the keyword index's check against the registry,
and the watch on other processes' writes. The model and vector checks are about the stored data, so
they are here too. ``Index`` (searches, counts, papers) and ``Ingester`` (ingest, remove, repair,
clear) each take a Store and neither imports the other.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from typing import TypedDict

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.embedding import Embedder, load_embedder
from rag_papers.keyword import (
    KEYWORD_VERSION,
    KeywordIndexError,
    KeywordStore,
    damaged_files,
    paper_text,
    writer_lock_free,
)
from rag_papers.model_files import check_model_installed
from rag_papers.paths import home_problem
from rag_papers.progress import progress_bar
from rag_papers.registry import connect, move_damaged_registry_aside, open_registry, registry_write
from rag_papers.vectors import VectorStore, VectorStoreError, kinds

# A keyword index holding more papers than this beyond the registry's (a large removal cut short) is
# rebuilt by a reader rather than searched for that many extra hits.
KEYWORD_SURPLUS_MAX = 1000
WATCH_SECONDS = 2.0  # how often a long-running reader looks for other processes' writes
REOPEN_SECONDS = 10.0  # how often, at most, it reopens the embedded vector store to see them


def passage_text(title: str, chunk: str) -> str:
    """What gets embedded for one chunk: the chunk led by its paper's title, for context.

    Chunks are as long as the model's window allows, so most abstracts are one head
    chunk plus one tail that overlaps it: every sentence is covered for about 2 embeddings
    a paper. Smaller chunks measured no better on eval/qa.jsonl and cost much more ingest
    time; less overlap saved few tokens and scored worse on paraphrased questions
    (docs/design-notes.md).
    """
    return f"{title}. {chunk}"


class StoreOptions(TypedDict, total=False):
    """What a ``Store`` is opened with besides the settings (``Index`` passes them on)."""

    embedder: Embedder | None
    rebuild: bool
    embedder2: Embedder | None


class Store:
    """An open data directory: the registry connection, the vector store, the keyword index, the models."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        *,
        rebuild: bool = False,
        embedder2: Embedder | None = None,
    ) -> None:
        """Open (or create) the data directory's registry; ``embedder``, ``embedder2``: loaded models to use
        (tests share one) instead of loading ``embed_model`` and ``embed_model_2`` on first use.

        A registry SQLite cannot read stops here with one line naming the file and the way
        out; with ``rebuild`` (``ingest --rebuild``) it is set aside and a fresh one started.
        """
        self.settings = settings
        self.notes_at_open: list[str] = []
        try:
            settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RagPapersError(
                f"cannot create the data directory {settings.home}: {home_problem(settings.home, exc)}"
            ) from None
        if rebuild:  # a damaged registry (header or pages) is renamed, never deleted, and a new one started
            moved = move_damaged_registry_aside(settings)
            self.notes_at_open = [moved] if moved else []
        self.db = open_registry(settings.in_home("papers.sqlite"))
        # Reads from other threads (a search's keyword side, UI request threads) get their own
        # connections: CPython 3.12+ cannot step one connection from two threads at once
        # (cpython#118172), and with separate connections their reads do not take turns.
        self._owner = threading.get_ident()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._embedder = embedder
        self._embedder2 = embedder2
        self.vectors = VectorStore(settings)
        self.vector_lock = ReadWriteLock()  # searches read the vector store; a reopen waits for them
        # What a write did besides its job (a store set aside, papers re-embedded), for the command to print.
        self.notes: list[str] = list(self.notes_at_open)
        self._watch_lock = threading.Lock()
        self._watch_db: sqlite3.Connection | None = None
        self._watched_at = -1e9
        self._data_version: int | None = None
        self._seen_state: tuple[int, int, str] | None = None
        self._reopen_wanted = False
        self._reopened_at = -1e9
        self._count_value, self._count_at = 0, -1e9
        self._kw: KeywordStore | None = None
        self._kw_lock = threading.Lock()
        self._kw_checked_at = -2e9  # the _count_at of the last check of the keyword index
        self._kw_extra = 0  # papers the keyword index holds beyond the registry's (a write in progress)

    # ---- the embedding models, loaded on first use
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
        """The models in use, by number: ``[embedder]`` or ``[embedder, embedder2]`` (``Index.nearest``'s ``model``)."""
        second = self.embedder2
        return [self.embedder] if second is None else [self.embedder, second]

    def loaded_embedders(self) -> tuple[Embedder | None, Embedder | None]:
        """The two models as loaded so far (None: not yet): a rebuild's staging store borrows them, and
        hands back what it loaded, so a model is loaded once per command."""
        return self._embedder, self._embedder2

    def adopt_embedders(self, other: Store) -> None:
        """Use the models ``other`` has loaded (``loaded_embedders``) from now on."""
        self._embedder, self._embedder2 = other.loaded_embedders()

    # ---- what the registry says about the stored data
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def recorded_second_model(self) -> str | None:
        """The second embedding model this index holds vectors of (whatever the settings say), or None."""
        return self.meta("embed_model_2")

    def check_model(self) -> None:
        """Fail early (before loading anything heavy) if the registry was built with another model.

        The second model likewise, except that one may be added to an index that has none (the next
        ``ingest`` or ``repair`` embeds every paper with it), and that an index built with one may be
        searched without it. Its packages are checked here too, so
        a missing mpnet is one line before any work rather than after it.
        """
        built_with = self.meta("embed_model")
        if built_with and built_with != self.settings.embed_model:
            raise RagPapersError(
                f"the index was built with embedding model {built_with!r} but {self.settings.embed_model!r} is "
                "configured: re-ingest with `rag-papers ingest --rebuild` or set embed_model back"
            )
        second, wanted = self.meta("embed_model_2"), self.settings.embed_model_2
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
            self.vectors.collection("chunks")  # also checks the server's collection
            if wanted and second:
                self.vectors.collection("chunks2")

    # ---- the registry, read
    def conn(self) -> sqlite3.Connection:
        """This thread's connection for reads: the main one in the thread that opened the store."""
        if threading.get_ident() == self._owner:
            return self.db
        conn: sqlite3.Connection | None = getattr(self._local, "db", None)
        if conn is None:
            conn = self._local.db = connect(self.settings.in_home("papers.sqlite"), mmap=True)
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def count(self) -> int:
        return int(self.conn().execute("SELECT COUNT(*) FROM papers").fetchone()[0])

    def count_cached(self) -> int:
        """COUNT(*) scans an index: fine per command, too slow per query at millions of rows."""
        self._watch()
        now = time.monotonic()
        if now - self._count_at > 10:
            self._count_value, self._count_at = self.count(), now
        return self._count_value

    @property
    def counted_at(self) -> float:
        """When ``count_cached`` last read the count: what a reader's memo of counts is valid for."""
        return self._count_at

    def forget_counts(self) -> None:
        """After a write: the paper count and the keyword index's state are read afresh at the next search."""
        self._count_at = -1e9
        self._kw_checked_at = -2e9

    def max_seq(self) -> int:
        """The largest ``seq`` of the registry's papers (0 when there are none)."""
        return int(self.conn().execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0])

    # ---- the keyword index (tantivy, derived from the registry)
    @property
    def kw_store(self) -> KeywordStore:
        """The tantivy keyword index, its files checked against tantivy's checksums before it is opened
        (``verify_keyword``). One damaged or that tantivy cannot open is derived data only: it is deleted
        and started empty, and rebuilt from the registry (``keyword_index``, or the write under way)."""
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
        path = self.settings.in_home("keyword")
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
        max_seq = self.max_seq()
        return (self.count() if count is None else count), max_seq

    def keyword_index(self) -> tuple[KeywordStore, int]:
        """(the keyword index, the papers it holds beyond the registry's), checked against the registry
        whenever the paper count is re-read.

        Ahead of the registry (an ingest between its keyword and registry commits, or killed
        there; a removal cut short) it is searched as it is, for that many more hits, unless it
        is far ahead (``KEYWORD_SURPLUS_MAX``). Behind it (its files lost or damaged) or far
        ahead, a reader rebuilds it from the registry if no write holds the index; otherwise
        that write does, and searches meanwhile miss the papers it lacks.
        """
        count = self.count_cached()
        with self._kw_lock:
            if self._kw_checked_at == self._count_at:
                return self.kw_store, self._kw_extra
            kw = self.kw_store
            kw.index.reload()  # another process may have rebuilt it without touching the registry
            have, want = kw.state(), self.keyword_state(count)
            if have[0] < want[0] or have[1] < want[1] or have[0] - want[0] > KEYWORD_SURPLUS_MAX:
                self._rebuild_keyword_if_free()
                have = kw.state()
            self._kw_extra = max(0, have[0] - want[0])
            self._kw_checked_at = self._count_at
            return kw, self._kw_extra

    @property
    def keyword_surplus(self) -> int:
        """Papers the keyword index holds beyond the registry's (a write between its two commits, or killed there)."""
        return self.keyword_index()[1]

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
            with closing(connect(self.settings.in_home("papers.sqlite"))) as db:
                self.sync_keyword(db, show_progress=False)
        except (RagPapersError, ValueError, OSError, sqlite3.Error):
            pass  # a read-only registry, a full disk: searches go on with what the index has
        finally:
            kw.close()

    def sync_keyword(self, db: sqlite3.Connection, show_progress: bool = False, force: bool = False) -> bool:
        """Rebuild the tantivy keyword index from the registry's titles and abstracts (read through ``db``)
        unless it holds exactly the registry's papers, tokenised as today (True when it rebuilt; ``force``:
        whatever it holds, as after a rebuild's swap, whose papers may have the old ones' numbers). The
        caller holds the keyword writer.

        They disagree after a kill between the keyword commit and the registry's, after a removal
        cut short, when the keyword files were lost or damaged, and when ``keyword_tokens`` changed
        (``KEYWORD_VERSION``). One commit at the end: searches meanwhile use the old contents.
        """
        kw = self.kw_store
        version = db.execute("SELECT value FROM meta WHERE key = 'keyword_version'").fetchone()
        want = self.keyword_state()
        if not force and kw.state() == want and version is not None and version[0] == KEYWORD_VERSION:
            return False
        progress = progress_bar(want[0], "keyword index", show_progress and want[0] > 0)

        def rows() -> Iterable[tuple[int, str]]:
            last = 0
            while batch := db.execute(
                "SELECT seq, title, abstract FROM papers WHERE seq > ? ORDER BY seq LIMIT 2000", (last,)
            ).fetchall():
                yield from ((int(r[0]), paper_text(r[1], r[2])) for r in batch)
                last = int(batch[-1][0])
                if progress is not None:
                    progress.update(len(batch))

        kw.rebuild(rows())
        if progress is not None:
            progress.close()
        with registry_write(self.settings.in_home("papers.sqlite")), db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('keyword_version', ?)", (KEYWORD_VERSION,))
        return True

    # ---- other processes' writes
    def _watch(self) -> None:
        """Notice another process's writes (an ingest or repair beside a running UI).

        ``PRAGMA data_version`` changes when another connection commits; then the counts
        are re-read and, if papers came or went or the vector store was rebuilt (the
        ``vector_epoch`` in ``meta``), the embedded store is marked for reopening: chromadb
        keeps each collection's HNSW index in memory and does not see vectors another
        process adds until it opens the store afresh. Never blocks on the vector store
        (it runs in the search pool too): ``reopen_if_needed`` does the reopening, on the
        searching thread. Checked at most every ``WATCH_SECONDS``.
        """
        with self._watch_lock:
            now = time.monotonic()
            if now - self._watched_at < WATCH_SECONDS:
                return
            self._watched_at = now
            if self._watch_db is None:
                self._watch_db = connect(self.settings.in_home("papers.sqlite"))
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

    def reopen_if_needed(self) -> None:
        """Reopen the embedded vector store if ``_watch`` asked for it, at most every ``REOPEN_SECONDS``.

        Reopening reloads the HNSW indexes from disk (slow for a large store), so beside a
        long ingest that commits every few seconds a reader catches up at this pace, not per batch.
        """
        if not self._reopen_wanted or time.monotonic() - self._reopened_at < REOPEN_SECONDS:
            return
        with self.vector_lock.write():
            if self._reopen_wanted:
                self._reopen_wanted = False
                self._reopened_at = time.monotonic()
                self.vectors.reopen()

    def reopen_vectors(self) -> None:
        """Reopen the vector store once no search reads it (another process dropped the collections held)."""
        with self.vector_lock.write():
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
        max_seq = self.max_seq()
        seqs = sorted(
            {1 + (max_seq - 1) * k // max(sample - 1, 1) for k in range(sample)}
            | set(range(max(1, max_seq - 7), max_seq + 1))
        )
        marks = ",".join("?" * len(seqs))
        ids = [r[0] for r in self.conn().execute(f"SELECT id FROM papers WHERE seq IN ({marks})", seqs)]
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
                f"the vector store at {self.vectors.location} does not match the registry {self.settings.in_home('papers.sqlite')} "
                f"({why}): run `{repair}` to embed the missing papers from the registry"
            )

    # ---- closing
    def release_writer(self) -> None:
        """The tantivy writer's lock is held for one write operation only (another process may write next)."""
        if self._kw is not None:
            self._kw.close()

    def close(self) -> None:
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


class ReadWriteLock:
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
