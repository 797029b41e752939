"""JSONL, the project's own: one object a line with an ``abstract`` and optionally title, id, year, venue,
authors and url (an export's records written as JSON lines are read by ``json_export`` instead)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rag_papers.corpus.files import json_lines
from rag_papers.corpus.readers.base import mapping_record
from rag_papers.corpus.record import CorpusError, RawRecord


def read_jsonl(path: Path) -> Iterator[RawRecord]:
    for lineno, obj in json_lines(path):
        if not isinstance(obj, dict):
            raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield mapping_record(path, lineno, obj)
