"""The registry: one SQLite file per data directory, the source of truth of what is indexed.

Papers (title, abstract, metadata), their sources, chunk texts and build metadata live
here; the vector store and the tantivy keyword index are derived from it and rebuilt from it
(``rag_papers.ingest``). This module opens it, says in one line when it cannot be read,
and sets a damaged file aside so that ``ingest --rebuild`` can start afresh.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_papers import RagPapersError
from rag_papers.corpus import Paper
from rag_papers.vectors import aside_name

if TYPE_CHECKING:
    from rag_papers.config import Settings

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


def read_papers(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Paper]:
    """The registered papers among ``ids``, with their sources ("file:loc"), by id (one read for the
    read side and the write side alike: ``Index.get``, and an ingest re-embedding registered papers)."""
    out: dict[str, Paper] = {}
    for part, marks in in_batches(list(dict.fromkeys(ids))):
        srcs: dict[str, list[str]] = {}
        for s in conn.execute(
            f"SELECT paper_id, file, loc FROM sources WHERE paper_id IN ({marks}) ORDER BY file, loc", part
        ):
            srcs.setdefault(s["paper_id"], []).append(f"{s['file']}:{s['loc']}")
        for row in conn.execute(f"SELECT * FROM papers WHERE id IN ({marks})", part):
            out[row["id"]] = row_to_paper(row, srcs.get(row["id"], []))
    return out


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
    if is_damage(exc):
        return damaged_error(path, text)
    return RagPapersError(f"the registry {path} failed ({text})")


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite says the file itself is damaged (not busy, full or unreadable for permissions)."""
    low = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and any(w in low for w in ("not a database", "malformed", "corrupt"))


def damaged_error(path: Path, detail: str) -> RegistryError:
    return RegistryError(
        f"the registry {path} is damaged ({detail}): restore it from a backup, or rebuild the index from your "
        "corpus files with `rag-papers ingest --rebuild [FILES]`, which keeps the damaged file aside"
    )


class RegistryCursor(sqlite3.Cursor):
    """A cursor whose damage errors (``is_damage``) are the registry's one line, wherever a read meets them."""

    def _damaged(self, exc: sqlite3.DatabaseError) -> BaseException:
        path = getattr(self.connection, "registry_path", None)
        return damaged_error(path, str(exc)) if path is not None and is_damage(exc) else exc


def _guarded(name: str) -> Callable[..., Any]:
    """``sqlite3.Cursor``'s method ``name``, raising the registry's one line where it meets damage."""
    base = getattr(sqlite3.Cursor, name)

    def method(self: RegistryCursor, *args: Any) -> Any:
        try:
            return base(self, *args)
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    method.__name__ = name
    return method


# Every way a cursor reads or writes (a loop over the cursor too: ``__next__``).
for _name in ("execute", "executemany", "executescript", "fetchone", "fetchmany", "fetchall", "__next__"):
    setattr(RegistryCursor, _name, _guarded(_name))


class RegistryConnection(sqlite3.Connection):
    """The registry's connections (``connect``): SQLite's "database disk image is malformed", met by any read or
    write anywhere (a search's rows, the UI's pages, an ingest), becomes one line saying that the registry is
    damaged and how to rebuild it, instead of an unexpected DatabaseError. Damage inside the file, past the header
    ``check_registry_file`` reads, shows up only when a query reaches the damaged pages."""

    registry_path: Path

    def cursor(self, factory: Any = RegistryCursor) -> Any:
        return super().cursor(factory)

    def execute(self, *args: Any) -> Any:
        return self.cursor().execute(*args)

    def executemany(self, *args: Any) -> Any:
        return self.cursor().executemany(*args)

    def executescript(self, *args: Any) -> Any:
        return self.cursor().executescript(*args)

    def commit(self) -> None:
        try:
            super().commit()
        except sqlite3.DatabaseError as exc:
            raise (damaged_error(self.registry_path, str(exc)) if is_damage(exc) else exc) from None


# ------------------------------------------------------------------ damage inside the file
# How an unclean close is noticed without reading the whole file at every open: every write operation
# (``writing``: ingest, remove, repair) holds a shared flock on ``papers.sqlite.writing`` and removes the
# file when it ends normally. A marker that exists while nobody holds its lock was left by a writer that
# died (a kill, a crash, a power cut): the next open runs ``PRAGMA quick_check`` once. Not the -wal file:
# it also exists while any other process (a running UI) merely has the registry open, which would cost
# every command beside it a read of the whole file; and a copy taken mid-write has none.
WRITING_SUFFIX = ".writing"


def writing_marker(path: Path) -> Path:
    return Path(f"{path}{WRITING_SUFFIX}")


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Mark the registry as being written for the block (see ``WRITING_SUFFIX``); a read-only directory: unmarked."""
    marker = writing_marker(path)
    fd = -1
    for _ in range(5):
        try:
            fd = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            fd = -1
            break
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            if os.stat(marker).st_ino == os.fstat(fd).st_ino:
                break  # still the marker: a reader that found it unlocked did not remove it meanwhile
        except FileNotFoundError:
            pass
        os.close(fd)
        fd = -1
    try:
        yield
    finally:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other writer holds it: the writes ended cleanly
                with contextlib.suppress(OSError):
                    marker.unlink()
            except OSError:
                pass  # another write is under way; it removes the marker when it ends
            finally:
                os.close(fd)


def check_after_unclean_end(path: Path) -> None:
    """Run ``quick_check`` if a write operation ended without closing (its marker is there and nobody holds
    it), holding the marker's lock meanwhile so that a new writer waits; an intact file loses the marker."""
    marker = writing_marker(path)
    if not marker.exists():
        return
    try:
        fd = os.open(marker, os.O_RDONLY)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # a writer is alive
        problem = quick_check(path)
        if problem is not None:
            raise damaged_error(path, problem)
        with contextlib.suppress(OSError):
            marker.unlink()
    finally:
        os.close(fd)


def quick_check(path: Path) -> str | None:
    """SQLite's ``PRAGMA quick_check`` (every page and row read, indexes not compared with their tables):
    None when the registry is intact (or absent), else what is wrong, in a few words."""
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            rows = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise registry_error(path, exc) from None
        return str(exc)
    if rows == ["ok"]:
        return None
    text = " ".join("; ".join(rows).replace("*** in database main ***", "").split())
    return text if len(text) <= 200 else text[:199] + "…"


def contents_note(path: Path) -> str:
    """What a damaged registry held, as far as it can still be read: its paper count and source files."""
    count: int | None = None
    files: list[str] = []
    try:
        # immutable: no -wal or -shm file made beside a file that is about to be moved aside (nor any lock taken)
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)) as db:
            with contextlib.suppress(sqlite3.Error):
                count = int(db.execute("SELECT COUNT(*) FROM papers").fetchone()[0])
            with contextlib.suppress(sqlite3.Error):
                files = [str(r[0]) for r in db.execute("SELECT DISTINCT file FROM sources ORDER BY file")]
    except sqlite3.Error:
        pass
    held = f"it held {count:,} papers" if count is not None else "how many papers it held cannot be read"
    if files:
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        held += f" from {len(files):,} file(s) ({shown})"
    return held


def move_damaged_registry_aside(settings: Settings) -> str:
    """Before ``ingest --rebuild``: a registry SQLite finds damaged (its header, or ``quick_check``) is renamed
    to ``papers.sqlite.damaged-<time>`` (never deleted) so that the rebuild starts a new one. Returns the note
    saying so and what was lost ("" when the registry is intact or absent)."""
    path = settings.in_home("papers.sqlite")
    try:
        check_registry_file(path)
        problem = quick_check(path)
    except RegistryError as exc:
        problem = str(exc).partition("(")[2].partition(")")[0] or "not an SQLite database"
    if problem is None:
        return ""
    held = contents_note(path)
    dest = set_aside(path)
    with contextlib.suppress(OSError):
        writing_marker(path).unlink()
    return (
        f"the registry was damaged ({problem}): moved it aside to {dest} and started a new one; {held}. "
        "Papers from files not ingested now are gone from the index: ingest those files again to get them back"
    )


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
    check_after_unclean_end(path)  # every page read once after a write that did not end (``WRITING_SUFFIX``)
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
    db = sqlite3.connect(path, check_same_thread=False, timeout=30, factory=RegistryConnection)
    db.registry_path = path
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
