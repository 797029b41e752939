"""The JSON exports (CSL-JSON, arXiv, OpenAlex, OpenReview, Semantic Scholar): which source wrote a record, told
by the keys each always writes, and the records of a page, an array or JSON lines, each read by its source's
reader, and cited by the line it starts on. A file holds one source's records: the first record tells which; a
later one of another shape (or a malformed line of JSON lines, or one nested deeper than ``MAX_JSON_DEPTH``) is a
damaged record, skipped and reported (``on_damaged``), or without it (``--strict``) the file's refusal. A page or
an array is decoded whole, so one malformed or too deep anywhere refuses the file: no record can be cut out of it
without decoding it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rag_papers.corpus.files import MAX_EXPORT_LINE_BYTES, JsonTooDeep, json_lines, loads_json, unknown_format
from rag_papers.corpus.readers import arxiv, csl_json, openalex, openreview, semantic_scholar
from rag_papers.corpus.readers.base import OnDamaged, OnSkip, checked, damaged
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


PAGE_KEYS = ("results", "notes", "data", "items")


def _element_lines(text: str, page_key: str | None) -> list[int]:
    """The line each record of a page or array starts on, found by walking the document's top level with the
    decoder (``json.loads`` keeps no positions). Called on a document ``json.loads`` has read, so it is well formed."""
    decoder = json.JSONDecoder()
    ws = " \t\r\n"

    def skip(i: int) -> int:
        while i < len(text) and text[i] in ws:
            i += 1
        return i

    def array(i: int) -> list[int]:  # ``i`` at "["
        starts: list[int] = []
        i = skip(i + 1)
        while i < len(text) and text[i] != "]":
            starts.append(i)
            _, i = decoder.raw_decode(text, i)
            i = skip(i)
            if text[i] == ",":
                i = skip(i + 1)
        return starts

    i = skip(0)
    starts: list[int] = []
    if text.startswith("[", i):
        starts = array(i)
    elif text.startswith("{", i):
        i = skip(i + 1)
        while i < len(text) and text[i] != "}":
            key, i = decoder.raw_decode(text, i)
            i = skip(skip(i) + 1)  # past the colon
            if key == page_key and text.startswith("[", i) and not starts:
                starts = array(i)
            _, i = decoder.raw_decode(text, i)
            i = skip(i)
            if text[i] == ",":
                i = skip(i + 1)
        if not starts:
            starts = [skip(0)]
    lines: list[int] = []
    line, pos = 1, 0
    for start in starts:
        line += text.count("\n", pos, start)
        pos = start
        lines.append(line)
    return lines


def json_records(path: Path, text: str | None, on_damaged: OnDamaged | None = None) -> Iterator[tuple[int, object]]:
    """The records of a JSON export with the lines they start on: a page (``{"results"|"notes"|"data": [...]}``)
    or an array, read whole (``text``); or one object per line (the arXiv snapshot, OpenAlex and OpenReview
    dumps), streamed line by line (``text`` None) so a multi-GB snapshot never sits in memory."""
    if text is None:
        yield from json_lines(path, on_damaged, MAX_EXPORT_LINE_BYTES)
        return
    try:
        doc = loads_json(text)
    except JsonTooDeep as exc:
        raise CorpusError(f"{path}:{exc.lineno}: {exc.msg}") from None
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise CorpusError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        # More values after the first: JSON lines whose first line is longer than the sniffed head.
        yield from json_records(path, None, on_damaged)
        return
    page_key = None
    if isinstance(doc, dict) and json_kind(doc) is None:
        for key in PAGE_KEYS:
            if isinstance(doc.get(key), list):
                doc, page_key = doc[key], key
                break
    records = doc if isinstance(doc, list) else [doc]
    lines = _element_lines(text, page_key)
    yield from zip(lines if len(lines) == len(records) else range(1, len(records) + 1), records)


def read_json_export(
    path: Path, text: str | None, on_skip: OnSkip | None, on_damaged: OnDamaged | None = None
) -> Iterator[RawRecord]:
    kind: tuple[str, JsonReader] | None = None
    for loc, obj in json_records(path, text, on_damaged):
        if obj is None:  # Semantic Scholar's batch endpoint answers null for a paper it does not know
            if on_skip is not None:
                on_skip(f"{path}:{loc}")
            continue
        this = json_kind(obj)
        if kind is None:
            if this is None:
                raise unknown_format(path, _describe(obj))
            kind = this
        elif (this is None or this[0] != kind[0]) and not (
            kind[0] == csl_json.NAME and isinstance(obj, dict) and csl_json.belongs(obj)
        ):
            damaged(
                CorpusError(f"{path}:{loc}: not a {kind[0]} record like the ones before it ({_describe(obj)})"),
                on_damaged,
            )
            continue
        assert isinstance(obj, dict)
        try:
            rec = kind[1](path, loc, obj, on_skip)
        except CorpusError as exc:
            damaged(exc, on_damaged)
            continue
        rec = checked(rec, on_damaged)
        if rec is not None:
            yield rec
    if kind is None:
        raise unknown_format(path, "no JSON records")


def first_line_record(head: str) -> object:
    """The first line of ``head`` as JSON when it is a whole JSON value on its own (JSON lines), else None."""
    first = next((line for line in head.splitlines() if line.strip()), "")
    try:
        return loads_json(first)
    except ValueError:  # malformed, cut off by the head's end, or too deep: the reader says which, by its line
        return None
