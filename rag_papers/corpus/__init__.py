"""Corpus stage: read abstracts (the project's seeds text, JSONL and CSV, and researchers' exports: BibTeX, RIS,
CSL-JSON, arXiv's snapshot and Atom feeds, OpenAlex, OpenReview, Semantic Scholar) into ``Paper`` records.

The modules, lowest first: ``text`` (sanitising, reading text, the one sentence splitter), ``titles`` (derived
titles), ``record`` (``RawRecord``, ``Paper``, the checks), ``ids`` (DOIs, arXiv ids, dedupe keys), ``files``
(safe file access), ``readers/`` (one module per format) and ``read`` (the format told, the reader picked).
Everything other modules use is importable from here.
"""

from rag_papers.corpus.files import (
    FORMATS,
    SNIFF_BYTES,
    SUPPORTED_SUFFIXES,
    check_regular_file,
    expand_paths,
    json_lines,
    open_binary,
    unknown_format,
)
from rag_papers.corpus.ids import (
    arxiv_id,
    dedupe_keys,
    doi_of,
    first_author_key,
    person,
    registry_keys,
    title_key,
)
from rag_papers.corpus.read import detect, read_export, read_file, validate
from rag_papers.corpus.readers.base import OnDamaged, OnSkip, first_of, year_in
from rag_papers.corpus.readers.bibtex import read_bibtex
from rag_papers.corpus.readers.csv import read_csv
from rag_papers.corpus.readers.json_export import (
    JsonReader,
    first_line_record,
    json_kind,
    json_records,
    read_json_export,
)
from rag_papers.corpus.readers.jsonl import read_jsonl
from rag_papers.corpus.readers.ris import read_ris
from rag_papers.corpus.readers.seeds import read_seeds
from rag_papers.corpus.record import (
    DERIVED_TITLE_NOTE,
    MAX_ABSTRACT_CHARS,
    MAX_AUTHOR_CHARS,
    MAX_AUTHORS,
    MAX_ID_CHARS,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    MAX_VENUE_CHARS,
    MAX_YEAR,
    MIN_ABSTRACT_WORDS,
    MIN_YEAR,
    CorpusError,
    Paper,
    RawRecord,
    check_values,
    clip,
    clip_repr,
    content_hash,
    normalise,
    normalise_id,
    to_paper,
)
from rag_papers.corpus.text import STOPWORDS, plain_text, quotable_sentences, safe_text, sentences
from rag_papers.corpus.titles import GENERIC_ACRONYMS, GENERIC_WORDS, coined_name, derive_title, topic_phrases

__all__ = [
    "DERIVED_TITLE_NOTE",
    "FORMATS",
    "GENERIC_ACRONYMS",
    "GENERIC_WORDS",
    "MAX_ABSTRACT_CHARS",
    "MAX_AUTHORS",
    "MAX_AUTHOR_CHARS",
    "MAX_ID_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_URL_CHARS",
    "MAX_VENUE_CHARS",
    "MAX_YEAR",
    "MIN_ABSTRACT_WORDS",
    "MIN_YEAR",
    "SNIFF_BYTES",
    "STOPWORDS",
    "SUPPORTED_SUFFIXES",
    "CorpusError",
    "JsonReader",
    "OnDamaged",
    "OnSkip",
    "Paper",
    "RawRecord",
    "arxiv_id",
    "check_regular_file",
    "check_values",
    "clip",
    "clip_repr",
    "coined_name",
    "content_hash",
    "dedupe_keys",
    "derive_title",
    "detect",
    "doi_of",
    "expand_paths",
    "first_author_key",
    "first_line_record",
    "first_of",
    "json_kind",
    "json_lines",
    "json_records",
    "normalise",
    "normalise_id",
    "open_binary",
    "person",
    "plain_text",
    "quotable_sentences",
    "read_bibtex",
    "read_csv",
    "read_export",
    "read_file",
    "read_json_export",
    "read_jsonl",
    "read_ris",
    "read_seeds",
    "registry_keys",
    "safe_text",
    "sentences",
    "title_key",
    "to_paper",
    "topic_phrases",
    "unknown_format",
    "validate",
    "year_in",
]
