"""The JSON exports (CSL-JSON, arXiv, OpenAlex, OpenReview, Semantic Scholar): which source wrote a record, told
by the keys each always writes, and the records of a page, an array or JSON lines, each read by its source's
reader. A file holds one source's records: another's in the middle fails it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rag_papers.corpus.files import json_lines, unknown_format
from rag_papers.corpus.readers import arxiv, csl_json, openalex, openreview, semantic_scholar
from rag_papers.corpus.readers.base import OnSkip
from rag_papers.corpus.record import CorpusError, RawRecord

JsonReader = Callable[[Path, int, dict[str, Any], OnSkip | None], RawRecord | None]
# Tried in this order: a record with the keys of two sources is the first's.
SOURCES = (openalex, openreview, semantic_scholar, arxiv, csl_json)


def json_kind(obj: object) -> tuple[str, JsonReader] | None:
    """Which export one JSON record is, from the keys each source always writes; None when none."""
    if not isinstance(obj, dict):
        return None
    for source in SOURCES:
        if source.matches(obj):
            return source.NAME, source.read_record
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
                raise unknown_format(path, _describe(obj))
            kind = this
        elif this is None or this[0] != kind[0]:
            raise CorpusError(f"{path}:{loc}: not a {kind[0]} record like the ones before it ({_describe(obj)})")
        assert isinstance(obj, dict)
        rec = kind[1](path, loc, obj, on_skip)
        if rec is not None:
            yield rec
    if kind is None:
        raise unknown_format(path, "no JSON records")


def first_line_record(head: str) -> object:
    """The first line of ``head`` as JSON when it is a whole JSON value on its own (JSON lines), else None."""
    first = next((line for line in head.splitlines() if line.strip()), "")
    try:
        return json.loads(first)
    except json.JSONDecodeError:
        return None
