"""Files as the corpus readers meet them: which files a path names, and their bytes read safely.

Every read goes through here, so a FIFO, an unreadable file, a binary file, a bad byte or an absurdly long line
is one ``CorpusError`` line naming the file (and line) before any reader parses it.
"""

from __future__ import annotations

import json
import os
import re
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
# How deep a JSON value may nest. No format read here nests past a handful of levels (an OpenAlex work: 5), and
# Python's json module recurses once a level, so a line of 5,000 "[" stopped an ingest with RecursionError, a
# traceback class in place of the file's line. Deeper than this is refused as the file's own error (FILE:LINE),
# well before the interpreter's limit (1,000 frames, some of them ours), so the limit does not move with the stack.
MAX_JSON_DEPTH = 512
# Strings (whose brackets are text), runs of openers and runs of closers: how ``json_depth_error_at`` walks a text
# with the regex engine doing the per-character work, so 1 GB of "[" is one match.
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+', re.S)


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


class JsonTooDeep(ValueError):
    """A JSON text nested deeper than ``MAX_JSON_DEPTH``; ``lineno`` and ``colno`` (1-based) say where it passes."""

    def __init__(self, lineno: int, colno: int) -> None:
        self.lineno, self.colno = lineno, colno
        self.msg = f"JSON nested deeper than {MAX_JSON_DEPTH} levels (at column {colno}); no paper record nests so deep"
        super().__init__(self.msg)


def json_depth_error_at(text: str) -> int | None:
    """The index in ``text`` where JSON nesting first passes ``MAX_JSON_DEPTH``, else None. One pass, brackets
    inside strings ignored; used on the error path only, to name the line."""
    depth = 0
    for m in _JSON_NESTING.finditer(text):
        start, run = m.start(), m.end() - m.start()  # not m.group(): a run may be the whole file
        if text[start] == '"':
            continue
        if text[start] in "[{":
            if depth + run > MAX_JSON_DEPTH:
                return start + MAX_JSON_DEPTH - depth
            depth += run
        else:
            depth = max(0, depth - run)
    return None


def _nests_deeper(value: object, limit: int) -> bool:
    """Whether a decoded value has containers more than ``limit`` deep (walked with a stack, not recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, with nesting deeper than ``MAX_JSON_DEPTH`` a ``JsonTooDeep`` naming where it passes.

    The decoder runs first (in C, at its speed); a value it could decode is walked only when the text has more
    openers than the limit (``count``, also C), so the usual record, with a few dozen brackets, costs nothing
    more. A malformed text is ``json.JSONDecodeError`` as before.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        deep = True
    else:
        openers = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
        deep = openers > MAX_JSON_DEPTH and _nests_deeper(value, MAX_JSON_DEPTH)
    if not deep:
        return value
    whole = text if isinstance(text, str) else text.decode("utf-8", errors="replace")
    pos = json_depth_error_at(whole) or 0
    raise JsonTooDeep(whole.count("\n", 0, pos) + 1, pos - (whole.rfind("\n", 0, pos) + 1) + 1)


def json_lines(
    path: Path, on_damaged: Callable[[str], None] | None = None, max_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of ``path`` as JSON, with its line number; a malformed line, or one nested deeper than
    ``MAX_JSON_DEPTH``, is a ``CorpusError``, or with ``on_damaged`` (an export's lines, each one record) that
    line's error passed there and the line skipped."""
    for lineno, line in text_lines(path, max_bytes):
        if not line.strip():
            continue
        try:
            value = loads_json(line)
        except JsonTooDeep as exc:
            error = f"{path}:{lineno}: {exc.msg}"
        except json.JSONDecodeError as exc:
            error = f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})"
        else:
            yield lineno, value
            continue
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
