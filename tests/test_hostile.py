"""Hostile servers, hostile files and the login (issue 47): what a fault and attack probe broke, each case run
again here as the probe ran it.

* ``fetch`` against stand-ins that misbehave (``fetch_stub.HOSTILE``: an endless body, a slow drip, headers then
  silence, a gzip bomb, entity expansion, an external entity, deep nesting), every source against each: one line
  naming the host and the limit, the pages before it kept and resumed; the memory cap measured on the process.
* JSON nested past ``MAX_JSON_DEPTH`` in every JSON reader: ``FILE:LINE``, exit 2 (an export's line: skipped and
  named unless ``--strict``); BibTeX braces nested 50,000 deep named as such.
* The login's growing delay and the per-account bound, against the real app, with forged ``X-Forwarded-For`` and
  ``Forwarded`` headers and from several real loopback addresses.
* The smaller lines: the API's parameters in words, ``OLLAMA_HOST`` with a newline, ``papers`` on a full disk, a
  dangling symlink as the data directory.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import VENV_BIN, run_cli, run_main
from fetch_stub import HOSTILE, ArxivStub, OpenAlexStub, OpenReviewStub, Stub
from test_integrity import fill_to_the_last_byte, one_error_line, tmpfs  # noqa: F401 - tmpfs is a fixture
from test_ui import Served, app_over_seeds
from test_validation import papers_json

from rag_papers.config import Settings
from rag_papers.corpus import CorpusError, read_file
from rag_papers.corpus.files import MAX_JSON_DEPTH, JsonTooDeep, loads_json

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

VENUE = "ICLR.cc/2026/Conference"
URL_SETTING = {"arxiv": "arxiv_url", "openreview": "openreview_url", "openalex": "openalex_url"}
STUBS: dict[str, Callable[[], Stub]] = {"arxiv": ArxivStub, "openreview": OpenReviewStub, "openalex": OpenAlexStub}


def api_url(source: str, stub: Stub) -> str:
    return stub.url + ("/api/query" if source == "arxiv" else "")


def target(source: str) -> str:
    return VENUE if source == "openreview" else "testing"


# --------------------------------------------------------------------------- fetch: each source against each
# The limits the matrix runs under, small so that each case is quick (the defaults: 256 MB, 300 s, 60 s).
LIMITS = {
    "RAG_PAPERS_FETCH_MAX_MB": "4",
    "RAG_PAPERS_FETCH_DEADLINE": "2",
    "RAG_PAPERS_FETCH_TIMEOUT": "1",
    "RAG_PAPERS_FETCH_BACKOFF": "0",
    "RAG_PAPERS_FETCH_INTERVAL": "0",
}


def expected_line(how: str, source: str) -> str | None:
    """What the one line says for a stand-in that misbehaves ``how`` (None: the fetch completes)."""
    json_api = source != "arxiv"
    return {
        "endless": "sent more than 4 MB in one answer (the fetch_max_mb limit)",
        "drip": "took longer than 2 s to answer one request (the fetch_deadline limit)",
        "silence": "sent nothing for 1 s (the fetch_timeout limit; tried 3 times)",
        "gzip_bomb": "sent its answer in Content-Encoding gzip, which was not asked for",
        "entities": "answered something that is not JSON"
        if json_api
        else "not an Atom feed (limit on input amplification factor",
        "external": "answered something that is not JSON" if json_api else "not an Atom feed (undefined entity &xxe;",
        # Atom: expat nests without recursion, and the nested text is no entry's summary: the fetch completes.
        "deep": f"answered JSON nested deeper than {MAX_JSON_DEPTH} levels" if json_api else None,
    }[how]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", HOSTILE)
@pytest.mark.parametrize("source", sorted(STUBS))
def test_each_source_against_each_hostile_server(
    source: str, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One good page (3 records), then the stand-in misbehaves: one line naming the host and the limit, within
    the limits' time; the good page stays in ``OUT.part`` and a rerun against a polite server resumes after it."""
    from rag_papers import RagPapersError
    from rag_papers.fetch import fetch

    for name, value in LIMITS.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "fetched.jsonl"
    part, state_file = out.with_name("fetched.jsonl.part"), out.with_name("fetched.jsonl.fetch-state")
    with STUBS[source]() as stub:
        settings = Settings()
        setattr(settings, URL_SETTING[source], api_url(source, stub))
        stub.misbehave, stub.misbehave_after = how, 1
        t0 = time.monotonic()
        want = expected_line(how, source)
        if want is None:
            done = fetch(settings, source, target(source), max_records=6, page_size=3, out=out, show_progress=False)
            assert done.records == 6 and out.exists()
            return
        with pytest.raises(RagPapersError) as err:
            fetch(settings, source, target(source), max_records=6, page_size=3, out=out, show_progress=False)
        took = time.monotonic() - t0
        line = str(err.value)
        assert want in line and "\n" not in line, line
        assert line.startswith(stub.url.removeprefix("http://")), line  # the host, named first
        assert "root:" not in line  # no local file read for an external entity
        assert took < 15, took  # the slowest, silence: 3 tries of 1 s
        state = json.loads(state_file.read_text(encoding="utf-8"))
        assert state["pages"] == 1 and len(part.read_bytes().splitlines()) == state["records"] == 3
        stub.misbehave = None  # the server mends: the same command resumes after the good page
        stub.requests.clear()
        resumed = fetch(settings, source, target(source), max_records=6, page_size=3, out=out, show_progress=False)
    assert resumed.resumed_at == 3 and resumed.records == 6, resumed
    assert not part.exists() and len(out.read_bytes().splitlines()) == 6


# Run from a small launcher, not from the test's own process: Linux counts a child's peak RSS from before its
# exec too, so a child of a pytest worker that holds 2 GB reports 2 GB whatever the child itself used.
_LAUNCH = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _rss_run(cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int, float, str, float]:
    """Run ``cmd``; (exit code, its peak RSS in MB, its stderr, seconds). The peak is the kernel's own count for
    this child alone (``wait4`` in the launcher), not a sample."""
    peak = log.with_suffix(".rss")
    with open(os.devnull, "w") as null, log.open("w") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(peak), *cmd], stdout=null, stderr=err, env=env)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        seconds = time.monotonic() - t0
    return code, int(peak.read_text()) / 1024, log.read_text(encoding="utf-8"), seconds


def test_an_endless_answer_stops_at_fetch_max_mb_with_memory_bounded(tmp_path: Path) -> None:
    """Reported: ``fetch arxiv 'all:test' --max 5 --url http://127.0.0.1:PORT/api/query`` against an endless body
    reached 3.1 GB in 5 s and kept growing. Run as the probe ran it, a process, with its peak RSS measured."""
    with ArxivStub() as stub:
        stub.misbehave = "endless"  # up to 1 GiB, as fast as it is read: an unbounded read holds all of it
        env = {**os.environ, "RAG_PAPERS_FETCH_MAX_MB": "8"}
        cmd = [str(VENV_BIN / "rag-papers"), "fetch", "arxiv", "all:test", "--max", "5", "--no-progress"]
        cmd += ["--url", api_url("arxiv", stub)]
        host = stub.url.removeprefix("http://")
        code, peak_mb, stderr, seconds = _rss_run(cmd, env, tmp_path / "stderr", timeout=120)
    # The CLI with its imports peaks near 50 MB, the page it holds adds at most 8 (twice, while it is copied);
    # reading the stand-in's 1 GiB whole took over 1 GB.
    assert peak_mb < 160, f"peak RSS {peak_mb:.0f} MB"
    assert seconds < 60, seconds
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, stderr[-2000:])
    assert f"{host} sent more than 8 MB in one answer (the fetch_max_mb limit)" in lines[0], lines


def test_a_slow_drip_meets_the_deadline_and_the_fetch_resumes(tmp_path: Path) -> None:
    """Reported: with ``RAG_PAPERS_FETCH_TIMEOUT=10``, a server sending a byte every 2 s kept the fetch running
    past 120 s with no line (the timeout bounds each read). Now ``fetch_deadline`` bounds the request."""
    from rag_papers.fetch import fetch

    out = tmp_path / "dripped.jsonl"
    with ArxivStub() as stub:
        stub.misbehave, stub.misbehave_after, stub.drip_s = "drip", 1, 1.0
        env = {
            "RAG_PAPERS_FETCH_TIMEOUT": "10",
            "RAG_PAPERS_FETCH_DEADLINE": "3",
            "RAG_PAPERS_FETCH_INTERVAL": "0",
        }
        t0 = time.monotonic()
        args = ["fetch", "arxiv", "all:test", "--max", "5", "--page-size", "2", "--out", str(out), "--no-progress"]
        res = run_cli(*args, "--url", api_url("arxiv", stub), env=env, timeout=60)
        took = time.monotonic() - t0
        line = one_error_line(res)
        assert "took longer than 3 s to answer one request (the fetch_deadline limit)" in line, line
        assert stub.url.removeprefix("http://") in line
        assert took < 40, took  # 3 s of drip, the rest the process start
        stub.misbehave = None
        settings = Settings(arxiv_url=api_url("arxiv", stub), fetch_interval=0)
        resumed = fetch(settings, "arxiv", "all:test", max_records=5, page_size=2, out=out, show_progress=False)
    assert resumed.resumed_at == 2 and resumed.records == 5


# --------------------------------------------------------------------------- JSON nested too deep
def test_json_depth_limit_is_exact_and_ignores_brackets_in_strings() -> None:
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_json(ok) is not None and loads_json(ok.encode()) is not None
    with pytest.raises(JsonTooDeep) as err:
        loads_json('{"a": 1,\n "b": ' + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1) + "}")
    assert (err.value.lineno, err.value.colno) == (2, 6 + MAX_JSON_DEPTH)  # where the 513th level opens
    assert loads_json(json.dumps({"t": "[" * 100_000})) == {"t": "[" * 100_000}  # text, not nesting
    with pytest.raises(JsonTooDeep):
        loads_json(b"[" * 1_000_000)  # never closed: still too deep, not "malformed" at its far end


DEEP = "[" * 5000 + "]" * 5000


def _project_jsonl(path: Path) -> Path:
    good = {"title": "Sock sorting", "abstract": "We sort socks by colour in linear time with a counting pass."}
    path.write_text(json.dumps(good) + "\n" + DEEP + "\n", encoding="utf-8")
    return path


# A whole JSON document with a too-deep record as its second: the format, the text, the line of that record.
WHOLE_DOCUMENTS: dict[str, tuple[str, int]] = {
    "csl-array": (
        '[{"id": "a", "type": "article-journal", "title": "A", "abstract": "An abstract about things."},\n'
        + DEEP
        + "]\n",
        2,
    ),
    "openalex-page": (
        '{"meta": {"count": 2}, "results": [\n{"id": "https://openalex.org/W1", "title": "A"},\n'
        '{"id": "https://openalex.org/W2", "concepts": ' + DEEP + "}]}\n",
        3,
    ),
    "openreview-page": ('{"notes": [\n{"id": "n1", "content": {"title": {"value": "A"}}},\n' + DEEP + "]}\n", 3),
    "semantic-scholar-page": ('{"total": 2, "data": [\n{"paperId": "p1", "title": "A"},\n' + DEEP + "]}\n", 3),
    "brackets-only": ("[" * 2_000_000, 1),  # the probe's 1 GB of "[", smaller: the same path
}


@pytest.mark.parametrize("name", sorted(WHOLE_DOCUMENTS))
def test_a_whole_json_document_nested_too_deep_is_one_line_with_its_line(name: str, tmp_path: Path) -> None:
    """Reported: "unexpected RecursionError: maximum recursion depth exceeded while decoding a JSON array",
    exit 1. A page or an array is decoded whole, so it is refused whole, at the line where it passes the limit,
    as a malformed one is."""
    text, line = WHOLE_DOCUMENTS[name]
    path = tmp_path / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    got = one_error_line(run_main("ingest", "--no-progress", str(path)))
    assert got.startswith(f"rag-papers: error: {path}:{line}: JSON nested deeper than {MAX_JSON_DEPTH} levels"), got
    with pytest.raises(CorpusError, match=f"{path}:{line}: JSON nested deeper"):
        list(read_file(path, on_damaged=lambda _line: None))  # not a record to skip: the document is one value


def test_the_projects_jsonl_nested_too_deep_is_its_line_and_exit_2_with_the_index_unchanged(
    seeded: Settings, tmp_path: Path
) -> None:
    before = papers_json({})
    path = _project_jsonl(tmp_path / "own.jsonl")
    for flags in ([], ["--strict"]):  # the project's own format is all or nothing either way
        line = one_error_line(run_main("ingest", "--no-progress", *flags, str(path)))
        assert line == (
            f"rag-papers: error: {path}:2: JSON nested deeper than {MAX_JSON_DEPTH} levels (at column "
            f"{MAX_JSON_DEPTH + 1}); no paper record nests so deep"
        ), line
    assert papers_json({}) == before


def _export_lines(source: str) -> list[str]:
    """Two real records of ``source`` (tests/formats), one JSON object a line, as its dumps are written."""
    formats = Path(__file__).parent / "formats"
    if source == "arxiv":
        return (formats / "arxiv-metadata-oai-snapshot.json").read_text(encoding="utf-8").splitlines()[:2]
    file, key = {
        "openalex": ("openalex-works.json", "results"),
        "openreview": ("openreview-notes.json", "notes"),
        "semantic_scholar": ("semantic-scholar.json", "data"),
        "csl": ("zotero-csl.json", None),
    }[source]
    doc = json.loads((formats / file).read_text(encoding="utf-8"))
    return [json.dumps(r) for r in (doc[key] if key else doc)[:2]]


@pytest.mark.parametrize("source", ["arxiv", "openalex", "openreview", "semantic_scholar", "csl"])
def test_an_exports_line_nested_too_deep_is_a_damaged_record(source: str, tmp_path: Path) -> None:
    """A JSON-lines export (the arXiv snapshot, an OpenAlex or OpenReview dump, ...) is read a record a line: a
    line nested too deep is one damaged record, skipped and named like a malformed one; ``--strict`` refuses."""
    first, second = _export_lines(source)
    path = tmp_path / f"{source}-dump.jsonl"
    path.write_text(f"{first}\n{DEEP}\n{second}\n", encoding="utf-8")
    damaged: list[str] = []
    records = list(read_file(path, on_damaged=damaged.append))
    assert [r.source for r in records] == [f"{path}:1", f"{path}:3"]
    assert damaged == [
        f"{path}:2: JSON nested deeper than {MAX_JSON_DEPTH} levels (at column {MAX_JSON_DEPTH + 1}); "
        "no paper record nests so deep"
    ]
    with pytest.raises(CorpusError, match=f"^{path}:2: JSON nested deeper"):
        list(read_file(path))  # --strict


def test_bibtex_braces_nested_50000_deep_are_named_as_braces(tmp_path: Path) -> None:
    """Reported: "an entry is not closed (... maximum recursion depth exceeded)", true but naming Python's limit."""
    good = "@article{good, title={Sock sorting}, abstract={We sort socks by colour in linear time.}}\n"
    deep = "@article{deep, title={" + "{" * 50_000 + "x" + "}" * 50_000 + "}, abstract={Some abstract text here.}}\n"
    path = tmp_path / "deep.bib"
    path.write_text(good + deep, encoding="utf-8")
    damaged: list[str] = []
    assert [r.title for r in read_file(path, on_damaged=damaged.append)] == ["Sock sorting"]
    assert damaged == [f"{path}:2: malformed BibTeX, braces nested 50,002 levels deep, too deep to decode (a field "
                       "needs a few)"]  # fmt: skip
    assert "recursion" not in damaged[0]


# --------------------------------------------------------------------------- the login
def _login(
    url: str, password: str, headers: dict[str, str] | None = None, source: str | None = None, user: str = "ada"
) -> tuple[int, float, dict[str, str]]:
    """POST the login form (from the loopback address ``source``); (status, seconds, response headers)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(
        parts.hostname or "127.0.0.1", parts.port, timeout=120, source_address=(source, 0) if source else None
    )
    form = urllib.parse.urlencode({"username": user, "password": password})
    t0 = time.monotonic()
    try:
        conn.request("POST", "/login", form, {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


@pytest.fixture
def login_app(
    seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Served]:
    """The app behind a login (ada), the delays and the account's bound made small so that a test is short."""
    import importlib

    launch = importlib.import_module("rag_papers.ui.launch")
    monkeypatch.setattr(launch, "LOGIN_DELAY_S", 0.05)
    monkeypatch.setattr(launch, "LOGIN_DELAY_MAX_S", 0.2)
    monkeypatch.setattr(launch, "ACCOUNT_FAILURES_MAX", 8, raising=False)
    monkeypatch.setattr(launch, "ACCOUNT_WINDOW_S", 600.0, raising=False)
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "hostile_login_home", auth="ada:s3cret-pw", llm="extractive"
    ) as served:
        yield served


def forged(i: int) -> dict[str, str]:
    """A new claimed address for each try, in the headers a proxy writes (and anyone can)."""
    return [
        {"X-Forwarded-For": f"10.0.{i}.1"},
        {"Forwarded": f"for=10.1.{i}.1;proto=https"},
        {"X-Forwarded-For": f"203.0.113.{i}, 127.0.0.1"},
        {"Forwarded": f'for="[2001:db8::{i}]:4711"', "X-Forwarded-For": f"198.51.100.{i}"},
    ][i % 4]


def test_forged_forwarded_headers_do_not_skip_the_login_delay(
    login_app: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reported: 30 wrong passwords, each with a new X-Forwarded-For, then the right one: 31 tries in 0.41 s,
    success. The delay is the socket peer's, whatever the headers say; the account takes 8 failures (here) and
    then no more until its window has passed, even with the right password."""
    import importlib

    url = login_app.url.rstrip("/")
    t0 = time.monotonic()
    tries = [_login(url, "wrong", forged(i)) for i in range(30)]
    total = time.monotonic() - t0
    statuses = [status for status, _, _ in tries]
    # One peer's delay: 0.05, 0.1, then 0.2 a try, headers or not (30 tries: at least 5.75 s).
    assert total >= 5.0, (total, statuses)
    assert all(seconds >= 0.19 for _, seconds, _ in tries[3:]), [round(s, 2) for _, s, _ in tries]
    assert statuses == [400] * 8 + [429] * 22, statuses
    assert all(int(h["retry-after"]) > 0 for _, _, h in tries[8:])
    status, _, _ = _login(url, "s3cret-pw", forged(31))
    assert status == 429  # the bound holds for the right password too: it is not even checked
    monkeypatch.setattr(importlib.import_module("rag_papers.ui.launch"), "ACCOUNT_WINDOW_S", 0.01)
    status, seconds, headers = _login(url, "s3cret-pw", forged(32))  # the window passed: the right one works
    assert status == 200 and "set-cookie" in headers and seconds >= 0.19


def test_the_account_bound_holds_across_real_addresses(login_app: Served) -> None:
    """Failures from many machines (here, loopback addresses 127.0.0.10 to .21, each trying once: no delay of its
    own) count for the account: past 8, refused; other usernames have a count of their own."""
    url = login_app.url.rstrip("/")
    statuses = [_login(url, "wrong", source=f"127.0.0.{10 + i}")[0] for i in range(12)]
    assert statuses == [400] * 8 + [429] * 4, statuses
    others = [_login(url, "wrong", source=f"127.0.1.{i}", user=f"eve{i}")[0] for i in range(3)]
    assert others == [400] * 3  # made-up usernames neither share ada's count nor reset it
    assert _login(url, "s3cret-pw", source="127.0.2.1")[0] == 429


def test_a_forwarded_address_counts_only_from_a_trusted_proxy() -> None:
    """``trusted_proxies`` names the proxies whose forwarded headers are believed; from any other peer they are
    ignored. Behind a trusted proxy each client behind it has its own delay."""
    from rag_papers.ui.access import client_address, proxy_networks

    trusted = proxy_networks(["127.0.0.1", "10.0.0.0/8"])
    xff = [(b"x-forwarded-for", b"198.51.100.7, 10.0.0.2")]
    assert client_address("192.0.2.1", xff, trusted) == "192.0.2.1"  # not a proxy of ours: headers ignored
    assert client_address("127.0.0.1", xff, []) == "127.0.0.1"  # no proxy configured: never read
    assert client_address("127.0.0.1", xff, trusted) == "198.51.100.7"  # past our two proxies
    fwd = [(b"forwarded", b'for="[2001:db8:cafe::17]:4711";proto=https')]
    assert client_address("127.0.0.1", fwd, trusted) == "2001:db8:cafe::17"
    assert client_address("127.0.0.1", [(b"x-forwarded-for", b"unknown")], trusted) == "127.0.0.1"
    with pytest.raises(Exception, match="bad trusted_proxies entry 'proxy.local'"):
        proxy_networks(["proxy.local"])


def test_the_guard_keys_clients_behind_a_trusted_proxy_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Guard itself, in front of a stand-in for gradio's /login: behind a trusted proxy, a client that failed
    waits, another does not; from an untrusted peer, a header changes nothing. The username is read from the
    browser's form (multipart) as from an API's (urlencoded)."""
    import asyncio
    import importlib

    from rag_papers.ui.launch import LOGIN_DELAY_S, Guard

    class Served:
        auth = {"ada": "pw"}

    async def login_route(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        body = (await receive())["body"]
        ok = b"password=pw" in body or b'"password"\r\n\r\npw\r\n' in body
        await send({"type": "http.response.start", "status": 200 if ok else 400, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def attempt(
        guard: Guard, peer: str, forwarded: str, password: str = "no", multipart: bool = False
    ) -> tuple[int, float]:
        if multipart:  # as gradio's login page sends it (FormData)
            kind = b"multipart/form-data; boundary=XyZ"
            form = (
                b"".join(
                    b'--XyZ\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (k, v)
                    for k, v in ((b"username", b"ada"), (b"password", password.encode()))
                )
                + b"--XyZ--\r\n"
            )
        else:
            kind = b"application/x-www-form-urlencoded"
            form = urllib.parse.urlencode({"username": "ada", "password": password}).encode()
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/login",
            "app": Served(),
            "client": (peer, 5000),
            "headers": [(b"content-type", kind), (b"x-forwarded-for", forwarded.encode())],
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": form, "more_body": False}

        sent: list[int] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent.append(message["status"])

        t0 = time.monotonic()
        await guard(scope, receive, send)
        return sent[0], time.monotonic() - t0

    async def scenario() -> None:
        behind = Guard(login_route, trusted=["10.9.9.9"], users=["ada"])
        assert (await attempt(behind, "10.9.9.9", "198.51.100.1"))[0] == 400
        _, waited = await attempt(behind, "10.9.9.9", "198.51.100.1")  # the same client: waits
        _, other = await attempt(behind, "10.9.9.9", "198.51.100.2")  # another client behind the proxy: not
        assert waited >= LOGIN_DELAY_S * 0.9 and other < LOGIN_DELAY_S * 0.5, (waited, other)
        direct = Guard(login_route, users=["ada"])
        await attempt(direct, "192.0.2.5", "198.51.100.3")
        _, forged_wait = await attempt(direct, "192.0.2.5", "198.51.100.4")  # a new header, the same peer
        assert forged_wait >= LOGIN_DELAY_S * 0.9, forged_wait
        monkeypatch.setattr(importlib.import_module("rag_papers.ui.launch"), "ACCOUNT_FAILURES_MAX", 1)
        bounded = Guard(login_route, users=["ada"])
        assert (await attempt(bounded, "192.0.2.6", "", multipart=True))[0] == 400  # the page's form: ada failed
        assert (await attempt(bounded, "192.0.2.7", "", password="pw"))[0] == 429  # ada's count: full
        assert (await attempt(Guard(login_route, users=["ada"]), "192.0.2.8", "", "pw", multipart=True))[0] == 200

    # A thread of its own: a browser test before this one on the same worker leaves playwright's loop running here.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, scenario()).result()


# --------------------------------------------------------------------------- the API's parameters
@pytest.fixture(scope="module")
def api_app(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "hostile_api_home", llm="extractive") as served:
        yield served


def _call(url: str, api: str, data: list[Any]) -> tuple[int, str]:
    """POST /gradio_api/call/API, then read its event: (the POST's status, the POST's body or the event's text)."""
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=60)
    conn.request("POST", f"/gradio_api/call/{api}", json.dumps({"data": data}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    if resp.status != 200:
        return resp.status, body
    event = json.loads(body)["event_id"]
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=60)
    conn.request("GET", f"/gradio_api/call/{api}/{event}")
    text = conn.getresponse().read().decode()
    conn.close()
    return 200, text


def test_api_ask_with_a_top_k_that_is_no_number_says_so(api_app: Served) -> None:
    """Reported: ``/ask`` with top_k "abc" answered ``{"error": null}``."""
    status, text = _call(api_app.url, "ask", ["What does ABBA claim?", "extractive", "", "abc", None])
    assert status == 200 and "event: error" in text, text
    assert "top_k: 'abc' is not a value this parameter takes" in text and '"error": null' not in text, text
    status, text = _call(api_app.url, "ask", ["What does ABBA claim?", "extractive", "", 2, None])
    assert "event: complete" in text and "ABBA" in text, text  # a good one answers as before


def test_api_search_with_too_few_parameters_names_them_without_reprs(api_app: Served) -> None:
    """Reported: HTTP 400 with ``<gradio.components.api_component.Api object at 0x...>``."""
    status, text = _call(api_app.url, "search", ["ABBA"])
    assert status == 400 and "object at 0x" not in text and "Api" not in text, text
    detail = json.loads(text)["detail"]
    assert detail == (
        "1 of the 6 parameters given (query, top_k, year_min, year_max, venue, keyword): give all 6, null where "
        "the default will do"
    ), detail


def test_api_search_refuses_true_for_top_k(api_app: Served) -> None:
    """Reported: top_k ``true`` was taken as 1."""
    for data in (["ABBA", True, None, None, "", ""], ["ABBA", 3, False, None, "", ""]):
        status, text = _call(api_app.url, "search", data)
        assert status == 422, (status, text)
        assert "should be a whole number, not" in text, text
    status, text = _call(api_app.url, "search", ["ABBA", 3, None, None, "", ""])
    assert status == 200 and text.count('"id"') == 3, text


# --------------------------------------------------------------------------- the smaller lines
def test_an_ollama_host_holding_a_newline_is_refused() -> None:
    line = one_error_line(run_main("info", env={"OLLAMA_HOST": "http://localhost:11434\n"}))
    assert "ollama_host" in line and "control character '\\n'" in line, line
    with pytest.raises(ValueError, match="control character"):
        Settings(ollama_host="local\thost:11434")
    assert Settings(ollama_host="localhost:11434").ollama_url == "http://localhost:11434"


@pytest.mark.slow
def test_papers_on_a_full_disk_lists_them_and_says_so(tmpfs: Path, seeds_home: Path) -> None:  # noqa: F811
    """Reported: on a 100% full disk ``papers`` listed with no notice; the README says it says so in one line.

    It can list while another process has the registry open (a running chat: SQLite's shared-memory file is
    there already); without one it cannot even open it, and says so as the other commands do."""
    import sqlite3

    home = tmpfs / "home"
    shutil.copytree(seeds_home, home)
    env = {"RAG_PAPERS_HOME": str(home)}
    chat = sqlite3.connect(home / "papers.sqlite")  # the running chat's connection
    try:
        n = chat.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        assert n > 0
        listed = run_main("papers", env=env)
        assert listed.returncode == 0 and listed.stderr == "", listed.stderr  # space left: no word of it
        fill_to_the_last_byte(tmpfs)
        res = run_main("papers", env=env)
    finally:
        chat.close()
    assert res.returncode == 0 and res.stdout == listed.stdout and len(res.stdout.splitlines()) >= 38
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"rag-papers: no space left on the device holding {home} (0.0 MB free)"), lines
    assert "free some space and run the command again" in lines[0]


def test_home_problem_names_the_dangling_link(tmp_path: Path) -> None:
    from rag_papers.paths import home_problem

    link = tmp_path / "home"
    link.symlink_to(tmp_path / "unmounted" / "rag")
    with pytest.raises(OSError) as err:
        link.mkdir(parents=True, exist_ok=True)
    assert home_problem(link, err.value) == (
        f"it is a symbolic link to {tmp_path / 'unmounted' / 'rag'}, which does not exist: create that folder (or "
        "mount its disk), or choose another data directory with RAG_PAPERS_HOME"
    )
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(OSError) as err:
        (afile / "home").mkdir(parents=True, exist_ok=True)
    assert home_problem(afile / "home", err.value).startswith(f"{afile} is a file, not a folder")


def test_a_dangling_symlink_as_home_is_named(tmp_path: Path) -> None:
    """Reported: ``cannot create the data directory ...: File exists``."""
    link = tmp_path / "home"
    link.symlink_to(tmp_path / "unmounted" / "rag")
    line = one_error_line(run_main("info", env={"RAG_PAPERS_HOME": str(link)}))
    assert f"cannot create the data directory {link}: it is a symbolic link to" in line, line
    assert "File exists" not in line
