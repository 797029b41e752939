"""CSV, the project's own: a header row with an ``abstract`` column and optionally title, id, year, venue,
authors and url (the JSONL fields), a record a row; a record is cited by the line its row starts on."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from rag_papers.corpus.files import text_lines
from rag_papers.corpus.readers.base import mapping_record
from rag_papers.corpus.record import MAX_ABSTRACT_CHARS, CorpusError, RawRecord


def read_csv(path: Path) -> Iterator[RawRecord]:
    csv.field_size_limit(MAX_ABSTRACT_CHARS * 4)

    def decoded() -> Iterator[str]:
        for _, line in text_lines(path):
            yield line

    reader = csv.DictReader(decoded())
    try:
        fields = reader.fieldnames
    except csv.Error as exc:
        raise CorpusError(f"{path}:1: malformed CSV header ({exc})") from None
    if not fields or "abstract" not in [f.strip().lower() for f in fields]:
        raise CorpusError(f"{path}:1: CSV needs an 'abstract' column (found: {', '.join(fields or []) or 'none'})")
    try:
        start = reader.line_num + 1
        for row in reader:
            obj = {(k or "").strip().lower(): v for k, v in row.items()}
            yield mapping_record(path, start, obj)  # a quoted record may span lines: cite its first
            start = reader.line_num + 1
    except csv.Error as exc:
        raise CorpusError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
