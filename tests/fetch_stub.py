"""Local, stdlib-only stand-ins for the three APIs ``rag-papers fetch`` asks, for tests and the scale benchmark.

Each answers as the real service does, from records in its real format (tests/fetch/README.md says where each
fixture comes from):

* ``ArxivStub``: ``GET /api/query?search_query=&start=&max_results=``, an Atom feed whose ``<entry>`` elements are
  copied byte for byte from recorded arXiv answers, with the opensearch header arXiv writes; a query it cannot
  parse gets arXiv's error feed.
* ``OpenReviewStub``: API v2 ``GET /notes`` with ``content.venueid`` or ``invitation``, ``sort=id``, ``limit``
  (capped at 1000, as the API caps it), ``offset``, ``after`` and ``count``; ``{"notes": [...], "count": N}``.
* ``OpenAlexStub``: ``GET /works?search=&per-page=&cursor=&select=``, cursor paging with an opaque
  ``meta.next_cursor`` (null on the last page), ``per-page`` 1 to 200 (else OpenAlex's 400 error), ``select``.

Knobs, changeable while the server runs:

* ``fail``: answers to give before the real ones, each ``(status, headers)``, e.g. ``[(429, {"Retry-After": "1"})]``;
* ``stall_after``: when an int, every request after that many pages is held (not answered) until ``release()``
  or ``stop()``: a client killed then has completed exactly that many pages;
* ``misbehave``: one of ``HOSTILE``, how every answer after ``misbehave_after`` good pages goes wrong, as a
  hostile or broken server's does (issue 47's probe): ``endless`` (a body that never ends, streamed as fast as the
  client reads), ``drip`` (the whole answer, status line included, a byte every ``drip_s``), ``silence`` (status
  and headers, then nothing), ``gzip_bomb`` (512 MiB of zeros gzipped to half a MB, sent as
  ``Content-Encoding: gzip`` unasked), ``entities`` (XML whose entities expand a billion-fold), ``external`` (XML
  naming a local file as an entity) and ``deep`` (a million nested brackets; for Atom, 100,000 nested elements).

Every request is recorded in ``requests`` as a ``Request`` (path, query, headers, time).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).parent / "fetch"


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)


Answer = tuple[int, dict[str, str], bytes]
HOSTILE = ("endless", "drip", "silence", "gzip_bomb", "entities", "external", "deep")
ENDLESS_MAX = 1 << 30  # an "endless" body ends here, so that a client without a cap ends too (holding 1 GiB)
BILLION_LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE feed [\n  <!ENTITY lol0 "lol">\n'
    + b"".join(b'  <!ENTITY lol%d "%s">\n' % (i, b"&lol%d;" % (i - 1) * 10) for i in range(1, 10))
    + b']>\n<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>http://arxiv.org/abs/2401.00001v1</id>'
    b"<title>&lol9;</title><summary>&lol9;</summary></entry></feed>\n"
)
EXTERNAL_ENTITY = (
    b'<?xml version="1.0"?>\n<!DOCTYPE feed [\n  <!ENTITY xxe SYSTEM "file:///etc/passwd">\n]>\n'
    b'<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>http://arxiv.org/abs/2401.00001v1</id>'
    b"<title>Read this</title><summary>Leaked: &xxe; end of the abstract.</summary></entry></feed>\n"
)
_GZIP_BOMB: list[bytes] = []


def gzip_bomb() -> bytes:
    """512 MiB of zeros as gzip: one member of 1 MiB, compressed once, repeated (gzip reads members one after
    another), so it is made at once and is about half a MB."""
    if not _GZIP_BOMB:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        member = packer.compress(bytes(1 << 20)) + packer.flush()
        _GZIP_BOMB.append(member * 512)
    return _GZIP_BOMB[0]


class Stub:
    """A threaded HTTP server on a free loopback port; subclasses answer ``answer(path, query)``."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.fail: list[tuple[int, dict[str, str]]] = []
        self.stall_after: int | None = None
        self.misbehave: str | None = None
        self.misbehave_after = 0
        self.drip_s = 0.05
        self.pages_served = 0
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- what a subclass provides
    def answer(self, path: str, query: dict[str, str]) -> Answer:
        raise NotImplementedError

    def deep(self, body: bytes) -> bytes:
        """A polite answer's body with a million levels of nesting (for a JSON API: brackets)."""
        return b"[" * 1_000_000 + b"]" * 1_000_000

    # ---- the server
    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                stub._serve(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def release(self) -> None:
        """Answer the held requests and hold no more."""
        self.stall_after = None
        self._release.set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.stop()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        with self._lock:
            self.requests.append(Request(parts.path, query, {k.lower(): v for k, v in handler.headers.items()}))
            failure = self.fail.pop(0) if self.fail else None
            stall = failure is None and self.stall_after is not None and self.pages_served >= self.stall_after
        if stall:
            self._release.wait(120)
        if failure is not None:
            status, headers = failure
            body = json.dumps({"name": "TooManyRequestsError", "message": "Too many requests"}).encode()
            self._send(handler, status, {"Content-Type": "application/json", **headers}, body)
            return
        try:
            status, headers, body = self.answer(parts.path, query)
        except Exception as exc:  # a bug in the stand-in: a 500 the client retries, and the test sees it
            status, headers, body = 500, {"Content-Type": "text/plain"}, repr(exc).encode()
        if status == 200 and self.misbehave is not None and self.pages_served >= self.misbehave_after:
            self._misbehave(handler, self.misbehave, headers, body)
            return
        if status == 200:
            with self._lock:
                self.pages_served += 1
        self._send(handler, status, headers, body)

    def _misbehave(self, handler: BaseHTTPRequestHandler, how: str, headers: dict[str, str], body: bytes) -> None:
        """Answer as ``how`` says (``HOSTILE``) instead of with ``body``."""
        handler.close_connection = True
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        try:
            if how == "endless":
                handler.wfile.write(f"HTTP/1.1 200 OK\r\n{head}Connection: close\r\n\r\n".encode())
                handler.wfile.write(body[: len(body) // 2])
                filler, sent = b"x" * (1 << 16), 0
                while sent < ENDLESS_MAX and not self._release.is_set():
                    handler.wfile.write(filler)
                    sent += len(filler)
            elif how == "drip":
                whole = f"HTTP/1.1 200 OK\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
                for i in range(len(whole)):
                    if self._release.wait(self.drip_s):
                        return
                    handler.wfile.write(whole[i : i + 1])
            elif how == "silence":
                handler.wfile.write(f"HTTP/1.1 200 OK\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode())
                self._release.wait(120)
            elif how == "gzip_bomb":
                self._send(handler, 200, {**headers, "Content-Encoding": "gzip"}, gzip_bomb())
            elif how in ("entities", "external"):
                doc = BILLION_LAUGHS if how == "entities" else EXTERNAL_ENTITY
                self._send(handler, 200, {"Content-Type": "application/atom+xml; charset=utf-8"}, doc)
            elif how == "deep":
                self._send(handler, 200, headers, self.deep(body))
            else:
                raise ValueError(f"misbehave: {how!r} is none of {HOSTILE}")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: what a client should do
            pass

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        try:
            handler.send_response(status)
            for k, v in headers.items():
                handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client was killed while held
            pass

    def pages(self, path: str) -> list[Request]:
        """The requests for ``path`` (the retried ones included)."""
        return [r for r in self.requests if r.path == path]


# --------------------------------------------------------------------------- arXiv
ATOM_HEAD = """<?xml version='1.0' encoding='UTF-8'?>
<feed xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom" xmlns="http://www.w3.org/2005/Atom">
  <id>https://arxiv.org/api/stand-in</id>
  <title>arXiv Query: search_query={q}&amp;id_list=&amp;start={start}&amp;max_results={size}</title>
  <updated>2026-04-12T22:09:27Z</updated>
  <link href="https://arxiv.org/api/query?search_query={q}&amp;start={start}&amp;max_results={size}&amp;id_list=" type="application/atom+xml"/>
  <opensearch:itemsPerPage>{size}</opensearch:itemsPerPage>
  <opensearch:totalResults>{total}</opensearch:totalResults>
  <opensearch:startIndex>{start}</opensearch:startIndex>
"""
# arXiv's answer to a malformed query (https://info.arxiv.org/help/api/user-manual.html#_errors)
ATOM_ERROR = """<?xml version='1.0' encoding='UTF-8'?>
<feed xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom" xmlns="http://www.w3.org/2005/Atom">
  <id>https://arxiv.org/api/errors</id>
  <title>Error</title>
  <updated>2026-04-12T22:09:27Z</updated>
  <opensearch:totalResults>1</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>
  <opensearch:itemsPerPage>1</opensearch:itemsPerPage>
  <entry>
    <id>https://arxiv.org/api/errors#incorrect_id_format_for_{q}</id>
    <title>Error</title>
    <summary>{message}</summary>
    <updated>2026-04-12T22:09:27Z</updated>
    <link href="https://arxiv.org/api/errors#incorrect_id_format_for_{q}" rel="alternate" type="text/html"/>
    <author>
      <name>arXiv api core</name>
    </author>
  </entry>
</feed>
"""


def arxiv_entries() -> list[str]:
    """The ``<entry>`` elements of the recorded arXiv answers, as they are written there."""
    entries: list[str] = []
    for path in sorted(FIXTURES.glob("arxiv-*.xml"), key=lambda p: int(re.findall(r"\d+", p.name)[-1])):
        entries += re.findall(r"  <entry>.*?</entry>\n", path.read_text(encoding="utf-8"), flags=re.S)
    return entries


class ArxivStub(Stub):
    path = "/api/query"

    def deep(self, body: bytes) -> bytes:
        """The feed with a million nested elements inside its first entry's summary."""
        nested = b"<b>" * 100_000 + b"x" + b"</b>" * 100_000  # 0.7 MB: under the cap the tests set
        return body.replace(b"<summary>", b"<summary>" + nested, 1)

    def __init__(self, entries: list[str] | None = None) -> None:
        super().__init__()
        self.entries = arxiv_entries() if entries is None else entries

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        from xml.sax.saxutils import escape

        headers = {"Content-Type": "application/atom+xml; charset=utf-8"}
        q = escape(query.get("search_query", ""))
        if path != self.path:
            return 404, {"Content-Type": "text/plain"}, b"not found"
        if query.get("search_query", "").startswith("bad:"):
            message = escape("unknown field in search_query")
            return 400, headers, ATOM_ERROR.format(q=q, message=message).encode()
        start, size = int(query.get("start", "0")), int(query.get("max_results", "10"))
        page = self.entries[start : start + size]
        head = ATOM_HEAD.format(q=q, start=start, size=size, total=len(self.entries))
        return 200, headers, (head + "".join(page) + "</feed>\n").encode("utf-8")


# --------------------------------------------------------------------------- OpenReview
def openreview_notes() -> list[dict[str, Any]]:
    return list(json.loads((FIXTURES / "openreview-notes.json").read_text(encoding="utf-8"))["notes"])


class OpenReviewStub(Stub):
    path = "/notes"

    def __init__(self, notes: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.notes = sorted(openreview_notes() if notes is None else notes, key=lambda n: str(n["id"]))

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if path != self.path:
            return 404, headers, json.dumps({"name": "NotFoundError", "message": "Not Found"}).encode()
        notes = self.notes
        if "content.venueid" in query:
            want = query["content.venueid"]
            notes = [n for n in notes if n["content"].get("venueid", {}).get("value") == want]
        elif "invitation" in query:
            notes = [n for n in notes if query["invitation"] in n.get("invitations", [])]
        else:
            return 400, headers, json.dumps({"name": "ValidationError", "message": "a filter is required"}).encode()
        if query.get("sort", "id").split(":")[0] != "id":
            return 400, headers, json.dumps({"name": "ValidationError", "message": "sort by id only here"}).encode()
        if "after" in query:
            notes = [n for n in notes if str(n["id"]) > query["after"]]
        offset = int(query.get("offset", "0"))
        limit = min(int(query.get("limit", "1000")), 1000)
        doc: dict[str, Any] = {"notes": notes[offset : offset + limit]}
        if query.get("count") == "true":
            doc["count"] = len(notes)
        return 200, headers, json.dumps(doc).encode("utf-8")


# --------------------------------------------------------------------------- OpenAlex
def openalex_works() -> list[dict[str, Any]]:
    return list(json.loads((FIXTURES / "openalex-works.json").read_text(encoding="utf-8"))["results"])


class OpenAlexStub(Stub):
    path = "/works"

    def __init__(self, works: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.works = openalex_works() if works is None else works

    @staticmethod
    def cursor(offset: int) -> str:
        return base64.b64encode(json.dumps([offset, "stand-in"]).encode()).decode()

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        headers = {"Content-Type": "application/json"}

        def error(message: str) -> Answer:
            body = {"error": "Invalid query parameters error.", "message": message}
            return 400, headers, json.dumps(body).encode()

        if path != self.path:
            return 404, headers, json.dumps({"error": "Not found", "message": path}).encode()
        per_page = int(query.get("per-page", "25"))
        if not 1 <= per_page <= 200:
            return error("per-page parameter must be between 1 and 200")
        cursor = query.get("cursor")
        if cursor is None:
            return error("this stand-in pages by cursor only")
        offset = 0 if cursor == "*" else int(json.loads(base64.b64decode(cursor))[0])
        page = self.works[offset : offset + per_page]
        if query.get("select"):
            keep = query["select"].split(",")
            page = [{k: w.get(k) for k in keep} for w in page]
        end = offset + per_page >= len(self.works)
        meta = {
            "count": len(self.works),
            "db_response_time_ms": 12,
            "page": None,
            "per_page": per_page,
            "next_cursor": None if end or not page else self.cursor(offset + per_page),
            "groups_count": None,
        }
        return 200, headers, json.dumps({"meta": meta, "results": page, "group_by": []}).encode("utf-8")


STUBS: dict[str, Callable[[], Stub]] = {"arxiv": ArxivStub, "openreview": OpenReviewStub, "openalex": OpenAlexStub}
