"""The UI's safety rules, checked as an attacker would probe them.

* Corpus and model text is shown as text: HTML and Markdown in an abstract, a title or an
  LLM reply never becomes an element of the page (no image fetched, no live link), in the
  chat, the sources panel, the status pill or the Markdown export.
* Clients pick among the models the server allows, by name; they never name a file.
* A public address is served only behind a login, unless the user says otherwise in so
  many words (``--insecure-no-auth``); wrong logins slow down, and no route that acts on a
  session or lists the routes answers without one.
* A conversation's export is private: 0600 in the server's own 0700 folder, never copied into
  gradio's shared cache, and gone when the server stops.
* The API checks its parameters with the CLI's rules and answers a bad one 422, in words.

Everything is real (gradio server, Chromium, MiniLM, llama.cpp, the console script)
except the Ollama server, replaced by ``ollama_stub.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import SEEDS, VENV_BIN, free_port, stop_process, wait_http
from ollama_stub import OllamaStub
from test_ui import Served, _serve, app_over_seeds, ask, open_app

from rag_papers.config import PROJECT_ROOT, Settings

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

STUB_MODEL = "llama3.2:3b"


# --------------------------------------------------------------------- helpers
class Listener:
    """A loopback HTTP server that records every request: any request means the page fetched corpus markup."""

    def __init__(self) -> None:
        hits: list[str] = []
        self.hits = hits

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                hits.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_HEAD = do_OPTIONS = _record

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def hostile_forms(base: str) -> list[str]:
    """Every way corpus or model text could try to become markup pointing at ``base`` (http://host:port)."""
    rel = base.removeprefix("http:")  # protocol-relative: extractive answers quote sentences without http://
    return [
        f'<img src="{base}/html-img.png">',
        f'<a href="{base}/html-link">click here to log in</a>',
        f'<iframe src="{rel}/iframe"></iframe>',
        f"<img src=x onerror=\"fetch('{rel}/onerror')\">",
        f'<svg><image href="{rel}/svg.png"/></svg>',
        f"![chart]({rel}/md-img.png)",
        f"[login here]({rel}/md-link)",
        f"<{base}/angle-autolink>",
        f"see {base}/bare-url now",
        "mail ada@evil.example or www.evil.example",
        f"$$\\href{{{base}/katex}}{{x}}$$",
        "{{constructor.constructor('alert(1)')()}} ${alert(1)}",
    ]


class Markup(HTMLParser):
    """Collects the elements and the text (entities decoded) of an HTML fragment."""

    def __init__(self, html_text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(html_text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


OUR_TAGS = {"div", "span", "a", "b", "em", "mark", "ol", "ul", "li", "br", "p", "button"}


# The attributes our templates write; corpus text may stand (escaped) only in the text-carrying ones: a
# tooltip, the reference "Copy reference" copies, and the citation cards' store in the panel
# (templates/cards.html: title and first sentence).
TEXT_ATTRS = {"title", "data-ref", "data-title", "data-body"}
OUR_ATTRS = {"class", "href", "id", "type", "aria-label", "hidden", "data-key", "data-n", "data-score", *TEXT_ATTRS}


def assert_only_our_markup(fragment: str, where: str) -> Markup:
    """No element, link or attribute in ``fragment`` may come from corpus or model text."""
    m = Markup(fragment)
    for tag, attrs in m.tags:
        assert tag in OUR_TAGS, f"{where}: <{tag}> from corpus markup in {fragment[:300]!r}"
        if tag == "a":
            assert attrs.get("href", "").startswith("#cite-"), f"{where}: live link {attrs} in {fragment[:300]!r}"
        for k, v in attrs.items():
            assert k in OUR_ATTRS, f"{where}: attribute {k}={v!r} from corpus markup"
            if k not in TEXT_ATTRS:  # a tooltip or a citation card holding a hostile title is text too
                assert "evil" not in v and "//" not in v, f"{where}: attribute {k}={v!r} carries corpus markup"
    return m


def markdown_html(text: str) -> str:
    """CommonMark (inline HTML allowed, as gradio's Chatbot does) of a chat message or the export."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True, "breaks": True}).enable(["table", "strikethrough"]).render(text)


def _item(n: int, form: str) -> tuple[Any, Any]:
    """Source n as the panel gets it: the hit, and the paper that holds its abstract."""
    from rag_papers.corpus import Paper
    from rag_papers.retrieve import Hit

    pid = f"id-{n}{form}"
    hit = Hit(
        id=pid,
        title=f"Title {n} {form}",
        score=0.5,
        dense_score=0.5,
        keyword_score=0.0,
        passage=f"Passage {n} {form}.",
        year=2024,
        venue=f"Venue {form}",
        n=n,
        cited=True,
    )
    abstract = f"The abstract of paper {n} says {form}. It goes on about the topic."
    return hit, Paper(pid, hit.title, abstract, year=hit.year, venue=hit.venue)


def _hostile_state(tmp_path: Path) -> Any:
    """A UI state whose every corpus- and model-derived field carries hostile markup."""
    from rag_papers.ui import Exchange, UIState

    forms = hostile_forms("http://evil.example:81")
    pairs = [_item(n, form) for n, form in enumerate(forms, 1)]
    items = [hit for hit, _ in pairs]
    papers = {paper.id: paper for _, paper in pairs}
    joined = " ".join(forms)
    state = UIState(session=None)  # type: ignore[arg-type]  # rendering never touches the session
    state.show_rewrite = True
    state.exchanges = [
        Exchange(
            question=f"q {joined}",
            mode="answer",
            standalone=f"standalone {joined}",
            text=f"From the abstracts:\n- {forms[0]} [1]\n- {forms[5]} [2]\n\n[g]: http://evil.example/ref\n{joined} [3] [99]",
            items=items,
            papers=papers,
            notice=f"notice {joined}",
            footer=f"ollama {forms[0]} · retrieval 3 ms",
            done=True,
        ),
        Exchange(
            question=f"search {joined}", mode="search", items=items, papers=papers, done=True, footer="retrieval only"
        ),
        Exchange(question="failed", mode="answer", error=f"The LLM failed: {joined}", done=True),
        Exchange(question="streaming", mode="answer", text=f"partial {joined}", items=items[:2], papers=papers),
    ]
    return state


# ------------------------------------------------------------------ rendering
def test_rendered_chat_and_panel_show_corpus_markup_as_text(tmp_path: Path) -> None:
    """Unit level: every rendering function turns hostile fields into text, in HTML and after Markdown."""
    from rag_papers.ui import chat_messages, sources_panel

    state = _hostile_state(tmp_path)
    forms = hostile_forms("http://evil.example:81")
    for i, msg in enumerate(chat_messages(state)):
        where = f"message {i} ({msg['role']})"
        m = assert_only_our_markup(msg["content"], where)
        assert_only_our_markup(markdown_html(msg["content"]), f"{where} as Markdown")
        if i not in (4, 6):  # the questions "failed" and "streaming" carry no markup
            assert "<img src=" in m.plain, where  # the literal characters are shown
    answer = Markup(chat_messages(state)[1]["content"]).plain
    for form in forms:
        assert " ".join(form.split()) in answer, form
    assert "[99]" in answer  # an unknown citation stays text
    cites = [a for t, a in Markup(chat_messages(state)[1]["content"]).tags if t == "a"]
    assert {a["href"] for a in cites} == {"#cite-0-1", "#cite-0-2", "#cite-0-3"}

    for idx in range(2):
        for n in range(1, len(forms) + 1):
            state.view = (idx, n)
            panel = sources_panel(state)
            m = assert_only_our_markup(panel, f"panel {idx}/{n}")
            opened = forms[n - 1]
            assert f"Title {n} {' '.join(opened.split())}" in m.plain
            assert f"id-{n}{' '.join(opened.split())}" in m.plain
            assert f"Venue {' '.join(opened.split())}" in m.plain
            refs = [a["data-ref"] for t, a in m.tags if t == "button"]  # decoded: the text the clipboard gets
            assert refs[n - 1].startswith(f"Title {n} {' '.join(opened.split())}. Venue ")


def test_an_extractive_caveat_is_a_note_above_the_answer_and_text() -> None:
    """``Answer.caveat`` (the question's specific words are in no quoted abstract) shows above the quotes, as
    text: the words it names are the user's, so they may carry markup too."""
    from rag_papers.answer import Answer
    from rag_papers.ui import Exchange, UIState, chat_messages

    forms = hostile_forms("http://evil.example:81")
    hit, paper = _item(1, forms[0])
    caveat = f"None of the abstracts mention {forms[1]}"
    text = f"{caveat}; the closest papers are (quoted, no LLM):\n- {forms[2]} [1]"
    answer = Answer("q", text, [hit.id], [hit], False, "extractive", None, caveat=caveat)
    state = UIState(session=None)  # type: ignore[arg-type]  # rendering never touches the session
    state.exchanges = [
        Exchange(
            question="q", mode="answer", text=text, items=[hit], papers={paper.id: paper}, answer=answer, done=True
        )
    ]
    html = chat_messages(state)[1]["content"]
    for fragment in (html, markdown_html(html)):
        m = assert_only_our_markup(fragment, "caveat")
        assert ("div", {"class": "rp-caveat"}) in m.tags
    assert html.index("rp-caveat") < html.index("rp-answer")  # above the answer
    plain = Markup(html).plain
    assert " ".join(caveat.split()) in plain and plain.count("None of the abstracts mention") == 1
    assert " ".join(forms[2].split()) in plain


def test_status_pill_shows_markup_as_text() -> None:
    from rag_papers.ui import status_html

    for form in hostile_forms("http://evil.example:81"):
        m = assert_only_our_markup(status_html(f"Ollama says {form}", "bad"), "status")
        assert " ".join(form.split()) in m.plain


@pytest.mark.parametrize("text", ["&amp;", "&#60;b&#62; &lt;i&gt;", "a & b < c", "{{ x }} {% y %}", "\\[1\\]"])
def test_text_is_escaped_exactly_once(text: str) -> None:
    """Entities and template syntax in corpus text show as written: the templates escape once, in HTML and Markdown."""
    from rag_papers.retrieve import Hit
    from rag_papers.ui import answer_html, status_html

    hit = Hit(id=text, title=text, score=0.5, dense_score=0.5, keyword_score=0.0, passage=text, n=1)
    for fragment in (status_html(text, "ok"), answer_html(f"{text} [1]", 0, [hit])):
        assert Markup(fragment).plain.startswith(" ".join(text.split())), fragment
        assert Markup(markdown_html(fragment)).plain.startswith(" ".join(text.split())), fragment


def test_export_renders_no_corpus_links_or_images(tmp_path: Path) -> None:
    """A Markdown viewer opening the export shows the markup as text; our References list stays plain."""
    from rag_papers.ui import export_markdown

    state = _hostile_state(tmp_path)
    state.exchanges[0].items[0].cited = True
    md = export_markdown(state)
    rendered = markdown_html(md)
    tags = Markup(rendered).tags
    assert not [t for t in tags if t[0] in {"a", "img", "iframe", "svg", "image", "script"}], rendered[:2000]
    assert not [t for t in tags if t[0] in {"div", "span"}], "raw HTML from the corpus reached the export"
    # GFM autolink literals (http://, www., e-mail) need these sequences raw: none is left.
    assert re.search(r"(?<!\\)://", md) is None and "www." not in md and re.search(r"[\w.]@\w", md) is None
    plain = Markup(rendered).plain
    assert '<img src="http://evil.example:81/html-img.png">' in plain
    assert "[login here](//evil.example:81/md-link)" in plain
    assert "**References**" in md and "- [1] Title 1 " in md


# ------------------------------------------------------------------ the browser
def _write_corpus(path: Path, base: str) -> None:
    """Three hostile papers (HTML, Markdown, bare URLs) among ordinary ones."""
    rel = base.removeprefix("http:")
    papers = [
        {
            "id": f"zorblax-<b>{rel}/id</b>",
            "title": f'Zorblax <img src="{base}/title-img.png"> tomato gardening',
            "venue": f'<img src="{rel}/venue.png">Zorblax Workshop',
            "year": 2024,
            "abstract": (
                f'Zorblax gardening raises tomato yields in cold climates <img src="{rel}/img.png"> across three seasons. '
                f'We show that Zorblax gardening <a href="{rel}/link">click here to log in</a> beats mulching on every farm. '
                f'Zorblax gardening also <iframe src="{rel}/iframe"></iframe> halves the water used in field trials. '
                f"The Zorblax schedule <img src=x onerror=\"fetch('{rel}/onerror')\"> is simple for small growers. "
                f'Zorblax plots <svg><image href="{rel}/svg.png"/></svg> need no fertiliser during the trials.'
            ),
        },
        {
            "title": f"[Quibbly]({base}/title-link) sorting of ![logo]({base}/title-img2.png) socks",
            "abstract": (
                f"Quibbly sorting arranges socks by colour ![chart]({rel}/md-img.png) in linear time. "
                f"Quibbly sorting [login here]({rel}/md-link) needs no extra memory for the socks. "
                f"Quibbly sorting keeps pairs together <{base}/angle> for every sock colour we tried. "
                f"Quibbly sorting $$\\href{{{base}/katex}}{{x}}$$ was tested on one million socks."
            ),
        },
        {
            "title": f'Frobnitz caching <a href="{base}/title-a">docs</a> for databases',
            "abstract": (
                f"Frobnitz caching speeds up database reads, see {base}/bare for the code. "
                f"Frobnitz caching is mirrored at www.frobnitz.example and {base}/bare2 as well. "
                f"Mail frobnitz@example.com or visit {base}/bare3 to learn more about Frobnitz caching."
            ),
        },
        {
            "title": "Protein folding with diffusion",
            "abstract": "We fold proteins with a diffusion model trained on structures. It beats baselines on CASP.",
        },
        {
            "title": "Graph networks for traffic",
            "abstract": "Graph neural networks forecast road traffic from sensor data. They cut errors by a fifth.",
        },
        {
            "title": "Speech recognition on small devices",
            "abstract": "A tiny speech recogniser runs on microcontrollers. It keeps accuracy close to large models.",
        },
    ]
    path.write_text("".join(json.dumps(p) + "\n" for p in papers), encoding="utf-8")


def _llm_reply(base: str) -> str:
    return (
        "Zorblax gardening raises tomato yields [1]. "
        f'<img src="{base}/llm-img.png"> ![x]({base}/llm-md-img.png) [login]({base}/llm-md-link) '
        f'see {base}/llm-bare and [the guide][g] <a href="{base}/llm-a">click here to log in</a> [1] [7].\n\n'
        f"[g]: {base}/llm-ref\n\n"
        f'- a list item <iframe src="{base}/llm-iframe"></iframe>\n'
        f"- another <{base}/llm-angle>\n"
    )


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture(scope="module")
def hostile_stub(listener: Listener) -> Iterator[OllamaStub]:
    with OllamaStub(models=[STUB_MODEL], reply=_llm_reply(listener.url)) as s:
        yield s


@pytest.fixture(scope="module")
def hostile_server(
    listener: Listener, hostile_stub: OllamaStub, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The app over the hostile corpus: extractive answers, Ollama (the stub) one choice away."""
    from rag_papers.index import Index
    from rag_papers.ingest import Ingester

    home = tmp_path_factory.mktemp("hostile_home")
    corpus = home / "hostile.jsonl"
    _write_corpus(corpus, listener.url)
    index = Index(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    Ingester(index.store).ingest([corpus], show_progress=False)
    index.close()
    served = _serve(home, embedder, ollama_host=hostile_stub.url, llm="extractive", source_min_ratio=0.0)
    yield served
    served.app.close()


# Attributes that make the browser fetch or navigate (a tooltip or an input's value holding the text is fine).
FIND_LIVE_MARKUP = """port => {
  const bad = [];
  const live = /^(src|href|srcset|action|formaction|data|poster|background|xlink:href|ping|cite|lowsrc|style|on.*)$/i;
  for (const el of document.querySelectorAll('*')) {
    for (const attr of el.getAttributeNames()) {
      const v = el.getAttribute(attr) || '';
      if (live.test(attr) && (v.includes(':' + port) || v.includes('frobnitz.example') || /^on/i.test(attr) && v.includes('fetch')))
        bad.push(el.tagName + ' ' + attr + '=' + v.slice(0, 120));
    }
  }
  for (const root of document.querySelectorAll('#rp-chat, #rp-panel, #rp-status-wrap')) {
    for (const el of root.querySelectorAll('img, iframe, object, embed, image, video, audio, source, form, script, link, .latex-block, .katex'))
      bad.push('element ' + el.outerHTML.slice(0, 160));
    for (const el of root.querySelectorAll('style'))  // gradio's icons carry their own <style>
      if (el.textContent.includes(':' + port)) bad.push('style ' + el.outerHTML.slice(0, 160));
    for (const a of root.querySelectorAll('a'))
      if (!(a.getAttribute('href') || '').startsWith('#cite-')) bad.push('link ' + a.outerHTML.slice(0, 160));
  }
  return bad;
}"""


def _open_every_source(page: Any) -> str:
    """Click every "Show source" choice; returns the panel's text with each paper opened."""
    texts = []
    page.wait_for_selector("#rp-source-pick label")
    labels = page.locator("#rp-source-pick label")
    for i in range(labels.count()):
        labels.nth(i).click()
        page.wait_for_selector(f"#rp-panel #src-{i + 1}.selected")
        texts.append(page.locator("#rp-panel").inner_text())
    return "\n".join(texts)


def _choose(page: Any, elem_id: str, value: str) -> None:
    """Pick ``value`` in a gradio Dropdown, as a user does (open it, click the option)."""
    page.locator(f"#{elem_id} input").click()
    page.locator(f"[role=listbox] li[role=option][aria-label='{value}']").click()
    page.wait_for_function(
        "([id, v]) => document.querySelector('#' + id + ' input').value.includes(v)", arg=[elem_id, value]
    )


@pytest.mark.browser
def test_hostile_corpus_stays_text_in_the_browser(
    hostile_server: Served, hostile_stub: OllamaStub, listener: Listener, page: Any, tmp_path: Path
) -> None:
    """Answers, paper lists, every source, a rewrite, an LLM reply and the export: nothing is fetched or linked."""
    listener.hits.clear()
    open_app(page, hostile_server.url)

    reply = ask(page, "What does Zorblax gardening do for tomato yields?")
    panel = _open_every_source(page)
    page.wait_for_timeout(500)
    assert listener.hits == [], f"the page fetched corpus markup: {listener.hits}"
    assert reply.locator("a.rp-cite").count() >= 1
    assert any(tag in reply.inner_text() for tag in ("<img src=", "<a href=", "<iframe src=", "<svg>"))
    assert "Zorblax <img src=" in panel and "<iframe src=" in panel and "onerror=" in panel

    reply = ask(page, "How does Quibbly sorting arrange socks?")
    assert "![chart](//127.0.0.1:" in reply.inner_text() or "[login here](//127.0.0.1:" in reply.inner_text()
    panel = _open_every_source(page)
    # Markdown in the title stays text; the abstract's TeX is shown as what it reads (issue 15), its \\href no link.
    assert "[Quibbly](http://127.0.0.1:" in panel and "Quibbly sorting x was tested on one million socks" in panel

    reply = ask(page, "What does Frobnitz caching speed up?")
    assert f"{listener.url}/bare" in reply.inner_text()

    page.locator("#rp-show-rewrite input").check()
    follow = ask(page, "and what are its limitations?")
    assert "<a href=" in follow.locator(".rp-searched").inner_text()  # the rewrite quotes the hostile title

    page.locator("#rp-retrieval-only input").check()
    listing = ask(page, "Zorblax Quibbly Frobnitz")
    assert listing.locator("ol.rp-hits li").count() >= 3
    assert "Zorblax <img src=" in listing.inner_text()
    _open_every_source(page)
    page.locator("#rp-retrieval-only input").uncheck()

    # An LLM whose reply itself carries markup; the model box offers the backend's models by name.
    page.locator("#rp-settings").get_by_text("Answering and retrieval settings").click()
    _choose(page, "rp-backend", "ollama")
    page.wait_for_selector(f"#rp-status-wrap .rp-status:has-text('model {STUB_MODEL}')")
    page.wait_for_function(f"() => document.querySelector('#rp-model input').value === '{STUB_MODEL}'")
    llm = ask(page, "What does Zorblax gardening do for tomato yields?")
    if llm.locator("details.rp-doubtful").count():  # most of its claims fail: folded under the warning (issue 45)
        llm.locator("details.rp-doubtful > summary").click()
        llm.locator(".rp-answer").wait_for(state="visible")
    text = llm.inner_text()
    assert f'<img src="{listener.url}/llm-img.png">' in text and f"[login]({listener.url}/llm-md-link)" in text
    assert f"[g]: {listener.url}/llm-ref" in text
    assert "ollama" in llm.locator(".rp-meta").inner_text()
    _open_every_source(page)

    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "Zorblax" in exported and "**References**" in exported

    page.wait_for_timeout(1500)  # let any image or frame the page might load try its request
    assert listener.hits == [], f"the page fetched corpus markup: {listener.hits}"
    bad = page.evaluate(FIND_LIVE_MARKUP, listener.port)
    assert bad == [], "\n".join(bad)
    assert "Traceback" not in page.content()
    rendered = markdown_html(exported)
    assert not [t for t, _ in Markup(rendered).tags if t in {"a", "img", "iframe", "svg"}], rendered[:2000]
    assert re.search(r"(?<!\\)://", exported) is None and "www." not in exported


# ---------------------------------------------------------------- allowed models
@pytest.fixture(scope="module")
def model_server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app over the seeds with short llama.cpp answers; no Ollama server."""
    home = tmp_path_factory.mktemp("models_home")
    shutil.copytree(seeds_home, home, dirs_exist_ok=True)
    served = _serve(home, embedder, ollama_host="http://127.0.0.1:9", llm="extractive", max_answer_tokens=16)
    yield served
    served.app.close()


def _client(url: str, **kw: Any) -> Any:
    from gradio_client import Client

    return Client(url, verbose=False, **kw)


def test_api_refuses_model_paths_alike_and_never_touches_them(
    model_server: Served, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``/ask`` names a model the server allows; a path (real, missing or relative) is one same error."""
    from rag_papers.llm import smollm2_path

    touched: list[str] = []
    real_stat = os.stat

    def spy(path: Any, *args: Any, **kwargs: Any) -> Any:
        touched.append(os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", spy)
    client = _client(model_server.url)
    params = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/ask"]["parameters"]
    assert [p["parameter_name"] for p in params] == ["question", "backend_name", "model", "top_k"]
    probes = ["/etc/passwd", str(tmp_path / "missing.gguf"), "models/relative.gguf"]
    errors = []
    for probe in probes:
        out = client.predict("What does ABBA claim?", "llamacpp", probe, api_name="/ask")
        assert set(out) == {"question", "error"}, out
        errors.append(out["error"])
    assert "not an allowed model" in errors[0]
    assert errors[0] == errors[1] == errors[2], errors
    assert not any(p in t or "passwd" in t or "relative.gguf" in t for t in touched for p in probes), touched

    out = client.predict("What does ABBA claim?", "ollama", "../../etc/passwd", api_name="/ask")
    assert "not an allowed model" in out["error"]
    out = client.predict("What does ABBA claim?", "no-such-backend", "", api_name="/ask")
    assert "unknown LLM backend" in out["error"]

    # The allowed name works: the server maps it to its GGUF file (a real llama.cpp run).
    gguf = smollm2_path()
    assert gguf is not None
    out = client.predict("What does ABBA claim?", "llamacpp", gguf.name, api_name="/ask")
    assert "error" not in out, out
    assert out["backend"] == "llamacpp" and out["model"] == gguf.name


def test_model_control_is_a_choice_of_names(model_server: Served) -> None:
    """The UI's model box offers allowed names (no path), starting on the backend's default."""
    with urllib.request.urlopen(f"{model_server.url.rstrip('/')}/config", timeout=10) as resp:
        config = json.load(resp)
    model = next(c for c in config["components"] if c.get("props", {}).get("elem_id") == "rp-model")
    assert model["type"] == "dropdown", model["type"]
    assert not model["props"].get("allow_custom_value")
    names = [c[1] if isinstance(c, list) else c for c in model["props"]["choices"]]
    assert all("/" not in str(n) for n in names), names


def test_allowed_models_come_from_settings(tmp_path: Path) -> None:
    """Extra models are listed in settings; names map to paths server-side, anything else is refused."""
    from rag_papers import RagPapersError
    from rag_papers.llm import allowed_models, resolve_model, smollm2_path

    extra = tmp_path / "other" / "tiny.gguf"
    settings = Settings(
        home=tmp_path, llamacpp_models=[extra], ollama_models=["qwen2.5:0.5b"], ollama_host="http://127.0.0.1:9"
    )
    gguf = smollm2_path()
    assert gguf is not None
    lc = allowed_models(settings, "llamacpp")
    assert lc == {gguf.name: str(gguf), "tiny.gguf": str(extra)}
    assert resolve_model(settings, "llamacpp", "tiny.gguf") == str(extra)
    assert resolve_model(settings, "llamacpp", "") == str(gguf)
    assert list(allowed_models(settings, "ollama")) == ["llama3.2:3b", "qwen2.5:0.5b"]
    assert resolve_model(settings, "auto", "qwen2.5:0.5b") == "qwen2.5:0.5b"
    assert allowed_models(settings, "extractive") == {}
    for bad in (str(extra), str(gguf), "tiny", "../tiny.gguf"):
        with pytest.raises(RagPapersError, match="not an allowed model"):
            resolve_model(settings, "llamacpp", bad)
    with pytest.raises(RagPapersError, match="unknown LLM backend"):
        resolve_model(settings, "nope", "")

    # The models the Ollama server itself lists (its operator pulled them) are allowed too.
    with OllamaStub(models=["llama3.2:3b", "phi3:mini"]) as stub:
        served = settings.model_copy(update={"ollama_host": stub.url})
        assert "phi3:mini" in allowed_models(served, "ollama")
        assert resolve_model(served, "ollama", "phi3:mini") == "phi3:mini"
        with pytest.raises(RagPapersError, match="not an allowed model"):
            resolve_model(served, "ollama", "/etc/passwd")


# ------------------------------------------------------------ public address
def _run(cmd: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str] | None:
    """Run ``cmd``; ``None`` if it was still running (serving) after ``timeout`` seconds."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _one_seed(tmp_path: Path) -> Path:
    seeds = tmp_path / "seeds"
    seeds.mkdir(exist_ok=True)
    first = sorted(SEEDS.glob("*.txt"))[-1]
    shutil.copy(first, seeds / first.name)
    return seeds


@pytest.mark.parametrize(("entry", "host"), [("cli", "0.0.0.0"), ("app.py", "::"), ("cli", "192.0.2.7")])
def test_public_host_without_auth_is_refused(entry: str, host: str, tmp_path: Path) -> None:
    """One line, exit 2, nothing loaded or served; the message names the way out."""
    home = tmp_path / "home"
    env = {"RAG_PAPERS_HOME": str(home), "RAG_PAPERS_SEEDS_DIR": str(_one_seed(tmp_path)), "RAG_PAPERS_AUTH": ""}
    port = str(free_port())
    cmd = (
        [str(VENV_BIN / "rag-papers"), "chat", "--host", host, "--port", port]
        if entry == "cli"
        else [sys.executable, str(PROJECT_ROOT / "app.py"), "--host", host, "--port", port]
    )
    proc = _run(cmd, env)
    assert proc is not None, f"{entry} --host {host} without auth started serving"
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--insecure-no-auth" in lines[0] and "--auth-file" in lines[0] and host in lines[0]
    assert proc.stdout == "" and not home.exists()


def test_loopback_hosts_need_no_auth() -> None:
    from rag_papers import RagPapersError
    from rag_papers.ui import check_exposure

    for host in ("127.0.0.1", "127.8.9.10", "::1", "localhost", "LOCALHOST"):
        check_exposure(Settings(host=host), insecure_no_auth=False)
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""):
        with pytest.raises(RagPapersError, match="insecure-no-auth"):
            check_exposure(Settings(host=host), insecure_no_auth=False)
        check_exposure(Settings(host=host, auth="a:b"), insecure_no_auth=False)
        check_exposure(Settings(host=host), insecure_no_auth=True)


def test_bad_auth_file_is_one_line(tmp_path: Path) -> None:
    from rag_papers import RagPapersError
    from rag_papers.ui import resolve_auth

    empty = tmp_path / "empty"
    empty.write_text("\n")
    good = tmp_path / "good"
    good.write_text("ada:pa:ss word\n")
    assert resolve_auth(Settings(auth_file=good)) == ("ada", "pa:ss word")
    assert resolve_auth(Settings(auth="u:p")) == ("u", "p")
    assert resolve_auth(Settings()) is None
    for settings, match in (
        (Settings(auth_file=tmp_path / "nope"), "cannot read auth file"),
        (Settings(auth_file=empty), "expected one line user:password"),
        (Settings(auth_file=tmp_path), "cannot read auth file"),
        (Settings(auth_file=good, auth="u:p"), "not both"),
    ):
        with pytest.raises(RagPapersError, match=match) as err:
            resolve_auth(settings)
        assert "\n" not in str(err.value) and "ss word" not in str(err.value)


def _serve_process(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})


def _seeded_env(seeds_home: Path, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    shutil.copytree(seeds_home, home)
    return {"RAG_PAPERS_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False", "RAG_PAPERS_AUTH": ""}


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.parametrize("how", ["auth-file", "env"])
def test_public_host_with_auth_requires_login(how: str, seeds_home: Path, tmp_path: Path) -> None:
    """``chat --host 0.0.0.0 --auth-file F`` (or ``RAG_PAPERS_AUTH`` with app.py): a login guards everything."""
    env = _seeded_env(seeds_home, tmp_path)
    port = free_port()
    if how == "auth-file":
        secret = tmp_path / "auth"
        secret.write_text("ada:s3cret-pw\n")
        cmd = [
            str(VENV_BIN / "rag-papers"),
            "chat",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--auth-file",
            str(secret),
        ]
    else:
        env["RAG_PAPERS_AUTH"] = "ada:s3cret-pw"
        cmd = [sys.executable, str(PROJECT_ROOT / "app.py"), "--host", "0.0.0.0", "--port", str(port)]
    cmd += ["--llm", "extractive"]
    log = tmp_path / "serve.log"
    tmp = tmp_path / "tmp"  # the server's TMPDIR: its private folder goes there, and must go when it stops
    tmp.mkdir()
    proc = _serve_process(cmd, {**env, "TMPDIR": str(tmp)}, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/", timeout=120)
        assert _status(f"{url}/config") == 401
        found = _client(url, auth=("ada", "s3cret-pw")).predict("Hadamard product", 2, api_name="/search")
        assert found["results"][0]["title"].startswith("ABBA")
        assert "s3cret-pw" not in " ".join(cmd)
        (private,) = tmp.glob("rag-papers-ui-*")
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
    finally:
        stop_process(proc, 20)  # SIGTERM, as a service manager stops it
    output = log.read_text()
    assert "sign-in required" in output and "Traceback" not in output
    assert not private.exists() and not (tmp / "gradio").exists(), list(tmp.iterdir())


def test_insecure_flag_serves_public_host_without_login(seeds_home: Path, tmp_path: Path) -> None:
    env = _seeded_env(seeds_home, tmp_path)
    port = free_port()
    cmd = [sys.executable, str(PROJECT_ROOT / "app.py"), "--host", "0.0.0.0", "--port", str(port)]
    cmd += ["--insecure-no-auth", "--llm", "extractive"]
    log = tmp_path / "serve.log"
    proc = _serve_process(cmd, env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/", timeout=120)
        assert _status(f"{url}/config") == 200
    finally:
        stop_process(proc, 20)
    output = log.read_text()
    assert "without a login" in output and "Traceback" not in output


# ------------------------------------------------------------------ the /search API's parameters
def _post(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


HUGE = 99999999999999999999  # past a 64-bit integer


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (["ABBA", 5, "abc", None, "", ""], ["year_min", "valid integer", "'abc'"]),  # blamed the vector store
        (["ABBA", 5, None, None, {"$ne": "x"}, ""], ["venue", "valid string"]),  # an AttributeError
        (["ABBA", -3, None, None, "", ""], ["top_k", "greater than or equal to 1", "-3"]),  # returned 1 result
        (["ABBA", 0, None, None, "", ""], ["top_k", "greater than or equal to 1"]),  # returned 5
        (["ABBA", HUGE, None, None, "", ""], ["top_k", "less than or equal to 1000"]),
        (["ABBA", 5, HUGE, None, "", ""], ["year_min", "less than or equal to 9999"]),
        (["ABBA", 5, None, "2024", ["x"], 7], ["venue", "keyword"]),  # "2024" is a year as the CLI reads one
        ([{"q": 1}, 5, None, None, "", ""], ["query", "valid string"]),
    ],
)
def test_api_search_answers_a_bad_parameter_422_in_words(
    model_server: Served, data: list[Any], needles: list[str]
) -> None:
    status, body = _post(f"{model_server.url.rstrip('/')}/gradio_api/call/search", {"data": data})
    assert status == 422, (status, body)
    for needle in needles:
        assert needle in body, (needle, body)
    assert "vector store" not in body and "AttributeError" not in body


def test_api_search_takes_good_parameters_as_before(model_server: Served) -> None:
    client = _client(model_server.url)
    found = client.predict("Hadamard product low-rank adaptation", 3, api_name="/search")
    assert len(found["results"]) == 3 and found["results"][0]["title"].startswith("ABBA")
    default = client.predict("Hadamard product low-rank adaptation", api_name="/search")
    assert len(default["results"]) == model_server.settings.top_k
    narrowed = client.predict("Hadamard product", 5, "2026", 2026, "", "", api_name="/search")
    assert narrowed["results"] and all(r["year"] == 2026 for r in narrowed["results"])
    status, _ = _post(
        f"{model_server.url.rstrip('/')}/gradio_api/call/search", {"data": ["ABBA", 2, None, None, "", ""]}
    )
    assert status == 200
    # The CLI refuses the same values with the same words.
    from rag_papers import RagPapersError
    from rag_papers.retrieve import SearchRequest

    with pytest.raises(RagPapersError, match="top_k: Input should be greater than or equal to 1"):
        SearchRequest.checked(top_k=-3)


# ------------------------------------------------------------------ logins and the routes around them
def _login(url: str, password: str) -> tuple[int, float, str]:
    """POST the login form; (status, seconds it took, the session cookie when it worked)."""
    form = urllib.parse.urlencode({"username": "ada", "password": password}).encode()
    req = urllib.request.Request(f"{url}/login", data=form)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            cookies = resp.headers.get_all("set-cookie") or []
            return int(resp.status), time.monotonic() - t0, "; ".join(c.split(";", 1)[0] for c in cookies)
    except urllib.error.HTTPError as exc:
        return int(exc.code), time.monotonic() - t0, ""


@pytest.fixture
def login_server(
    seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Served]:
    """The app behind a login (ada), with short login delays so that the test is quick."""
    import importlib

    launch = importlib.import_module("rag_papers.ui.launch")  # the module: the package exports its function
    monkeypatch.setattr(launch, "LOGIN_DELAY_S", 0.1, raising=False)
    monkeypatch.setattr(launch, "LOGIN_DELAY_MAX_S", 0.5, raising=False)
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "login_home", auth="ada:s3cret-pw", llm="extractive"
    ) as served:
        yield served


def test_each_failed_login_waits_longer_up_to_a_bound(login_server: Served) -> None:
    """Reported: 50 wrong logins in a row got no slowdown."""
    url = login_server.url.rstrip("/")
    took = []
    for _ in range(7):
        status, seconds, _ = _login(url, "wrong")
        assert status == 400
        took.append(seconds)
    # 0, then 0.1 doubling: 0.1, 0.2, 0.4, then the bound 0.5.
    assert took[0] < 0.1 + 0.3 and took[3] >= 0.4 and took[4] >= 0.5, took
    assert took[6] < 0.5 + 0.4, took  # bounded
    status, seconds, cookie = _login(url, "s3cret-pw")  # the right password still works, after the wait
    assert status == 200 and seconds >= 0.5 and cookie
    status, seconds, _ = _login(url, "wrong")  # and a success starts the count again
    assert status == 400 and seconds < 0.3


def test_no_route_acts_on_a_session_or_lists_the_routes_without_a_login(login_server: Served) -> None:
    """Reported: /gradio_api/cancel, /reset and /openapi.json answered without a login."""
    url = login_server.url.rstrip("/")
    body = {"session_hash": "abc", "fn_index": 0, "event_id": "e1"}
    assert _post(f"{url}/gradio_api/cancel", body)[0] == 401
    assert _post(f"{url}/gradio_api/reset", {"event_id": "e1"})[0] == 401
    assert _status(f"{url}/openapi.json") == 404  # FastAPI's schema of every route: off
    assert _status(f"{url}/gradio_api/openapi.json") == 401  # gradio's own asks for the login
    _, _, cookie = _login(url, "s3cret-pw")
    signed_in = {"Cookie": cookie}
    assert _post(f"{url}/gradio_api/cancel", body, signed_in)[0] == 200  # the Stop button still works
    assert _post(f"{url}/gradio_api/reset", {"event_id": "e1"}, signed_in)[0] == 200


def test_openapi_json_is_off_without_a_login_too(model_server: Served) -> None:
    assert _status(f"{model_server.url.rstrip('/')}/openapi.json") == 404


# ------------------------------------------------------------------ exports
def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.mark.browser
def test_exports_are_private_and_gone_when_the_server_stops(
    seeds_home: Path,
    embedder: object,
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reported: each export left a file in TMPDIR/rag-papers-export-*/ and a 0644 copy in gradio's cache
    (0755 folders), all of it kept after the server stopped."""
    from rag_papers.ui import files

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # TMPDIR from here on: whatever the app leaves there shows
    monkeypatch.setattr(files, "EXPORT_KEEP_S", 10)  # old exports removed while it runs: seconds here
    monkeypatch.setattr(files, "EXPORT_SWEEP_S", 1)
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "export_home", llm="extractive") as served:
        root = Path(served.app.GRADIO_CACHE)  # gradio's cache for this app: its own folder
        assert root.parent == files.process_folder()
        assert stat.S_IMODE(root.parent.stat().st_mode) == 0o700
        open_app(page, served.url)
        ask(page, "What does ABBA claim?")
        with page.expect_download() as dl:
            page.locator("#rp-export").click()
        assert "## 1. What does ABBA claim?" in Path(dl.value.path()).read_text(encoding="utf-8")
        exported = list(root.rglob("rag-papers-chat-*.md"))
        modes = _modes(root)
        assert exported and all(mode == 0o600 for name, mode in modes.items() if name.endswith(".md")), modes
        assert all(mode == 0o700 for name, mode in modes.items() if "export-" in name and "." not in name), modes
        assert modes["."] == 0o700, modes
        left = [p for p in tmp.rglob("*") if files.process_folder() not in (p, *p.parents)]
        assert left == [], left  # no copy in TMPDIR/gradio, no rag-papers-export-* folder
        deadline = time.monotonic() + 40
        while any(p.exists() for p in exported) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(p.exists() for p in exported), "an old export was kept while the server ran"
    assert not root.exists(), _modes(root)  # the server stopped: its folder is gone
    assert [p for p in tmp.rglob("*") if files.process_folder() not in (p, *p.parents)] == []
