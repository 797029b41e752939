"""The chat UI, a day later (issue 45): what a researcher still tripped over after the last round.

Driven in Chromium at a desktop size and a phone size (the ``screen`` fixture). Every browser test here also
watches the page's console, its failed requests and the server's stderr (``Watched``): an error in any of them
fails the test. Servers: the seeds plus a few papers with authors, links and one venue spelled two ways
(``server``, no LLM: extractive answers, writable from this machine); the Ollama stand-in (``llm_server``); the
packaged demo model (``demo_server``). axe-core runs in the page (``axe``): scripts/setup --dev downloads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import one_size
from ollama_stub import OllamaStub
from test_ui import BOT, STUB_MODEL, STUB_REPLY, Served, _copy_home, _serve, app_over_seeds, ask, open_app
from test_ui_daylong import choose, open_settings
from test_ui_history import reload, saved
from test_ui_upload import upload, write

from rag_papers.config import Settings

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

ABBA_Q = "What does ABBA claim?"
TIDAL = "TIDAL: forecasting tidal energy output with harmonic transformers"
TIDAL_URL = "https://example.org/papers/tidal?v=2"
REEF = "Coral reef bleaching alerts from ocean temperature sequences"
# The seeds (38 papers of ICLR 2026, no authors, no links) and three papers more: one with authors and a link,
# two of one venue spelled two ways (its name and its abbreviation, ``rag_papers/words/venue_aliases.txt``).
EXTRA = [
    {
        "id": "tidal-2024",
        "title": TIDAL,
        "authors": ["Wendy Wave", "Carl Current"],
        "year": 2024,
        "venue": "Transactions on Machine Learning Research",
        "url": TIDAL_URL,
        "abstract": "We forecast the energy output of tidal turbines a week ahead with harmonic transformers, a "
        "model that reads the astronomical tide harmonics beside the turbine's own history. It cuts the forecast "
        "error by a third against harmonic analysis alone on four tidal sites.",
    },
    {
        "id": "reef-2024",
        "title": REEF,
        "authors": ["Coral Diver"],
        "year": 2024,
        "venue": "TMLR",
        "abstract": "We issue coral reef bleaching alerts from sequences of ocean surface temperature. A recurrent "
        "model trained on twenty years of reef surveys warns of bleaching four weeks ahead.",
    },
]


# ------------------------------------------------------------------ fixtures
def _ingest(home: Path, embedder: object, records: list[dict[str, Any]]) -> None:
    from rag_papers.index import Index
    from rag_papers.ingest import Ingester

    corpus = home / "extra.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in records), encoding="utf-8")
    index = Index(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    Ingester(index.store).ingest([corpus], show_progress=False)
    index.close()


@pytest.fixture(scope="module")
def server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The seeds and ``EXTRA``, no LLM reachable (backend auto: extractive answers); Add papers allowed."""
    home = _copy_home(seeds_home, tmp_path_factory, "dayafter_home")
    _ingest(home, embedder, EXTRA)
    served = _serve(home, embedder, ollama_host="http://127.0.0.1:9")
    yield served
    served.app.close()


@pytest.fixture(scope="module")
def stub() -> Iterator[OllamaStub]:
    with OllamaStub(models=[STUB_MODEL], reply=STUB_REPLY) as s:
        yield s


@pytest.fixture(scope="module")
def llm_server(
    stub: OllamaStub, seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "dayafter_llm_home", ollama_host=stub.url, llm="ollama"
    ) as served:
        yield served


@pytest.fixture(scope="module")
def demo_server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``--llm llamacpp`` with no model named: the packaged SmolLM2 demo model answers."""
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "dayafter_demo_home", ollama_host="http://127.0.0.1:9", llm="llamacpp"
    ) as served:
        yield served


@pytest.fixture(autouse=True)
def _one_upload_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """gradio checks an uploaded file against the folder ``GRADIO_TEMP_DIR`` names when the upload is used, and
    each app built names its own (``files.server_folder``): with this module's three apps in one process, an
    upload to the first one built was refused ("not uploaded by a user") once a later one was built. A server
    process has one app; here the process's folder, which holds every app's, is named during each test."""
    from rag_papers.ui import files

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(files.process_folder()))


@pytest.fixture(autouse=True)
def _stub_reply(request: pytest.FixtureRequest) -> None:
    if "stub" in request.fixturenames:
        request.getfixturevalue("stub").reply = STUB_REPLY


# ------------------------------------------------------------------ what the page and the server said
class Watched:
    """A page's console errors and warnings, its uncaught exceptions and its failed requests, and what the
    server wrote on stderr meanwhile (``capfd``: the in-process server's threads write there)."""

    def __init__(self, page: Any, capfd: pytest.CaptureFixture[str]) -> None:
        self.page, self.capfd = page, capfd
        self.seen: list[str] = []
        # While a reload runs: gradio's client logs its aborted event streams ("AbortError", "Connection errored
        # out") as the old page unloads; those are the reload's doing, not the new page's.
        self.unloading = False
        capfd.readouterr()  # what came before this test is not its own
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.seen.append(f"uncaught: {exc}"))
        page.on("response", self._response)

    def _console(self, msg: Any) -> None:
        if self.unloading and re.search(r"AbortError|Connection errored out", msg.text):
            return
        if msg.type in ("error", "warning"):
            self.seen.append(f"console.{msg.type}: {msg.text}")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.seen.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    def problems(self) -> list[str]:
        """Everything wrong so far: the page's, then the server's tracebacks and error lines."""
        self.page.wait_for_timeout(300)  # a request still on its way
        err = self.capfd.readouterr().err
        server = [line for line in err.splitlines() if re.search(r"Traceback|Error|ERROR|Exception", line)]
        return [*self.seen, *(f"server stderr: {line}" for line in server)]


@pytest.fixture
def watched(screen: Any, capfd: pytest.CaptureFixture[str]) -> Iterator[Watched]:
    """The ``screen`` page, watched; the test fails on any problem it saw, after the test's own checks."""
    w = Watched(screen, capfd)
    yield w
    assert w.problems() == []


def options(page: Any, elem_id: str) -> list[str]:
    """The options a gradio Dropdown offers (opened as a user does, then closed again)."""
    page.locator(f"#{elem_id} input").click()
    listed = page.locator("[role=listbox] li[role=option]")
    listed.first.wait_for()
    shown = [t.strip().splitlines()[-1].strip() for t in listed.all_inner_texts()]  # without the selected one's ✓
    page.keyboard.press("Escape")
    page.locator("[role=listbox]").wait_for(state="detached")
    page.locator(f"#{elem_id} input").evaluate("e => e.blur()")  # the next click opens it again
    return shown


def first_line(reply: Any) -> str:
    return str(reply.inner_text()).strip().splitlines()[0]


# ------------------------------------------------------------------ 1. filters follow the papers
NEW_PAPERS = """@inproceedings{{glacier2025{tag},
  title = {{Glacier calving forecasts from satellite radar {tag}}},
  author = {{Ice, Ada and Floe, Ben}},
  booktitle = {{NeurIPS}},
  year = {{2025}},
  abstract = {{We forecast glacier calving events from sequences of satellite radar images with a sequence model
    that reads crevasse growth. It warns of calving a week ahead on eleven Greenland glaciers.}},
}}

@article{{kelp2023{tag},
  title = {{Kelp forest canopy maps from spectral unmixing {tag}}},
  author = {{Sea, Cora}},
  journal = {{JMLR}},
  year = {{2023}},
  abstract = {{We map kelp forest canopies along the coast from multispectral images with spectral unmixing, and
    track the canopy's seasonal loss over ten years.}},
}}
"""


def remove_papers(page: Any, query: str, n: int) -> None:
    """Papers tab: the papers matching ``query`` ticked and removed, after the confirmation."""
    page.locator("#rp-papers-q input, #rp-papers-q textarea").first.fill(query)
    page.wait_for_function(
        "([q, n]) => { const h = document.querySelector('#rp-papers .rp-papers-head');"
        " return h && h.innerText.includes('“' + q + '”') && document.querySelectorAll('#rp-papers .rp-paper').length === n; }",
        arg=[query, n],
    )
    for i in range(n):
        page.locator("#rp-papers .rp-paper").nth(i).locator("input.rp-pick-box").check()
        page.wait_for_function(f"() => document.querySelector('#rp-remove')?.innerText.includes('({i + 1})')")
    page.locator("#rp-remove").click()
    page.locator("#rp-remove-confirm .rp-confirm").wait_for(state="visible")
    page.locator("#rp-confirm").click()
    page.wait_for_function(
        "n => (document.querySelector('#rp-papers-notice') || {}).innerText?.includes(`removed ${n} paper(s)`)", arg=n
    )


@pytest.mark.browser
@one_size
def test_the_filters_offer_the_venues_and_years_of_papers_added_and_removed_in_the_page(
    server: Served, screen: Any, watched: Watched, tmp_path: Path
) -> None:
    """Reported: after Add papers with a NeurIPS 2025 and a JMLR 2023 paper, a fresh page still offered venue
    {Any, ICLR} and year {2026} only, until the server restarted; papers removed stayed offered too."""
    page = screen
    tag = f"w{page.viewport_size['width']}"  # each size adds papers of its own
    open_app(page, server.url)
    open_settings(page)
    assert "NeurIPS" not in options(page, "rp-venue")
    page.get_by_role("tab", name="Papers").click()
    page.wait_for_selector("#rp-papers .rp-paper")
    line = upload(page, write(tmp_path, "new.bib", NEW_PAPERS.format(tag=tag)))
    assert "2 added" in line, line

    page.get_by_role("tab", name="Chat").click()  # the page that added them offers them at once
    venues = options(page, "rp-venue")
    assert {"NeurIPS", "JMLR", "ICLR"} <= set(venues), venues
    assert {"2023", "2025", "2026"} <= set(options(page, "rp-year-from")), options(page, "rp-year-from")

    open_app(page, server.url)  # and so does a fresh page
    open_settings(page)
    assert {"NeurIPS", "JMLR"} <= set(options(page, "rp-venue"))
    assert {"2023", "2025"} <= set(options(page, "rp-year-to"))
    choose(page, "rp-venue", "NeurIPS")  # and the filter finds the paper
    page.locator("#rp-retrieval-only input").check()
    listing = ask(page, "glacier calving forecasts from radar")
    assert "Glacier calving forecasts" in listing.locator("ol.rp-hits li").first.inner_text()
    assert listing.locator("ol.rp-hits li").count() == 1
    page.locator("#rp-clear-filters").click()
    page.wait_for_function("() => document.querySelector('#rp-venue input').value === 'Any'")

    page.get_by_role("tab", name="Papers").click()
    page.wait_for_selector("#rp-papers .rp-paper")
    remove_papers(page, tag, 2)
    page.get_by_role("tab", name="Chat").click()
    page.wait_for_function("() => !document.querySelector('#rp-chips .rp-chip')")
    assert "NeurIPS" not in options(page, "rp-venue")  # the page that removed them no longer offers them
    open_app(page, server.url)
    open_settings(page)
    venues, years = options(page, "rp-venue"), options(page, "rp-year-from")
    assert "NeurIPS" not in venues and "JMLR" not in venues, venues
    assert "2025" not in years and "2023" not in years, years


# ------------------------------------------------------------------ 2. an unsupported answer says so first
INVENTED = (
    "Large language models have transformed every field of science. They now write most research papers. "
    "Experts expect them to replace peer review by next year. Their energy use has fallen to zero. "
    "Every benchmark has been solved."
)


@pytest.mark.browser
def test_an_answer_whose_claims_fail_warns_first_and_folds_its_text(
    llm_server: Served, stub: OllamaStub, screen: Any, watched: Watched
) -> None:
    """Reported (llama.cpp): the invented prose came first; "⚠ 5 of 5 claims not supported" and "the answer cites
    no source; treat it with care" only below it. A reader who trusts what they read first was misled."""
    page = screen
    stub.reply = INVENTED
    open_app(page, llm_server.url)
    reply = ask(page, ABBA_Q)
    page.wait_for_selector(f"{BOT} .rp-doubt")
    first = reply.locator(".rp-doubt")
    assert re.match(r"⚠ (\d) of \1 claims not supported", first_line(reply)), reply.inner_text()
    assert "cites no source" in first.inner_text()
    text = reply.locator(".rp-answer")
    assert not text.is_visible()  # the model's prose is folded under the warning ...
    top = first.bounding_box()
    summary = reply.locator("details.rp-doubtful > summary")
    assert top is not None and summary.bounding_box()["y"] > top["y"]
    summary.click()  # ... and one click away
    text.wait_for(state="visible")
    assert "Large language models have transformed" in text.inner_text()
    said = reply.inner_text()
    assert said.count("cites no source") == 1 and said.count("claims not supported") == 1, said

    stub.reply = STUB_REPLY  # a supported answer is shown as it was: text first, nothing folded
    fine = ask(page, ABBA_Q)
    assert fine.locator(".rp-doubt").count() == 0 and fine.locator(".rp-answer").is_visible()
    assert first_line(fine).startswith("ABBA reparameterizes")


# ------------------------------------------------------------------ 3. no wait without another answer
@pytest.mark.browser
@one_size
def test_no_wait_behind_other_answers_is_reported_when_none_runs(server: Served, screen: Any, watched: Watched) -> None:
    """Reported: "waited 361 ms behind other answers" with no other answer running (one tab, questions 3 s
    apart), copied into the export. Reproduced here on a link with 200 ms of latency each way, where the steps
    of one question take that long to follow each other."""
    page = screen
    open_app(page, server.url)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 200, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    footers = []
    for question in (ABBA_Q, "What is the Bayesian Attention Mechanism?", "What does SWAX do?"):
        footers.append(ask(page, question).locator(".rp-meta").inner_text())
        page.wait_for_timeout(3000)
    assert not any("behind other answers" in f for f in footers), footers
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "behind other answers" not in exported and "retrieval" in exported


# ------------------------------------------------------------------ 4. a saved backend comes back quietly
@pytest.mark.browser
@one_size
def test_a_saved_backend_other_than_the_default_comes_back_without_an_error(
    server: Served, screen: Any, watched: Watched
) -> None:
    """Reported: with extractive or llamacpp chosen, every page load answered POST /gradio_api/run/predict with
    HTTP 500 ("Value: llama3.2:3b is not in the list of choices: []"), 18 tracebacks on the server's stderr."""
    page = screen
    open_app(page, server.url)
    for backend, model in (("extractive", ""), ("llamacpp", "SmolLM2")):
        choose(page, "rp-backend", backend)
        page.wait_for_function(
            "m => { const v = document.querySelector('#rp-model input').value; return m ? v.includes(m) : v === ''; }",
            arg=model,
        )
        page.wait_for_selector("#rp-status-wrap .rp-status:not(:has-text('checking'))")
        page.wait_for_timeout(500)  # the settings are written to the browser
        watched.unloading = True  # an event stream the reload aborts is logged by the old page, not the load's
        reload(page)
        watched.unloading = False
        page.wait_for_function("b => document.querySelector('#rp-backend input').value === b", arg=backend)
        page.wait_for_selector("#rp-status-wrap .rp-status:not(:has-text('checking'))")
        page.wait_for_timeout(1500)  # every load event has run
        assert model in page.locator("#rp-model input").input_value()
        assert watched.problems() == [], backend


def _queue_call(url: str, session: str, fn_index: int, data: list[Any]) -> dict[str, Any]:
    """One event through gradio's queue as the page sends it (join, then read the session's event stream until
    that event completes): its ``process_completed`` message."""
    import httpx

    base = url.rstrip("/") + "/gradio_api"
    with httpx.Client(timeout=60) as client:
        joined = client.post(
            f"{base}/queue/join",
            json={"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None},
        )
        joined.raise_for_status()
        event = joined.json()["event_id"]
        with client.stream("GET", f"{base}/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") == event and msg.get("msg") == "process_completed":
                    return dict(msg)
    raise AssertionError(f"event {fn_index} never completed")


def _fn_index(served: Served, name: str) -> int:
    return next(i for i, fn in served.app.fns.items() if getattr(fn.fn, "__name__", "") == name)


def test_a_question_sent_while_the_status_check_empties_the_model_box_is_answered(server: Served) -> None:
    """Reported (CI, a page asked at once after loading): the load's status check found no LLM and emptied the
    model box (no choices, no value) while the page still held the box's first value; the answer step sent that
    value and gradio refused it ("Value: llama3.2:3b is not in the list of choices: []"), so the reply never came.
    The server checks a model itself (``ChatApp.resolve``), as data; a page's older value must not fail the step."""
    session = "stale-model-box"
    checked = _queue_call(server.url, session, _fn_index(server, "refresh_models"), ["auto", "llama3.2:3b"])
    assert checked["success"], checked
    answered = _queue_call(
        server.url,
        session,
        _fn_index(server, "run_answer"),
        [None, None, "auto", "llama3.2:3b", 5, "Any", "Any", "Any", ""],
    )
    assert answered["success"], answered.get("output")


# ------------------------------------------------------------------ 5. axe-core: WCAG A and AA
AXE_VERSION = "4.14.1"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"


def axe_script() -> str:
    """axe-core's ``axe.min.js``, as scripts/setup --dev puts it in the user's cache (pinned, checksummed)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = Path(os.environ.get("RAG_PAPERS_AXE_JS") or cache / "rag-papers" / f"axe-core-{AXE_VERSION}" / "axe.min.js")
    if not path.is_file():
        pytest.fail(f"axe-core {AXE_VERSION} is not at {path}: run scripts/setup --dev (it downloads it)")
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == AXE_SHA256, f"{path} is not axe-core {AXE_VERSION}'s axe.min.js"
    return data.decode("utf-8")


def axe(page: Any) -> list[dict[str, Any]]:
    """The WCAG 2 A and AA violations axe-core finds on the page as it is now: rule, impact and where."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(content=axe_script())
    found: list[dict[str, Any]] = page.evaluate(
        """async () => {
          const r = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}});
          return r.violations.map(v => ({rule: v.id, impact: v.impact,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ': ' + n.failureSummary.split('\\n').slice(1).join(' ').trim())}));
        }"""
    )
    return found


@pytest.mark.browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_wcag_violation_after_an_answer_with_a_citation_card_open(
    server: Served, screen: Any, watched: Watched, scheme: str
) -> None:
    """Reported (axe-core, wcag2aa): the citation card's body and score were #94a3b8 on #fff (2.56:1); the dark
    mode's "cited" badge #818cf8 on #334155 (3.47:1). Checked on the chat after an answer with a card open, the
    settings open, and on the Papers tab with a paper open; light and dark, both sizes."""
    page = screen
    open_app(page, server.url.rstrip("/") + ("/?__theme=dark" if scheme == "dark" else "/"))
    assert page.evaluate("() => document.body.classList.contains('dark')") == (scheme == "dark")
    reply = ask(page, ABBA_Q)
    page.wait_for_selector("#rp-panel .rp-src.cited")
    open_settings(page)
    cite = reply.locator("a.rp-cite").first
    cite.scroll_into_view_if_needed()
    cite.hover()
    page.locator(".rp-hovercard").wait_for(state="visible")
    assert axe(page) == []
    page.get_by_role("tab", name="Papers").click()
    page.locator("#rp-papers .rp-paper summary").first.click()
    page.locator("#rp-papers .rp-paper .rp-abstract").first.wait_for(state="visible")
    assert axe(page) == []


# ------------------------------------------------------------------ 6. a refusal under a filter says so first
@pytest.mark.browser
@one_size
def test_a_refusal_under_a_filter_names_the_filter_first_and_once(
    server: Served, screen: Any, watched: Watched
) -> None:
    """Reported: a not-covered answer under a filter led with the generic line. The answer stage now says the
    filter first; the page must neither bury that line nor repeat it in a note of its own."""
    page = screen
    open_app(page, server.url)
    open_settings(page)
    page.locator("#rp-keyword textarea, #rp-keyword input").first.fill("RNA")
    page.wait_for_selector("#rp-chips .rp-chip")
    reply = ask(page, "which papers study learnable parameters?")
    assert "Not covered" in reply.locator(".rp-badge").first.inner_text()
    lead = first_line(reply)
    assert lead.removeprefix("Not covered").strip().startswith("The filters (keyword 'RNA') keep only papers"), lead
    said = reply.inner_text()
    assert said.lower().count("filters") == 1 and "Filters were on" not in said, said


# ------------------------------------------------------------------ 7. the export keeps authors and links
@pytest.mark.browser
@one_size
def test_the_markdown_export_keeps_authors_and_links(server: Served, screen: Any, watched: Watched) -> None:
    """Reported: the Markdown export dropped authors and links (TIDAL's url was lost)."""
    page = screen
    open_app(page, server.url)
    ask(page, "How are tidal turbines' energy outputs forecast a week ahead?")
    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    refs = exported.split("**References**", 1)[-1]
    tidal = next((line for line in refs.splitlines() if "TIDAL" in line), "")
    assert "Wendy Wave, Carl Current" in tidal, refs
    assert f"<{TIDAL_URL}>" in tidal, refs  # a link, as the sources panel gives one


# ------------------------------------------------------------------ 8. smaller
@pytest.mark.browser
@one_size
def test_the_status_pill_shows_the_command_as_code_not_backticks(server: Served, screen: Any, watched: Watched) -> None:
    page = screen
    open_app(page, server.url)
    pill = page.locator("#rp-status-wrap .rp-status")
    assert "ollama serve" in pill.inner_text() and "`" not in pill.inner_text(), pill.inner_text()
    assert pill.locator("code").inner_text() == "ollama serve"


@pytest.mark.browser
@one_size
def test_with_auto_and_no_ollama_the_model_box_names_no_model(server: Served, screen: Any, watched: Watched) -> None:
    """Reported: with backend auto and no Ollama, the model box showed llama3.2:3b, which answers nothing."""
    page = screen
    open_app(page, server.url)
    assert page.locator("#rp-backend input").input_value() == "auto"
    page.wait_for_function("() => document.querySelector('#rp-model input').value === ''")
    assert STUB_MODEL not in page.locator("#rp-model").inner_text()
    assert "no LLM" in page.locator("#rp-model").inner_text()
    reply = ask(page, ABBA_Q)
    assert "extractive" in reply.locator(".rp-meta").inner_text()


@pytest.mark.browser
@one_size
def test_show_rewritten_question_is_kept_after_a_reload(server: Served, screen: Any, watched: Watched) -> None:
    page = screen
    open_app(page, server.url)
    ask(page, ABBA_Q)
    page.locator("#rp-show-rewrite input").check()
    ask(page, "and what are its limitations?")
    saved(page, "2 questions")
    page.wait_for_timeout(500)
    reload(page)
    page.wait_for_function(f'() => document.querySelectorAll("{BOT}").length === 2')
    # The past chat and the kept settings come back by two load events, in either order (CI once saw the chat
    # first): the switch must come back on, not at the same moment.
    page.wait_for_function("() => document.querySelector('#rp-show-rewrite input').checked", timeout=15_000)
    page.wait_for_selector("#rp-chat .rp-searched")  # the reopened chat shows what was searched for
    assert "ABBA" in page.locator("#rp-chat .rp-searched").first.inner_text()


@pytest.mark.browser
@one_size
def test_edit_last_question_is_off_on_an_empty_chat(server: Served, screen: Any, watched: Watched) -> None:
    """Reported: "Edit last question" was enabled on an empty chat and did nothing."""
    page = screen
    open_app(page, server.url)
    edit = page.locator("#rp-edit")
    assert edit.is_disabled()
    ask(page, ABBA_Q)
    page.wait_for_function("() => !document.querySelector('#rp-edit').disabled")
    page.locator("#rp-new").click()
    page.wait_for_function(f'() => document.querySelectorAll("{BOT}").length === 0')
    page.wait_for_function("() => document.querySelector('#rp-edit').disabled")


@pytest.mark.browser
@one_size
def test_a_past_chat_search_with_no_match_says_so(server: Served, screen: Any, watched: Watched) -> None:
    page = screen
    open_app(page, server.url)
    ask(page, ABBA_Q)
    saved(page, "ABBA")
    search = page.locator("#rp-past-search input, #rp-past-search textarea").first
    search.fill("quokka zeppelin")
    page.wait_for_function("() => document.querySelectorAll('#rp-past label').length === 0")
    page.wait_for_function("() => document.querySelector('#rp-history').innerText.includes('No past chat')")
    assert "quokka zeppelin" in page.locator("#rp-history").inner_text()
    search.fill("")
    page.wait_for_function("() => document.querySelectorAll('#rp-past label').length === 1")
    assert "No past chat" not in page.locator("#rp-history").inner_text()


@pytest.mark.browser
@one_size
def test_a_venue_spelled_two_ways_is_offered_once_and_filters_both(
    server: Served, screen: Any, watched: Watched
) -> None:
    """Reported: "JMLR" and "Journal of Machine Learning Research" were two venues. The aliases of
    rag_papers/words/venue_aliases.txt make one venue of them, offered by its short name."""
    page = screen
    open_app(page, server.url)
    open_settings(page)
    venues = options(page, "rp-venue")
    assert "TMLR" in venues and "Transactions on Machine Learning Research" not in venues, venues
    choose(page, "rp-venue", "TMLR")
    page.locator("#rp-retrieval-only input").check()
    listing = ask(page, "forecasting from temperature and tide sequences")
    titles = listing.locator("ol.rp-hits li b").all_inner_texts()
    assert sorted(titles) == sorted([TIDAL, REEF]), titles


@pytest.mark.browser
def test_on_a_phone_the_model_name_stops_before_the_dropdown_arrow(
    demo_server: Served, screen: Any, watched: Watched
) -> None:
    """Reported at 390 px: the model name (SmolLM2-135M-Instruct.Q4_1.gguf) ran under the dropdown arrow."""
    page = screen
    open_app(page, demo_server.url)
    box = page.locator("#rp-model input")
    assert "SmolLM2" in box.input_value()
    text_right, cut, overflow = box.evaluate(
        "e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);"
        " return [r.right - parseFloat(s.paddingRight) - parseFloat(s.borderRightWidth), e.scrollWidth > e.clientWidth,"
        " s.textOverflow]; }"
    )
    arrow = page.locator("#rp-model .icon-wrap").bounding_box()
    assert arrow is not None and text_right <= arrow["x"] + 0.5, (text_right, arrow)
    assert not cut or overflow == "ellipsis", (cut, overflow)


@pytest.mark.browser
@one_size
def test_the_papers_sort_box_says_the_sort_the_list_has(server: Served, screen: Any, watched: Watched) -> None:
    """Reported: the sort box said "Best match" while the list said "sorted by title" (no search: nothing to
    rank by)."""
    page = screen
    open_app(page, server.url)
    page.get_by_role("tab", name="Papers").click()
    page.wait_for_selector("#rp-papers .rp-paper")
    sort = page.locator("#rp-papers-sort input")
    head = page.locator("#rp-papers .rp-papers-head")
    assert "sorted by title" in head.inner_text()
    page.wait_for_function("() => document.querySelector('#rp-papers-sort input').value === 'Title (A–Z)'")
    page.locator("#rp-papers-q input, #rp-papers-q textarea").first.fill("attention")
    page.wait_for_function(
        "() => document.querySelector('#rp-papers .rp-papers-head').innerText.includes('“attention”')"
    )
    assert "best matches first" in head.inner_text()
    page.wait_for_function("() => document.querySelector('#rp-papers-sort input').value === 'Best match'")
    choose(page, "rp-papers-sort", "Year (newest first)")  # a sort chosen stays chosen
    page.wait_for_function(
        "() => document.querySelector('#rp-papers .rp-papers-head').innerText.includes('newest first')"
    )
    page.locator("#rp-papers-q input, #rp-papers-q textarea").first.fill("")
    page.wait_for_function("() => document.querySelector('#rp-papers .rp-papers-head').innerText.includes('indexed')")
    assert "newest first" in head.inner_text() and sort.input_value() == "Year (newest first)"


@pytest.mark.browser
@one_size
def test_an_upload_leaves_the_console_clean(server: Served, screen: Any, watched: Watched, tmp_path: Path) -> None:
    """Reported: an upload logged "Method not implemented." in the console."""
    page = screen
    open_app(page, server.url)
    page.get_by_role("tab", name="Papers").click()
    page.wait_for_selector("#rp-papers .rp-paper")
    broken = write(tmp_path, "broken.bib", "@article{broken,\n  title = {Never closed,\n")
    line = upload(page, broken)  # refused in one line, nothing added: only the upload itself is looked at
    assert line.startswith("broken.bib:"), line
    page.wait_for_timeout(1000)


# ------------------------------------------------------------------ 9. the demo model, bounded
@pytest.mark.browser
@one_size
def test_the_demo_models_answer_is_bounded_and_the_pill_says_how_long_it_takes(
    demo_server: Served, screen: Any, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reported: the demo model's answers took 51 to 142 s on two cores and ran to the repetition cut-off."""
    from rag_papers.llm import LlamaCppBackend

    caps: list[int] = []
    real = LlamaCppBackend.token_cap

    def spy(self: LlamaCppBackend, max_tokens: int) -> int:
        caps.append(real(self, max_tokens))
        return caps[-1]

    monkeypatch.setattr(LlamaCppBackend, "token_cap", spy)
    page = screen
    open_app(page, demo_server.url)
    pill = page.locator("#rp-status-wrap .rp-status").inner_text()
    assert "demo model" in pill and f"cut at {Settings().demo_answer_tokens} tokens" in pill and "minute" in pill, pill
    reply = ask(page, ABBA_Q, timeout=300_000)
    assert caps and max(caps) <= Settings().demo_answer_tokens < 400, caps
    took = re.search(r"generation ([\d.]+) (ms|s)", reply.locator(".rp-meta").inner_text())
    assert took, reply.locator(".rp-meta").inner_text()
    reload(page)
    page.wait_for_selector("#rp-status-wrap .rp-status:not(:has-text('checking'))")
    pill = page.locator("#rp-status-wrap .rp-status").inner_text()
    assert re.search(r"the last one took \d+ s", pill), pill


# ------------------------------------------------------------------ without a browser
def test_venue_spellings_of_one_venue_share_a_key_and_others_do_not() -> None:
    from rag_papers.venues import same_venue, venue_groups, venue_name

    one = [
        "JMLR",
        "Journal of Machine Learning Research",
        "journal of  machine learning research (JMLR)",
        "J. Mach. Learn. Res.",
    ]
    assert {venue_name(v) for v in one} == {"JMLR"}
    assert all(same_venue(one[0], v) for v in one)
    assert venue_name("Proceedings of the 40th International Conference on Machine Learning") == "ICML"
    assert venue_name("Advances in Neural Information Processing Systems 36") == "NeurIPS"
    assert not same_venue("ICML", "ICLR") and not same_venue("TMLR", "JMLR") and not same_venue("JMLR", None)
    assert venue_name("Annual Horology Meeting") == "Annual Horology Meeting"  # not listed: as spelled
    groups = venue_groups(["ICLR", "iclr", "TMLR", "Transactions on Machine Learning Research", "Zorblax Workshop"])
    assert groups == {
        "ICLR": ["ICLR", "iclr"],
        "TMLR": ["TMLR", "Transactions on Machine Learning Research"],
        "Zorblax Workshop": ["Zorblax Workshop"],
    }


def test_the_venue_filter_takes_every_spelling_in_both_retrievers_paths() -> None:
    from rag_papers.corpus import Paper
    from rag_papers.retrieve import Filters as VenueFilters  # the retriever's own filters compare venues by key

    f = VenueFilters(year_min=2020, venue="TMLR", keyword="reef")
    indexed = ["ICLR", "TMLR", "Transactions on Machine Learning Research"]
    assert f.chroma_where(indexed) == {
        "$and": [{"year": {"$gte": 2020}}, {"venue": {"$in": ["TMLR", "Transactions on Machine Learning Research"]}}]
    }
    assert VenueFilters(venue="ICLR").chroma_where(indexed) == {"venue": "ICLR"}
    long = Paper("a", "Reef alerts", "A reef study.", year=2024, venue="Transactions on Machine Learning Research")
    assert f.accepts(long)
    assert not f.accepts(Paper("b", "Reef alerts", "A reef study.", year=2024, venue="ICLR"))
    assert not f.accepts(Paper("c", "Reef alerts", "A reef study.", year=2019, venue="TMLR"))  # the other filters hold
    assert not f.accepts(Paper("d", "Kelp", "A kelp study.", year=2024, venue="TMLR"))
    assert f.parts() == ["year 2020 or later", "venue 'TMLR'", "keyword 'reef'"]


def test_a_wait_is_counted_only_while_every_answer_slot_was_taken() -> None:
    import time

    from rag_papers.ui.chat_app import AnswerSlots

    slots = AnswerSlots(2)
    t0 = time.monotonic()
    slots.enter()
    assert not slots.full_since(t0)  # one answer running of two: nobody waits
    slots.enter()
    assert slots.full_since(t0)
    slots.leave()
    t1 = time.monotonic()
    assert slots.full_since(t0) and not slots.full_since(t1 + 1)  # full until t1, not since
    slots.leave()
    assert slots.running == 0


def test_a_doubtful_answer_is_warned_about_above_its_text_in_the_export_too() -> None:
    from rag_papers.answer import Answer
    from rag_papers.claims import Claim
    from rag_papers.corpus import Paper
    from rag_papers.retrieve import Hit
    from rag_papers.ui.export import export_markdown
    from rag_papers.ui.render import doubt, render_exchange
    from rag_papers.ui.state import Exchange, UIState

    hit = Hit("p1", "TIDAL: tides", 0.8, 0.8, 0.0, "text", year=2024, venue="TMLR", n=1, cited=False)
    answer = Answer(
        "q", INVENTED, [], [hit], False, "ollama", "m", notice="the answer cites no source; treat it with care"
    )
    answer.claims = [Claim(s, [], 0.1, False) for s in INVENTED.split(". ")]
    paper = Paper("p1", "TIDAL: tides", "Tides.", authors=["Wendy Wave"], url="javascript:alert(1)")
    ex = Exchange("q", "answer", text=INVENTED, items=[hit], answer=answer, done=True, papers={"p1": paper})
    ex.notice = answer.notice or ""
    warning = doubt(answer)
    assert (
        warning
        == "⚠ 5 of 5 claims not supported by the abstracts cited; the answer cites no source: treat it with care"
    )
    html = render_exchange(0, ex, False)
    assert html.index("rp-doubt") < html.index("rp-answer") and "cites no source" not in html.split("rp-answer", 1)[1]
    state = UIState(session=None)  # type: ignore[arg-type]
    state.exchanges.append(ex)
    out = export_markdown(state)
    assert out.index("⚠ 5 of 5 claims") < out.index("Large language models")
    refs = out.split("**References**", 1)[1]
    assert "Wendy Wave" in refs and "<javascript" not in refs and "javascript:alert" in refs  # text, not a link
    answer.claims[0] = Claim("Fine.", ["p1"], 0.9, True)
    answer.claims[1] = Claim("Fine too.", ["p1"], 0.9, True)
    answer.claims[2] = Claim("Fine three.", ["p1"], 0.9, True)
    assert doubt(answer) is None  # 2 of 5 fail: not most; the claims say it under the text, as before
