"""Ingest stage: validate, chunk, embed and store papers; remove them; repair and verify the stores.

The write side of an open data directory (a ``rag_papers.store.Store``; the read side,
``rag_papers.index.Index``, is not known here). Order of writes, so that a kill at any
point leaves the previous index usable and a rerun resumes: a batch's ids go to ``pending`` first, then
its vectors to the vector store and its tokens to the tantivy copy, then one registry
transaction makes the papers visible. Vectors and the keyword index are derived data:
``repair`` rebuilds them from the registry alone. With a second embedding model
(``embed_model_2``) every write embeds each passage with both models into their own
collections; one added to an existing index is caught up by the same reconciliation.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError
from rag_papers.config import SCHEMA_VERSION, HomePart, Settings
from rag_papers.corpus import (
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
from rag_papers.keyword import paper_text
from rag_papers.progress import progress_bar
from rag_papers.registry import (
    damaged_error,
    drop_old_keyword_tables,
    in_batches,
    quick_check,
    read_papers,
    registry_error,
    registry_write,
    writing,
)
from rag_papers.store import Store, passage_text
from rag_papers.vectors import (
    MODEL_KINDS,
    DiskFullError,
    VectorStore,
    VectorStoreError,
    disk_full_error,
    free_bytes,
    is_disk_full,
    kinds,
    mb,
    tree_bytes,
)


def chunk_texts(abstract: str, chunk_tokens: int, overlap: int, tokenize: Callable[[str], list[int]]) -> list[str]:
    """Sentence-aware windows that together cover the whole abstract, each inside the model window."""
    from llama_index.core.node_parser import SentenceSplitter

    splitter = SentenceSplitter(chunk_size=chunk_tokens, chunk_overlap=overlap, tokenizer=tokenize)
    return [c for c in splitter.split_text(abstract) if c.strip()] or [abstract]


@dataclass
class IngestReport:
    files: int = 0
    records: int = 0
    added: int = 0
    unchanged: int = 0
    removed: int = 0
    duplicates: int = 0
    skipped: int = 0  # export records without an abstract (rag_papers/corpus/readers), left out of the count above
    chunks: int = 0
    seconds: float = 0.0
    total: int = 0
    reembedded: int = 0  # registered papers whose missing vectors this ingest embedded again
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (id in the file, id given), see ``_ingest``
    removed_ids: list[str] = field(default_factory=list)
    # Damaged records of exports, skipped (``FILE:LINE: reason``); with ``strict`` the first refuses the ingest.
    damaged: list[str] = field(default_factory=list)
    skipped_records: list[str] = field(default_factory=list)  # FILE:LINE of each record without an abstract
    # Each record that went into a paper another record gave: the record, the paper, what they share, the other.
    merged: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # records kept apart that an identifier alone would merge

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("removed_ids", "skipped_records")}
        d["renamed"] = [{"id": a, "indexed_as": b} for a, b in self.renamed]
        d["skipped_records"] = [*self.damaged, *(f"{s}: no abstract" for s in self.skipped_records)]
        return d

    def summary(self) -> str:
        """The one line ``rag-papers ingest`` prints, and the UI's "Add papers" shows: one wording for both."""
        skipped = f", {self.skipped} record{plural(self.skipped)} skipped: no abstract" if self.skipped else ""
        if self.damaged:
            skipped += f", {len(self.damaged)} damaged record{plural(len(self.damaged))} skipped"
        renamed = f", {len(self.renamed)} renamed" if self.renamed else ""
        return (
            f"{self.records} abstracts read from {self.files} file(s): {self.added} added, "
            f"{self.unchanged} unchanged, {self.duplicates} duplicates, {self.removed} removed{skipped}{renamed}; "
            f"{self.total} papers indexed ({self.chunks} new chunks) in {self.seconds:.1f} s"
        )


def removal_line(removed: int, left: int) -> str:
    """The line ``rag-papers remove`` prints, and the UI's "Remove" shows."""
    return f"removed {removed} paper(s); {left} left"


def plural(n: int) -> str:
    """ "s" for any count but one: "1 page", "2 pages"."""
    return "" if n == 1 else "s"


@dataclass
class RepairReport:
    papers: int = 0
    checked: bool = False  # every paper's vectors were looked up (not only counts and a sample)
    reembedded: int = 0  # papers that lacked vectors of either model
    chunks: int = 0  # passages embedded, counted once per model
    second_model: int = 0  # papers embedded with embed_model_2 (all of them when it was just added)
    moved_aside: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SpaceCheck:
    """Stop an ingest cleanly before a batch that may not fit in the data directory.

    A write that runs out of space part way can leave chromadb's files unreadable (a
    cut-short HNSW pickle) and even keep chromadb from opening the store for reading,
    so the check comes before each batch, while everything can still be read. The
    estimate is deliberately generous: per vector, three times its float32 size plus
    1 kB (HNSW graph, Chroma's own write-ahead log, metadata); per character of text,
    10 bytes (the abstract, its chunks, keyword postings, SQLite's WAL); doubled. On top,
    ``min_free_mb`` and room for the stores' bursts: an HNSW resize rewrites a quarter
    of the store, a tantivy merge needs up to the keyword index's size again.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.written = 0  # papers whose vectors this process wrote, for the message

    def check(self, papers: Sequence[Paper], passages: Sequence[tuple[Paper, int, str]], dim: int) -> _SpaceTicket:
        s = self.settings
        chars = sum(len(p.abstract) + len(p.title) for p in papers) + sum(len(c) for _, _, c in passages)
        estimate = len(passages) * 2 * (dim * 4 * 3 + 1024) + chars * 10 + len(papers) * 2048
        headroom = s.min_free_mb * 1_000_000 + tree_bytes(s.in_home("keyword"))
        if not s.chroma_url:
            headroom += tree_bytes(s.in_home("chroma")) // 4
        need = 2 * estimate + headroom
        free = free_bytes(s.home)
        if free < need:
            done = (
                f"{self.written:,} papers were written before stopping and"
                if self.written
                else "nothing was written and"
            )
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


def node_meta(paper: Paper, chunk: int) -> dict[str, Any]:
    """Flat metadata Chroma can filter on (``document_id``: the key deletes use, as llama-index names it)."""
    meta: dict[str, Any] = {"paper_id": paper.id, "document_id": paper.id, "chunk": chunk}
    if paper.year is not None:
        meta["year"] = paper.year
    if paper.venue:
        meta["venue"] = paper.venue
    return meta


class Ingester:
    """Every write to one open data directory: ``ingest``, ``remove``, ``repair``, ``clear``.

    It writes through the store's registry connection, vectors and keyword index, and has the store
    re-read its counts afterwards (``Store.forget_counts``), so that an ``Index`` over the same store
    (or another process's, through the store's watch) sees the change; searches are ``Index``'s.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.settings = store.settings
        self.db = store.db
        self.notes = store.notes  # the store's own list: a command prints them after the write
        self.space = SpaceCheck(store.settings)

    def _bump_vector_epoch(self) -> None:
        """Tell readers in other processes that the vector store was rebuilt or set aside (see ``Store._watch``)."""
        with self._registry_write(), self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('vector_epoch', ?)", (f"{time.time():.6f}",))

    def repair(self, show_progress: bool = True) -> RepairReport:
        """Make the derived stores whole again from the registry alone (no corpus files needed).

        A vector store chromadb cannot read is set aside and rebuilt; papers whose vectors
        the store in use lacks are re-embedded from their registered chunk texts; the
        keyword index is rebuilt if it is out of step.
        """
        registry = self.settings.in_home("papers.sqlite")
        problem = quick_check(registry)  # every page of the source of truth, before anything is derived
        if problem is not None:
            raise damaged_error(registry, problem)
        try:
            self.store.verify_keyword(full=True)  # every file against tantivy's checksums, not only new ones
            self.store.kw_store.lock()
            with writing(registry):
                return self._repair(show_progress, full=True)
        finally:
            self.store.release_writer()

    def _adopt_second_model(self) -> bool:
        """Start keeping ``embed_model_2``'s vectors in an index that has none (True when it did).

        Its collections start empty (any there are leftovers, maybe of another model) and the
        registry records the model at once, so an ingest killed while embedding the existing
        papers with it resumes: the gaps check finds them still missing. A different model
        already recorded is ``check_model``'s error, never replaced.
        """
        wanted = self.settings.embed_model_2
        if not wanted or self.store.meta("embed_model_2") == wanted:
            return False
        self.store.check_model()
        try:
            self.store.vectors.drop(MODEL_KINDS[1])
        except VectorStoreError as exc:
            if not exc.damaged:
                raise  # a damaged store is set aside (whole) by the probe that follows
        with self._registry_write(), self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model_2', ?)", (wanted,))
        return True

    def _repair(self, show_progress: bool, full: bool) -> RepairReport:
        """``full``: check every paper; otherwise only when the counts or a sample say something is missing."""
        t0 = time.perf_counter()
        report = RepairReport(papers=self.store.count())
        adding = self._adopt_second_model()
        try:
            self.store.vectors.probe()
        except VectorStoreError as exc:
            if not exc.damaged:
                raise  # busy, slow or away: nothing to rebuild, and nothing is set aside for it
            self.store.vectors.reopen()  # once more from a fresh client before deciding
            try:
                self.store.vectors.probe()
            except VectorStoreError as again:
                if not again.damaged:
                    raise
                if self.settings.chroma_url and not full:
                    raise  # a server's collections are deleted only by an explicit `repair`
                report.moved_aside = self.store.vectors.move_aside()
                self.notes.append(f"{report.moved_aside}; rebuilding it from the registry")
                self._bump_vector_epoch()
        self.store.check_model()
        self._drop_unfinished()
        self._sync_keyword(show_progress)
        if full or report.moved_aside or self.store.vector_gaps() is not None:
            report.checked = True
            desc = f"embed with {self.settings.embed_model_2}" if adding else "repair vectors"
            progress = progress_bar(report.papers, desc, show_progress and report.papers > 0)
            models = self.store.vectors.models()
            batch_size = max(8, self.settings.embed_batch_size // 2)
            last = 0
            while True:
                rows = self.db.execute(
                    "SELECT id, seq FROM papers WHERE seq > ? ORDER BY seq LIMIT ?", (last, batch_size)
                ).fetchall()
                if not rows:
                    break
                last = int(rows[-1]["seq"])
                ids = [r["id"] for r in rows]
                lacking = {m: self._lacking_vectors(ids, m) for m in models}
                # Each paper is embedded by the models whose vectors it lacks, so adding a second
                # model never re-embeds with the first.
                by_models: dict[tuple[int, ...], list[str]] = {}
                for pid in ids:
                    wanted = tuple(m for m in models if pid in lacking[m])
                    if wanted:
                        by_models.setdefault(wanted, []).append(pid)
                for wanted, pids in by_models.items():
                    report.reembedded += len(pids)
                    report.second_model += len(pids) if 1 in wanted else 0
                    report.chunks += self._reembed(pids, wanted)
                if progress is not None:
                    progress.update(len(rows))
            if progress is not None:
                progress.close()
            if report.reembedded:
                self._bump_vector_epoch()  # readers in other processes reopen the store to see them
                if adding and report.second_model == report.reembedded:
                    self.notes.append(
                        f"embedded {report.second_model:,} papers ({report.chunks:,} chunks) from the registry with "
                        f"the second embedding model {self.settings.embed_model_2!r}"
                    )
                else:
                    self.notes.append(
                        f"re-embedded {report.reembedded:,} papers ({report.chunks:,} chunks) from the registry into "
                        f"the vector store at {self.store.vectors.location}"
                    )
        report.seconds = round(time.perf_counter() - t0, 3)
        return report

    def _lacking_vectors(self, ids: list[str], model: int = 0) -> list[str]:
        """Which of these registered papers miss their head vector or any chunk vector of embedding model ``model``."""
        n_chunks = {
            r["id"]: int(r["n_chunks"])
            for part, marks in in_batches(ids)
            for r in self.db.execute(f"SELECT id, n_chunks FROM papers WHERE id IN ({marks})", part)
        }
        chunks_of, docs_of = kinds(model)
        docs = self.store.vectors.existing(docs_of, [f"{pid}:doc" for pid in ids])
        chunks = self.store.vectors.existing(
            chunks_of, [f"{pid}:{i}" for pid in ids for i in range(n_chunks.get(pid, 1))]
        )
        return [
            pid
            for pid in ids
            if f"{pid}:doc" not in docs or any(f"{pid}:{i}" not in chunks for i in range(n_chunks.get(pid, 1)))
        ]

    def _reembed(self, paper_ids: list[str], models: Sequence[int] = (0,)) -> int:
        """Embed these registered papers again from their chunk texts with ``models`` (re-chunking any that have
        none, which then need every model's vectors anew); returns passages embedded, once per model."""
        papers = read_papers(self.store.conn(), paper_ids)
        texts: dict[str, list[str]] = {}
        for part, marks in in_batches(paper_ids):
            for pid, _, text in self.db.execute(
                f"SELECT paper_id, i, text FROM chunks WHERE paper_id IN ({marks}) ORDER BY paper_id, i", part
            ):
                texts.setdefault(pid, []).append(text)
        passages: list[tuple[Paper, int, str]] = []
        rechunked: list[tuple[Paper, int, str]] = []
        for pid in paper_ids:
            paper = papers.get(pid)
            if paper is None:
                continue
            chunks = texts.get(pid)
            if not chunks:  # an index written before the registry kept chunk texts: chunk it again
                chunks = chunk_texts(
                    paper.abstract,
                    self.settings.chunk_tokens,
                    self.settings.chunk_overlap,
                    self.store.embedder.count_tokens,
                )
                self.store.vectors.delete_papers([pid])  # its old chunk vectors may number more than the new chunks
                with self._registry_write(), self.db:
                    self.db.execute("DELETE FROM chunks WHERE paper_id=?", (pid,))
                    self.db.executemany(
                        "INSERT INTO chunks VALUES (?,?,?)", [(pid, i, c) for i, c in enumerate(chunks)]
                    )
                    self.db.execute("UPDATE papers SET n_chunks=? WHERE id=?", (len(chunks), pid))
                rechunked.extend((paper, i, chunk) for i, chunk in enumerate(chunks))
                continue
            passages.extend((paper, i, chunk) for i, chunk in enumerate(chunks))
        every = self.store.vectors.models()
        done = 0
        for group, group_models in ((passages, list(models)), (rechunked, every)):
            if group:
                dim = sum(self.store.embedders()[m].dim for m in group_models)
                space = self.space.check(list({id(p): p for p, _, _ in group}.values()), group, dim)
                self._write_vectors(group, group_models)
                space.done()
                done += len(group) * len(group_models)
        return done

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

    def _store_batch(self, batch: list[Paper], progress: Any, hashes: dict[str, str] | None = None) -> int:
        """Embed a batch and write it: vectors to Chroma, tokens to tantivy, then papers and chunk texts to the registry.

        Vectors go to the collection with flat metadata (ids, paper, chunk, year, venue),
        not through llama-index's ``ChromaVectorStore.add``: that stores each chunk's text as a
        Chroma document (which Chroma also indexes for ``where_document``) plus llama-index's
        node JSON in its metadata, several times the time and disk per vector (docs/design-notes.md).
        Chunk texts live in the registry's ``chunks`` table, written in the same
        transaction as the paper.
        """
        passages: list[tuple[Paper, int, str]] = []
        for paper in batch:
            for i, chunk in enumerate(
                chunk_texts(
                    paper.abstract,
                    self.settings.chunk_tokens,
                    self.settings.chunk_overlap,
                    self.store.embedder.count_tokens,
                )
            ):
                passages.append((paper, i, chunk))
        space = self.space.check(batch, passages, sum(e.dim for e in self.store.embedders()))
        # Intent first: if we die between the vector writes and the registry commit below,
        # the next ingest finds these ids in ``pending`` and deletes their vectors.
        try:
            with self.db:
                self.db.executemany("INSERT OR IGNORE INTO pending VALUES (?)", [(p.id,) for p in batch])
        except sqlite3.Error as exc:
            raise registry_error(self.settings.in_home("papers.sqlite"), exc, writing=True) from None
        self._write_vectors(passages)
        first = int(self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM papers").fetchone()[0]) + 1
        # The keyword index before the registry: a kill in between leaves it ahead (papers the
        # registry lacks, which searches skip), and the next write rebuilds it (``_sync_keyword``).
        try:
            self.store.kw_store.add((first + k, paper_text(p.title, p.abstract)) for k, p in enumerate(batch))
            self.store.kw_store.commit()
        except Exception as exc:  # tantivy raises ValueError with the OS error in its text
            if is_disk_full(exc):
                raise disk_full_error(self.settings.home, "writing the keyword index") from None
            raise
        with self._registry_write(), self.db:
            for seq, paper in zip(range(first, first + len(batch)), batch):
                chunk_rows = [(paper.id, i, chunk) for p, i, chunk in passages if p is paper]
                n_chunks = len(chunk_rows)
                self.db.execute(
                    "INSERT INTO papers (id, hash, title, abstract, year, venue, authors, url, n_chunks, seq, "
                    "title_derived) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        paper.id,
                        (hashes or {}).get(paper.id) or content_hash(paper.abstract),
                        paper.title,
                        paper.abstract,
                        paper.year,
                        paper.venue,
                        json.dumps(paper.authors) if paper.authors else None,
                        paper.url,
                        n_chunks,
                        seq,
                        int(paper.title_derived),
                    ),
                )
                self.db.executemany("INSERT INTO chunks VALUES (?,?,?)", chunk_rows)
                for src in paper.sources:
                    file, _, loc = src.rpartition(":")
                    self.db.execute("INSERT OR IGNORE INTO sources VALUES (?,?,?)", (paper.id, file, loc))
            self.db.executemany("DELETE FROM pending WHERE paper_id=?", [(p.id,) for p in batch])
        self.store.forget_counts()
        space.done()
        if progress is not None:
            progress.update(len(batch))
        return len(passages)

    def _write_vectors(self, passages: list[tuple[Paper, int, str]], models: Sequence[int] | None = None) -> None:
        """Embed (title + chunk) passages with each model (default: all in use) and upsert their chunk vectors
        and, for chunk 0, head vectors into that model's collections."""
        texts = [passage_text(paper.title, chunk) for paper, _, chunk in passages]
        heads = [k for k, (_, i, _) in enumerate(passages) if i == 0]
        ids = [f"{p.id}:{i}" for p, i, _ in passages]
        metas = [node_meta(p, i) for p, i, _ in passages]
        embedders = self.store.embedders()
        for model in self.store.vectors.models() if models is None else models:
            chunks_of, docs_of = kinds(model)
            vectors = embedders[model].embed_array(texts)
            self.store.vectors.upsert(chunks_of, ids, vectors, metas)
            # The paper's head (title + opening) doubles as its whole-paper vector: no extra embedding.
            self.store.vectors.upsert(
                docs_of,
                [f"{passages[k][0].id}:doc" for k in heads],
                vectors[heads],
                [node_meta(passages[k][0], -1) for k in heads],
            )

    def _registry_write(self) -> AbstractContextManager[None]:
        return registry_write(self.settings.in_home("papers.sqlite"))

    def ingest(
        self, paths: Iterable[Path], rebuild: bool = False, show_progress: bool = True, strict: bool = False
    ) -> IngestReport:
        """Sync the index with these files: new abstracts added, vanished ones removed.

        Each file is validated in full before anything is written, so bad input never
        touches the index. Papers from files not named here are left alone. A damaged
        record of an export is skipped and named in the report; ``strict`` refuses its file.
        """
        try:
            with writing(self.settings.in_home("papers.sqlite")):
                return self._ingest(paths, rebuild, show_progress, strict)
        finally:
            self.store.release_writer()

    def _ingest(self, paths: Iterable[Path], rebuild: bool, show_progress: bool, strict: bool = False) -> IngestReport:
        t0 = time.perf_counter()
        files = expand_paths(paths)
        report = IngestReport(files=len(files))
        with self._registry_write(), self.db:
            for table in (
                "incoming (hash TEXT PRIMARY KEY)",
                "ingest_files (file TEXT PRIMARY KEY)",
                "incoming_ids (id TEXT PRIMARY KEY, hash TEXT NOT NULL, source TEXT NOT NULL)",
            ):
                self.db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table}")
            for table in ("incoming", "ingest_files", "incoming_ids"):
                self.db.execute(f"DELETE FROM {table}")
            self.db.executemany("INSERT OR IGNORE INTO ingest_files VALUES (?)", [(str(f.resolve()),) for f in files])

        def note(rec: RawRecord) -> None:
            h = content_hash(rec.abstract)
            self.db.execute("INSERT OR IGNORE INTO incoming VALUES (?)", (h,))
            if rec.keys:  # the text's other hash, should another paper hold the same abstract (``_same_text``)
                self.db.execute("INSERT OR IGNORE INTO incoming VALUES (?)", (identity_hash(h, rec.keys),))
            if rec.id is None or rec.keys:
                # An export's id is its DOI or arXiv id: two sources of one paper share it with different
                # abstracts (a preprint and its published version), and they are merged below, not refused.
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

        def on_skip(source: str) -> None:
            report.skipped += 1
            report.skipped_records.append(source)

        # One validating pass before any write; it also notes which texts are still wanted.
        try:
            n_records = validate(files, note, on_skip, None if strict else report.damaged.append)
        finally:
            self.db.commit()  # only the temp tables were written
        self.store.kw_store.lock()  # a second writer is refused here, before anything is written
        if self.store.loaded_embedders()[0] is None:
            # The model must be at hand before anything is written or a progress bar drawn: a hub
            # name that cannot be fetched, a missing package, stops here.
            from rag_papers.model_files import resolve_model_path

            resolve_model_path(self.settings.embed_model, self.settings.models_dir)
        if rebuild:
            return self._rebuild_beside(files, show_progress, t0, strict)
        self.store.check_model()
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
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS known_keys (key TEXT PRIMARY KEY, paper_id TEXT)")
            self.db.execute("DELETE FROM known_keys")
        self._keys_loaded = False
        progress = progress_bar(n_records, "ingest", show_progress)
        batch: list[Paper] = []
        self._batch_hash: dict[str, Paper] = {}  # stored hash -> the batch's paper (``_same_text``)
        self._batch_keys: dict[str, list[str]] = {}  # the batch's paper id -> its record's keys
        hashes: dict[str, str] = {}  # paper id -> the hash stored with it
        batch_size = max(8, self.settings.embed_batch_size // 2)
        skip_damaged = None if strict else (lambda _line: None)  # the validating pass reported them
        for file in files:
            key_file = str(file.resolve())
            for rec in read_file(file, None, skip_damaged):
                report.records += 1
                loc = rec.source.rpartition(":")[2]
                pid, why, stored = self._match(rec, report)
                if pid is not None:
                    first = self.db.execute("SELECT file, loc FROM seen WHERE paper_id=? LIMIT 1", (pid,)).fetchone()
                    if first is not None:
                        report.duplicates += 1
                    else:
                        report.unchanged += 1
                        first = self.db.execute(
                            # another file's, one this ingest does not re-read: this record joins its paper
                            "SELECT file, loc FROM sources WHERE paper_id=? AND file NOT IN (SELECT file FROM ingest_files)"
                            " LIMIT 1",
                            (pid,),
                        ).fetchone()
                    if first is not None:
                        report.merged.append(
                            {"record": rec.source, "paper": pid, "same": why, "as": f"{first[0]}:{first[1]}"}
                        )
                    if progress is not None:
                        progress.update(1)
                else:
                    paper = to_paper(rec)
                    paper.sources = [f"{key_file}:{loc}"]
                    if (
                        any(p.id == paper.id for p in batch)
                        or self.db.execute("SELECT 1 FROM papers WHERE id=?", (paper.id,)).fetchone()
                    ):
                        # The id belongs to an indexed paper with other text (an earlier ingest, or the
                        # old version of an edited abstract, which this sync drops at its end), or to a
                        # paper with the same text and another identity: ids stay unique, and the report
                        # says which paper got which id (an id the record gave; a content hash is ours).
                        renamed = f"{paper.id}-{stored[:8]}"
                        if rec.id is not None:
                            report.renamed.append((paper.id, renamed))
                        paper.id = renamed
                    paper.title = self._unique_title(paper.abstract, paper.title, paper.id, rec.title is None)
                    if any(p.title == paper.title for p in batch):
                        paper.title = f"{paper.title} [{paper.id[:6]}]"
                    pid = paper.id
                    kept = [k for k in rec.keys if not (why == "conflict" and k.startswith("doi:"))]
                    self.db.executemany("INSERT OR REPLACE INTO known_keys VALUES (?,?)", [(k, pid) for k in kept])
                    batch.append(paper)
                    hashes[pid] = stored
                    self._batch_hash[stored] = paper
                    self._batch_keys[pid] = rec.keys
                    if len(batch) >= batch_size:
                        report.chunks += self._store_batch(batch, progress, hashes)
                        report.added += len(batch)
                        batch, self._batch_hash, self._batch_keys = [], {}, {}
                self.db.execute("INSERT INTO seen VALUES (?,?,?)", (pid, key_file, loc))
        if batch:
            report.chunks += self._store_batch(batch, progress, hashes)
            report.added += len(batch)
        if progress is not None:
            progress.close()
        removed = self._sync_sources([str(f.resolve()) for f in files])
        report.removed = len(removed)
        report.removed_ids = removed
        report.total = self.store.count()
        report.seconds = round(time.perf_counter() - t0, 3)
        return report

    def _match(self, rec: RawRecord, report: IngestReport) -> tuple[str | None, str, str]:
        """The paper ``rec`` is a source of, if any, with what they share; and the hash a new paper of it stores.

        A paper is the same by DOI, arXiv id, or normalised title plus first author (``corpus.dedupe_keys``),
        never by its abstract alone: the same abstract under two identities (two arXiv ids, the chapters of one
        book that repeat the book's abstract) is two papers. The abstract decides only where a record brings no
        identity (the project's own formats). A DOI shared by records whose titles and first authors both
        differ is a wrong DOI, not one paper: two papers, and a warning naming them (why "conflict").
        """
        h = content_hash(rec.abstract)
        conflict = False
        if rec.keys:
            if not self._keys_loaded:
                self._load_keys()
                self._keys_loaded = True
            pid, why = self._same_paper(rec, report)
            if pid is not None:
                return pid, why, h
            conflict = why == "conflict"
        pid, stored = self._same_text(rec, h)
        return pid, "conflict" if conflict and pid is None else "the same abstract", stored

    def _paper_keys(self, pid: str) -> list[str]:
        """The dedupe keys of a paper of this ingest's batch (its record's) or of the registry (``registry_keys``)."""
        from rag_papers.corpus import registry_keys

        if pid in self._batch_keys:
            return self._batch_keys[pid]
        row = self.db.execute("SELECT title, authors FROM papers WHERE id=?", (pid,)).fetchone()
        if row is None:
            return []
        return registry_keys(pid, row["title"], json.loads(row["authors"]) if row["authors"] else None)

    def _same_text(self, rec: RawRecord, h: str) -> tuple[str | None, str]:
        """A paper with ``rec``'s abstract whose identity does not contradict ``rec``'s (either has no keys, or they
        share one), and the hash a new paper of ``rec`` stores: the content hash, or where a paper of another
        identity holds that, ``identity_hash`` (the registry keeps one paper per hash)."""
        hashes = [h, identity_hash(h, rec.keys)] if rec.keys else [h]
        taken = False
        for stored in hashes:
            candidates = [p.id for p in [self._batch_hash.get(stored)] if p is not None] + [
                str(r[0]) for r in self.db.execute("SELECT id FROM papers WHERE hash=?", (stored,))
            ]
            for pid in candidates:
                theirs = self._paper_keys(pid)
                if not rec.keys or not theirs or set(rec.keys) & set(theirs):
                    return pid, stored
                taken = True
            if not candidates:
                return None, stored
        return None, hashes[-1] if taken else h

    def _load_keys(self) -> None:
        """The dedupe keys of the indexed papers, once per ingest that reads an export (``_same_paper``).

        Computed from the registry (id, title, first author) rather than stored: no new table to keep in
        step, at the cost of one pass over the papers' titles, which an ingest that embeds is far slower than.
        """
        from rag_papers.corpus import registry_keys

        last = 0
        while rows := self.db.execute(
            "SELECT seq, id, title, authors FROM papers WHERE seq > ? ORDER BY seq LIMIT 5000", (last,)
        ).fetchall():
            last = int(rows[-1]["seq"])
            pairs = [
                (k, r["id"])
                for r in rows
                for k in registry_keys(r["id"], r["title"], json.loads(r["authors"]) if r["authors"] else None)
            ]
            self.db.executemany("INSERT OR IGNORE INTO known_keys VALUES (?,?)", pairs)

    def _same_paper(self, rec: RawRecord, report: IngestReport) -> tuple[str | None, str]:
        """The paper another source already gave for one of ``rec``'s keys (same DOI or arXiv id, or else the
        same normalised title and first author), if it lasts: seen in this ingest, or kept by a file this
        ingest does not re-read. A paper only a re-read file had, not yet seen again, is the old version of
        an edited record: not a match, so the edit replaces it as for any file. With what they share, or
        "conflict" when only a DOI matched a paper whose title and first author both differ."""
        conflict = ""
        for key in rec.keys:
            row = self.db.execute("SELECT paper_id FROM known_keys WHERE key=?", (key,)).fetchone()
            if row is None:
                continue
            pid = str(row[0])
            lasting = self.db.execute("SELECT 1 FROM seen WHERE paper_id=? LIMIT 1", (pid,)).fetchone() or (
                self.db.execute(
                    "SELECT 1 FROM sources WHERE paper_id=? AND file NOT IN (SELECT file FROM ingest_files) LIMIT 1",
                    (pid,),
                ).fetchone()
            )
            if not lasting:
                continue
            if key.startswith("doi:") and _differ(rec.keys, self._paper_keys(pid)):
                first = self.db.execute("SELECT file, loc FROM seen WHERE paper_id=? LIMIT 1", (pid,)).fetchone()
                if first is None:
                    first = self.db.execute("SELECT file, loc FROM sources WHERE paper_id=? LIMIT 1", (pid,)).fetchone()
                where = f" ({first[0]}:{first[1]})" if first is not None else ""
                report.warnings.append(
                    f"{rec.source}: {key.removeprefix('doi:')} is also the DOI of {pid}{where}, whose title and first "
                    "author differ: indexed as two papers (one of the two DOIs is wrong)"
                )
                conflict = "conflict"
                continue
            return pid, WHY.get(key.split(":", 1)[0], "the same key")
        return None, conflict

    def _rebuild_beside(self, files: list[Path], show_progress: bool, t0: float, strict: bool = False) -> IngestReport:
        """``ingest --rebuild``: build the new index in a staging folder beside this one, then swap it in.

        Until the swap the old index is untouched and answers as before: a kill, a full disk or
        any failure while building costs only the staging folder (removed by the next rebuild).
        The swap itself: one registry transaction replaces every row with the staging registry's
        (readers see the old papers or the new, and notice through ``vector_epoch``), then the
        vector store is swapped and the keyword index rebuilt from the registry. A kill between
        the two leaves a registry whose derived stores disagree with it, which ``ingest`` and
        ``repair`` rebuild from the registry like any other gap.
        """
        remove_stale_staging(self.settings)
        stage_settings = staging_settings(self.settings)
        shutil.rmtree(stage_settings.home, ignore_errors=True)
        first, second = self.store.loaded_embedders()
        stage = Store(stage_settings, first, embedder2=second)
        try:
            report = Ingester(stage).ingest(files, rebuild=False, show_progress=show_progress, strict=strict)
            self.notes.extend(stage.notes)
            self.store.adopt_embedders(stage)  # loaded once for the command, whichever store loaded them
        finally:
            stage.close()
        self._swap_in(stage_settings)
        shutil.rmtree(stage_settings.home, ignore_errors=True)
        report.total = self.store.count()
        report.seconds = round(time.perf_counter() - t0, 3)
        return report

    def _swap_in(self, stage: Settings) -> None:
        """Replace this index's contents with the staging index's (``_rebuild_beside``)."""
        with self._registry_write():
            self.db.execute("ATTACH DATABASE ? AS staging", (str(stage.in_home("papers.sqlite")),))
            try:
                with self.db:
                    for table in ("papers", "sources", "chunks", "pending", "meta"):
                        cols = ", ".join(r[1] for r in self.db.execute(f"PRAGMA staging.table_info({table})"))
                        self.db.execute(f"DELETE FROM main.{table}")
                        self.db.execute(f"INSERT INTO main.{table} ({cols}) SELECT {cols} FROM staging.{table}")
                    self.db.execute(
                        "INSERT OR REPLACE INTO main.meta VALUES ('vector_epoch', ?)", (f"{time.time():.6f}",)
                    )
            finally:
                self.db.execute("DETACH DATABASE staging")
        self.store.forget_counts()
        self.store.vectors.adopt(VectorStore(stage))
        # The keyword index is rebuilt from the registry in one commit (readers see old or new), not
        # swapped as a folder: this process holds its writer, and other processes keep it open.
        self._sync_keyword(force=True)

    def _drop_unfinished(self) -> None:
        """Delete vectors a killed ingest wrote for papers it never registered.

        A rerun over the same file overwrites them anyway; this also covers the file
        having changed (or not being ingested again) in the meantime.
        """
        stray = [
            r[0] for r in self.db.execute("SELECT paper_id FROM pending WHERE paper_id NOT IN (SELECT id FROM papers)")
        ]
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
            rows = self.db.execute(
                "SELECT id, seq FROM papers WHERE id NOT IN (SELECT paper_id FROM sources)"
            ).fetchall()
            orphans = [r[0] for r in rows]
            for part, marks in in_batches(orphans):
                self.db.execute(f"DELETE FROM papers WHERE id IN ({marks})", part)
        self._deleted([r[1] for r in rows], orphans)
        return orphans

    def _delete_vectors(self, paper_ids: list[str]) -> None:
        self.store.vectors.delete_papers(paper_ids)

    def _deleted(self, seqs: list[int], paper_ids: list[str]) -> None:
        """After the registry's delete has committed: drop the papers' vectors and keyword copies.

        Until the keyword index commits, it holds papers the registry lacks, which searches skip.
        """
        self.store.forget_counts()
        self._delete_vectors(paper_ids)
        if seqs:
            self.store.kw_store.delete(seqs)
            self.store.kw_store.commit()

    def remove(self, paper_ids: Sequence[str]) -> int:
        try:
            with writing(self.settings.in_home("papers.sqlite")):
                return self._remove(paper_ids)
        finally:
            self.store.release_writer()

    def _remove(self, paper_ids: Sequence[str]) -> int:
        self.store.kw_store.lock()
        rows = [
            (r[0], int(r[1]))
            for part, marks in in_batches(list(dict.fromkeys(paper_ids)))
            for r in self.db.execute(f"SELECT id, seq FROM papers WHERE id IN ({marks})", part)
        ]
        known = [pid for pid, _ in rows]
        self._sync_keyword()
        with self.db:
            for pid in known:
                self.db.execute("DELETE FROM sources WHERE paper_id=?", (pid,))
                self.db.execute("DELETE FROM papers WHERE id=?", (pid,))
        self._deleted([seq for _, seq in rows], known)
        return len(known)

    def clear(self) -> None:
        """Drop everything (``ingest --rebuild``). Holds the keyword writer until the ingest releases it."""
        self.store.kw_store.lock()
        try:
            self.store.vectors.drop()
        except VectorStoreError as exc:
            if not exc.damaged:
                raise
            self.notes.append(self.store.vectors.move_aside())
        with self._registry_write(), self.db:
            self.db.execute("DELETE FROM sources")
            self.db.execute("DELETE FROM papers")
            self.db.execute("DELETE FROM meta")
            self.db.execute("DELETE FROM chunks")
            self.db.execute("DELETE FROM pending")
            self.db.execute("INSERT INTO meta VALUES ('vector_epoch', ?)", (f"{time.time():.6f}",))
        self.store.kw_store.clear()
        self.store.forget_counts()

    def _sync_keyword(self, show_progress: bool = False, force: bool = False) -> None:
        """Before a write: rebuild the keyword index from the registry if the two disagree (``Store.sync_keyword``)."""
        with self._registry_write():
            drop_old_keyword_tables(self.db)
        self.store.sync_keyword(self.db, show_progress, force)
        self.store.forget_counts()


WHY = {"doi": "the same DOI", "arXiv": "the same arXiv id", "title": "the same title and first author"}


def identity_hash(h: str, keys: list[str]) -> str:
    """The hash stored for a paper whose abstract (content hash ``h``) another paper of another identity holds."""
    return content_hash(f"{h}\n{keys[0]}")


def _title_author(keys: list[str]) -> tuple[str, str] | None:
    key = next((k for k in keys if k.startswith("title:")), None)
    if key is None:
        return None
    title, _, author = key.removeprefix("title:").rpartition("|")
    return title, author


def _differ(ours: list[str], theirs: list[str]) -> bool:
    """Whether two records' titles and first authors both differ (either lacking them: no)."""
    a, b = _title_author(ours), _title_author(theirs)
    return a is not None and b is not None and a[0] != b[0] and a[1] != b[1]


STAGING_PREFIX: HomePart = ".rebuild-"


def staging_settings(settings: Settings) -> Settings:
    """Where ``ingest --rebuild`` builds: a folder in the data directory (the same file system, so
    space is counted where it is used), this process's id in its name; on a Chroma server, collections
    named after it. The model cache is pinned: a data directory's own older cache is not the staging's."""
    pid = os.getpid()
    update: dict[str, Any] = {"home": settings.in_home(STAGING_PREFIX, str(pid)), "model_cache": settings.models_dir}
    if settings.chroma_url:
        update["collection"] = f"{settings.collection}-rb{pid}"
    return settings.model_copy(update=update)


def remove_stale_staging(settings: Settings) -> None:
    """Remove what rebuilds that were killed left behind: staging folders whose process is gone."""
    for folder in settings.home.glob(f"{STAGING_PREFIX}*"):
        pid = folder.name.removeprefix(STAGING_PREFIX)
        if pid.isdigit() and not _alive(int(pid)):
            if settings.chroma_url:
                stale = VectorStore(settings.model_copy(update={"collection": f"{settings.collection}-rb{pid}"}))
                try:
                    stale.drop()
                except RagPapersError:
                    pass  # the server is away: its leftover collections go with a later rebuild
                finally:
                    stale.close()
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that number
        return True
    return True


def verify_index(settings: Settings) -> dict[str, Any]:
    """Registry, vectors and keyword index agree: every paper's chunks present once, nothing without a paper.

    Read straight from the files (not through an ``Index``), as a check after a kill must.
    """
    from rag_papers.keyword import KeywordStore

    con = sqlite3.connect(settings.in_home("papers.sqlite"))
    rows = con.execute("SELECT id, n_chunks, seq FROM papers").fetchall()
    papers = {pid: n for pid, n, _ in rows}
    seqs = {int(seq) for _, _, seq in rows}
    texts = {f"{pid}:{i}" for pid, i in con.execute("SELECT paper_id, i FROM chunks")}  # (paper_id, i) is the key
    con.close()
    kw_seqs = KeywordStore(settings.in_home("keyword")).seqs()
    store = VectorStore(settings)
    expected = {f"{pid}:{i}" for pid, n in papers.items() for i in range(n)}
    out: dict[str, Any] = {"papers": len(papers)}
    try:
        for model in store.models():
            chunks_of, docs_of = kinds(model)
            col = store.collection(chunks_of)
            ids: list[str] = []
            total = col.count()
            for off in range(0, total, 5000):
                ids += col.get(limit=5000, offset=off, include=[])["ids"]
            have = set(ids)
            pre = "" if model == 0 else "m2_"  # the second model's collections: the same checks, prefixed
            out[f"{pre}chunk_vectors"] = len(ids)
            out[f"{pre}duplicate_chunk_ids"] = len(ids) - len(have)
            out[f"{pre}missing_chunks"] = len(expected - have)
            out[f"{pre}orphan_vectors"] = len(have - expected)
            out[f"{pre}doc_vectors"] = store.count(docs_of)
    finally:
        store.close()
    return {
        **out,
        "missing_texts": len(expected - texts),
        "orphan_texts": len(texts - expected),
        "keyword_docs": len(kw_seqs),
        "keyword_missing": len(seqs - set(kw_seqs)),
        "keyword_orphans": len(set(kw_seqs) - seqs),
    }


def index_complete(check: dict[str, Any], n: int) -> bool:
    """``verify_index`` found all ``n`` papers, each chunk (vector and text) and keyword document once, and nothing else
    (the second model's vectors too, when it checked them)."""
    zero = [
        "duplicate_chunk_ids",
        "missing_chunks",
        "orphan_vectors",
        "missing_texts",
        "orphan_texts",
        "keyword_missing",
        "keyword_orphans",
    ]
    second = "m2_doc_vectors" in check
    if second:
        zero += ["m2_duplicate_chunk_ids", "m2_missing_chunks", "m2_orphan_vectors"]
    return (
        bool(check["papers"] == n == check["doc_vectors"] == check["keyword_docs"])
        and (not second or check["m2_doc_vectors"] == n)
        and all(check[k] == 0 for k in zero)
    )
