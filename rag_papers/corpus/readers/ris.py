"""RIS (``.ris``) through rispy, with the record boundaries checked first: rispy drops a record that lacks its
closing ER line silently, and a cut-off export must fail whole.

The venue is read from every tag that writers put it in: T2 (Zotero's publication or proceedings title), C3
(Zotero's and EndNote's proceedings title for a conference paper), JO, JF, BT, J2 and JA (abbreviations last)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnDamaged, OnSkip, checked, damaged, derived_note, first_of, record, year_in
from rag_papers.corpus.record import CorpusError, RawRecord

_RIS_TAG = re.compile(r"^([A-Z][A-Z0-9])  -(?: (.*))?$")


def read_ris(path: Path, text: str, on_skip: OnSkip | None, on_damaged: OnDamaged | None = None) -> Iterator[RawRecord]:
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
        unknown = e.get("unknown_tag") or {}
        try:
            rec = record(
                path,
                loc,
                val("abstract", "notes_abstract"),
                None if derived_note(e.get("notes")) else val("title", "primary_title"),
                year=year_in(val("year", "publication_year", "date")),
                authors=[*(e.get("authors") or []), *(e.get("first_authors") or [])],
                venue=val("secondary_title", "custom3", "journal_name", "alternate_title3")
                or first_of(unknown, "BT")
                or val("alternate_title1", "alternate_title2"),
                url=url,
                doi=doi_of(val("doi")),
                arxiv=arxiv_id(url),
                on_skip=on_skip,
            )
        except CorpusError as exc:
            damaged(exc, on_damaged)
            continue
        rec = checked(rec, on_damaged)
        if rec is not None:
            yield rec
