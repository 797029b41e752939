"""``rag-papers fetch``: download abstracts from arXiv, OpenReview or OpenAlex into a file ``formats`` reads.

The one opt-in network use of the package (besides a hub model download): nothing else imports this module.
Each source is asked the way its own client asks it (arxiv.py for arXiv's Atom API, openreview-py's
``efficient_iterget`` for OpenReview API v2 notes, OpenAlex's cursor paging), and politely: a User-Agent naming
rag-papers, one request at a time spaced by the API's policy, and retries with exponential backoff on 429, 5xx
and dropped connections (a server's Retry-After wins).

And guarded against a server that misbehaves: an answer is read in pieces up to ``fetch_max_mb`` (an endless
body once took 3 GB in 5 s), each request has a wall-clock deadline, ``fetch_deadline`` (``fetch_timeout`` bounds
one socket read, so a server dripping a byte a second never tripped it), and a JSON answer nested deeper than
``MAX_JSON_DEPTH`` is refused. Each is one line naming the host and the limit; the pages before it stay resumable.

A fetch is resumable. Records go to ``OUT.part`` one whole page at a time, each page followed by a small state
file (``OUT.fetch-state``: where the next page starts, how many bytes of ``OUT.part`` are complete). A fetch
killed at any point and run again with the same arguments cuts ``OUT.part`` back to the last complete page and
asks for the next one; ``OUT`` appears, by a rename, only when the fetch is complete. Neither leftover has a
suffix ``ingest`` reads, so ingesting the folder never picks up half a fetch.
"""

from __future__ import annotations

import email.utils
import fcntl
import hashlib
import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode, urlsplit
from xml.etree import ElementTree

from rag_papers import RagPapersError, __version__
from rag_papers.config import Settings
from rag_papers.corpus.files import MAX_JSON_DEPTH, JsonTooDeep, loads_json

USER_AGENT = f"rag-papers/{__version__} (research-paper abstracts Q&A; Python-urllib/{sys.version_info[0]}.{sys.version_info[1]})"
MAX_BACKOFF = 60.0  # seconds: the longest wait between two retries of our own choosing
MAX_RETRY_AFTER = 600.0  # seconds: a server asking for longer is reported, not waited for
# A refused or dropped connection is retried at most this often: a server that is down (or a machine that is
# offline) is said so in seconds, while a busy server's 429 and 5xx answers get every retry.
CONNECTION_RETRIES = 2
STATE_VERSION = 1
SOURCES = ("arxiv", "openreview", "openalex")
# The limits' defaults (the settings fetch_max_mb and fetch_deadline), above any real page: at the fixtures' 2.5 KB
# a record, 1,000 OpenReview notes or 2,000 arXiv entries are 3 to 5 MB; the extreme is an OpenAlex page of 200
# works with authorships like ATLAS's (1 MB each, tests/fixtures/openalex-work-atlas.jsonl), 200 MB. Low enough
# that a server sending without end costs a few hundred MB and a few minutes, not the machine.
READ_CHUNK = 64 * 1024  # bytes read at a time: the size cap is checked between reads
MB = 1024 * 1024


class FetchError(RagPapersError):
    """A fetch that cannot go on: printed as one line; what was fetched so far is kept for a re-run."""


# --------------------------------------------------------------------------- HTTP
class _Watchdog:
    """A request's wall-clock deadline: when it passes, the request's socket is shut down, which wakes a read
    blocked on a server that sends a byte at a time (a socket timeout never fires for it)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the fd's own shutdown, never a TLS layer's, from a thread
    except OSError:
        pass  # already closed


class _WatchedHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's HTTP and HTTPS handlers, each connection's socket handed to the current request's watchdog the
    moment it is made (before a TLS handshake, which a slow server could drip too)."""

    def __init__(self, owner: Http) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self)
        self.owner = owner

    def _connection(self, cls: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        watchdog = self.owner.watchdog

        def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = cls(host, **kwargs)
            create = conn._create_connection  # type: ignore[attr-defined]

            def create_watched(*args: Any, **kw: Any) -> socket.socket:
                sock: socket.socket = create(*args, **kw)
                if watchdog is not None:
                    watchdog.watch(sock)
                return sock

            conn._create_connection = create_watched  # type: ignore[attr-defined]
            return conn

        return make

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection(http.client.HTTPConnection), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection(http.client.HTTPSConnection), req)  # the default, verifying context


class _TooBig(Exception):
    """The answer passed ``fetch_max_mb``."""


class Http:
    """GET with the politeness rules: one request at a time, at least ``interval`` seconds apart, retried;
    each answer read up to ``fetch_max_mb`` and within ``fetch_deadline``."""

    def __init__(self, settings: Settings, interval: float, accept: str) -> None:
        self.settings = settings
        self.interval = settings.fetch_interval if settings.fetch_interval is not None else interval
        self.accept = accept
        self.requests = 0
        self.max_mb = settings.fetch_max_mb
        self.deadline = settings.fetch_deadline
        self.watchdog: _Watchdog | None = None  # the request under way's
        self._opener = urllib.request.build_opener(_WatchedHandler(self))
        self._last = 0.0  # monotonic time of the last request's end
        self.sleep: Callable[[float], None] = time.sleep

    def _wait_turn(self) -> None:
        wait = self._last + self.interval - time.monotonic()
        if self._last and wait > 0:
            self.sleep(wait)

    def _read(self, request: urllib.request.Request) -> bytes:
        """One answer's body, read a piece at a time so that no more than ``fetch_max_mb`` is ever held."""
        cap = int(self.max_mb * MB)
        with self._opener.open(request, timeout=self.settings.fetch_timeout) as response:
            length = (response.headers.get("Content-Length") or "").strip()
            if length.isdigit() and int(length) > cap:
                raise _TooBig
            encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
            if encoding != "identity":  # never asked for (no Accept-Encoding), so never decoded: a gzip bomb stays
                host = urlsplit(request.full_url).netloc  # half a MB of noise
                raise FetchError(f"{host} sent its answer in Content-Encoding {encoding[:40]}, which was not asked for")
            body = bytearray()
            while chunk := response.read(READ_CHUNK):
                body += chunk
                if len(body) > cap:
                    raise _TooBig
        return bytes(body)

    def get(self, url: str) -> bytes:
        """The body of a 200 answer to ``url``; a ``FetchError`` (one line) once retries are spent."""
        host = urlsplit(url).netloc
        retries = self.settings.fetch_retries
        connection_failures = 0
        late = FetchError(
            f"{host} took longer than {self.deadline:g} s to answer one request (the fetch_deadline limit)"
        )
        for attempt in range(retries + 1):
            self._wait_turn()
            request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": self.accept})
            retry_after: float | None = None
            connection = True  # a refused, dropped or timed-out connection; False: an HTTP answer to retry
            silent = False  # the server was reached, then sent nothing for fetch_timeout
            watchdog = self.watchdog = _Watchdog(self.deadline)
            watchdog.start()
            try:
                self.requests += 1
                body = self._read(request)
                if watchdog.expired:  # the socket was shut under a read that then saw an early end
                    raise late
                return body
            except _TooBig:
                raise FetchError(
                    f"{host} sent more than {self.max_mb:g} MB in one answer (the fetch_max_mb limit); stopped "
                    "reading it: no page of the API is that large"
                ) from None
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if watchdog.expired:
                    raise late from None
                if exc.code != 429 and not 500 <= exc.code < 600:
                    raise FetchError(f"{host} answered {exc.code} {exc.reason}{detail} for {url}") from None
                problem = f"{exc.code} {exc.reason}{detail}"
                connection = False
                retry_after = _retry_after(exc.headers.get("Retry-After"))
            except urllib.error.URLError as exc:
                if watchdog.expired:
                    raise late from None
                reason = exc.reason
                if isinstance(reason, socket.gaierror):  # no such name, or no network at all: retrying won't help
                    raise FetchError(f"cannot reach {host} ({_reason(reason)})") from None
                problem = _reason(reason)
            except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
                if watchdog.expired:
                    raise late from None
                # A timeout here is a read's (a connect's comes as URLError): the server answered, then went quiet.
                silent = isinstance(exc, TimeoutError)
                problem = _reason(exc)
            finally:
                watchdog.cancel()
                self.watchdog = None
                self._last = time.monotonic()
            tries = f"tried {attempt + 1} time{'s' if attempt else ''}"
            connection_failures += connection
            if connection and (connection_failures > min(retries, CONNECTION_RETRIES) or attempt == retries):
                if silent:
                    raise FetchError(
                        f"{host} sent nothing for {self.settings.fetch_timeout:g} s (the fetch_timeout limit; {tries})"
                    )
                raise FetchError(f"cannot reach {host} ({problem}; {tries})")
            if attempt == retries:
                raise FetchError(f"{host} kept answering {problem} ({tries}); try again later to resume")
            if retry_after is not None and retry_after > MAX_RETRY_AFTER:
                raise FetchError(
                    f"{host} asks to wait {retry_after:.0f} s before the next request ({problem}); try later"
                )
            wait = (
                retry_after if retry_after is not None else min(MAX_BACKOFF, self.settings.fetch_backoff * 2**attempt)
            )
            self.sleep(wait)
        raise AssertionError("unreachable")  # the loop returns or raises


def _reason(exc: object) -> str:
    if isinstance(exc, socket.gaierror):
        return f"name lookup failed: {exc.strerror or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The server's own words about an error: a JSON ``message`` (OpenReview, OpenAlex) or the summary of
    arXiv's error feed."""
    try:
        body = exc.read(8192) or b""
    except OSError:
        return ""
    message: object = None
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            message = doc.get("message") or doc.get("error")
    except ValueError:
        m = re.search(rb"<summary>(.*?)</summary>", body, flags=re.S)
        message = m.group(1).decode("utf-8", "replace") if m else None
    return f": {' '.join(str(message).split())[:200]}" if message else ""


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number of seconds or an HTTP date (RFC 9110 10.2.3); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


# --------------------------------------------------------------------------- sources
@dataclass
class Page:
    """One answer, parsed: the records to write (JSON objects), where the next page starts (None: the end)."""

    records: list[dict[str, Any]]
    next: dict[str, Any] | None
    total: int | None = None
    skipped: int = 0  # records left out because no reader could take them (not counted as fetched)


class Source:
    """One API: how to ask for a page, how to read the answer, which records are the same."""

    name = ""
    interval = 1.0  # seconds between requests: the API's policy
    accept = "application/json"
    page_size = 100
    max_page_size = 1000

    def __init__(self, settings: Settings, target: str) -> None:
        self.settings = settings
        self.target = target

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """What makes two runs the same fetch (a state file for another query is not resumed)."""
        return {"source": self.name, "url": self.base_url, "target": self.target}

    def first(self) -> dict[str, Any]:
        return {}

    def url(self, state: dict[str, Any], page_size: int) -> str:
        raise NotImplementedError

    def parse(self, body: bytes, state: dict[str, Any], page_size: int) -> Page:
        raise NotImplementedError

    def record_id(self, record: dict[str, Any]) -> str:
        return str(record.get("id"))

    def empty_message(self) -> str:
        return f"{self.host} has no records for {self.target!r}"


def _json(body: bytes, host: str) -> Any:
    try:
        return loads_json(body)
    except JsonTooDeep as exc:
        raise FetchError(
            f"{host} answered JSON nested deeper than {MAX_JSON_DEPTH} levels (line {exc.lineno}, column {exc.colno}); "
            "no API page nests so deep"
        ) from None
    except ValueError as exc:
        raise FetchError(f"{host} answered something that is not JSON ({exc})") from None


def _json_page(body: bytes, host: str, key: str, api: str) -> tuple[dict[str, Any], list[Any]]:
    """A JSON page (an object) and its list of records under ``key``, else the one-line error naming ``api``."""
    doc = _json(body, host)
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise FetchError(f"{host} answered JSON without a '{key}' list (not {api}?)")
    return doc, items


class ArxivSource(Source):
    """The arXiv API (https://info.arxiv.org/help/api/user-manual.html): Atom pages by ``start`` and
    ``max_results``, as arxiv.py asks, relevance-sorted; entries written in the arXiv metadata snapshot's shape
    (one object a line), which ``formats`` reads like the snapshot itself."""

    name = "arxiv"
    interval = 3.0  # "no more than one request every three seconds" (the API's terms; arxiv.py's delay_seconds)
    accept = "application/atom+xml"
    page_size = 100
    max_page_size = 2000

    NS = {
        "atom": "http://www.w3.org/2005/Atom",
        "arxiv": "http://arxiv.org/schemas/atom",
        "opensearch": "http://a9.com/-/spec/opensearch/1.1/",
    }

    @property
    def base_url(self) -> str:
        return self.settings.arxiv_url

    def first(self) -> dict[str, Any]:
        return {"start": 0}

    def url(self, state: dict[str, Any], page_size: int) -> str:
        query = {
            "search_query": self.target,
            "sortBy": "relevance",
            "sortOrder": "descending",
            "start": str(state["start"]),
            "max_results": str(page_size),
        }
        return f"{self.base_url}?{urlencode(query)}"

    def parse(self, body: bytes, state: dict[str, Any], page_size: int) -> Page:
        try:
            feed = ElementTree.fromstring(body)
        except ElementTree.ParseError as exc:
            raise FetchError(f"{self.host} answered something that is not an Atom feed ({exc})") from None
        total_text = feed.findtext("opensearch:totalResults", default="", namespaces=self.NS).strip()
        total = int(total_text) if total_text.isdigit() else None
        records: list[dict[str, Any]] = []
        entries = feed.findall("atom:entry", self.NS)
        for entry in entries:
            entry_id = (entry.findtext("atom:id", default="", namespaces=self.NS) or "").strip()
            if "/api/errors" in entry_id:  # the API's way of refusing a query: one entry whose summary says why
                why = " ".join((entry.findtext("atom:summary", default="", namespaces=self.NS) or "").split())
                raise FetchError(f"{self.host} refused the query {self.target!r}: {why or 'no reason given'}")
            record = self._snapshot(entry, entry_id)
            if record is not None:
                records.append(record)
        start = int(state["start"]) + len(entries)
        done = not entries or (total is not None and start >= total)
        return Page(records, None if done else {"start": start}, total, len(entries) - len(records))

    def _snapshot(self, entry: ElementTree.Element, entry_id: str) -> dict[str, Any] | None:
        """One Atom entry as a line of arxiv-metadata-oai-snapshot.json (the fields that file has)."""
        m = re.search(r"arxiv\.org/abs/(.+?)(v\d+)?$", entry_id)
        if m is None:
            return None

        def text(path: str) -> str | None:
            found = entry.findtext(path, default=None, namespaces=self.NS)
            return " ".join(found.split()) if found and found.strip() else None

        names = [" ".join((a.findtext("atom:name", default="", namespaces=self.NS) or "").split()) for a in
                 entry.findall("atom:author", self.NS)]  # fmt: skip
        published = text("atom:published")
        created = None
        if published:
            try:
                when = datetime.fromisoformat(published.replace("Z", "+00:00"))
                created = email.utils.format_datetime(when.astimezone(UTC), usegmt=True)
            except ValueError:
                created = published
        categories = [c.get("term", "") for c in entry.findall("atom:category", self.NS) if c.get("term")]
        return {
            "id": m.group(1),
            "submitter": None,
            "authors": ", ".join(n for n in names if n),
            "title": text("atom:title"),
            "comments": text("arxiv:comment"),
            "journal-ref": text("arxiv:journal_ref"),
            "doi": text("arxiv:doi"),
            "categories": " ".join(categories),
            "abstract": entry.findtext("atom:summary", default="", namespaces=self.NS),
            "versions": [{"version": m.group(2) or "v1", "created": created}],
            "update_date": (text("atom:updated") or "")[:10] or None,
        }

    def empty_message(self) -> str:
        return f"{self.host} found no papers for the query {self.target!r}"


class OpenReviewSource(Source):
    """OpenReview API v2 ``GET /notes``, paged as openreview-py's ``efficient_iterget`` pages ``get_all_notes``:
    ``sort=id``, ``limit``, ``count=true`` on the first page, then ``after=<the last note's id>``. A venue's
    accepted papers by ``content.venueid=VENUE``; every submission (rejected and withdrawn ones too) by
    ``invitation=VENUE/-/Submission``."""

    name = "openreview"
    interval = 0.5
    page_size = 1000
    max_page_size = 1000  # the API's own cap on limit

    def __init__(self, settings: Settings, target: str, submissions: bool = False) -> None:
        super().__init__(settings, target.strip().strip("/"))
        self.submissions = submissions

    @property
    def base_url(self) -> str:
        return self.settings.openreview_url

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "submissions": self.submissions}

    def _filter(self) -> dict[str, str]:
        if self.submissions:
            return {"invitation": f"{self.target}/-/Submission"}
        return {"content.venueid": self.target}

    def url(self, state: dict[str, Any], page_size: int) -> str:
        query = {**self._filter(), "sort": "id", "limit": str(page_size)}
        if state.get("after"):
            query["after"] = state["after"]
        else:
            query["count"] = "true"
        return f"{self.base_url}/notes?{urlencode(query)}"

    def parse(self, body: bytes, state: dict[str, Any], page_size: int) -> Page:
        doc, notes = _json_page(body, self.host, "notes", "the OpenReview API v2")
        total = doc.get("count") if isinstance(doc.get("count"), int) else state.get("total")
        # A note ``formats`` can read has a content object with a title; the rest are not papers.
        records = [n for n in notes if isinstance(n, dict) and isinstance(n.get("content"), dict) and
                   "title" in n["content"] and n.get("id")]  # fmt: skip
        seen = int(state.get("seen", 0)) + len(notes)
        done = not notes or (isinstance(total, int) and seen >= total)
        last = notes[-1].get("id") if notes and isinstance(notes[-1], dict) else None
        if not done and not last:
            raise FetchError(f"{self.host} answered a note without an id; cannot ask for the next page")
        nxt = None if done else {"after": last, "seen": seen, "total": total}
        return Page(records, nxt, total if isinstance(total, int) else None, len(notes) - len(records))

    def empty_message(self) -> str:
        how = f"invitation={self.target}/-/Submission" if self.submissions else f"content.venueid={self.target}"
        other = "" if self.submissions else ", or --submissions for every submission"
        return (
            f"{self.host} has no public notes with {how}: check the venue id (as in the venue's OpenReview page, "
            f"e.g. ICLR.cc/2026/Conference){other}"
        )


class OpenAlexSource(Source):
    """OpenAlex ``GET /works?search=`` with cursor paging (``cursor=*``, then ``meta.next_cursor``) and
    ``per-page`` (at most 200); ``mailto`` when set, for the polite pool. Works are written as the API gives
    them (the fields ``formats`` reads, by ``select``), one a line."""

    name = "openalex"
    interval = 0.1  # the API allows 10 requests a second
    page_size = 200
    max_page_size = 200
    SELECT = "id,doi,title,display_name,publication_year,authorships,primary_location,abstract_inverted_index"

    @property
    def base_url(self) -> str:
        return self.settings.openalex_url

    def first(self) -> dict[str, Any]:
        return {"cursor": "*"}

    def url(self, state: dict[str, Any], page_size: int) -> str:
        query = {"search": self.target, "per-page": str(page_size), "cursor": state["cursor"], "select": self.SELECT}
        if self.settings.openalex_mailto:
            query["mailto"] = self.settings.openalex_mailto
        return f"{self.base_url}/works?{urlencode(query)}"

    def parse(self, body: bytes, state: dict[str, Any], page_size: int) -> Page:
        doc, results = _json_page(body, self.host, "results", "the OpenAlex API")
        meta = doc.get("meta") or {}
        total = meta.get("count") if isinstance(meta.get("count"), int) else None
        cursor = meta.get("next_cursor")
        records = [w for w in results if isinstance(w, dict) and w.get("id")]
        done = not results or not cursor
        return Page(records, None if done else {"cursor": cursor}, total, len(results) - len(records))

    def empty_message(self) -> str:
        return f"{self.host} found no works for the search {self.target!r}"


def make_source(settings: Settings, name: str, target: str, submissions: bool = False) -> Source:
    if not target.strip():
        raise FetchError(f"fetch {name}: empty {'venue id' if name == 'openreview' else 'query'}")
    if name == "arxiv":
        return ArxivSource(settings, target.strip())
    if name == "openalex":
        return OpenAlexSource(settings, target.strip())
    if name == "openreview":
        return OpenReviewSource(settings, target, submissions)
    raise FetchError(f"unknown source {name!r}; choose from {', '.join(SOURCES)}")


# --------------------------------------------------------------------------- the resumable fetch
def default_out(settings: Settings, source: Source) -> Path:
    """HOME/fetched/SOURCE-TARGET.jsonl: one file per fetch, named after what was asked."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", source.target).strip("._")[:80] or "query"
    if slug != source.target:  # two targets that read alike get two files
        slug += "-" + hashlib.sha1(source.target.encode()).hexdigest()[:6]
    extra = "-submissions" if isinstance(source, OpenReviewSource) and source.submissions else ""
    return settings.in_home("fetched") / f"{source.name}-{slug}{extra}.jsonl"


@dataclass
class FetchResult:
    path: Path
    records: int
    pages: int
    requests: int
    resumed_at: int  # records the state file held when this run began (0: a fresh fetch)
    skipped: int
    seconds: float
    total: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "records": self.records,
            "pages": self.pages,
            "requests": self.requests,
            "resumed_at": self.resumed_at,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 2),
            "total": self.total,
        }


class Fetch:
    """One fetch into ``out``: ``OUT.part`` and ``OUT.fetch-state`` beside it until it completes."""

    def __init__(self, source: Source, out: Path, max_records: int | None, page_size: int | None) -> None:
        if out.suffix.lower() not in (".jsonl", ".json"):
            raise FetchError(f"--out {out}: the file is JSON lines; give it a .jsonl name")
        if max_records is not None and max_records < 1:
            raise FetchError(f"--max {max_records}: give at least 1")
        size = page_size or source.page_size
        if not 1 <= size <= source.max_page_size:
            raise FetchError(f"--page-size {size}: {source.name} pages hold 1 to {source.max_page_size} records")
        if max_records is not None:
            size = min(size, max_records)  # never ask for more than is wanted
        self.source, self.out, self.max, self.page_size = source, out, max_records, size
        self._made_dir: Path | None = None
        self.part = out.with_name(out.name + ".part")
        self.state_path = out.with_name(out.name + ".fetch-state")

    def _load_state(self) -> dict[str, Any] | None:
        """The state of an unfinished fetch of the same thing, when there is one that matches ``OUT.part``."""
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            return None
        if state.get("identity") != self.source.identity():
            return None
        try:
            if self.part.stat().st_size < int(state["bytes"]):  # the part file lost what the state says it holds
                return None
        except (OSError, KeyError, TypeError, ValueError):
            return None
        return state

    def _save_state(self, state: dict[str, Any]) -> None:
        """Written beside, flushed, then renamed over the old one: a kill leaves the old state or the new."""
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_path)

    def _seen_ids(self, fh: IO[bytes], upto: int) -> set[str]:
        """The ids already written to the part file (its complete pages), so a resumed fetch skips them."""
        seen: set[str] = set()
        fh.seek(0)
        done = 0
        for line in fh:
            done += len(line)
            if done > upto:
                break
            try:
                seen.add(self.source.record_id(json.loads(line)))
            except ValueError:
                continue
        return seen

    def run(self, show_progress: bool, on_resume: Callable[[int, int], None] | None = None) -> FetchResult:
        from rag_papers.progress import progress_bar

        t0 = time.perf_counter()
        http = Http(self.source.settings, self.source.interval, self.source.accept)
        missing = [d for d in [self.out.parent, *self.out.parent.parents] if not d.exists()]
        self._made_dir = missing[-1] if missing else None  # the topmost folder this fetch makes
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            fh = self.part.open("a+b")
        except OSError as exc:
            raise FetchError(f"cannot write {self.part}: {exc.strerror or exc}") from None
        with fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise FetchError(f"another fetch is writing {self.part}; wait for it to finish") from None
            state = self._load_state()
            if state is None:
                state = {
                    "version": STATE_VERSION,
                    "identity": self.source.identity(),
                    "next": self.source.first(),
                    "records": 0,
                    "pages": 0,
                    "skipped": 0,
                    "bytes": 0,
                    "total": None,
                }
            resumed_at = int(state["records"])
            fh.truncate(int(state["bytes"]))  # a page written after the last saved state is dropped, then asked again
            seen = self._seen_ids(fh, int(state["bytes"])) if resumed_at else set()
            fh.seek(0, os.SEEK_END)
            if resumed_at and on_resume is not None:
                on_resume(resumed_at, int(state["pages"]))
            want = self.max
            progress = None  # drawn once the first page is in: a host that cannot be reached is one line, no bar
            try:
                while state["next"] is not None and (want is None or state["records"] < want):
                    # A whole page even when fewer are wanted: a page boundary is where a resume starts.
                    body = http.get(self.source.url(state["next"], self.page_size))
                    page = self.source.parse(body, state["next"], self.page_size)
                    fresh = []
                    for record in page.records:
                        rid = self.source.record_id(record)
                        if rid in seen:
                            continue
                        seen.add(rid)
                        fresh.append(record)
                    if want is not None:
                        fresh = fresh[: want - state["records"]]
                    data = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in fresh)
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                    state.update(
                        next=page.next,
                        records=state["records"] + len(fresh),
                        pages=state["pages"] + 1,
                        skipped=state["skipped"] + page.skipped,
                        bytes=state["bytes"] + len(data),
                        total=page.total if page.total is not None else state["total"],
                    )
                    self._save_state(state)
                    if progress is None and state["records"]:
                        progress = progress_bar(
                            self._target(state["total"]), f"fetch {self.source.name}", show_progress, "record",
                            state["records"],
                        )  # fmt: skip
                    elif progress is not None:
                        progress.total = self._target(state["total"])
                        progress.update(len(fresh))
            except BaseException:
                if state["pages"] == 0:  # nothing fetched (an unreachable host): nothing left behind
                    self._discard(fh)
                raise
            finally:
                if progress is not None:
                    progress.close()
            if state["records"] == 0:
                self._discard(fh)
                raise FetchError(self.source.empty_message())
            os.replace(self.part, self.out)  # complete: the file appears whole, under its name
        self.state_path.unlink(missing_ok=True)
        return FetchResult(
            self.out, int(state["records"]), int(state["pages"]), http.requests, resumed_at, int(state["skipped"]),
            time.perf_counter() - t0, state["total"],
        )  # fmt: skip

    def _target(self, total: int | None) -> int | None:
        if self.max is None:
            return total
        return self.max if total is None else min(self.max, total)

    def _discard(self, fh: IO[bytes]) -> None:
        """Nothing fetched: nothing left behind (no empty part file, no state, no folder made for them)."""
        fh.truncate(0)
        self.part.unlink(missing_ok=True)
        self.state_path.unlink(missing_ok=True)
        if self._made_dir is not None:
            for folder in [self.out.parent, *self.out.parent.parents]:
                try:
                    folder.rmdir()
                except OSError:
                    break
                if folder == self._made_dir:
                    break


def fetch(
    settings: Settings,
    source_name: str,
    target: str,
    *,
    max_records: int | None = None,
    page_size: int | None = None,
    out: Path | None = None,
    submissions: bool = False,
    show_progress: bool = True,
    on_resume: Callable[[int, int], None] | None = None,
) -> FetchResult:
    """Fetch ``target`` (a query, or a venue id) from ``source_name`` into ``out`` (default: HOME/fetched/...)."""
    source = make_source(settings, source_name, target, submissions)
    job = Fetch(source, out or default_out(settings, source), max_records, page_size)
    return job.run(show_progress, on_resume)


def iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a fetched file (for tests and the scale benchmark)."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
