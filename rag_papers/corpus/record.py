"""What a corpus record is: ``RawRecord`` as a reader read it, ``Paper`` as the index keeps it, and the checks
every record passes whatever its format (``check_values``), with the limits they enforce.

Also the small text rules ids and records share: ``normalise`` (what is stored), ``content_hash`` (the id of a
record without one) and ``clip`` (the one clipping rule of the package).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_papers import RagPapersError
from rag_papers.corpus.text import safe_text
from rag_papers.corpus.titles import derive_title

MAX_ABSTRACT_CHARS = 20_000
MIN_ABSTRACT_WORDS = 5
# Every value is checked against these before anything is written (``check_values``): a value the
# registry cannot store (a year past SQLite's 64-bit INTEGER), or one no real paper has, is an
# error in the input, found in the validating pass rather than by a write halfway through.
MIN_YEAR, MAX_YEAR = 1000, 2200
MAX_ID_CHARS = 256
MAX_TITLE_CHARS = 2_000
MAX_VENUE_CHARS = 500
MAX_URL_CHARS = 2_048
MAX_AUTHORS = 5_000  # collaborations of a few thousand authors exist; more is a broken record
MAX_AUTHOR_CHARS = 500
# What an export of ours writes beside a title it derived (``rag_papers.references``), and what the readers take as
# "this record has no title of its own": read back, the title is derived again (and marked so) rather than passing
# as the authors' words.
DERIVED_TITLE_NOTE = "title derived from the abstract by rag-papers"


class CorpusError(RagPapersError):
    """Bad input: the message is one line that names the file (and line)."""


@dataclass
class Paper:
    id: str
    title: str
    abstract: str
    sources: list[str] = field(default_factory=list)
    year: int | None = None
    venue: str | None = None
    authors: list[str] | None = None
    url: str | None = None
    # The title is ours (``derive_title``): the record had none. Stored at ingest; False for papers of
    # registries written before it was, whose titles show unlabelled.
    title_derived: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RawRecord:
    """One abstract as read, before dedupe: where it came from and what the file said."""

    abstract: str
    source: str
    title: str | None = None
    id: str | None = None
    year: int | None = None
    venue: str | None = None
    authors: list[str] | None = None
    url: str | None = None
    # Where two sources of one paper meet (DOI, arXiv id, normalised title and first author): set by the
    # export readers (rag_papers/corpus/readers), empty for the project's own formats. See ``Ingester._ingest``.
    keys: list[str] = field(default_factory=list)


def normalise(text: str) -> str:
    """Controls stripped (``safe_text``), NFC, collapsed whitespace: what we store and show."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", safe_text(text, newlines=False))).strip()


def normalise_id(text: str) -> str:
    """``normalise`` for identifiers (ids, URLs), also without invisible format characters.

    A zero-width space or joiner (Unicode category Cf) has no business in an id or a URL and
    makes two different ones look the same.
    """
    return "".join(c for c in normalise(text) if unicodedata.category(c) != "Cf")


def content_hash(abstract: str) -> str:
    """Stable id from content: re-ingesting (or re-wrapping the lines of) an abstract gives the same id."""
    key = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", abstract)).strip().casefold()
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def clip(text: str, n: int, words: bool = False) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis (the one clipping rule of the package);
    with ``words``, at the end of the last whole word, less a trailing comma or colon (what a prompt quotes)."""
    text = " ".join(text.split())
    if len(text) <= n:
        return text
    cut = text[: n - 1]
    if words and text[n - 1] != " ":
        cut = cut.rsplit(" ", 1)[0]
    return (cut.rstrip(",;: ") if words else cut.rstrip()) + "…"


def clip_repr(value: object, n: int = 40) -> str:
    """A value as an error message shows it: its repr, clipped (a 1 MB value is not echoed)."""
    return clip(repr(value), n)


def check_values(rec: RawRecord) -> None:
    """Refuse a record with a value no real paper has, whatever reader produced it (one ``CorpusError`` line).

    Every reader's records pass through here in the validating pass, so a value the registry
    cannot hold fails there and never halfway through the writes.
    """
    where = rec.source

    def too_long(what: str, value: str | None, limit: int) -> None:
        if value is not None and len(value) > limit:
            raise CorpusError(f"{where}: {what} is {len(value):,} characters; at most {limit:,} allowed")

    if rec.year is not None and not MIN_YEAR <= rec.year <= MAX_YEAR:
        raise CorpusError(f"{where}: year {clip_repr(rec.year)} is out of range ({MIN_YEAR} to {MAX_YEAR})")
    too_long("id", rec.id, MAX_ID_CHARS)
    too_long("title", rec.title, MAX_TITLE_CHARS)
    too_long("venue", rec.venue, MAX_VENUE_CHARS)
    too_long("url", rec.url, MAX_URL_CHARS)
    if rec.authors is not None:
        if len(rec.authors) > MAX_AUTHORS:
            raise CorpusError(f"{where}: {len(rec.authors):,} authors; at most {MAX_AUTHORS:,} allowed")
        for name in rec.authors:
            too_long("an author's name", name, MAX_AUTHOR_CHARS)


def to_paper(rec: RawRecord) -> Paper:
    return Paper(
        id=rec.id or content_hash(rec.abstract),
        title=rec.title or derive_title(rec.abstract),
        abstract=rec.abstract,
        sources=[rec.source],
        year=rec.year,
        venue=rec.venue,
        authors=rec.authors,
        url=rec.url,
        title_derived=rec.title is None,
    )
