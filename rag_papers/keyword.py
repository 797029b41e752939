"""The index stage's keyword side: a tantivy BM25 index, derived from the registry's texts.

The registry (SQLite) holds each paper's title and abstract; this index holds their
``keyword_tokens`` and is rebuilt from them whenever the two disagree. Why tantivy and
not SQLite's FTS5 beside the registry: FTS5 has no early termination, so ranking walks
every posting of every query term and its time grew with the corpus on synthetic
benchmark corpora, while tantivy (block-max WAND over impact-bounded blocks) stayed
fast, with exact BM25 over all query terms (docs/design-notes.md). One engine, not two
kept in step: term statistics come from tantivy too (``KeywordStore.doc_freqs``).

Write order makes this index a superset of the registry's papers outside a rebuild: it
gets a batch's papers before the registry commits them and loses removed papers after
the registry has dropped them. Searches skip papers the registry lacks; a copy that
lacks registry papers (lost, damaged, from an older version) is rebuilt from the
registry by the next write, or by a reader that can take the writer's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError
from rag_papers.corpus import STOPWORDS

# tantivy's BM25 k1 (its default, not settable from Python; b is 0.75): the retrieve stage bounds a
# term's score by (K1 + 1) x its idf.
BM25_K1 = 1.2

# What ``keyword_tokens`` makes of a text; a change to it bumps this, and the next write
# rebuilds the index from the registry so stored and query tokens agree.
KEYWORD_VERSION = "1"

# Terms in at most this many papers get an exact count of live papers (``doc_freqs``): a
# posting walk, cheap at this size. Above it tantivy's stored count, which includes removed
# papers until their segment is merged, is a close enough idf and free to read.
EXACT_DF_UP_TO = 5000


# ---------------------------------------------------------------- integrity
# tantivy ends every segment file with a footer: a JSON object holding the CRC-32 of everything
# before it, the JSON's length (u32, little-endian) and the magic number 1337 (tantivy's
# directory/footer.rs). tantivy checks them only in ``Index::validate_checksum``, which tantivy-py does
# not expose, and reads damaged files as they are: a zeroed posting list panicked in Rust, a damaged
# term dictionary raised "Fst data is corrupted", bytes changed inside a block changed scores
# silently. So the same check is done here, on tantivy's own checksums, before the index is opened.
FOOTER_MAGIC = 1337
FOOTER_MAX_LEN = 50_000  # tantivy's own bound on the footer's JSON
SEGMENT_SUFFIXES = (".idx", ".pos", ".term", ".store", ".fast", ".fieldnorm")
# Files found intact, by (size, mtime in ns): segment files are written once and never changed, so a
# file that still has both is not read again (a search's open reads only what the last writes added).
# ``repair`` checks every file regardless.
VERIFIED_NAME = ".rag-papers-verified.json"
WRITER_LOCK = ".tantivy-writer.lock"  # tantivy's writer lock file (flock), taken here too to rebuild a damaged index


class KeywordIndexError(RagPapersError):
    """The keyword index is damaged and cannot be rebuilt here now: the message names the way out."""


def segment_files(path: Path) -> list[Path] | None:
    """The files of the segments tantivy's ``meta.json`` names (what a search reads); None when it cannot be read."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        out: list[Path] = []
        for seg in meta["segments"]:
            uuid = str(seg["segment_id"]).replace("-", "")
            out += [path / f"{uuid}{suffix}" for suffix in SEGMENT_SUFFIXES]
            if seg.get("deletes"):
                out.append(path / f"{uuid}.{int(seg['deletes']['opstamp'])}.del")
        return out
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def footer_intact(file: Path) -> bool:
    """Whether ``file``'s body matches the CRC-32 in its tantivy footer (a missing file: no)."""
    try:
        with file.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 8:
                return False
            fh.seek(size - 8)
            length, magic = struct.unpack("<II", fh.read(8))
            if magic != FOOTER_MAGIC or length > FOOTER_MAX_LEN or size < length + 8:
                return False
            body = size - 8 - length
            fh.seek(body)
            want = json.loads(fh.read(length))["crc"]
            fh.seek(0)
            crc, left = 0, body
            while left:
                block = fh.read(min(left, 1 << 20))
                if not block:
                    return False
                crc, left = zlib.crc32(block, crc), left - len(block)
            return bool(crc == want)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def damaged_files(path: Path, full: bool = False) -> list[str]:
    """Names of the keyword index's files that fail tantivy's checksums ([] for none, or no index yet).

    ``full``: read every file, not only those changed since they were last found intact. A file a
    writer's merge removed meanwhile is looked for again in the newer ``meta.json``.
    """
    if not (path / "meta.json").exists():
        return []
    verified_file = path / VERIFIED_NAME
    try:
        verified = {} if full else dict(json.loads(verified_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        verified = {}
    for attempt in range(3):
        files = segment_files(path)
        if files is None:
            return ["meta.json"]
        bad: list[str] = []
        found: dict[str, list[int]] = {}
        for f in files:
            try:
                st = f.stat()
            except FileNotFoundError:  # tantivy writes every component of a segment, empty or not
                bad.append(f.name)
                continue
            stamp = [st.st_size, st.st_mtime_ns]
            if verified.get(f.name) == stamp or footer_intact(f):
                found[f.name] = stamp
            else:
                bad.append(f.name)
        if not bad or segment_files(path) == files or attempt == 2:
            break  # a file missing while meta.json changed: a merge replaced it, look again
    if not bad and found != verified:
        with contextlib.suppress(OSError):  # a read-only data directory: checked again next time
            tmp = path / f"{VERIFIED_NAME}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(found), encoding="utf-8")
            os.replace(tmp, verified_file)
    return bad


@contextlib.contextmanager
def writer_lock_free(path: Path) -> Iterator[bool]:
    """Hold tantivy's writer lock on ``path`` (the flock its writer takes) for the block; yields whether it
    was free. Used to replace a damaged index, which tantivy itself cannot be trusted to open."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


class KeywordStore:
    """Papers' stemmed token text, keyed by the registry's ``seq``; BM25 (k1=1.2, b=0.75) top-n."""

    HEAP_BYTES = 50_000_000  # the writer's buffer; tantivy flushes a segment when it fills

    def __init__(self, path: Path) -> None:
        import tantivy

        self._tantivy = tantivy
        path.mkdir(parents=True, exist_ok=True)
        sb = tantivy.SchemaBuilder()
        sb.add_unsigned_field("seq", stored=False, fast=True, indexed=True)
        # Tokens arrive stemmed and lower-cased (index.keyword_tokens), one space apart.
        sb.add_text_field("text", tokenizer_name="whitespace", index_option="freq")
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema, path=str(path))
        self._writer: Any = None

    # ---- reading
    def state(self) -> tuple[int, int]:
        """(live papers, largest seq): compared with the registry's before this index is trusted."""
        searcher = self.index.searcher()
        n = int(searcher.num_docs)
        if n == 0:
            return 0, 0
        hits = searcher.search(self._tantivy.Query.all_query(), 1, count=False, order_by_field="seq")
        top = searcher.fast_field_values("seq", [addr for _, addr in hits.hits])
        return n, int(top[0] or 0) if top else 0

    def seqs(self) -> list[int]:
        """Every live paper's seq, duplicates kept: for consistency checks (bench, tests)."""
        searcher = self.index.searcher()
        hits = searcher.search(self._tantivy.Query.all_query(), max(1, searcher.num_docs), count=False).hits
        return [int(v) for v in searcher.fast_field_values("seq", [addr for _, addr in hits]) if v is not None]

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Papers containing each term, as tantivy's BM25 sees them.

        Exact for rare terms (``EXACT_DF_UP_TO``): a removed paper's words stop counting at
        once, so a question about it finds its words unknown, not known but unmatched.
        """
        searcher = self.index.searcher()
        out: dict[str, int] = {}
        for t in dict.fromkeys(terms):
            df = int(searcher.doc_freq("text", t))
            if 0 < df <= EXACT_DF_UP_TO:
                found = searcher.search(self._tantivy.Query.term_query(self.schema, "text", t), 1, count=True)
                df = int(found.count)  # type: ignore[attr-defined]  # tantivy's stubs lack SearchResult.count
            out[t] = df
        return out

    def search(self, terms: Sequence[tuple[str, float]], n: int) -> list[tuple[int, float]]:
        """(seq, score) of the ``n`` best papers for any of these (term, weight) pairs, best first.

        A paper's score is the sum over the terms it contains of weight x the term's BM25
        (tantivy's: Lucene's idf). The weights let the caller swap in another idf.
        """
        q = self._tantivy.Query
        should = self._tantivy.Occur.Should
        query = q.boolean_query([(should, q.boost_query(q.term_query(self.schema, "text", t), w)) for t, w in terms])
        searcher = self.index.searcher()
        hits = searcher.search(query, n, count=False).hits
        seqs = searcher.fast_field_values("seq", [addr for _, addr in hits])
        return [(int(seq), float(score)) for (score, _), seq in zip(hits, seqs) if seq is not None]

    def matches(self, terms: Sequence[str], n: int) -> tuple[int, list[int]]:
        """(papers containing every one of these terms, the seqs of the ``n`` best of them by BM25, best first)."""
        q = self._tantivy.Query
        must = self._tantivy.Occur.Must
        query = q.boolean_query([(must, q.term_query(self.schema, "text", t)) for t in terms])
        searcher = self.index.searcher()
        found = searcher.search(query, max(1, n), count=True)
        seqs = searcher.fast_field_values("seq", [addr for _, addr in found.hits])
        return int(found.count), [int(seq) for seq in seqs if seq is not None]  # type: ignore[attr-defined]

    # ---- writing (one writer per index: tantivy holds a lock file while it lives)
    def _w(self) -> Any:
        if self._writer is None:
            try:
                self._writer = self.index.writer(heap_size=self.HEAP_BYTES, num_threads=1)
            except ValueError as e:
                raise RagPapersError("another ingest or removal is writing this index; wait for it to finish") from e
        return self._writer

    @property
    def writing(self) -> bool:
        """Whether this process holds the writer (a write operation is under way here)."""
        return self._writer is not None

    def lock(self) -> None:
        """Take the writer (and its lock) now: a write operation calls this before it changes anything."""
        self._w()

    def add(self, rows: Iterable[tuple[int, str]]) -> None:
        """Add (seq, token text) rows; visible and durable after ``commit``."""
        w = self._w()
        for seq, text in rows:
            doc = self._tantivy.Document()
            doc.add_unsigned("seq", seq)
            doc.add_text("text", text)
            w.add_document(doc)

    def delete(self, seqs: Sequence[int]) -> None:
        # By query: delete_documents_by_term with a Python int silently misses u64 fields.
        w = self._w()
        for i in range(0, len(seqs), 1000):
            w.delete_documents_by_query(
                self._tantivy.Query.term_set_query(self.schema, "seq", list(seqs[i : i + 1000]))
            )

    def clear(self) -> None:
        self.rebuild(())

    def rebuild(self, rows: Iterable[tuple[int, str]]) -> None:
        """Replace every paper with these (seq, token text) rows in one commit: readers see the old
        contents or the new, never a half-built index."""
        self._w().delete_all_documents()
        self.add(rows)
        self.commit()

    def commit(self) -> None:
        self._w().commit()
        self.index.reload()

    def close(self) -> None:
        """Let background merges finish and release the writer's lock."""
        if self._writer is not None:
            self._writer.wait_merging_threads()
            self._writer = None


# ---------------------------------------------------------------- tokens and term weights
_STEMMER: Any = None


# Runs of 2+ letters or digits; underscores split words (snake_case names are several words).
_WORD = re.compile(r"[^\W_]{2,}")


_ACRONYM_PLURAL = re.compile(r"\b([A-Z][A-Z0-9]*[A-Z])s\b")


def keyword_tokens(text: str) -> list[str]:
    """Lower-cased, stop-word-free, Snowball-stemmed words: what the keyword index stores and matches.

    Acronym plurals are singularised first (LLMs -> LLM, GNNs -> GNN): the stemmer
    would leave "llms" and "llm" as two different words.
    """
    text = _ACRONYM_PLURAL.sub(r"\1", text)
    stem = _stemmer().stemWords
    return list(stem([w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]))


def _stemmer() -> Any:
    global _STEMMER
    if _STEMMER is None:
        import Stemmer

        _STEMMER = Stemmer.Stemmer("english")
    return _STEMMER


def paper_text(title: str, abstract: str) -> str:
    """What the index stores for a paper: its title and abstract as space-joined ``keyword_tokens``."""
    return " ".join(keyword_tokens(f"{title}. {abstract}"))


def lucene_idf(n_docs: int, df: int) -> float:
    """Lucene's (and tantivy's) BM25 idf: never negative; a term no paper has gets the largest."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def useful_terms(stats: list[tuple[str, int]], n_docs: int, max_df: float) -> list[str]:
    """Known terms specific enough to be evidence: in at most ``max_df`` of the papers (the ``keyword_max_df``
    setting, fitted on eval/qa.jsonl's dev part: every caller passes it, so there is no second copy here).

    A match on a word found in 40% of the corpus ("neural", "model") says little about
    which paper is meant; counting it let generic words outvote the dense ranking.
    """
    return [t for t, df in stats if df and df <= max(1.0, max_df * n_docs)]


# Words that say "I am asking about papers", not what about: dropped from keyword queries (``keyword_query``),
# and never taken for a name the question asks about (``coverage``).
QUERY_BOILERPLATE = frozenset(
    [
        "paper",
        "papers",
        "work",
        "works",
        "study",
        "studies",
        "research",
        "article",
        "articles",
        "abstract",
        "abstracts",
        "author",
        "authors",
        "propose",
        "proposes",
        "proposed",
        "claim",
        "claims",
        "describe",
        "describes",
        "does",
        "do",
        "did",
        "which",
        "what",
        "who",
        "whom",
        "how",
        "why",
        "when",
        "show",
        "shows",
        "find",
        "finds",
        "present",
        "presents",
        "introduce",
        "introduces",
        "method",
        "methods",
        "approach",
        "approaches",
        "technique",
        "techniques",
        "tell",
        "explain",
        "discuss",
        "discusses",
        "anyone",
        "someone",
        "something",
        "about",
        "regarding",
        "there",
        "any",
        "some",
        "way",
        "ways",
        "can",
        "could",
        "would",
        "should",
        "using",
        "use",
    ]
)


def keyword_query(query: str) -> str:
    """The query's words without ``QUERY_BOILERPLATE`` (all of them when nothing else is left)."""
    words = re.findall(r"[\w'-]+", query)
    kept = [w for w in words if w.lower() not in QUERY_BOILERPLATE]
    return " ".join(kept) if kept else query
