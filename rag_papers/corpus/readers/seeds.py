"""The seeds format, the project's own text: an optional one-line header ("ICLR 2026 Papers"), then one abstract
per blank-line separated paragraph."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rag_papers.corpus.files import text_lines
from rag_papers.corpus.readers.base import check_abstract
from rag_papers.corpus.record import MIN_ABSTRACT_WORDS, CorpusError, RawRecord, normalise

_HEADER = re.compile(r"^(?P<venue>[A-Za-z][\w&.\- ]*?)\s+(?P<year>(?:19|20)\d\d)\b")


def read_seeds(path: Path) -> Iterator[RawRecord]:
    """Seeds format: an optional one-line header ("ICLR 2026 Papers"), then one abstract per paragraph."""
    venue: str | None = None
    year: int | None = None
    para: list[str] = []
    para_start = 0
    first_para = True

    def flush() -> Iterator[RawRecord]:
        nonlocal first_para, venue, year
        text = " ".join(para)
        is_first, first_para = first_para, False
        if is_first and len(para) == 1 and len(text) < 120 and not text.rstrip().endswith("."):
            m = _HEADER.match(text.strip())
            if m:
                venue, year = normalise(m.group("venue")), int(m.group("year"))
            return
        abstract = check_abstract(path, para_start, text)
        if len(abstract.split()) < MIN_ABSTRACT_WORDS:
            raise CorpusError(
                f"{path}:{para_start}: paragraph of {len(abstract.split())} words is too short to be an abstract"
            )
        yield RawRecord(abstract=abstract, source=f"{path}:{para_start}", venue=venue, year=year)

    for lineno, line in text_lines(path):
        if line.strip():
            if not para:
                para_start = lineno
            para.append(line.strip())
        elif para:
            yield from flush()
            para = []
    if para:
        yield from flush()
