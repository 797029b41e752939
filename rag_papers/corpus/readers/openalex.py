"""OpenAlex works (the API's pages and the snapshot's lines, whole: authorships, concepts, references and all):
the abstract comes as an inverted index (word -> positions) and is put back in order; the venue is the primary
location's source, or in works of the API before 2023 the host venue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_papers.corpus.ids import doi_of
from rag_papers.corpus.readers.base import OnSkip, record
from rag_papers.corpus.record import RawRecord

NAME = "OpenAlex"


def matches(obj: dict[str, Any]) -> bool:
    return "abstract_inverted_index" in obj or str(obj.get("id", "")).startswith("https://openalex.org/W")


def read_record(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
    index = obj.get("abstract_inverted_index") or {}
    words = sorted((pos, word) for word, positions in index.items() for pos in positions)
    authors = [str((a.get("author") or {}).get("display_name") or "") for a in obj.get("authorships") or []]
    source = ((obj.get("primary_location") or {}).get("source") or {}).get("display_name") or (
        obj.get("host_venue") or {}
    ).get("display_name")
    doi = doi_of(obj.get("doi"))
    wid = str(obj.get("id") or "").rsplit("/", 1)[-1] or None
    return record(
        path, loc, " ".join(w for _, w in words), obj.get("title") or obj.get("display_name"),
        year=obj.get("publication_year") if isinstance(obj.get("publication_year"), int) else None,
        authors=authors, venue=source, doi=doi,
        url=obj.get("doi") if doi else (obj.get("primary_location") or obj.get("host_venue") or {}).get(
            "landing_page_url" if obj.get("primary_location") else "url"
        ),
        native_id=f"openalex:{wid}" if wid else None, on_skip=on_skip,
    )  # fmt: skip
