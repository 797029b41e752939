"""``rag-papers fetch arxiv|openreview|openalex`` (issue 27, "Fetching") against local stand-ins that answer in each
API's real format (tests/fetch_stub.py, fixtures in tests/fetch/): several pages fetched and ingested, the
requests polite (User-Agent, paging parameters, the API's spacing, retries honouring Retry-After), an
unreachable host one line with the index unchanged, and a fetch killed midway resumed without asking for a
completed page again or writing a record twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import VENV_BIN, free_port, run_cli, run_main
from fetch_stub import FIXTURES, ArxivStub, OpenAlexStub, OpenReviewStub, Request, Stub
from test_integrity import one_error_line
from test_validation import papers_json

from rag_papers import __version__
from rag_papers.config import Settings

VENUE = "ICLR.cc/2026/Conference"
URL_VARS = {
    "arxiv": "RAG_PAPERS_ARXIV_URL",
    "openreview": "RAG_PAPERS_OPENREVIEW_URL",
    "openalex": "RAG_PAPERS_OPENALEX_URL",
}


def stub_for(source: str) -> Stub:
    return {"arxiv": ArxivStub, "openreview": OpenReviewStub, "openalex": OpenAlexStub}[source]()


def api_url(source: str, stub: Stub) -> str:
    return stub.url + ("/api/query" if source == "arxiv" else "")


def snapshot(folder: Path) -> set[tuple[str, int, int]]:
    """Every file under ``folder`` with its size and modification time: equal snapshots, nothing written."""
    return {(str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def fixture_abstract_phrase(source: str) -> tuple[str, str]:
    """(a sentence of one abstract on the last page, that paper's title), read from the fixtures themselves."""
    if source == "arxiv":
        return (
            "We present a method for efficient estimation of the prevalence of infection in a population with high "
            "accuracy using only a small number of tests",
            "Variable pool testing for infection spread estimation",
        )
    if source == "openreview":
        return (
            "we introduce SWAX, a hybrid architecture consisting of sliding-window attention and xLSTM linear RNN "
            "layers",
            "Short Window Attention Enables Long-Term Memorization",
        )
    return (
        "Diffusion large language models (dLLMs) are emerging as a promising alternative",
        "Efficient Inference for Diffusion Large Language Models",
    )


# source: (CLI arguments after `fetch SOURCE`, records written, papers indexed, the paging parameters of each request)
CASES: dict[str, tuple[list[str], int, int, list[dict[str, str]]]] = {
    "arxiv": (
        ["testing", "--max", "14", "--page-size", "5"],
        14,
        14,
        [{"search_query": "testing", "start": s, "max_results": "5"} for s in ("0", "5", "10")],
    ),
    "openreview": (
        [VENUE, "--page-size", "3"],
        9,
        8,  # the note without an abstract is skipped; the rejected submission is not asked for
        [
            {"content.venueid": VENUE, "sort": "id", "limit": "3", "count": "true"},
            {"content.venueid": VENUE, "sort": "id", "limit": "3", "after": "Nz0abs0000"},
            {"content.venueid": VENUE, "sort": "id", "limit": "3", "after": "a7BnW2rTq0"},
        ],
    ),
    "openalex": (
        ["open access", "--max", "6", "--page-size", "2", "--mailto", "someone@example.org"],
        6,
        5,  # the work whose abstract_inverted_index is null is skipped
        [
            {"search": "open access", "per-page": "2", "cursor": c, "mailto": "someone@example.org"}
            for c in ("*", OpenAlexStub.cursor(2), OpenAlexStub.cursor(4))
        ],
    ),
}
POLICY = {"arxiv": 3.0, "openreview": 0.5, "openalex": 0.1}  # seconds between requests (the APIs' own policies)


def paging(request: Request, keys: dict[str, str]) -> dict[str, str]:
    return {k: request.query.get(k, "<absent>") for k in keys}


@pytest.mark.parametrize("source", sorted(CASES))
def test_fetch_pages_through_the_api_politely_and_ingests_what_it_fetched(
    source: str, embedder: object, _private_home: Path
) -> None:
    args, n_records, n_papers, expected = CASES[source]
    with stub_for(source) as stub:
        res = run_main("fetch", source, *args, "--no-progress", env={URL_VARS[source]: api_url(source, stub)})
        assert res.returncode == 0, res.stderr
        requests = list(stub.requests)
    # the paging: each page asked once, in order, with the API's parameters
    assert [paging(r, e) for r, e in zip(requests, expected)] == expected
    assert len(requests) == len(expected), [r.query for r in requests]
    if source == "openreview":
        assert "count" not in requests[1].query and "after" not in requests[0].query
    if source == "openalex":
        assert "abstract_inverted_index" in requests[0].query["select"].split(",")
    # polite: a User-Agent naming rag-papers and its version, and the API's spacing between requests
    for r in requests:
        assert r.headers["user-agent"].startswith(f"rag-papers/{__version__} "), r.headers
    gaps = [b.at - a.at for a, b in zip(requests, requests[1:])]
    assert min(gaps) >= POLICY[source] - 0.05, gaps
    # what was fetched went in, as `ingest FILE` puts it in
    out = _private_home / "fetched"
    (fetched,) = out.iterdir()
    assert fetched.suffix == ".jsonl" and not list(out.glob("*.part")) and not list(out.glob("*.fetch-state"))
    assert len(fetched.read_text(encoding="utf-8").splitlines()) == n_records
    assert f"fetched {n_records} records in {len(expected)} pages" in res.stderr, res.stderr
    assert f"{n_papers} added" in res.stdout, res.stdout
    papers = papers_json({})
    assert len(papers) == n_papers and len({p["id"] for p in papers}) == n_papers
    assert all(s.startswith(f"{fetched.resolve()}:") for p in papers for s in p["sources"])
    phrase, title = fixture_abstract_phrase(source)
    hit = json.loads(run_main("search", "--json", phrase).stdout)["results"][0]
    assert hit["title"] == title, hit


def test_fetched_records_keep_their_metadata(embedder: object, _private_home: Path) -> None:
    """What each source says about a paper reaches the index: arXiv's UTF-8 author names, OpenReview's venue
    and forum url, the year."""
    with ArxivStub() as stub:
        res = run_main("fetch", "arxiv", "testing", "--max", "2", "--no-progress", env=arxiv_env(stub))
        assert res.returncode == 0, res.stderr
    with OpenReviewStub() as stub:
        env = {"RAG_PAPERS_OPENREVIEW_URL": stub.url, "RAG_PAPERS_FETCH_INTERVAL": "0"}
        res = run_main("fetch", "openreview", VENUE, "--no-progress", env=env)
        assert res.returncode == 0, res.stderr
    papers = {p["title"]: p for p in papers_json({})}
    ranking = papers["Towards Explainable Test Case Prioritisation with Learning-to-Rank Models"]
    assert ranking["authors"][:3] == ["Aurora Ramírez", "Mario Berrios", "José Raúl Romero"]
    assert ranking["url"] == "https://arxiv.org/abs/2405.13786" and ranking["year"] == 2024
    swax = papers["Short Window Attention Enables Long-Term Memorization"]
    assert (swax["id"], swax["venue"], swax["year"]) == ("openreview:Hw1tR6uJdO", "ICLR 2026 Poster", 2026)
    assert swax["url"] == "https://openreview.net/forum?id=Hw1tR6uJdO"
    assert not any("Persuasion" in t for t in papers)  # rejected: not in the venue's content.venueid


def arxiv_env(stub: Stub) -> dict[str, str]:
    return {"RAG_PAPERS_ARXIV_URL": api_url("arxiv", stub), "RAG_PAPERS_FETCH_INTERVAL": "0"}


def test_openreview_submissions_asks_for_the_submission_invitation(embedder: object, _private_home: Path) -> None:
    with OpenReviewStub() as stub:
        env = {"RAG_PAPERS_OPENREVIEW_URL": stub.url, "RAG_PAPERS_FETCH_INTERVAL": "0"}
        res = run_main("fetch", "openreview", VENUE, "--submissions", "--no-progress", "--json", env=env)
        assert res.returncode == 0, res.stderr
        assert stub.requests[0].query["invitation"] == f"{VENUE}/-/Submission"
    report = json.loads(res.stdout)
    assert report["added"] == 9 and report["skipped"] == 1  # the rejected submission too


def test_429_and_5xx_are_retried_with_retry_after_honoured(tmp_path: Path) -> None:
    """429 with Retry-After: 1 waits that second; a 503 without one waits the (tiny, in tests) backoff."""
    from rag_papers.fetch import fetch

    settings = Settings(fetch_backoff=0.05, fetch_interval=0)
    with OpenReviewStub() as stub:
        stub.fail = [(429, {"Retry-After": "1"}), (503, {})]
        settings.openreview_url = stub.url
        result = fetch(settings, "openreview", VENUE, out=tmp_path / "v.jsonl", show_progress=False)
        first, second, third, *rest = stub.requests
    assert first.query == second.query == third.query  # the same page asked again
    assert second.at - first.at >= 0.95  # Retry-After
    assert 0.05 <= third.at - second.at < 0.9  # the backoff, not Retry-After's second again
    assert result.records == 9 and result.requests == 3 + len(rest) and result.pages == 1


def test_retries_run_out_in_one_line(tmp_path: Path) -> None:
    with OpenReviewStub() as stub:
        stub.fail = [(503, {})] * 10
        env = {"RAG_PAPERS_OPENREVIEW_URL": stub.url, "RAG_PAPERS_FETCH_RETRIES": "2", "RAG_PAPERS_FETCH_BACKOFF": "0"}
        line = one_error_line(run_main("fetch", "openreview", VENUE, "--no-progress", env=env))
        assert len(stub.requests) == 3
    assert "kept answering 503" in line and "tried 3 times" in line, line


def test_a_client_error_is_one_line_and_not_retried(tmp_path: Path) -> None:
    """A 4xx other than 429 will not change by asking again: said once, with the server's own words."""
    with ArxivStub() as stub:
        line = one_error_line(run_main("fetch", "arxiv", "bad:query", "--no-progress", env=arxiv_env(stub)))
        assert len(stub.requests) == 1
    assert "400" in line and "unknown field in search_query" in line, line
    with OpenAlexStub() as stub:
        env = {"RAG_PAPERS_OPENALEX_URL": stub.url + "/v9"}
        line = one_error_line(run_main("fetch", "openalex", "x", "--no-progress", env=env))
        assert len(stub.requests) == 1
    assert "404" in line, line


def test_bad_arguments_are_one_line_before_any_request(tmp_path: Path) -> None:
    with OpenAlexStub() as stub:
        env = {"RAG_PAPERS_OPENALEX_URL": stub.url}
        assert "1 to 200" in one_error_line(run_main("fetch", "openalex", "x", "--page-size", "500", env=env))
        assert "--max 0" in one_error_line(run_main("fetch", "openalex", "x", "--max", "0", env=env))
        assert ".jsonl" in one_error_line(run_main("fetch", "openalex", "x", "--out", str(tmp_path / "a.txt"), env=env))
        assert "empty query" in one_error_line(run_main("fetch", "openalex", "  ", env=env))
        assert stub.requests == []
    line = one_error_line(run_main("fetch", "arxiv", "x", "--url", "ftp://example.org/q"))
    assert "arxiv_url" in line and "http" in line, line


def test_an_empty_venue_is_one_line_and_writes_nothing(seeded: Settings) -> None:
    before = snapshot(seeded.home)
    with OpenReviewStub() as stub:
        env = {"RAG_PAPERS_OPENREVIEW_URL": stub.url, "RAG_PAPERS_FETCH_INTERVAL": "0"}
        line = one_error_line(run_main("fetch", "openreview", "ICLR.cc/2062/Conference", env=env))
    assert "no public notes with content.venueid=ICLR.cc/2062/Conference" in line and "--submissions" in line
    assert snapshot(seeded.home) == before


@pytest.mark.parametrize("source", sorted(CASES))
def test_an_unreachable_host_is_one_line_and_leaves_the_index_unchanged(source: str, seeded: Settings) -> None:
    before = snapshot(seeded.home)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {URL_VARS[source]: url + "/api/query", "RAG_PAPERS_FETCH_BACKOFF": "0.01", "RAG_PAPERS_FETCH_INTERVAL": "0"}
    target = VENUE if source == "openreview" else "anything"
    line = one_error_line(run_main("fetch", source, target, env=env))  # progress on: still one line
    assert line.startswith(f"rag-papers: error: cannot reach {url.removeprefix('http://')} ("), line
    assert snapshot(seeded.home) == before


@pytest.mark.slow
def test_unreachable_from_the_console_script_is_one_line(seeded: Settings) -> None:
    """The installed script, as a user runs it offline: the default retries, no traceback, exit 2."""
    before = snapshot(seeded.home)
    url = f"http://127.0.0.1:{free_port()}"
    res = run_cli("fetch", "openalex", "graph neural networks", env={"RAG_PAPERS_OPENALEX_URL": url}, timeout=120)
    assert one_error_line(res).startswith("rag-papers: error: cannot reach 127.0.0.1:")
    assert snapshot(seeded.home) == before


# source: (arguments, the paging parameters that start page 3, the records written, the papers indexed)
KILL: dict[str, tuple[list[str], dict[str, str], int, int]] = {
    "arxiv": (["testing", "--max", "12", "--page-size", "3"], {"start": "6"}, 12, 12),
    "openreview": ([VENUE, "--page-size", "3"], {"after": "a7BnW2rTq0"}, 9, 8),
    "openalex": (["open access", "--page-size", "2"], {"cursor": OpenAlexStub.cursor(4)}, 6, 5),
}
FIRST_PAGE = {"arxiv": {"start": "0"}, "openreview": {"count": "true"}, "openalex": {"cursor": "*"}}


@pytest.mark.slow
@pytest.mark.parametrize("source", sorted(KILL))
def test_a_fetch_killed_midway_resumes_from_its_last_complete_page(
    source: str, embedder: object, _private_home: Path, tmp_path: Path
) -> None:
    args, third_page, n_records, n_papers = KILL[source]
    out = tmp_path / "fetched.jsonl"
    part, state_file = out.with_name("fetched.jsonl.part"), out.with_name("fetched.jsonl.fetch-state")
    with stub_for(source) as stub:
        env = {URL_VARS[source]: api_url(source, stub), "RAG_PAPERS_FETCH_INTERVAL": "0"}
        stub.stall_after = 2  # the third page is asked for, and held
        proc = subprocess.Popen(
            [str(VENV_BIN / "rag-papers"), "fetch", source, *args, "--out", str(out), "--no-progress"],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while len(stub.requests) < 3:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the third page was never asked for"
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        assert not out.exists()  # the file appears only when complete
        state = json.loads(state_file.read_text(encoding="utf-8"))
        assert state["pages"] == 2
        done = part.read_bytes()
        assert len(done.splitlines()) == state["records"] > 0
        with part.open("ab") as fh:  # a page half written when the kill came: the resume must drop it
            fh.write(b'{"id": "torn page", "content": {"title": {"val')
        stub.release()
        stub.requests.clear()
        res = run_main("fetch", source, *args, "--out", str(out), "--no-progress", env=env)
        assert res.returncode == 0, res.stderr
        resumed = list(stub.requests)
    assert f"resuming the fetch after 2 pages ({state['records']} records)" in res.stderr, res.stderr
    # no completed page asked again: the run starts at page 3
    assert {k: resumed[0].query.get(k) for k in third_page} == third_page, resumed[0].query
    first = FIRST_PAGE[source]
    assert not [r for r in resumed if all(r.query.get(k) == v for k, v in first.items())]
    # the file: the complete pages kept as they were, no torn line, no record twice
    text = out.read_bytes()
    assert text.startswith(done) and b"torn page" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    ids = [line["id"] for line in lines]
    assert len(ids) == n_records == len(set(ids))
    assert not part.exists() and not state_file.exists()
    papers = papers_json({})
    assert len(papers) == n_papers == len({p["id"] for p in papers})


def test_a_completed_fetch_run_again_fetches_afresh(tmp_path: Path) -> None:
    """No state left: the same command asks from the first page again (a refresh), and the file is replaced."""
    from rag_papers.fetch import fetch

    settings = Settings(fetch_interval=0)
    out = tmp_path / "w.jsonl"
    with OpenAlexStub() as stub:
        settings.openalex_url = stub.url
        first = fetch(settings, "openalex", "x", out=out, page_size=4, show_progress=False)
        again = fetch(settings, "openalex", "x", out=out, page_size=4, show_progress=False)
        assert [r.query["cursor"] for r in stub.requests] == ["*", OpenAlexStub.cursor(4)] * 2
    assert first.records == again.records == 6 and again.resumed_at == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 6


def test_a_state_of_another_query_is_not_resumed(tmp_path: Path) -> None:
    """The state names what was fetched: another query into the same file starts from its own first page."""
    from rag_papers.fetch import fetch

    settings = Settings(fetch_interval=0)
    out = tmp_path / "w.jsonl"
    state = {"version": 1, "identity": {"source": "openalex", "url": "x", "target": "other"}, "next": {"cursor": "zz"},
             "records": 1, "pages": 1, "skipped": 0, "bytes": 3, "total": None}  # fmt: skip
    out.with_name("w.jsonl.fetch-state").write_text(json.dumps(state), encoding="utf-8")
    out.with_name("w.jsonl.part").write_text("{}\n", encoding="utf-8")
    with OpenAlexStub() as stub:
        settings.openalex_url = stub.url
        result = fetch(settings, "openalex", "x", out=out, show_progress=False)
        assert stub.requests[0].query["cursor"] == "*"
    assert result.resumed_at == 0 and result.records == 6
    assert [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()][0].startswith("https://")


def test_nothing_but_fetch_loads_the_network_module() -> None:
    """Fetch is opt-in network: the CLI, the index and the UI's modules never import rag_papers.fetch."""
    code = (
        "import sys; import rag_papers.cli, rag_papers.index, rag_papers.ingest, rag_papers.corpus, "
        "rag_papers.chat; from rag_papers.cli import build_parser; build_parser().parse_args(['fetch', 'arxiv', 'x']); "
        "print('rag_papers.fetch' in sys.modules, 'urllib.request' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False", out


def test_fixtures_are_the_apis_own_format() -> None:
    """The stand-ins serve what the APIs write (tests/fetch/README.md): a guard against fixtures drifting into
    our own writer's output."""
    arxiv = (FIXTURES / "arxiv-testing-start0.xml").read_text(encoding="utf-8")
    assert "<opensearch:totalResults>214881</opensearch:totalResults>" in arxiv and "Aurora Ramírez" in arxiv
    notes: list[dict[str, Any]] = json.loads((FIXTURES / "openreview-notes.json").read_text(encoding="utf-8"))["notes"]
    assert all(set(n["content"]["title"]) == {"value"} for n in notes)
    works = json.loads((FIXTURES / "openalex-works.json").read_text(encoding="utf-8"))
    assert set(works) == {"meta", "results", "group_by"} and works["results"][0]["id"].endswith("W2741809807")
