"""Files as the corpus readers meet them: which files a path names, and their bytes read safely.

Every read goes through here, so a FIFO, an unreadable file, a binary file, a bad byte or an absurdly long line
is one ``CorpusError`` line naming the file (and line) before any reader parses it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from rag_papers.corpus.record import MAX_ABSTRACT_CHARS, CorpusError

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".csv", ".bib", ".ris", ".json", ".xml", ".atom")
FORMATS = (
    "seeds text (.txt), JSONL (.jsonl), CSV (.csv), BibTeX (.bib), RIS (.ris), the arXiv API's Atom feeds "
    "(.xml, .atom), and as .json or .jsonl: CSL-JSON, the arXiv metadata snapshot (arXiv), OpenAlex works, "
    "OpenReview notes (API v2), Semantic Scholar papers"
)
SNIFF_BYTES = 8192  # how much of a file tells its format (``read.detect``)
# A line of the project's own formats holds about one abstract, so a longer one is refused before it is decoded.
# A line of an export is one whole record with what is not stored (an OpenAlex work's authorships, concepts and
# references run to megabytes): its cap only bounds memory, and the stored fields have their own (``check_values``).
MAX_LINE_BYTES = MAX_ABSTRACT_CHARS * 4 + 1024
MAX_EXPORT_LINE_BYTES = 64 * 1024 * 1024


def unknown_format(path: Path, what: str) -> CorpusError:
    """The one-line refusal of a file in none of the formats: what it holds, and the formats that are read."""
    return CorpusError(f"{path}: cannot tell the format ({what}); supported formats: {FORMATS}")


def check_regular_file(path: Path) -> int:
    """The size of ``path``, which must be a regular file; else a one-line ``CorpusError``.

    Decided from ``stat`` alone, which never blocks: opening a FIFO for reading waits for a
    writer forever, so FIFOs, sockets and devices are refused before anything opens them.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file or directory") from None
    except OSError as exc:  # a folder on the way that this user may not enter, a name too long
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CorpusError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        raise CorpusError(f"{path}: not a regular file ({kind}); give a file")
    return st.st_size


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes; a file this user may not read is a one-line ``CorpusError``."""
    try:
        return path.open("rb")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None


def check_file(path: Path) -> None:
    """``path`` is a regular, non-empty file of text (no NUL bytes in its first KB); else a one-line ``CorpusError``."""
    if check_regular_file(path) == 0:
        raise CorpusError(f"{path}: file is empty")
    with open_binary(path) as fh:
        head = fh.read(8192)
    if b"\x00" in head:
        raise CorpusError(f"{path}: looks like a binary file (NUL bytes); expected text, JSONL or CSV")


def text_lines(path: Path, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """Decode line by line so a bad byte is reported with its line number.

    A raw NUL byte is refused (binary data); a NUL written as a JSON escape (``\\u0000``) is a
    character like any other control and is stripped with them (``normalise``).
    """
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            if len(raw) > max_bytes:
                if max_bytes == MAX_LINE_BYTES:
                    raise CorpusError(
                        f"{path}:{lineno}: line is {len(raw):,} bytes; an abstract may be at most {MAX_ABSTRACT_CHARS:,} characters"
                    )
                raise CorpusError(f"{path}:{lineno}: line is {len(raw):,} bytes; a record may be at most {max_bytes:,}")
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if "\x00" in text:
                raise CorpusError(f"{path}:{lineno}: contains NUL bytes; expected text")
            yield lineno, text


def json_lines(
    path: Path, on_damaged: Callable[[str], None] | None = None, max_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of ``path`` as JSON, with its line number; a malformed line is a ``CorpusError``, or
    with ``on_damaged`` (an export's lines, each one record) that line's error passed there and the line skipped."""
    for lineno, line in text_lines(path, max_bytes):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            error = f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})"
            if on_damaged is None:
                raise CorpusError(error) from None
            on_damaged(error)


def first_line(path: Path, max_bytes: int = MAX_EXPORT_LINE_BYTES) -> str:
    """The first non-blank line of ``path`` (at most ``max_bytes``), bad bytes replaced: a JSON-lines export whose
    first record is longer than the sniffed head is told by it."""
    with open_binary(path) as fh:
        for raw in fh:
            if raw.strip():
                return raw[:max_bytes].decode("utf-8-sig", errors="replace")
    return ""


def read_text(path: Path) -> str:
    """The whole of ``path`` as text, for the parsers that need it whole (BibTeX, RIS, a JSON page)."""
    with open_binary(path) as fh:
        raw = fh.read()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CorpusError(f"{path}:{line}: not valid UTF-8 ({exc.reason})") from None


def sniff(path: Path) -> str:
    """The first ``SNIFF_BYTES`` of ``path`` as text (a bad byte replaced): enough to tell its format."""
    with open_binary(path) as fh:
        return fh.read(SNIFF_BYTES).decode("utf-8-sig", errors="replace")


def _folder_files(folder: Path) -> list[Path]:
    """The supported files under ``folder``; a folder this user may not read is an error.

    ``Path.rglob`` skips unreadable folders silently, which would leave their files out of the
    ingest without a word (symlinked folders are not followed, as with ``rglob``).
    """

    def fail(exc: OSError) -> None:
        raise CorpusError(f"{exc.filename or folder}: cannot read the folder ({exc.strerror or exc})")

    found: list[Path] = []
    for root, _dirs, files in os.walk(folder, onerror=fail):
        found.extend(
            q for name in files if (q := Path(root) / name).suffix.lower() in SUPPORTED_SUFFIXES and q.is_file()
        )
    return sorted(found)


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files named, and the supported files inside folders named, sorted for determinism."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = _folder_files(p)
            if not found:
                raise CorpusError(f"{p}: folder has no {', '.join(SUPPORTED_SUFFIXES)} files")
            out.extend(found)
        else:
            out.append(p)
    return out
