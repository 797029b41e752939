"""The registry: one SQLite file per data directory, the source of truth of what is indexed.

Papers (title, abstract, metadata), their sources, chunk texts and build metadata live
here; the vector store and the tantivy keyword index are derived from it and rebuilt from it
(``rag_papers.ingest``). This module opens it, says in one line when it cannot be read,
and sets a damaged file aside so that ``ingest --rebuild`` can start afresh.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rag_papers import RagPapersError
from rag_papers.corpus import Paper
from rag_papers.vectors import aside_name

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS papers (
    id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, title TEXT NOT NULL, abstract TEXT NOT NULL,
    year INTEGER, venue TEXT, authors TEXT, url TEXT, n_chunks INTEGER NOT NULL, seq INTEGER NOT NULL,
    title_derived INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS sources (
    paper_id TEXT NOT NULL, file TEXT NOT NULL, loc TEXT NOT NULL, PRIMARY KEY (paper_id, file, loc)
);
CREATE INDEX IF NOT EXISTS sources_file ON sources(file);
CREATE INDEX IF NOT EXISTS papers_title ON papers(title);
CREATE UNIQUE INDEX IF NOT EXISTS papers_seq ON papers(seq);
CREATE INDEX IF NOT EXISTS papers_seq_id ON papers(seq, id);
CREATE TABLE IF NOT EXISTS pending (paper_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS chunks (
    paper_id TEXT NOT NULL, i INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY (paper_id, i)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS papers_chunks_delete AFTER DELETE ON papers BEGIN
    DELETE FROM chunks WHERE paper_id = old.id;
END;
"""


# What registries written by earlier versions lack, added when one is opened (``upgrade_registry``):
# a column (ALTER TABLE ... ADD COLUMN rewrites no row) and the indexes that let the UI's Papers tab
# page through the papers sorted by year or venue without sorting them all for every page.
UPGRADE_COLUMNS = {"title_derived": "ALTER TABLE papers ADD COLUMN title_derived INTEGER NOT NULL DEFAULT 0"}
BROWSE_INDEXES = """
CREATE INDEX IF NOT EXISTS papers_year_title ON papers(year DESC, title);
CREATE INDEX IF NOT EXISTS papers_venue_title ON papers(venue IS NULL, venue, title);
"""


def upgrade_registry(db: sqlite3.Connection) -> None:
    """Bring an older registry up to this schema where it can be written, at once or not at all.

    A registry this process cannot write now (read-only, another process's write under way) is read
    as it is: papers without the column read as titles not derived, and sorted pages are slower.
    Building the indexes on a large older registry takes a few seconds, once.
    """
    have = {r[1] for r in db.execute("PRAGMA table_info(papers)")}
    missing = [sql for col, sql in UPGRADE_COLUMNS.items() if col not in have]
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    if not missing and {"papers_year_title", "papers_venue_title"} <= indexes:
        return
    db.execute("PRAGMA busy_timeout=1000")  # wait for another process's write a little, not the usual 30 s
    try:
        db.executescript("BEGIN;" + "".join(f"{sql};" for sql in missing) + BROWSE_INDEXES + "COMMIT;")
    except sqlite3.OperationalError:
        if db.in_transaction:
            db.rollback()
    finally:
        db.execute("PRAGMA busy_timeout=30000")


def row_to_paper(row: sqlite3.Row, sources: list[str]) -> Paper:
    return Paper(
        id=row["id"],
        title=row["title"],
        abstract=row["abstract"],
        sources=sources,
        year=row["year"],
        venue=row["venue"],
        authors=json.loads(row["authors"]) if row["authors"] else None,
        url=row["url"],
        # A registry this process could not upgrade (read-only) has no such column: not derived, as before.
        title_derived=bool(row["title_derived"]) if "title_derived" in row.keys() else False,  # noqa: SIM118 - a Row's `in` looks at values
    )


class RegistryError(RagPapersError):
    """The registry file cannot be read: the message names it and the way out."""


def registry_error(path: Path, exc: sqlite3.Error, writing: bool = False) -> RagPapersError:
    """One line for an SQLite failure on the registry; only a file SQLite says is damaged counts as damaged.

    A full disk is named as such: SQLite says "disk is full" on a write, but only "disk I/O error" when a
    reader cannot create its shared-memory file, so an I/O error on a nearly full device counts too.
    """
    from rag_papers.vectors import NEARLY_FULL, disk_full_error, free_bytes

    text = str(exc)
    low = text.lower()
    if "full" in low or "no space" in low or ("i/o error" in low and free_bytes(path.parent) < NEARLY_FULL):
        what = "writing the registry" if writing else "opening the registry"
        return disk_full_error(path.parent, what, writing=writing)
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


def check_registry_file(path: Path) -> None:
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


# Tables of registries written before tantivy became the only keyword index (SQLite FTS5 with its
# own per-term counts): dropped by the first write (``drop_old_keyword_tables``), ignored before it.
OLD_KEYWORD_TABLES = """
DROP TRIGGER IF EXISTS papers_fts_delete;
DROP TABLE IF EXISTS papers_fts;
DROP TABLE IF EXISTS term_df;
DELETE FROM meta WHERE key = 'term_df';
"""


def drop_old_keyword_tables(db: sqlite3.Connection) -> bool:
    """Drop an older registry's FTS5 tables (True when there were any); a write operation calls it."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name IN ('papers_fts', 'term_df') LIMIT 1").fetchone():
        return False
    db.executescript("BEGIN;" + OLD_KEYWORD_TABLES + "COMMIT;")
    return True


def open_registry(path: Path) -> sqlite3.Connection:
    check_registry_file(path)
    db: sqlite3.Connection | None = None
    try:
        db = connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
        upgrade_registry(db)
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


def connect(path: Path, mmap: bool = False) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, timeout=30)
    db.row_factory = sqlite3.Row
    if mmap:
        # Read pages through a memory map (SQLite caps it at 2 GiB) instead of a read() call per
        # page: a cold search of a large index touches many pages of rows, and this measured
        # faster for a fresh process's searches.
        # Only for the search threads' read connections: mapped pages count as the process's
        # memory, and on the ingest connection they raised a large ingest's peak RSS by far
        # (figures: docs/design-notes.md).
        db.execute("PRAGMA mmap_size=4294967296")
    return db


def in_batches(ids: Sequence[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """Slices of ``ids`` with their ``?,?,...`` placeholders: SQLite caps the parameters of one statement."""
    for start in range(0, len(ids), size):
        part = list(ids[start : start + size])
        yield part, ",".join("?" * len(part))


@contextmanager
def registry_write(path: Path) -> Iterator[None]:
    """SQLite errors of a registry write as one line (the transaction itself rolls back)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise registry_error(path, exc, writing=True) from None
