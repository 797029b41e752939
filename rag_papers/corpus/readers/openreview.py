"""OpenReview notes, API v2 (each field a ``{"value": ...}``) and v1 (the value itself): the year from the venue,
else the note's creation date."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rag_papers.corpus.readers.base import OnSkip, record, year_in
from rag_papers.corpus.record import RawRecord

NAME = "OpenReview"


def matches(obj: dict[str, Any]) -> bool:
    content = obj.get("content")
    return isinstance(content, dict) and "title" in content


def read_record(path: Path, loc: int, obj: dict[str, Any], on_skip: OnSkip | None) -> RawRecord | None:
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
