"""CSL-JSON, what Zotero, Mendeley and citation.js export: an array of items with ``type`` and ``issued``,
``author`` or ``container-title``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnSkip, derived_note, record, year_in
from rag_papers.corpus.record import RawRecord

NAME = "CSL-JSON"


def matches(obj: dict[str, Any]) -> bool:
    return "type" in obj and ("issued" in obj or "author" in obj or "container-title" in obj)


def belongs(obj: dict[str, Any]) -> bool:
    """A later item of a file already told to be CSL-JSON: Zotero writes an item without a date, creators or
    container (a web page saved with its title only) as ``id``, ``type`` and ``title``."""
    return "type" in obj and ("id" in obj or "title" in obj)


def read_record(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
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
        path, loc, obj.get("abstract"), None if derived_note(obj.get("note")) else obj.get("title"), year=year, authors=names,
        venue=obj.get("container-title"), url=url, doi=doi, arxiv=arxiv_id(url), on_skip=on_skip,
    )  # fmt: skip
