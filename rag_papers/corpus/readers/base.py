"""What the readers share: ``record``, the one way an export's parsed record becomes a ``RawRecord`` (ids, links
and dedupe keys decided alike for every format), ``mapping_record`` for the project's own JSONL and CSV, and
the small field helpers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rag_papers.corpus.ids import arxiv_of_doi, dedupe_keys, person
from rag_papers.corpus.record import (
    DERIVED_TITLE_NOTE,
    MAX_ABSTRACT_CHARS,
    CorpusError,
    RawRecord,
    check_values,
    clip_repr,
    normalise,
    normalise_id,
)

OnSkip = Callable[[str], None]  # a record left out for having no abstract: its FILE:LINE
# A damaged record of an export (unbalanced braces, a value no paper has): its one-line FILE:LINE: reason. Given,
# the reader skips the record and goes on (a reference manager's library goes in with every good record); None
# (``--strict``): the error is raised and the whole file refused.
OnDamaged = Callable[[str], None]


def damaged(exc: CorpusError, on_damaged: OnDamaged | None) -> None:
    """Report one damaged record to ``on_damaged``, or raise it when there is none (strict)."""
    if on_damaged is None:
        raise exc
    on_damaged(str(exc))


def checked(rec: RawRecord | None, on_damaged: OnDamaged | None) -> RawRecord | None:
    """``rec`` if its values pass ``check_values``; else None, the record reported as damaged (or the error raised)."""
    if rec is None:
        return None
    try:
        check_values(rec)
    except CorpusError as exc:
        damaged(exc, on_damaged)
        return None
    return rec


def derived_note(note: object) -> bool:
    """Whether an export's note says its title is one rag-papers derived (``DERIVED_TITLE_NOTE``)."""
    values = note if isinstance(note, list) else [note]
    return any(isinstance(v, str) and DERIVED_TITLE_NOTE in v for v in values)


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
        arxiv = arxiv_of_doi(doi)
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


def check_abstract(path: Path, lineno: int, abstract: str) -> str:
    """``abstract`` as stored (``normalise``); one longer than ``MAX_ABSTRACT_CHARS`` is a ``CorpusError``."""
    abstract = normalise(abstract)
    if len(abstract) > MAX_ABSTRACT_CHARS:
        raise CorpusError(
            f"{path}:{lineno}: abstract is {len(abstract):,} characters; at most {MAX_ABSTRACT_CHARS:,} allowed"
        )
    return abstract


def mapping_record(path: Path, lineno: int, obj: dict[str, Any]) -> RawRecord:
    """A record of the project's own JSONL or CSV: ``abstract``, and optionally title, id, year, venue, authors, url."""
    abstract = obj.get("abstract")
    if isinstance(abstract, str):
        abstract = check_abstract(path, lineno, abstract)
    if not isinstance(abstract, str) or not abstract:  # nothing left once controls are stripped counts too
        raise CorpusError(f"{path}:{lineno}: record has no 'abstract' text")
    year_raw = obj.get("year")
    year: int | None = None
    if isinstance(year_raw, float) and year_raw.is_integer():
        year_raw = int(year_raw)  # 2024.0: a spreadsheet's way of writing a year
    if year_raw not in (None, ""):
        try:
            if isinstance(year_raw, bool) or not isinstance(year_raw, int | str):
                raise ValueError
            year = int(str(year_raw).strip())
        except ValueError:
            raise CorpusError(f"{path}:{lineno}: 'year' must be a whole number, got {clip_repr(year_raw)}") from None
    authors = obj.get("authors")
    if isinstance(authors, str):
        authors = re.split(r";|\band\b|,", authors)
    elif authors is not None and not (isinstance(authors, list) and all(isinstance(a, str) for a in authors)):
        raise CorpusError(f"{path}:{lineno}: 'authors' must be a string or a list of strings")
    if authors is not None:
        authors = [n for n in (normalise(a) for a in authors) if n] or None

    def text(key: str, clean: Callable[[str], str] = normalise) -> str | None:
        v = obj.get(key)
        if v in (None, ""):
            return None
        if isinstance(v, bool) or not isinstance(v, str | int):  # a list or an object is not a title or an id
            raise CorpusError(f"{path}:{lineno}: {key!r} must be text, got {type(v).__name__}")
        return clean(str(v)) or None

    return RawRecord(
        abstract=abstract,
        source=f"{path}:{lineno}",
        title=text("title"),
        id=text("id", normalise_id),
        year=year,
        venue=text("venue"),
        authors=authors,
        url=text("url", normalise_id),
    )
