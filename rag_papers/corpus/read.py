"""Reading a corpus file: its format told (``detect``), its reader picked, and every record it yields checked
(``check_values``), so ``validate`` can read every file through once and fail before the index is touched.

Readers stream record by record so a corpus of millions never sits in memory, and validate as they go: every
problem is a ``CorpusError`` naming the file and line. An export's record without an abstract is skipped and
counted (``on_skip``); a damaged record of an export (a reference manager's library, where one bad entry is the
norm) is skipped and named (``on_damaged``), or without it refuses the file; the project's own formats (seeds,
JSONL, CSV) are all or nothing. A file in none of the formats is refused in one line that lists them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from rag_papers.corpus.files import check_file, first_line, read_text, sniff, unknown_format
from rag_papers.corpus.readers.atom import is_feed, read_atom
from rag_papers.corpus.readers.base import OnDamaged, OnSkip
from rag_papers.corpus.readers.bibtex import read_bibtex
from rag_papers.corpus.readers.csv import read_csv
from rag_papers.corpus.readers.json_export import first_line_record, json_kind, read_json_export
from rag_papers.corpus.readers.jsonl import read_jsonl
from rag_papers.corpus.readers.ris import read_ris
from rag_papers.corpus.readers.seeds import read_seeds
from rag_papers.corpus.record import CorpusError, RawRecord, check_values


def detect(path: Path, head: str) -> str | None:
    """The format of ``path`` from its extension and its first few KB; None for the project's own formats."""
    suffix = path.suffix.lower()
    if suffix == ".bib":
        if not re.search(r"@\s*[A-Za-z]+\s*[{(]", head):
            raise unknown_format(path, "a .bib file with no BibTeX entry")
        return "bibtex"
    if suffix == ".ris":
        if not head.lstrip("\ufeff \r\n").startswith("TY  -"):
            raise unknown_format(path, "a .ris file that does not start with a TY line")
        return "ris"
    if suffix in (".xml", ".atom"):
        if not is_feed(head):
            raise unknown_format(path, f"a {suffix} file that is not an Atom feed")
        return "atom"
    first = first_line_record(head)
    if first is None and suffix in (".json", ".jsonl") and head.lstrip().startswith("{") and "\n" not in head.strip():
        # One record longer than the head (an OpenAlex work with its authorships and references): read it whole.
        first = first_line_record(first_line(path))
        if suffix == ".json" and isinstance(first, dict):
            return "jsonlines"
    if suffix == ".json":
        # One whole object on the first line and more after it: JSON lines (streamed); else one document.
        rest = head.lstrip().split("\n", 1)[1:]
        return "jsonlines" if isinstance(first, dict) and rest and rest[0].strip() else "json"
    if suffix == ".jsonl" and json_kind(first) is not None:
        return "jsonlines"
    return None


def read_export(
    path: Path, kind: str, on_skip: OnSkip | None, on_damaged: OnDamaged | None = None
) -> Iterator[RawRecord]:
    """The records of an export of format ``kind`` (from ``detect``); the whole file is read for all but JSON
    lines, as the BibTeX and RIS parsers, a JSON page and an Atom feed need."""
    if kind == "jsonlines":
        yield from read_json_export(path, None, on_skip, on_damaged)
        return
    text = read_text(path)
    if kind == "bibtex":
        yield from read_bibtex(path, text, on_skip, on_damaged)
    elif kind == "ris":
        yield from read_ris(path, text, on_skip, on_damaged)
    elif kind == "atom":
        yield from read_atom(path, text, on_skip, on_damaged)
    else:
        yield from read_json_export(path, text, on_skip, on_damaged)


def read_file(
    path: Path, on_skip: Callable[[str], None] | None = None, on_damaged: OnDamaged | None = None
) -> Iterator[RawRecord]:
    """Stream one file's records; raises CorpusError on the first problem, or if it holds none.

    The format is told by the extension and the first few KB (``detect``): an export (BibTeX, RIS, CSL-JSON,
    arXiv, OpenAlex, OpenReview, Semantic Scholar, an arXiv Atom feed) or the project's own seeds text, JSONL or
    CSV. An export's record without an abstract is skipped and passed to ``on_skip``; a damaged one, with
    ``on_damaged``, is skipped and its error line passed there (a file left with no good record still fails,
    on its first damaged record's line).
    """
    check_file(path)
    kind = detect(path, sniff(path))
    suffix = path.suffix.lower()
    records: Iterable[RawRecord]
    skipped = 0

    def skip(source: str) -> None:
        nonlocal skipped
        skipped += 1
        if on_skip is not None:
            on_skip(source)

    first_damage: list[str] = []

    def damage(line: str) -> None:
        if not first_damage:
            first_damage.append(line)
        if on_damaged is not None:
            on_damaged(line)

    if kind is not None:
        records = read_export(path, kind, skip, damage if on_damaged is not None else None)
    else:
        records = (read_jsonl if suffix == ".jsonl" else read_csv if suffix == ".csv" else read_seeds)(path)
    count = 0
    for rec in records:
        check_values(rec)
        count += 1
        yield rec
    if count == 0:
        if first_damage:
            raise CorpusError(first_damage[0])
        why = f" ({skipped} records skipped: no abstract)" if skipped else ""
        raise CorpusError(f"{path}: no abstracts found{why}")


def validate(
    paths: Iterable[Path],
    on_record: Callable[[RawRecord], None] | None = None,
    on_skip: Callable[[str], None] | None = None,
    on_damaged: OnDamaged | None = None,
) -> int:
    """Read every file through once without keeping anything: fail before the index is touched."""
    n = 0
    for path in paths:
        for rec in read_file(path, on_skip, on_damaged):
            n += 1
            if on_record is not None:
                on_record(rec)
    return n
