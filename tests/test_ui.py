"""The Gradio chat UI, driven as users and API clients drive it.

One in-process app over a copy of the seeds index (no Ollama: extractive answers) serves
the browser and API tests of this module; a second one talks to the Ollama stand-in
(``ollama_stub.py``) to test streaming, mid-answer failures and concurrency; one test
runs ``app.py`` as a subprocess, as a user starts it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import SEEDS, free_port, stop_process, wait_http
from ollama_stub import OllamaStub

from rag_papers.config import PROJECT_ROOT, Settings

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

# Set RAG_PAPERS_SCREENSHOT=docs/screenshot.png to refresh the README's picture; by default the
# test writes to a temporary file so a test run never changes tracked files.
SCREENSHOT_ENV = "RAG_PAPERS_SCREENSHOT"
BOT = "#rp-chat [data-testid='bot']"
STUB_MODEL = "llama3.2:3b"
STUB_REPLY = (
    "ABBA reparameterizes the weight update as a Hadamard product of two independently learnable "
    "low-rank matrices [1]. It reports state-of-the-art results on arithmetic and commonsense reasoning [1]."
)


@dataclass
class Served:
    url: str
    settings: Settings
    app: Any


def _serve(home: Path, embedder: object, **overrides: Any) -> Served:
    from rag_papers.chat import Engine
    from rag_papers.index import Index
    from rag_papers.ui import build_app, serve

    llm = overrides.pop("llm", None)
    settings = Settings(home=home, port=free_port(), **overrides)
    engine = Engine(settings, Index(settings, embedder=embedder))  # type: ignore[arg-type]
    app = build_app(settings, engine, llm=llm)
    url = serve(app, settings, block=False, quiet=True)
    return Served(url, settings, app)


def _copy_home(seeds_home: Path, tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    home = tmp_path_factory.mktemp(name)
    shutil.copytree(seeds_home, home, dirs_exist_ok=True)
    return home


@contextmanager
def app_over_seeds(
    seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory, name: str, **overrides: Any
) -> Iterator[Served]:
    """The app over a private copy of the seeds index (a module's server fixture), closed on the way out."""
    served = _serve(_copy_home(seeds_home, tmp_path_factory, name), embedder, **overrides)
    try:
        yield served
    finally:
        served.app.close()


@pytest.fixture(scope="module")
def server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app over the seeds, no LLM reachable: answers are extractive."""
    # source_min_ratio=0: every top-5 paper is a source, so the panel has several to switch between.
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "ui_home", ollama_host="http://127.0.0.1:9", source_min_ratio=0.0
    ) as served:
        yield served


@pytest.fixture(scope="module")
def stub() -> Iterator[OllamaStub]:
    with OllamaStub(models=[STUB_MODEL], reply=STUB_REPLY) as s:
        yield s


@pytest.fixture(scope="module")
def stub_server(
    stub: OllamaStub, seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The app answering with "Ollama" (the stub), chosen explicitly as ``--llm ollama``."""
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "ui_stub_home", ollama_host=stub.url, llm="ollama"
    ) as served:
        yield served


@pytest.fixture(autouse=True)
def _stub_defaults(request: pytest.FixtureRequest) -> None:
    """Each test starts with a healthy, fast stub (tests that use it change its knobs)."""
    if "stub" in request.fixturenames:
        s: OllamaStub = request.getfixturevalue("stub")
        s.reply, s.token_delay, s.die_after_tokens = STUB_REPLY, 0.0, None


# ------------------------------------------------------------------- browser


def open_app(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#rp-input textarea")
    # The status comes after the page's load events in the queue: on a loaded two-core machine running the
    # whole suite, the first page of a server once took over the default 30 s (as long as ``ask`` may wait), and
    # once (CI of 4160bfc, four workers, beside the bench test) a page of a running server over 60 s, and once
    # (CI of 3e6efbe) over 120 s: that check was stuck, not slow, and its cause is not found (CI of 9eea6eb: one
    # page of 97 waited the whole 90 s this wait once had, then settled on the click). So after 20 s the test
    # asks again, as a user would with "Check LLM" (a check that was only slow settles either way); a status still
    # "checking" 60 s later fails the test with what the pill shows.
    settled = "#rp-status-wrap .rp-status:not(:has-text('checking'))"
    try:
        page.wait_for_selector(settled, timeout=20_000)
        return
    except Exception:
        page.locator("#rp-refresh").dispatch_event("click")
    try:
        page.wait_for_selector(settled, timeout=60_000)
    except Exception as exc:
        shown = page.locator("#rp-status-wrap").inner_text(timeout=5_000)
        raise AssertionError(f"the LLM status never settled, even after Check LLM; it shows {shown!r}") from exc


def ask(page: Any, question: str, timeout: float = 60_000) -> Any:
    """Type a question, press Enter, wait until its reply is complete (it has a footer line)."""
    before = page.locator(BOT).count()
    page.fill("#rp-input textarea", question)
    page.press("#rp-input textarea", "Enter")
    page.wait_for_function(
        """n => { const m = document.querySelectorAll("#rp-chat [data-testid='bot']");
                  return m.length > n && m[m.length - 1].querySelector('.rp-meta') !== null; }""",
        arg=before,
        timeout=timeout,
    )
    return page.locator(BOT).last


def selected_source(page: Any) -> tuple[str, str]:
    card = page.locator("#rp-panel .rp-src.selected")
    return card.locator(".rp-src-title").inner_text(), card.locator(".rp-abstract").inner_text()


@pytest.mark.browser
def test_chat_in_browser(server: Served, page: Any, tmp_path: Path) -> None:
    """Answer with citations, open a cited paper, follow up, list papers, refuse, export, start over."""
    open_app(page, server.url)
    assert "Quoting the abstracts, no LLM" in page.locator("#rp-status-wrap").inner_text()

    reply = ask(page, "What does ABBA claim?")
    assert "[1]" in reply.inner_text()
    assert "ABBA" in reply.inner_text()
    assert (
        "retrieval" in reply.locator(".rp-meta").inner_text() and "extractive" in reply.locator(".rp-meta").inner_text()
    )

    # The first cited paper opens by itself; pick another, then click the citation to come back.
    title, abstract = selected_source(page)
    assert title.startswith("[1] ABBA")
    page.locator("#rp-source-pick label", has_text="[2]").click()
    page.wait_for_selector("#rp-panel #src-2.selected")
    assert not selected_source(page)[0].startswith("[1] ABBA")
    reply.locator("a.rp-cite", has_text="[1]").first.click()
    page.wait_for_selector("#rp-panel #src-1.selected")
    title, abstract = selected_source(page)
    assert title.removeprefix("[1] ").startswith("ABBA")
    assert "Hadamard product" in abstract
    assert page.locator("#rp-panel .rp-src.selected mark").count() >= 1  # the supporting passage is highlighted

    # A follow-up is condensed against the conversation; the rewrite is shown on request.
    page.locator("#rp-show-rewrite input").check()
    follow = ask(page, "and what is its code availability?")
    assert page.locator(BOT).count() == 2
    assert follow.locator("a.rp-cite").count() >= 1
    searched = follow.locator(".rp-searched").inner_text()
    assert "ABBA" in searched
    page.wait_for_timeout(300)
    shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "screenshot.png")
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000

    # Citations of an older answer still open that answer's paper.
    page.locator(BOT).first.locator("a.rp-cite").first.click()
    page.wait_for_function(
        "() => document.querySelector('#rp-panel .rp-src-head').innerText.includes('What does ABBA claim')"
    )

    # Retrieval only: a ranked list of papers, nothing generated.
    page.locator("#rp-retrieval-only input").check()
    listing = ask(page, "low-rank adaptation of language models")
    text = listing.inner_text()
    assert "matching papers" in text and "no answer generated" in text
    assert listing.locator("ol.rp-hits li").count() >= 3
    assert "From the abstracts" not in text
    assert "score" in text
    assert page.locator("#rp-panel .rp-src").count() >= 3
    page.locator("#rp-retrieval-only input").uncheck()

    # Off-topic: the pipeline's refusal, badged, and no sources cited.
    refusal = ask(page, "who won the 2022 World Cup?")
    assert "Not covered" in refusal.inner_text()
    assert "don't cover" in refusal.inner_text()
    assert refusal.locator("a.rp-cite").count() == 0
    assert "no LLM called" in refusal.locator(".rp-meta").inner_text()

    # Export: Markdown with every question, the answers and a References list.
    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "## 1. What does ABBA claim?" in exported
    assert "**References**" in exported and "ABBA" in exported
    assert "who won the 2022 World Cup?" in exported and "Not covered" in exported

    # New chat: everything goes.
    page.locator("#rp-new").click()
    page.wait_for_function("() => document.querySelectorAll(\"#rp-chat [data-testid='bot']\").length === 0")
    assert "Sources appear here" in page.locator("#rp-panel").inner_text()
    reply = ask(page, "and what is its code availability?")  # nothing to follow up on any more
    assert reply.locator(".rp-searched").count() == 0


@pytest.mark.browser
def test_streaming_error_and_recovery(stub_server: Served, stub: OllamaStub, page: Any) -> None:
    """Tokens appear as the LLM streams; an LLM dying mid-answer is a ⚠ message, and the chat goes on."""
    open_app(page, stub_server.url)
    assert f"model {STUB_MODEL}" in page.locator("#rp-status-wrap").inner_text()

    stub.token_delay = 0.08
    page.fill("#rp-input textarea", "What does ABBA claim?")
    page.press("#rp-input textarea", "Enter")
    page.wait_for_selector(f"{BOT} .rp-caret")  # still streaming ...
    partial = page.locator(BOT).last.inner_text()
    page.wait_for_selector(f"{BOT} .rp-meta")
    final = page.locator(BOT).last.inner_text()
    assert len(partial) < len(final) and "Hadamard product" in final and "[1]" in final
    assert "ollama llama3.2:3b" in page.locator(BOT).last.locator(".rp-meta").inner_text()

    stub.token_delay, stub.die_after_tokens = 0.0, 3
    broken = ask(page, "Which papers study positional encoding?")
    assert "⚠" in broken.inner_text()
    assert "Ollama" in broken.locator(".rp-error").inner_text()
    assert "Traceback" not in page.content()

    stub.die_after_tokens = None
    again = ask(page, "What does ABBA claim?")
    assert "Hadamard product" in again.inner_text()
    assert again.locator(".rp-error").count() == 0

    # Stop: the answer so far stays, marked as stopped, and the next question is served.
    stub.token_delay = 0.3
    page.fill("#rp-input textarea", "Which papers study positional encoding?")
    page.press("#rp-input textarea", "Enter")
    page.wait_for_selector(f"{BOT} .rp-caret")
    page.locator("#rp-stop").click()
    page.wait_for_selector(f"{BOT} >> text=Stopped before the answer was complete")
    stub.token_delay = 0.0
    # Let gradio finish cancelling the stopped event chain before the next submit (under
    # heavy load the new question could otherwise be typed into a still-busy session).
    page.wait_for_selector("#rp-input textarea:not([disabled])")
    page.wait_for_timeout(2000)
    after = ask(page, "What does ABBA claim?")
    assert "Hadamard product" in after.inner_text()


# ----------------------------------------------------------------------- API
def _client(url: str, **kw: Any) -> Any:
    from gradio_client import Client

    return Client(url, verbose=False, **kw)


def test_api_ask_and_search(server: Served) -> None:
    client = _client(server.url)
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/ask", "/search", "/new_chat"} <= names

    out = client.predict("What does ABBA claim?", api_name="/ask")
    assert out["refused"] is False
    assert "[1]" in out["answer"]
    assert out["sources"][0]["title"].startswith("ABBA")
    assert out["citations"] == [out["sources"][0]["id"]]
    assert out["backend"] == "extractive" and "generation_ms" in out["timings"]

    off = client.predict("who won the 2022 World Cup?", api_name="/ask")
    assert off["refused"] is True and off["sources"] == []

    found = client.predict("Hadamard product low-rank adaptation", 3, api_name="/search")
    assert len(found["results"]) == 3
    assert found["results"][0]["title"].startswith("ABBA")
    assert {"id", "score", "passage"} <= set(found["results"][0])
    assert client.predict("", api_name="/search") == {"error": "empty query"}


def test_top_k_slider_and_api_limit_the_answer_sources(engine: Any) -> None:
    """The slider's top_k reaches the answer: 2 papers retrieved, 2 sources, while streaming and after."""
    from rag_papers.ui import ChatApp

    engine.settings.source_min_ratio = 0.0  # without the slider's limit, all five would be sources
    app = ChatApp(engine.settings, engine)
    out, _ = app.api_ask("What does ABBA claim?", "extractive", "", 2, None)
    assert out["backend"] == "extractive" and len(out["sources"]) == 2
    assert out["sources"][0]["title"].startswith("ABBA")

    state = app.new_state()
    app.accept("What does ABBA claim?", state, False)
    steps = app.run_answer(0, state, "extractive", "", 2, None, None, None, "")
    next(steps)  # the provisional sources, shown while the answer streams
    ex = state.exchanges[0]
    assert not ex.error and ex.answer is None and [it.n for it in ex.items] == [1, 2]
    for _ in steps:
        pass
    assert ex.answer is not None and [s.n for s in ex.answer.sources] == [1, 2]
    assert [it.n for it in ex.items] == [1, 2]


def test_sessions_keep_separate_histories(server: Served) -> None:
    """Two clients talk at once; each follow-up is condensed against its own conversation only."""
    from concurrent.futures import ThreadPoolExecutor

    a, b = _client(server.url), _client(server.url)
    with ThreadPoolExecutor(2) as pool:
        fa = pool.submit(a.predict, "What does ABBA claim?", api_name="/ask")
        fb = pool.submit(b.predict, "What is the Bayesian Attention Mechanism?", api_name="/ask")
        assert fa.result()["sources"][0]["title"].startswith("ABBA")
        assert fb.result()["sources"][0]["title"].startswith("BAM")
    follow_b = b.predict("and what are its limitations?", api_name="/ask")
    follow_a = a.predict("and what is its code availability?", api_name="/ask")
    assert "BAM" in follow_b["standalone"] and "ABBA" not in follow_b["standalone"]
    assert "ABBA" in follow_a["standalone"] and "BAM" not in follow_a["standalone"]

    b.predict(api_name="/new_chat")
    fresh = b.predict("and what are its limitations?", api_name="/ask")
    assert fresh["standalone"] == "and what are its limitations?"


def test_slow_generation_does_not_block_search(stub_server: Served, stub: OllamaStub) -> None:
    """Generation and retrieval run in separate concurrency groups."""
    stub.token_delay = 0.15  # about 5 s for the whole reply
    client = _client(stub_server.url)
    job = client.submit("What does ABBA claim?", api_name="/ask")
    time.sleep(0.5)
    t0 = time.monotonic()
    found = _client(stub_server.url).predict("positional encoding", 3, api_name="/search")
    elapsed = time.monotonic() - t0
    assert found["results"] and not job.done()
    assert elapsed < 3.0
    out = job.result(timeout=60)
    assert out["backend"] == "ollama" and "[1]" in out["answer"]


def test_api_reports_llm_failure_as_data(stub_server: Served, stub: OllamaStub) -> None:
    stub.die_after_tokens = 3
    client = _client(stub_server.url)
    out = client.predict("What does ABBA claim?", api_name="/ask")
    assert "error" in out and "Ollama" in out["error"]
    stub.die_after_tokens = None
    assert "[1]" in client.predict("What does ABBA claim?", api_name="/ask")["answer"]


# ------------------------------------------------------------------ app.py
def test_app_py_ingests_and_requires_login(tmp_path: Path) -> None:
    """``python app.py --auth``: empty index → seeds ingested, served on 127.0.0.1 behind a login."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    first = sorted(SEEDS.glob("*.txt"))[-1]
    shutil.copy(first, seeds / first.name)
    port = free_port()
    env = {
        **os.environ,
        "RAG_PAPERS_HOME": str(tmp_path / "home"),
        "RAG_PAPERS_SEEDS_DIR": str(seeds),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    log = (tmp_path / "app.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(PROJECT_ROOT / "app.py"),
            "--port",
            str(port),
            "--auth",
            "ada:secret",
            "--llm",
            "extractive",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/", timeout=120)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}/config", timeout=5)
        assert err.value.code == 401
        client = _client(url, auth=("ada", "secret"))
        found = client.predict("Hadamard product", 2, api_name="/search")
        assert found["results"][0]["title"].startswith("ABBA")
    finally:
        stop_process(proc, 20)
        log.close()
    output = (tmp_path / "app.log").read_text()
    assert "ingesting" in output and "papers indexed" in output
    assert "Extractive answers" in output
    assert "Traceback" not in output


def test_bad_auth_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "app.py"), "--auth", "nopassword"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAG_PAPERS_HOME": str(tmp_path / "h")},
    )
    assert proc.returncode == 2
    assert "user:password" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.browser
def test_a_running_ui_picks_up_papers_another_process_ingests(
    seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory, page: Any, tmp_path: Path
) -> None:
    """Reported: a UI running while `ingest` adds papers showed the old count until restarted."""
    import json

    from conftest import run_cli

    served = _serve(
        _copy_home(seeds_home, tmp_path_factory, "ui_live_home"), embedder, ollama_host="http://127.0.0.1:9"
    )
    try:
        open_app(page, served.url)
        assert "38 research-paper abstracts" in page.locator(".rp-brand").inner_text()
        corpus = tmp_path / "new.jsonl"
        new = {
            "id": "sundial-1",
            "title": "Sundial calibration with shadow transformers",
            "abstract": "We calibrate ancient sundials from photographs with shadow transformers, a model that "
            "reads the gnomon's shadow and the hour lines, and reach a median error of four minutes.",
        }
        corpus.write_text(json.dumps(new) + "\n", encoding="utf-8")
        res = run_cli("ingest", "--no-progress", str(corpus), env={"RAG_PAPERS_HOME": str(served.settings.home)})
        assert res.returncode == 0, res.stderr
        time.sleep(2.5)  # the index looks for other processes' writes every couple of seconds
        page.reload()
        page.wait_for_selector("#rp-input textarea")
        page.wait_for_function("() => document.querySelector('.rp-brand').innerText.includes('39 research-paper')")
        page.get_by_text("Answering and retrieval settings").click()
        assert "39 papers" in page.locator("#rp-index-line").inner_text()
        page.locator("#rp-retrieval-only input").check()
        listing = ask(page, "how do you calibrate a sundial from a photo?")
        assert "Sundial calibration" in listing.locator("ol.rp-hits li").first.inner_text()
    finally:
        served.app.close()


@pytest.mark.browser
def test_each_claim_shows_its_evidence_and_unsupported_ones_are_flagged(
    stub_server: Served, stub: OllamaStub, page: Any
) -> None:
    """Issue 15: the claims under an answer, each with the sentence that backs it; an unsupported one stands out."""
    stub.reply = (
        "ABBA reparameterizes the weight update as a Hadamard product of two independently learnable "
        "low-rank matrices [1]. The <b>moon</b> landing was filmed with ABBA adapters in 1969 [1]."
    )
    open_app(page, stub_server.url)
    reply = ask(page, "What does ABBA claim?")
    claims = reply.locator("details.rp-claims")
    assert claims.count() == 1
    assert claims.get_attribute("open") is not None  # open: one claim is not supported
    assert "1 of 2 claims not supported" in claims.locator("summary").inner_text()
    items = claims.locator("li.rp-claim")
    assert items.count() == 2
    ok, bad = items.nth(0), items.nth(1)
    assert "rp-ok" in (ok.get_attribute("class") or "") and "rp-unsupported" in (bad.get_attribute("class") or "")
    assert "unsupported" in bad.locator(".rp-badge").inner_text()
    assert "The <b>moon</b> landing" in bad.locator(".rp-claim-text").inner_text()  # model text stays text
    assert bad.locator("b").count() == 0
    # The evidence: the cited abstract's sentence, under the claim and on hover.
    evidence = ok.locator(".rp-evidence").inner_text()
    assert "Hadamard product" in evidence and "closest in [1]" in evidence.lower()
    assert "Hadamard product" in (ok.get_attribute("title") or "")
    # An answer whose claims all hold keeps them folded.
    stub.reply = STUB_REPLY
    fine = ask(page, "What does ABBA claim?")
    assert fine.locator("details.rp-claims").get_attribute("open") is None
    assert "All 2 claims supported" in fine.locator("details.rp-claims summary").inner_text()
