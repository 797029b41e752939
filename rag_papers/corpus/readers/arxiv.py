"""The arXiv metadata snapshot (Kaggle's ``arxiv-metadata-oai-snapshot.json``, one record a line, streamed): the
abstract as submitted, authors in one LaTeX string, the year of the first version."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnSkip, record, year_in
from rag_papers.corpus.record import CorpusError, RawRecord, normalise

NAME = "arXiv"


def matches(obj: dict[str, Any]) -> bool:
    return isinstance(obj.get("versions"), list) and isinstance(obj.get("authors"), str) and "id" in obj


def read_record(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
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
