"""BibTeX (``.bib``) through bibtexparser 2: LaTeX accents decoded, protective braces dropped, names split."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from rag_papers.corpus.files import unknown_format
from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnSkip, first_of, record, year_in
from rag_papers.corpus.record import CorpusError, RawRecord


def read_bibtex(path: Path, text: str, on_skip: OnSkip | None) -> Iterator[RawRecord]:
    """BibTeX through bibtexparser 2: LaTeX accents decoded, protective braces dropped, names split."""
    import bibtexparser
    from bibtexparser.middlewares import LatexDecodingMiddleware, SeparateCoAuthors, SplitNameParts
    from bibtexparser.model import DuplicateBlockKeyBlock

    # bibtexparser logs each failed block as a warning (to stderr, through logging's last resort): the
    # failure is reported here instead, in one line.
    log = logging.getLogger("bibtexparser")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        library = bibtexparser.parse_string(
            text, append_middleware=[LatexDecodingMiddleware(), SeparateCoAuthors(), SplitNameParts()]
        )
    finally:
        log.setLevel(level)
    if library.failed_blocks:
        block = library.failed_blocks[0]
        error = block.error
        reason = getattr(error, "abort_reason", None) or str(error)
        where = f"{path}:{(block.start_line or 0) + 1}"
        if isinstance(block, DuplicateBlockKeyBlock):
            raise CorpusError(f"{where}: malformed BibTeX (the key {block.key!r} is used by two entries)")
        raise CorpusError(
            f"{where}: malformed BibTeX, an entry is not closed ({' '.join(reason.split()) or 'syntax error'})"
        )
    if not library.entries:
        raise unknown_format(path, "a .bib file with no BibTeX entries")
    for entry in library.entries:
        f = {k.lower(): v.value for k, v in entry.fields_dict.items()}
        val = partial(first_of, f)

        authors = f.get("author") or []
        names = [" ".join([*a.first, *a.von, *a.last, *a.jr]) if hasattr(a, "first") else str(a) for a in authors]
        eprint = val("eprint") if str(val("archiveprefix", "eprinttype") or "").lower() == "arxiv" else None
        url = val("url")
        rec = record(
            path,
            (entry.start_line or 0) + 1,
            val("abstract"),
            val("title"),
            year=year_in(val("year", "date")),
            authors=names,
            venue=val("booktitle", "journal", "journaltitle"),
            url=url,
            doi=doi_of(val("doi")),
            arxiv=arxiv_id(eprint) or arxiv_id(url),
            on_skip=on_skip,
        )
        if rec is not None:
            yield rec
