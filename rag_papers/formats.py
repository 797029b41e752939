"""Readers for the formats researchers export: BibTeX, RIS, CSL-JSON, the arXiv metadata snapshot, OpenAlex,
OpenReview (API v2) and Semantic Scholar (Graph API).

Each is told by its extension and by its content (``detect`` sniffs the first few KB): a file that is
none of them is refused in one line that lists the formats, never read as plain text. A record without an
abstract is skipped and counted (``on_skip``); every other problem fails the whole file, as for the
project's own formats. BibTeX and RIS go through the well-kept parsers (bibtexparser 2, rispy).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from rag_papers.corpus import (
    MAX_ABSTRACT_CHARS,
    CorpusError,
    RawRecord,
    json_lines,
    normalise,
    normalise_id,
)

FORMATS = (
    "seeds text (.txt), JSONL (.jsonl), CSV (.csv), BibTeX (.bib), RIS (.ris), and as .json or .jsonl: "
    "CSL-JSON, the arXiv metadata snapshot (arXiv), OpenAlex works, OpenReview notes (API v2), "
    "Semantic Scholar papers"
)
SNIFF_BYTES = 8192
OnSkip = Callable[[str], None]


def unknown(path: Path, what: str) -> CorpusError:
    return CorpusError(f"{path}: cannot tell the format ({what}); supported formats: {FORMATS}")


# --------------------------------------------------------------------------- ids and names
_DOI = re.compile(r"10\.\d{4,9}/\S+")
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(.+)$", re.I)
_ARXIV_URL = re.compile(r"arxiv\.org/(?:abs|pdf)/([^\s?#]+?)(?:v\d+)?(?:\.pdf)?$", re.I)


def doi_of(value: object) -> str | None:
    """A DOI as written (DOIs are case-insensitive: ids and keys fold it), from a bare DOI, ``doi:...`` or a doi.org URL."""
    if not isinstance(value, str):
        return None
    m = _DOI.search(value.strip())
    return m.group(0).rstrip(".,;") if m else None


def arxiv_id(value: object) -> str | None:
    """The arXiv id without version, from an id (``1706.03762v2``, ``cs/0501001``), an abs/pdf URL or an arXiv DOI."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    m = _ARXIV_DOI.match(doi_of(value) or "") or _ARXIV_URL.search(value)
    text = m.group(1) if m else value
    text = re.sub(r"^arxiv:", "", text, flags=re.I)
    m2 = re.fullmatch(r"(\d{4}\.\d{4,5}|[a-z-]+(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?", text)
    return m2.group(1) if m2 else None


def first_author_key(authors: list[str] | None) -> str:
    """The first author's surname, folded: what two sources agree on ("Vaswani, A." and "Ashish Vaswani")."""
    if not authors:
        return ""
    name = authors[0]
    surname = name.split(",")[0] if "," in name else name.split()[-1] if name.split() else ""
    return re.sub(r"\W+", "", surname.casefold())


def title_key(title: str) -> str:
    return re.sub(r"\W+", " ", title.casefold()).strip()


def registry_keys(pid: str, title: str, authors: list[str] | None) -> list[str]:
    """The keys of an indexed paper, from what the registry keeps (its id and title and authors)."""
    return ([pid] if pid.startswith(("doi:", "arXiv:")) else []) + _title_keys(title, authors)


def dedupe_keys(doi: str | None, arxiv: str | None, title: str | None, authors: list[str] | None) -> list[str]:
    """The keys under which two sources of one paper meet (ingest merges records that share one)."""
    keys = []
    if doi:
        keys.append(f"doi:{doi.lower()}")
    if arxiv:
        keys.append(f"arXiv:{arxiv}")
    keys.extend(_title_keys(title, authors))
    return keys


def _title_keys(title: str | None, authors: list[str] | None) -> list[str]:
    """``title:<normalised title>|<first author's surname>``, when both have letters to compare."""
    t, a = title_key(title or ""), first_author_key(authors)
    return [f"title:{t}|{a}"] if t and a else []


def person(name: str) -> str:
    """ "Last, First" -> "First Last" (RIS and CSL write names both ways)."""
    if name.count(",") == 1:
        last, first = (part.strip() for part in name.split(","))
        name = f"{first} {last}" if first else last
    return normalise(name)


def record(
    path: Path,
    loc: int | str,
    abstract: object,
    title: object,
    *,
    year: int | None,
    authors: Iterable[str] | None,
    venue: object = None,
    url: object = None,
    doi: str | None = None,
    arxiv: str | None = None,
    native_id: str | None = None,
    on_skip: OnSkip | None = None,
) -> RawRecord | None:
    """A ``RawRecord`` from one parsed record; None (counted by ``on_skip``) when it has no abstract.

    The id is the DOI (``doi:10....``) or arXiv id (``arXiv:...``) when the record has one, so two sources
    of one paper share it; else the source's own id (OpenReview, OpenAlex, Semantic Scholar) or none
    (the content hash, as for the project's own formats).
    """
    source = f"{path}:{loc}"
    text = normalise(abstract) if isinstance(abstract, str) else ""
    if not text:
        if on_skip is not None:
            on_skip(source)
        return None
    if len(text) > MAX_ABSTRACT_CHARS:
        raise CorpusError(f"{source}: abstract is {len(text):,} characters; at most {MAX_ABSTRACT_CHARS:,} allowed")
    names = [n for n in (person(a) for a in authors or []) if n] or None
    clean_title = normalise(title) if isinstance(title, str) else ""
    if arxiv is None and doi is not None:
        m = _ARXIV_DOI.match(doi)
        arxiv = m.group(1) if m else None
    link = normalise_id(url) if isinstance(url, str) and url.strip() else None
    if link is None and doi:
        link = f"https://doi.org/{doi}"
    if link is None and arxiv:
        link = f"https://arxiv.org/abs/{arxiv}"
    pid = f"doi:{doi.lower()}" if doi else f"arXiv:{arxiv}" if arxiv else native_id
    return RawRecord(
        abstract=text,
        source=source,
        title=clean_title or None,
        id=normalise_id(pid) if pid else None,
        year=year,
        venue=normalise(venue) or None if isinstance(venue, str) else None,
        authors=names,
        url=link,
        keys=dedupe_keys(doi, arxiv, clean_title, names),
    )


def first_of(mapping: dict[str, Any], *names: str) -> Any:
    """The first of these fields that has a value (a list's first item)."""
    for name in names:
        v = mapping.get(name)
        if isinstance(v, list):
            v = v[0] if v else None
        if v not in (None, ""):
            return v
    return None


def year_in(text: object) -> int | None:
    m = re.search(r"\b(1[5-9]\d\d|2[01]\d\d)\b", text) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------- BibTeX
def read_bibtex(path: Path, text: str, on_skip: OnSkip | None) -> Iterator[RawRecord]:
    """BibTeX through bibtexparser 2: LaTeX accents decoded, protective braces dropped, names split."""
    import bibtexparser
    from bibtexparser.middlewares import LatexDecodingMiddleware, SeparateCoAuthors, SplitNameParts
    from bibtexparser.model import DuplicateBlockKeyBlock

    # bibtexparser logs each failed block as a warning (to stderr, through logging's last resort): the
    # failure is reported here instead, in one line.
    log = logging.getLogger("bibtexparser")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        library = bibtexparser.parse_string(
            text, append_middleware=[LatexDecodingMiddleware(), SeparateCoAuthors(), SplitNameParts()]
        )
    finally:
        log.setLevel(level)
    if library.failed_blocks:
        block = library.failed_blocks[0]
        error = block.error
        reason = getattr(error, "abort_reason", None) or str(error)
        where = f"{path}:{(block.start_line or 0) + 1}"
        if isinstance(block, DuplicateBlockKeyBlock):
            raise CorpusError(f"{where}: malformed BibTeX (the key {block.key!r} is used by two entries)")
        raise CorpusError(
            f"{where}: malformed BibTeX, an entry is not closed ({' '.join(reason.split()) or 'syntax error'})"
        )
    if not library.entries:
        raise unknown(path, "a .bib file with no BibTeX entries")
    for entry in library.entries:
        f = {k.lower(): v.value for k, v in entry.fields_dict.items()}
        val = partial(first_of, f)

        authors = f.get("author") or []
        names = [" ".join([*a.first, *a.von, *a.last, *a.jr]) if hasattr(a, "first") else str(a) for a in authors]
        eprint = val("eprint") if str(val("archiveprefix", "eprinttype") or "").lower() == "arxiv" else None
        url = val("url")
        rec = record(
            path,
            (entry.start_line or 0) + 1,
            val("abstract"),
            val("title"),
            year=year_in(val("year", "date")),
            authors=names,
            venue=val("booktitle", "journal", "journaltitle"),
            url=url,
            doi=doi_of(val("doi")),
            arxiv=arxiv_id(eprint) or arxiv_id(url),
            on_skip=on_skip,
        )
        if rec is not None:
            yield rec


# --------------------------------------------------------------------------- RIS
_RIS_TAG = re.compile(r"^([A-Z][A-Z0-9])  -(?: (.*))?$")


def read_ris(path: Path, text: str, on_skip: OnSkip | None) -> Iterator[RawRecord]:
    """RIS through rispy. rispy drops a record that lacks its closing ER silently, so the record
    boundaries are checked here first: a cut-off export fails whole."""
    import rispy

    starts: list[int] = []
    open_at: int | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _RIS_TAG.match(line.rstrip())
        if not m:
            continue
        if m.group(1) == "TY":
            if open_at is not None:
                raise CorpusError(f"{path}:{open_at}: RIS record has no ER line before the next TY")
            open_at = lineno
            starts.append(lineno)
        elif m.group(1) == "ER":
            if open_at is None:
                raise CorpusError(f"{path}:{lineno}: RIS ER line without a TY line before it")
            open_at = None
    if open_at is not None:
        raise CorpusError(f"{path}:{open_at}: RIS record has no ER line (the file is cut off?)")
    try:
        entries = rispy.loads(text)
    except Exception as exc:  # rispy raises plain exceptions on bad tags
        raise CorpusError(f"{path}: malformed RIS ({' '.join(str(exc).split())})") from None
    if len(entries) != len(starts):
        raise CorpusError(f"{path}: malformed RIS ({len(starts)} records started, {len(entries)} read)")
    for loc, e in zip(starts, entries):
        val = partial(first_of, e)

        urls = e.get("urls") or []
        url = urls[0] if urls else None
        rec = record(
            path,
            loc,
            val("abstract", "notes_abstract"),
            val("title", "primary_title"),
            year=year_in(val("year", "publication_year", "date")),
            authors=[*(e.get("authors") or []), *(e.get("first_authors") or [])],
            venue=val("secondary_title", "journal_name", "alternate_title3", "alternate_title1"),
            url=url,
            doi=doi_of(val("doi")),
            arxiv=arxiv_id(url),
            on_skip=on_skip,
        )
        if rec is not None:
            yield rec


# --------------------------------------------------------------------------- JSON formats
def _csl(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
    names = []
    for a in obj.get("author") or []:
        if isinstance(a, dict):
            name = a.get("literal") or " ".join(
                str(a[k]) for k in ("given", "non-dropping-particle", "family") if a.get(k)
            )
            names.append(str(name))
    parts = (obj.get("issued") or {}).get("date-parts") or [[None]]
    year = year_in(str(parts[0][0])) if parts and parts[0] else None
    if year is None:
        year = year_in((obj.get("issued") or {}).get("raw"))
    url, doi = obj.get("URL"), doi_of(obj.get("DOI"))
    return record(
        path, loc, obj.get("abstract"), obj.get("title"), year=year, authors=names,
        venue=obj.get("container-title"), url=url, doi=doi, arxiv=arxiv_id(url), on_skip=on_skip,
    )  # fmt: skip


def _arxiv(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
    from pylatexenc.latex2text import LatexNodes2Text  # bibtexparser's own LaTeX decoder

    aid = arxiv_id(obj.get("id"))
    if aid is None:
        raise CorpusError(f"{path}:{loc}: arXiv record has no valid 'id' (got {obj.get('id')!r:.40})")
    versions = obj.get("versions") or []
    year = None
    if versions and isinstance(versions[0], dict):
        year = year_in(versions[0].get("created"))
    authors_text = LatexNodes2Text().latex_to_text(str(obj.get("authors") or ""))
    authors = [a.strip() for a in re.split(r",\s*|\s+and\s+", normalise(authors_text)) if a.strip()]
    return record(
        path, loc, obj.get("abstract"), obj.get("title"), year=year, authors=authors,
        url=f"https://arxiv.org/abs/{aid}", doi=doi_of(obj.get("doi")), arxiv=aid, on_skip=on_skip,
    )  # fmt: skip


def _openalex(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
    index = obj.get("abstract_inverted_index") or {}
    words = sorted((pos, word) for word, positions in index.items() for pos in positions)
    authors = [str((a.get("author") or {}).get("display_name") or "") for a in obj.get("authorships") or []]
    source = ((obj.get("primary_location") or {}).get("source") or {}).get("display_name")
    doi = doi_of(obj.get("doi"))
    wid = str(obj.get("id") or "").rsplit("/", 1)[-1] or None
    return record(
        path, loc, " ".join(w for _, w in words), obj.get("title") or obj.get("display_name"),
        year=obj.get("publication_year") if isinstance(obj.get("publication_year"), int) else None,
        authors=authors, venue=source, url=obj.get("doi") if doi else None, doi=doi,
        native_id=f"openalex:{wid}" if wid else None, on_skip=on_skip,
    )  # fmt: skip


def _openreview(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
    content = obj.get("content") or {}

    def value(key: str) -> Any:
        v = content.get(key)
        return v.get("value") if isinstance(v, dict) else v

    venue = value("venue")
    year = year_in(venue) or year_in(value("venueid"))
    if year is None and isinstance(obj.get("cdate"), int | float):
        year = datetime.fromtimestamp(obj["cdate"] / 1000, UTC).year
    nid = obj.get("forum") or obj.get("id")
    authors = value("authors")
    return record(
        path, loc, value("abstract"), value("title"), year=year,
        authors=[str(a) for a in authors] if isinstance(authors, list) else None, venue=venue,
        url=f"https://openreview.net/forum?id={nid}" if nid else None,
        native_id=f"openreview:{nid}" if nid else None, on_skip=on_skip,
    )  # fmt: skip


def _s2(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
    ext = obj.get("externalIds") or {}
    pid = obj.get("paperId")
    url = obj.get("url") or (f"https://www.semanticscholar.org/paper/{pid}" if pid else None)
    return record(
        path, loc, obj.get("abstract"), obj.get("title"),
        year=obj.get("year") if isinstance(obj.get("year"), int) else None,
        authors=[str(a.get("name") or "") for a in obj.get("authors") or [] if isinstance(a, dict)],
        venue=obj.get("venue"), url=url, doi=doi_of(ext.get("DOI")), arxiv=arxiv_id(ext.get("ArXiv")),
        native_id=f"s2:{pid}" if pid else None, on_skip=on_skip,
    )  # fmt: skip


JsonReader = Callable[[Path, int, dict[str, Any], OnSkip | None], RawRecord | None]


def json_kind(obj: object) -> tuple[str, JsonReader] | None:
    """Which export one JSON record is, from the keys each source always writes; None when none."""
    if not isinstance(obj, dict):
        return None
    if "abstract_inverted_index" in obj or str(obj.get("id", "")).startswith("https://openalex.org/W"):
        return "OpenAlex", _openalex
    content = obj.get("content")
    if isinstance(content, dict) and "title" in content:  # API v2 ({"value": ...}) or v1 (the value itself)
        return "OpenReview", _openreview
    if "paperId" in obj:
        return "Semantic Scholar", _s2
    if isinstance(obj.get("versions"), list) and isinstance(obj.get("authors"), str) and "id" in obj:
        return "arXiv", _arxiv
    if "type" in obj and ("issued" in obj or "author" in obj or "container-title" in obj):
        return "CSL-JSON", _csl
    return None


def _describe(obj: object) -> str:
    if isinstance(obj, dict):
        keys = ", ".join(str(k) for k in list(obj)[:6])
        return f"a JSON object with keys {keys}" if keys else "an empty JSON object"
    return f"JSON {type(obj).__name__}"


def json_records(path: Path, text: str | None) -> Iterator[tuple[int, object]]:
    """The records of a JSON export with their locations: a page (``{"results"|"notes"|"data": [...]}``) or an
    array, read whole (``text``); or one object per line (the arXiv snapshot, OpenAlex and OpenReview dumps),
    streamed line by line (``text`` None) so a multi-GB snapshot never sits in memory."""
    if text is None:
        yield from json_lines(path)
        return
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise CorpusError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        # More values after the first: JSON lines whose first line is longer than the sniffed head.
        yield from json_records(path, None)
        return
    if isinstance(doc, dict) and json_kind(doc) is None:
        for key in ("results", "notes", "data", "items"):
            if isinstance(doc.get(key), list):
                doc = doc[key]
                break
    # A pretty-printed page keeps no line per record: a record is cited by its position in the page.
    yield from enumerate(doc if isinstance(doc, list) else [doc], 1)


def read_json_export(path: Path, text: str | None, on_skip: OnSkip | None) -> Iterator[RawRecord]:
    kind: tuple[str, JsonReader] | None = None
    for loc, obj in json_records(path, text):
        if obj is None:  # Semantic Scholar's batch endpoint answers null for a paper it does not know
            if on_skip is not None:
                on_skip(f"{path}:{loc}")
            continue
        this = json_kind(obj)
        if kind is None:
            if this is None:
                raise unknown(path, _describe(obj))
            kind = this
        elif this is None or this[0] != kind[0]:
            raise CorpusError(f"{path}:{loc}: not a {kind[0]} record like the ones before it ({_describe(obj)})")
        assert isinstance(obj, dict)
        rec = kind[1](path, loc, obj, on_skip)
        if rec is not None:
            yield rec
    if kind is None:
        raise unknown(path, "no JSON records")


def first_line_record(head: str) -> object:
    """The first line of ``head`` as JSON when it is a whole JSON value on its own (JSON lines), else None."""
    first = next((line for line in head.splitlines() if line.strip()), "")
    try:
        return json.loads(first)
    except json.JSONDecodeError:
        return None


def detect(path: Path, head: str) -> str | None:
    """The format of ``path`` from its extension and its first few KB; None for the project's own formats."""
    suffix = path.suffix.lower()
    if suffix == ".bib":
        if not re.search(r"@\s*[A-Za-z]+\s*[{(]", head):
            raise unknown(path, "a .bib file with no BibTeX entry")
        return "bibtex"
    if suffix == ".ris":
        if not head.lstrip("\ufeff \r\n").startswith("TY  -"):
            raise unknown(path, "a .ris file that does not start with a TY line")
        return "ris"
    first = first_line_record(head)
    if suffix == ".json":
        # One whole object on the first line and more after it: JSON lines (streamed); else one document.
        rest = head.lstrip().split("\n", 1)[1:]
        return "jsonlines" if isinstance(first, dict) and rest and rest[0].strip() else "json"
    if suffix == ".jsonl" and json_kind(first) is not None:
        return "jsonlines"
    return None


def read_export(path: Path, kind: str, on_skip: OnSkip | None) -> Iterator[RawRecord]:
    """The records of an export of format ``kind`` (from ``detect``); the whole file is read for all but JSON
    lines, as the BibTeX and RIS parsers and a JSON page need."""
    if kind == "jsonlines":
        yield from read_json_export(path, None, on_skip)
        return
    from rag_papers.corpus import open_binary

    with open_binary(path) as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CorpusError(f"{path}:{line}: not valid UTF-8 ({exc.reason})") from None
    if kind == "bibtex":
        yield from read_bibtex(path, text, on_skip)
    elif kind == "ris":
        yield from read_ris(path, text, on_skip)
    else:
        yield from read_json_export(path, text, on_skip)
