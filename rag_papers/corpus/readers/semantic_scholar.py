"""Semantic Scholar papers (Graph API): search pages (``{"data": [...]}``), batch answers (a list, ``null`` for a
paper it does not know) and datasets' lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnSkip, record
from rag_papers.corpus.record import RawRecord

NAME = "Semantic Scholar"


def matches(obj: dict[str, Any]) -> bool:
    return "paperId" in obj


def read_record(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
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
