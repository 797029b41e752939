"""The arXiv API's own answer, an Atom feed (``.xml``, ``.atom``), as people save it from
``export.arxiv.org/api/query``: one paper per ``<entry>``, its abstract the ``<summary>``, its arXiv id in ``<id>``,
the DOI and journal reference in arXiv's own namespace. An entry the API wrote to say a query failed (its id under
``/api/errors``) is a damaged record, not a paper."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from rag_papers.corpus.files import unknown_format
from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnDamaged, OnSkip, checked, damaged, record, year_in
from rag_papers.corpus.record import CorpusError, RawRecord, normalise

ATOM = "{http://www.w3.org/2005/Atom}"
ARXIV = "{http://arxiv.org/schemas/atom}"
_ENTRY = re.compile(r"<(?:\w+:)?entry[\s>]")


def is_feed(head: str) -> bool:
    """Whether the first KB of a file are an Atom feed's (its root element ``feed`` in the Atom namespace)."""
    return bool(re.search(r"<(?:\w+:)?feed\b[^>]*http://www\.w3\.org/2005/Atom", head))


def read_atom(
    path: Path, text: str, on_skip: OnSkip | None, on_damaged: OnDamaged | None = None
) -> Iterator[RawRecord]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, col = exc.position
        raise CorpusError(
            f"{path}:{line}: malformed XML ({' '.join(str(exc).split(':')[0].split())} at column {col})"
        ) from None
    if root.tag != f"{ATOM}feed":
        raise unknown_format(path, f"an XML file whose root is <{root.tag.rsplit('}', 1)[-1]}>, not an Atom <feed>")
    entries = root.findall(f"{ATOM}entry")
    # ElementTree keeps no line numbers: each entry is cited by the line its start tag is on, in document order.
    lines = [text.count("\n", 0, m.start()) + 1 for m in _ENTRY.finditer(text)]
    if len(lines) != len(entries):
        lines = list(range(1, len(entries) + 1))

    def text_of(el: ET.Element, tag: str) -> str | None:
        found = el.find(tag)
        return normalise(found.text) if found is not None and found.text else None

    for line, entry in zip(lines, entries):
        ident = text_of(entry, f"{ATOM}id") or ""
        if "/api/errors" in ident:
            damaged(
                CorpusError(f"{path}:{line}: the arXiv API's error, not a paper ({text_of(entry, f'{ATOM}summary')})"),
                on_damaged,
            )
            continue
        aid = arxiv_id(ident)
        links = [ln.get("href") for ln in entry.findall(f"{ATOM}link") if ln.get("rel") == "alternate"]
        authors = [n for a in entry.findall(f"{ATOM}author") if (n := text_of(a, f"{ATOM}name"))]
        try:
            rec = record(
                path, line, text_of(entry, f"{ATOM}summary"), text_of(entry, f"{ATOM}title"),
                year=year_in(text_of(entry, f"{ATOM}published")), authors=authors,
                url=f"https://arxiv.org/abs/{aid}" if aid else (links[0] if links else None),
                doi=doi_of(text_of(entry, f"{ARXIV}doi")), arxiv=aid, on_skip=on_skip,
            )  # fmt: skip
        except CorpusError as exc:
            damaged(exc, on_damaged)
            continue
        rec = checked(rec, on_damaged)
        if rec is not None:
            yield rec
