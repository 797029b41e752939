"""The Gradio chat UI: streamed, cited answers beside a panel showing the papers they cite.

Design notes (why it is built this way):

* All conversation state lives in a per-browser-session ``gr.State`` holding a
  ``ChatSession``; nothing about a conversation is module-global, so concurrent users
  never see each other's history. The state starts as ``None`` (gradio deep-copies a
  State's initial value per session, and an ``Engine`` cannot be copied) and is
  created on the first request of each session.
* A question runs as a chain of three events: a non-queued step that shows the
  question at once, a *search* step and an *answer* step, each in its own
  concurrency group. Retrieval-only requests are served by the search group, so a
  slow LLM generation never blocks them.
* Citations ``[n]`` are rendered as ``<a href="#cite-E-N">`` (E = exchange, N = source
  number). The sources panel is a ``gr.HTML`` whose ``js_on_load`` catches clicks on
  such links anywhere on the page and fires a custom ``cite`` event, which selects
  that paper. Citations in older answers therefore still open *their* paper.
* Every failure (LLM gone mid-answer, bad settings, a bug) becomes a ``⚠`` message
  in the chat; the app keeps serving.
* Corpus and model text is never markup. The Chatbot renders messages as GFM Markdown
  (links, images, autolinks, ``$$`` LaTeX) and its sanitiser keeps ``<a>`` and ``<img>``, so
  ``html.escape`` is not enough: ``inert`` turns every ASCII punctuation character of such
  text into a numeric entity, which neither Markdown nor HTML (nor gr.HTML's templates) can
  act on and the browser shows as the same character. Every place that shows corpus, model
  or error text goes through it; our own tags (citation links, badges) are written around
  it. The Markdown export uses ``md_inert`` (backslash escapes) for the same reason.
* Clients choose models by name among those the server allows (``llm.allowed_models``);
  a client's string never reaches the filesystem. A public address needs a login.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import ipaddress
import logging
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import gradio as gr

from rag_papers import RagPapersError, __version__
from rag_papers.answer import Answer
from rag_papers.chat import ChatSession, Engine
from rag_papers.config import Settings
from rag_papers.corpus import Paper
from rag_papers.llm import ExtractiveBackend, LLMError, allowed_models, backend_names, get_backend, resolve_model
from rag_papers.retrieve import Filters, SearchResult

log = logging.getLogger(__name__)

ANY = "Any"
BUSY_SECONDS = 600.0  # a pending exchange older than this no longer blocks new questions
STREAM_INTERVAL = 0.03  # seconds between UI updates while streaming (tokens are batched)
_CITE_RE = re.compile(r"\[(\d+)\]")
# What an answer waits for, in words (``AnswerStream.phase``): never "searching" while the model works.
PHASE_WORDS = {
    "waiting": "Waiting for the model: it is writing another answer…",
    "loading": "Loading the model…",
    "reading": "The model is reading the abstracts…",
    "writing": "Writing the answer…",
}

# ---------------------------------------------------------------------------- state


@dataclass
class Item:
    """One paper in the sources panel (a source of an answer or a search hit)."""

    n: int
    id: str
    title: str
    score: float
    passage: str
    abstract: str = ""
    year: int | None = None
    venue: str | None = None
    cited: bool = False


@dataclass
class Exchange:
    """One question and what the UI showed for it: an answer, a paper list or an error."""

    question: str
    mode: str  # "answer" or "search"
    standalone: str = ""
    text: str = ""
    items: list[Item] = field(default_factory=list)
    answer: Answer | None = None
    relevant: bool = True
    refused: bool = False
    error: str = ""
    stopped: bool = False
    footer: str = ""
    notice: str = ""
    done: bool = False
    claimed: bool = False  # a worker step has taken it (guards against a double run)
    started: float = field(default_factory=time.monotonic)
    phase: str = ""  # what the answer waits for (``AnswerStream.phase``), shown until text arrives
    stream: Any = field(default=None, repr=False, compare=False)  # the running AnswerStream, for Stop


@dataclass
class UIState:
    """Everything one browser session owns; lives in a ``gr.State``."""

    session: ChatSession
    exchanges: list[Exchange] = field(default_factory=list)
    view: tuple[int, int] | None = None  # (exchange index, source number) shown in the panel
    show_rewrite: bool = False
    export_dir: Path | None = None

    def busy(self) -> bool:
        """A question is still being answered (stale ones, e.g. a closed tab, stop counting)."""
        if not self.exchanges:
            return False
        last = self.exchanges[-1]
        return not last.done and time.monotonic() - last.started < BUSY_SECONDS


# ------------------------------------------------------------------------ rendering
_MARKUP_CHARS = re.compile(r"[!-/:-@\[-`{-~]")  # every ASCII punctuation character


def inert(text: object) -> str:
    """``text`` as HTML that shows exactly its characters and can never become markup.

    The one escaping function for corpus, model and error text in the page. Entities for all
    ASCII punctuation (not just ``<>&"'``): Chatbot messages go through Markdown first, where
    ``![x](url)``, ``[x](url)``, ``<url>``, bare ``http://`` and ``www.`` autolinks, ``$$`` and
    ``{{ }}`` would otherwise come alive. Safe in text and in double-quoted attributes.
    """
    return _MARKUP_CHARS.sub(lambda m: f"&#{ord(m.group())};", str(text))


_MD_SPECIAL = re.compile(r"[\\`*_\[\]()<>!&#|~$]|:(?=//)|@|(?<=www)\.", re.IGNORECASE)


def md_inert(text: object) -> str:
    """``text`` for the Markdown export: any CommonMark/GFM viewer shows it as written, never as a link,
    an image or HTML (backslash escapes, also breaking ``://``, ``www.`` and e-mail autolinks)."""
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(), str(text))


def _ms(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def linkify(text: str, index: int, items: list[Item]) -> str:
    """``text`` made inert, each valid ``[n]`` a link that opens source n of exchange ``index``."""
    titles = {it.n: it.title for it in items}
    out: list[str] = []
    pos = 0
    for m in _CITE_RE.finditer(text):
        n = int(m.group(1))
        out.append(inert(text[pos : m.start()]))
        if n in titles:
            out.append(f'<a class="rp-cite" href="#cite-{index}-{n}" title="{inert(titles[n])}">[{n}]</a>')
        else:
            out.append(inert(m.group(0)))
        pos = m.end()
    out.append(inert(text[pos:]))
    return "".join(out)


_BULLET_RE = re.compile(r"[-*•]\s+(.*)")


def answer_html(text: str, index: int, items: list[Item], lead: str = "", tail: str = "") -> str:
    """An answer's text as our own HTML: paragraphs, "- " lines as a list, citations linked.

    The text itself is inert and no raw newline is left, so the Chatbot's Markdown pass sees a
    single HTML block and can add nothing. ``lead`` and ``tail`` (our badge, the caret) go inside
    the first and last block.
    """
    blocks: list[tuple[str, list[str]]] = []  # ("p" | "ul", lines)
    for line in text.split("\n"):
        s = line.strip()
        bullet = _BULLET_RE.fullmatch(s)
        kind = "ul" if bullet else "p"
        if not s:
            blocks.append(("", []))
            continue
        body = linkify(bullet.group(1) if bullet else s, index, items)
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(body)
        else:
            blocks.append((kind, [body]))
    blocks = [b for b in blocks if b[0]] or [("p", [""])]
    if lead:
        if blocks[0][0] == "p":
            blocks[0][1][0] = f"{lead} {blocks[0][1][0]}"
        else:
            blocks.insert(0, ("p", [lead]))
    if tail:
        blocks[-1][1][-1] += tail
    html_out = []
    for kind, lines in blocks:
        if kind == "ul":
            html_out.append("<ul>" + "".join(f"<li>{x}</li>" for x in lines) + "</ul>")
        else:
            html_out.append("<p>" + "<br>".join(lines) + "</p>")
    return f'<div class="rp-answer">{"".join(html_out)}</div>'


def highlight(abstract: str, passage: str, quoted: str = "") -> str:
    """The abstract as HTML: sentences quoted in the answer strongly marked, the retrieved passage lightly."""

    def norm(s: str) -> str:
        return " ".join(s.split()).lower()

    p, q = norm(passage), norm(quoted)
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", abstract.strip()):
        ns = norm(sentence)
        text = inert(sentence)
        if len(ns) > 12 and q and ns in q:
            out.append(f'<mark class="rp-quoted">{text}</mark>')
        elif len(ns) > 12 and p and (ns in p or ns[:32] in p or ns[-32:] in p):
            out.append(f"<mark>{text}</mark>")
        else:
            out.append(text)
    return " ".join(out)


def render_exchange(index: int, ex: Exchange, show_rewrite: bool) -> str:
    """The assistant message (Markdown with a little HTML) for one exchange."""
    parts: list[str] = []
    if show_rewrite and ex.standalone and ex.standalone != ex.question:
        parts.append(
            f'<div class="rp-searched"><span class="rp-label">Searched for</span> <em>{inert(ex.standalone)}</em></div>'
        )
    if ex.mode == "search" and ex.done and not ex.error:
        parts.append(_render_hits(index, ex))
    elif ex.text:
        lead = '<span class="rp-badge rp-nc">Not covered</span>' if ex.refused else ""
        tail = "" if ex.done else ' <span class="rp-caret">▍</span>'
        parts.append(answer_html(ex.text, index, ex.items, lead, tail))
    elif not ex.done:
        if ex.mode == "search" or not ex.items:
            what = "Searching the abstracts…"
        else:
            what = PHASE_WORDS.get(ex.phase, PHASE_WORDS["reading"])
            waited = time.monotonic() - ex.started
            if waited >= 2:
                what += f" {waited:.0f} s"
        parts.append(f'<span class="rp-thinking">{inert(what)}</span>')
    if ex.stopped:
        parts.append('<div class="rp-notice">Stopped before the answer was complete.</div>')
    if ex.error:
        parts.append(f'<div class="rp-error">⚠ {inert(ex.error)}</div>')
    if ex.notice and ex.done and not ex.error:
        parts.append(f'<div class="rp-notice">Note: {inert(ex.notice)}</div>')
    if ex.footer:
        parts.append(f'<div class="rp-meta">{inert(ex.footer)}</div>')
    return "\n\n".join(parts)


def _render_hits(index: int, ex: Exchange) -> str:
    if not ex.items:  # ex.text: why, when the filters excluded every paper (set by run_search)
        why = inert(ex.text) if ex.text else "No indexed paper matches this search (check the filters)."
        return f'<span class="rp-badge rp-nc">No match</span> {why}'
    head = f"<b>{len(ex.items)} matching paper{'s' if len(ex.items) != 1 else ''}</b> · retrieval only, no answer generated"
    if not ex.relevant:
        head = f'<span class="rp-badge rp-nc">Weak matches</span> {head}; none is a close match'
    rows = []
    for it in ex.items:
        rows.append(
            f'<li><a class="rp-cite" href="#cite-{index}-{it.n}">[{it.n}]</a> <b>{inert(it.title)}</b>'
            f' <span class="rp-id">{inert(it.id)} · score {it.score:.3f}</span>'
            f'<div class="rp-passage">{inert(_clip(it.passage, 260))}</div></li>'
        )
    return f'<div class="rp-hits-head">{head}</div>\n\n<ol class="rp-hits">{"".join(rows)}</ol>'


def chat_messages(state: UIState | None) -> list[dict[str, str]]:
    """The whole conversation in the Chatbot's messages format, rebuilt from state."""
    out: list[dict[str, str]] = []
    if state is None:
        return out
    for i, ex in enumerate(state.exchanges):
        out.append({"role": "user", "content": inert(ex.question)})
        out.append({"role": "assistant", "content": render_exchange(i, ex, state.show_rewrite)})
    return out


BOOK_SVG = (
    '<svg viewBox="0 0 24 24" width="100%" height="100%" fill="none" stroke="currentColor" stroke-width="1.8" '
    'stroke-linecap="round" stroke-linejoin="round" aria-hidden="true"><path d="M4 19.5V5a2 2 0 0 1 2-2h13v16H6.5'
    'A2.5 2.5 0 0 0 4 21.5v-2Z"/><path d="M4 19.5A2.5 2.5 0 0 1 6.5 17H19"/><path d="M9 7h6M9 10.5h4"/></svg>'
)

EMPTY_PANEL = (
    f'<div class="rp-empty"><div class="rp-empty-icon">{BOOK_SVG}</div>'
    "<p><b>Sources appear here.</b></p>"
    '<p>Each answer cites the abstracts it draws on, like <span class="rp-cite">[1]</span>. '
    "Click a citation to read that paper's abstract, with the supporting passage highlighted.</p></div>"
)


def sources_panel(state: UIState | None) -> str:
    """HTML for the panel: the selected exchange's papers, the selected one opened."""
    if state is None or state.view is None or state.view[0] >= len(state.exchanges):
        return EMPTY_PANEL
    idx, sel = state.view
    ex = state.exchanges[idx]
    if not ex.items:
        if ex.refused:
            why = (
                "The filters excluded every paper, so no LLM was asked: widen or clear them."
                if ex.answer is not None and ex.answer.filtered_out
                else "No indexed abstract is close enough to this question, so no LLM was asked."
            )
            return f'<div class="rp-empty"><span class="rp-badge rp-nc">Not covered</span><p>{why}</p></div>'
        return EMPTY_PANEL
    if ex.mode == "search":
        title = "Matching papers"
    elif ex.refused:
        title = "Closest papers (below the relevance threshold)"
    else:
        title = "Sources"
    quoted = ex.text if ex.mode == "answer" else ""
    cards = []
    for it in ex.items:
        selected = it.n == sel
        meta = [f'<span class="rp-id">{inert(it.id)}</span>', f"score {it.score:.3f}"]
        if it.venue or it.year:
            meta.append(inert(" ".join(str(x) for x in (it.venue, it.year) if x)))
        if it.cited:
            meta.append('<span class="rp-badge rp-cited">cited</span>')
        body = (
            f'<div class="rp-abstract">{highlight(it.abstract or it.passage, it.passage, quoted)}</div>'
            if selected
            else f'<div class="rp-snippet">{inert(_clip(it.passage, 150))}</div>'
        )
        cards.append(
            f'<div class="rp-src{" selected" if selected else ""}{" cited" if it.cited else ""}" id="src-{it.n}">'
            f'<a class="rp-src-title" href="#cite-{idx}-{it.n}"><span class="rp-num">[{it.n}]</span> {inert(it.title)}</a>'
            f'<div class="rp-src-meta">{" · ".join(meta)}</div>{body}</div>'
        )
    if ex.mode == "answer" and not ex.refused:
        legend = '<mark class="rp-quoted">quoted in the answer</mark> <mark>retrieved passage</mark>'
    else:
        legend = "<mark>retrieved passage</mark>"
    return (
        f'<div class="rp-sources"><div class="rp-src-head"><b>{title}</b> for “{inert(_clip(ex.question, 80))}”'
        f'<div class="rp-legend">{legend}</div></div>{"".join(cards)}</div>'
    )


def radio_update(state: UIState | None) -> dict[str, Any]:
    """The "Show source" picker for the exchange shown in the panel."""
    if state is None or state.view is None or state.view[0] >= len(state.exchanges):
        return gr.update(choices=[], value=None, visible=False)
    idx, sel = state.view
    items = state.exchanges[idx].items
    return gr.update(choices=[(f"[{it.n}]", it.n) for it in items], value=sel if items else None, visible=bool(items))


def _md_line(text: str) -> str:
    return md_inert(" ".join(text.split()))


def _md_id(pid: str) -> str:
    return f"`{pid}`" if re.fullmatch(r"[\w.:-]+", pid) else _md_line(pid)


_MD_CITE_RE = re.compile(r"\[(\d+)\](?!:)")  # "[n]:" would define a link, so it is escaped


def _md_text(text: str) -> str:
    """Answer text for the export: inert except its ``[n]`` citations, which stay readable."""
    out: list[str] = []
    pos = 0
    for m in _MD_CITE_RE.finditer(text):
        out += [md_inert(text[pos : m.start()]), m.group(0)]
        pos = m.end()
    out.append(md_inert(text[pos:]))
    return "".join(out)


def export_markdown(state: UIState) -> str:
    """The conversation as Markdown: each question, its answer and a References list.

    Corpus and model text is escaped (``md_inert``), so a Markdown viewer shows it as written.
    """
    lines = [
        "# rag-papers conversation",
        "",
        f"_Exported {datetime.now():%Y-%m-%d %H:%M} · rag-papers {__version__}_",
        "",
    ]
    for i, ex in enumerate(state.exchanges, 1):
        if not ex.done:
            continue
        lines += [f"## {i}. {_md_line(ex.question)}", ""]
        if ex.standalone and ex.standalone != ex.question:
            lines += [f"*Searched for: {_md_line(ex.standalone)}*", ""]
        if ex.mode == "search" and not ex.error:
            lines += ["Retrieval only (no answer generated). Matching papers:", ""]
            lines += [
                f"{it.n}. **{_md_line(it.title)}** ({_md_id(it.id)}, score {it.score:.3f}): "
                f"{_md_line(_clip(it.passage, 300))}"
                for it in ex.items
            ]
            lines.append("")
        else:
            if ex.refused:
                lines += [f"**Not covered.** {_md_text(ex.text)}", ""]
            elif ex.text:
                lines += [_md_text(ex.text.strip()), ""]
            if ex.error:
                lines += [f"> ⚠ {_md_line(ex.error)}", ""]
            if ex.footer:
                lines += [f"*{_md_line(ex.footer)}*", ""]
            refs = [it for it in ex.items if it.cited] or ([] if ex.refused else ex.items)
            if refs and not ex.refused:
                lines += ["**References**", ""]
                lines += [f"- [{it.n}] {_md_line(it.title)} (id {_md_id(it.id)})" for it in refs]
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------- the app
JS_ON_LOAD = """
if (window.__rpCite) document.removeEventListener('click', window.__rpCite, true);
window.__rpCite = (ev) => {
  const a = ev.target && ev.target.closest ? ev.target.closest('a[href^="#cite-"]') : null;
  if (!a) return;
  ev.preventDefault();
  ev.stopPropagation();
  trigger('cite', {key: a.getAttribute('href').slice(6)});
};
document.addEventListener('click', window.__rpCite, true);
watch('value', () => {
  // Keep the opened paper in view inside the panel (the first one: show the panel's heading too).
  const box = element.closest('.html-container') || element.parentElement;
  const cards = element.querySelectorAll('.rp-src');
  const s = element.querySelector('.rp-src.selected');
  if (!box) return;
  if (!s || s === cards[0]) { box.scrollTop = 0; return; }
  box.scrollTop += s.getBoundingClientRect().top - box.getBoundingClientRect().top - 8;
});
"""

CSS = """
.gradio-container { max-width: 1400px !important; margin: 0 auto; }
#rp-header { align-items: center; padding: 4px 2px 0; }
.rp-brand { display: flex; align-items: center; gap: 12px; }
.rp-logo { width: 40px; height: 40px; padding: 7px; border-radius: 10px; flex: none; color: white;
  background: linear-gradient(135deg, var(--primary-500), var(--primary-700)); box-sizing: border-box; }
.rp-brand h1 { font-size: 1.4rem; margin: 0 !important; line-height: 1.2; letter-spacing: -0.01em; font-weight: 700; }
.rp-brand .rp-sub { color: var(--body-text-color-subdued); font-size: 0.9rem; }
.rp-status { display: inline-flex; align-items: center; gap: 8px; padding: 5px 12px; border-radius: 999px;
  background: var(--background-fill-secondary); border: 1px solid var(--border-color-primary); font-size: 0.85rem; }
.rp-dot { width: 9px; height: 9px; border-radius: 50%; display: inline-block; background: #22c55e; flex: none; }
.rp-dot.rp-warn { background: #f59e0b; } .rp-dot.rp-bad { background: #ef4444; }
#rp-status-wrap { display: flex; justify-content: flex-end; }
.rp-label { font-size: 0.72rem; text-transform: uppercase; letter-spacing: 0.04em; font-weight: 700; margin-right: 4px; }
a.rp-cite, span.rp-cite { display: inline-block; padding: 0 5px; margin: 0 1px; border-radius: 6px; font-size: 0.82em;
  font-weight: 700; line-height: 1.45; text-decoration: none !important; vertical-align: 1px;
  color: var(--color-accent) !important; background: var(--color-accent-soft); border: 1px solid transparent; cursor: pointer; }
a.rp-cite:hover { border-color: var(--color-accent); }
.rp-meta { margin-top: 10px; padding-top: 6px; border-top: 1px dashed var(--border-color-primary);
  font-size: 0.78rem; color: var(--body-text-color-subdued); }
.rp-notice { font-size: 0.82rem; color: var(--body-text-color-subdued); margin-top: 6px; }
.rp-error { margin-top: 6px; padding: 8px 10px; border-radius: 8px; background: #fef2f2; color: #991b1b;
  border: 1px solid #fecaca; font-size: 0.92rem; }
.dark .rp-error { background: #450a0a; color: #fecaca; border-color: #7f1d1d; }
.rp-searched { font-size: 0.82rem; color: var(--body-text-color-subdued); margin-bottom: 6px; }
.rp-badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 0.74rem; font-weight: 700;
  vertical-align: 1px; margin-right: 4px; }
.rp-nc { background: #fef3c7; color: #92400e; border: 1px solid #fde68a; }
.rp-cited { background: var(--color-accent-soft); color: var(--color-accent); }
.rp-thinking { color: var(--body-text-color-subdued); font-style: italic; animation: rp-pulse 1.4s ease-in-out infinite; }
.rp-caret { animation: rp-pulse 1s steps(2) infinite; color: var(--color-accent); }
@keyframes rp-pulse { 50% { opacity: 0.35; } }
.rp-hits-head { margin-bottom: 4px; }
ol.rp-hits { margin: 4px 0 0 0; padding-left: 1.3em; }
ol.rp-hits li { margin-bottom: 8px; }
.rp-id { font-family: var(--font-mono); font-size: 0.78rem; color: var(--body-text-color-subdued); }
.rp-passage { font-size: 0.86rem; color: var(--body-text-color-subdued); margin-top: 2px; }
#rp-sources-col { gap: 8px; }
#rp-source-pick { padding: 4px 8px !important; }
#rp-source-pick .wrap { gap: 4px; }
#rp-panel { background: var(--background-fill-primary); padding: 12px 14px; }
#rp-source-pick { border-bottom: 1px solid var(--border-color-primary) !important; }
.rp-sources .rp-src-head { font-size: 0.92rem; margin-bottom: 8px; }
.rp-legend { margin-top: 4px; font-size: 0.74rem; color: var(--body-text-color-subdued); }
.rp-legend mark { padding: 0 4px; }
.rp-src { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 8px 10px; margin-bottom: 8px;
  background: var(--background-fill-secondary); transition: border-color 0.15s; }
.rp-src.selected { border-color: var(--color-accent); background: var(--background-fill-primary);
  box-shadow: 0 1px 6px rgba(0,0,0,0.06); }
.rp-src.cited .rp-num { color: var(--color-accent); }
a.rp-src-title { font-weight: 700; text-decoration: none !important; color: var(--body-text-color) !important;
  display: block; line-height: 1.35; text-align: left !important; padding: 0 !important; margin: 0 !important; }
a.rp-src-title:hover { color: var(--color-accent) !important; }
.rp-num { font-family: var(--font-mono); font-size: 0.85em; margin-right: 2px; color: var(--body-text-color-subdued); }
.rp-src-meta { font-size: 0.76rem; color: var(--body-text-color-subdued); margin: 3px 0 4px; }
.rp-snippet { font-size: 0.82rem; color: var(--body-text-color-subdued); }
.rp-abstract { font-size: 0.9rem; line-height: 1.55; margin-top: 6px; }
.rp-src-head b, .rp-hits b { font-weight: 700; }
.rp-abstract mark, .rp-legend mark { background: #fef9c3; color: inherit; border-radius: 3px; }
.rp-abstract mark.rp-quoted, .rp-legend mark.rp-quoted { background: #fde047; }
.dark .rp-abstract mark, .dark .rp-legend mark { background: #713f12; }
.dark .rp-abstract mark.rp-quoted, .dark .rp-legend mark.rp-quoted { background: #a16207; }
.rp-empty { text-align: center; color: var(--body-text-color-subdued); padding: 36px 16px; font-size: 0.92rem; }
.rp-empty-icon { width: 44px; height: 44px; margin: 0 auto 8px; color: var(--primary-400); }
#rp-controls { align-items: center; gap: 6px 14px; flex-wrap: wrap; }
#rp-controls > .block { border: none !important; background: transparent !important; box-shadow: none !important;
  padding: 2px 0 !important; flex: 0 0 auto !important; width: auto !important; min-width: 0 !important; }
#rp-controls .label-text { white-space: nowrap; font-size: 0.9rem; }
#rp-controls > button { flex: 0 0 auto !important; }
#rp-new { margin-left: auto; }
.rp-sources { text-align: left; }
#rp-send { min-width: 90px !important; }
footer { opacity: 0.7; }
"""


def _theme() -> gr.themes.Base:
    # Bold from the full Bold file: the SemiBold woff2 gradio ships is a tiny glyph subset,
    # so weight 600 renders titles in a mix of fonts.
    font = (gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif", "system-ui", "sans-serif")
    return gr.themes.Default(
        primary_hue="indigo",
        secondary_hue="slate",
        neutral_hue="slate",
        radius_size="md",
        font=font,
    )


def _status_html(text: str, level: str) -> str:
    dot = {"ok": "", "warn": " rp-warn", "bad": " rp-bad"}[level]
    return f'<span class="rp-status" title="{inert(text)}"><span class="rp-dot{dot}"></span>{inert(text)}</span>'


def backend_status(settings: Settings, name: str | None, model: str | None) -> tuple[str, str]:
    """(line, level) describing what will answer, e.g. "Ollama at …, model llama3.2:3b"."""
    try:
        backend, why = get_backend(settings, name or None, (model or "").strip() or None)
    except RagPapersError as exc:
        return str(exc), "bad"
    if not backend.extractive:
        return why, "ok"
    if (name or settings.llm) == "extractive":
        return "Extractive answers: quotes from the abstracts, no LLM", "ok"
    head = why.split(" (", 1)[0].split(";", 1)[0]
    if ": " in head:  # "… has no model 'x': run `ollama pull x`" -> keep the reason only
        head = head.split(": ", 1)[0]
    return f"{head[:1].upper()}{head[1:]}: extractive answers", "warn"


def _example_questions(engine: Engine, limit: int = 3) -> list[str]:
    """A few questions this corpus can answer, from papers whose title names their method."""
    out: list[str] = []
    for i, paper in enumerate(engine.index.papers()):
        if i > 300 or len(out) >= limit:
            break
        m = re.match(r"^([A-Z][\w-]{1,15}):", paper.title)
        if m:
            out.append(f"What does {m.group(1)} claim?")
    return out


class ChatApp:
    """Handlers and layout; one instance per built app, shared by all sessions (holds no chat state)."""

    def __init__(self, settings: Settings, engine: Engine, llm: str | None = None, model: str | None = None) -> None:
        self.llm = llm or settings.llm
        self.model = (model or "").strip()
        # The operator's --model (a name, or a GGUF path on their machine) is the backend's default.
        if self.model and self.llm in ("auto", "ollama"):
            settings = settings.model_copy(update={"ollama_model": self.model})
        elif self.model and self.llm == "llamacpp":
            settings = settings.model_copy(update={"llamacpp_model": Path(self.model)})
        self.settings = settings
        self.engine = engine
        years = [y for y in engine.index.field_values("year") if y is not None]
        venues = [v for v in engine.index.field_values("venue") if v]
        self.years: list[int] = sorted({int(y) for y in years})
        self.venues: list[str] = sorted({str(v) for v in venues})
        self.n_papers = engine.index.count()
        self._claim_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def brand_html(n_papers: int) -> str:
        return (
            f'<div class="rp-brand"><div class="rp-logo">{BOOK_SVG}</div><div><h1>rag-papers</h1><div class="rp-sub">'
            f"Ask questions about {n_papers:,} research-paper abstracts. Every answer cites the papers it comes "
            "from.</div></div></div>"
        )

    def index_line(self, n_papers: int) -> str:
        s = self.settings
        return (
            f"<small>Index: {n_papers:,} papers · embedding model <code>{inert(s.embed_model)}</code> · "
            f"{s.retrieval} retrieval · rag-papers {__version__}</small>"
        )

    def index_info(self) -> tuple[str, str]:
        """Header and settings line with the index's current size (another process may have ingested)."""
        n = self.engine.index.count()
        self.n_papers = n
        return self.brand_html(n), self.index_line(n)

    def _extra_models(self, name: str) -> dict[str, str]:
        """A plugin backend's --model from the command line, allowed beside its default."""
        plugin = name == self.llm and name not in ("auto", "ollama", "llamacpp", "extractive")
        return {self.model: self.model} if plugin and self.model else {}

    def resolve(self, backend_name: str | None, model: str | None) -> tuple[str, str | None]:
        """(backend, model for get_backend) from a client's choice; RagPapersError unless both are allowed."""
        name = (backend_name or "").strip() or self.llm
        return name, resolve_model(self.settings, name, model, self._extra_models(name))

    def model_choices(self, backend_name: str | None, listed: bool = True) -> list[str]:
        """The names the model box offers for a backend, its default first (no paths: the server maps them)."""
        name = (backend_name or "").strip() or self.llm
        try:
            allowed = allowed_models(self.settings, name, listed=listed)
        except RagPapersError:
            return []
        return list({**allowed, **self._extra_models(name)})

    def _model_update(self, backend_name: str | None, current: str | None = None, listed: bool = True) -> Any:
        choices = self.model_choices(backend_name, listed)
        value = current if current in choices else (choices[0] if choices else None)
        return gr.update(choices=choices, value=value, interactive=bool(choices))

    def new_state(self) -> UIState:
        return UIState(ChatSession(self.engine))

    def filters(self, year_from: Any, year_to: Any, venue: Any, keyword: Any) -> Filters:
        def year(v: Any) -> int | None:
            return None if v in (None, "", ANY) else int(v)

        return Filters(
            year(year_from),
            year(year_to),
            None if venue in (None, "", ANY) else str(venue),
            (str(keyword).strip() or None) if keyword else None,
        )

    def _items_from_result(self, result: SearchResult, limit: int) -> list[Item]:
        return [
            self._item(n, h.id, h.title, h.score, h.passage, result.papers.get(h.id), h.year, h.venue)
            for n, h in enumerate(result.results[:limit], 1)
        ]

    @staticmethod
    def _item(
        n: int,
        pid: str,
        title: str,
        score: float,
        passage: str,
        paper: Paper | None,
        year: int | None,
        venue: str | None,
        cited: bool = False,
    ) -> Item:
        return Item(n, pid, title, score, passage, paper.abstract if paper else "", year, venue, cited)

    def _export(self, state: UIState) -> dict[str, Any]:
        """Write the conversation to a fresh Markdown file for the download button."""
        if not any(ex.done for ex in state.exchanges):
            return gr.update(value=None, interactive=False)
        if state.export_dir is None or not state.export_dir.is_dir():
            state.export_dir = Path(tempfile.mkdtemp(prefix="rag-papers-export-"))
        path = state.export_dir / f"rag-papers-chat-{datetime.now():%Y%m%d-%H%M%S}.md"
        path.write_text(export_markdown(state), encoding="utf-8")
        return gr.update(value=str(path), interactive=True)

    def _outputs(self, state: UIState, *, panel: bool = True, final: bool = False) -> tuple[Any, ...]:
        """Values for (chatbot, panel, picker, state, export, stop), the outputs of every chat step."""
        return (
            chat_messages(state),
            sources_panel(state) if panel else gr.skip(),
            radio_update(state) if panel else gr.skip(),
            state,
            self._export(state) if final else gr.skip(),
            gr.update(visible=False) if final else gr.skip(),
        )

    @staticmethod
    def _skip(n: int = 6) -> tuple[Any, ...]:
        return tuple(gr.skip() for _ in range(n))

    def _claim(self, state: UIState | None, pending: int | None, mode: str) -> Exchange | None:
        """The pending exchange if it is of ``mode`` and no other step has taken it yet."""
        if state is None or pending is None or pending >= len(state.exchanges):
            return None
        ex = state.exchanges[pending]
        with self._claim_lock:
            if ex.mode != mode or ex.done or ex.claimed:
                return None
            ex.claimed = True
        return ex

    @staticmethod
    def _forget_failed_turn(state: UIState) -> None:
        """A turn that produced no answer must not steer the next follow-up."""
        turns = state.session.turns
        if turns and turns[-1].answer is None:
            turns.pop()

    # ---------------------------------------------------------------- handlers
    def accept(self, question: str, state: UIState | None, retrieval_only: bool) -> tuple[Any, ...]:
        """Show the question at once (not queued), so the user sees it before any work starts."""
        state = state or self.new_state()
        question = (question or "").strip()
        if not question:
            return ("", *self._skip(5), state, None)
        if state.busy():
            gr.Warning("Still answering the previous question: wait for it or press Stop.")
            return (question, *self._skip(5), state, gr.skip())
        state.exchanges.append(Exchange(question, "search" if retrieval_only else "answer"))
        return (
            "",
            chat_messages(state),
            gr.skip(),
            gr.skip(),
            gr.skip(),
            gr.update(visible=True),
            state,
            len(state.exchanges) - 1,
        )

    def run_search(
        self,
        pending: int | None,
        state: UIState | None,
        top_k: float,
        year_from: Any,
        year_to: Any,
        venue: Any,
        keyword: Any,
    ) -> tuple[Any, ...]:
        """Retrieval-only step: list matching papers without generating (its own concurrency group)."""
        ex = self._claim(state, pending, "search")
        if state is None or pending is None or ex is None:
            return self._skip()
        try:
            ex.standalone = state.session.condense(ex.question, ExtractiveBackend())  # a search waits for no LLM
            result = self.engine.search(ex.standalone, int(top_k), self.filters(year_from, year_to, venue, keyword))
            ex.items = self._items_from_result(result, int(top_k))
            ex.relevant = result.relevant
            if result.filtered_out:  # say that the filters, not the query, left nothing
                ex.text = f"The filters excluded every paper: {result.filter_reason}. Widen or clear them."
            ex.footer = f"retrieval only · {len(ex.items)} papers · retrieval {_ms(result.timings.get('total_ms'))}"
            state.view = (pending, 1) if ex.items else None
        except Exception as exc:  # noqa: BLE001 - shown in the chat, the app keeps serving
            ex.error = self._error_text(exc)
        ex.done = True
        return self._outputs(state, final=True)

    def run_answer(
        self,
        pending: int | None,
        state: UIState | None,
        backend_name: str,
        model: str,
        top_k: float,
        year_from: Any,
        year_to: Any,
        venue: Any,
        keyword: Any,
    ) -> Iterator[tuple[Any, ...]]:
        """Answer step: condense, retrieve, stream the cited answer token by token."""
        ex = self._claim(state, pending, "answer")
        if state is None or pending is None or ex is None:
            yield self._skip()
            return
        try:
            backend_name, model_value = self.resolve(backend_name, model)
        except RagPapersError as exc:  # a name the server does not allow: shown, nothing looked up
            ex.error, ex.done = str(exc), True
            yield self._outputs(state, final=True)
            return
        try:
            yield from self._stream_answer(
                state,
                pending,
                ex,
                backend_name,
                model_value or "",
                int(top_k),
                self.filters(year_from, year_to, venue, keyword),
            )
        finally:
            if not ex.done:  # cancelled (Stop, closed tab): leave a consistent history
                ex.done = True
                ex.stopped = True
                self._forget_failed_turn(state)

    def _stream_answer(
        self,
        state: UIState,
        index: int,
        ex: Exchange,
        backend_name: str,
        model: str,
        top_k: int,
        filters: Filters,
    ) -> Iterator[tuple[Any, ...]]:
        t0 = time.perf_counter()
        try:
            backend, _note = self.engine.backend(backend_name or None, (model or "").strip() or None)
            standalone, stream = state.session.ask(ex.question, backend, "", top_k, filters)
            ex.standalone = standalone
            # Provisional sources (the prompt's papers, in order) so citations work while streaming:
            # the search returned top_k papers, of which the prompt takes context_papers at most.
            limit = self.settings.context_papers
            ex.items = self._items_from_result(stream.result, limit) if stream.result.relevant else []
            state.view = (index, 1) if ex.items else state.view
            ex.stream = stream
            ex.phase = stream.phase
            yield self._outputs(state)
            last = 0.0
            for chunk in stream:
                ex.text += chunk
                now = time.perf_counter()
                phase, ex.phase = ex.phase, stream.phase
                # Text as it streams; while none comes (keepalives), a change of phase or the clock.
                if now - last >= (STREAM_INTERVAL if chunk else 1.0) or phase != ex.phase:
                    last = now
                    yield self._outputs(state, panel=False)
            answer = stream.answer
            if answer is None and stream.cancelled:  # Stop: the text so far stays, marked, and no turn is kept
                ex.stopped = True
                ex.footer = f"stopped after {_ms((time.perf_counter() - t0) * 1000)}"
            else:
                assert answer is not None
                self._finish(state, index, ex, answer, stream.result)
        except Exception as exc:  # noqa: BLE001 - LLMError, RagPapersError or a bug: shown, never a traceback
            if not isinstance(exc, RagPapersError):
                log.exception("answering %r failed", ex.question)
            ex.error = self._error_text(exc)
            ex.footer = f"failed after {_ms((time.perf_counter() - t0) * 1000)}"
            self._forget_failed_turn(state)
        ex.done = True
        yield self._outputs(state, final=True)

    def _finish(self, state: UIState, index: int, ex: Exchange, answer: Answer, result: SearchResult) -> None:
        ex.answer = answer
        ex.text = answer.answer
        ex.refused = answer.refused
        cited = set(answer.citations)
        if answer.refused:
            ex.items = self._items_from_result(result, 3)
        else:
            ex.items = [
                self._item(
                    s.n, s.id, s.title, s.score, s.passage, result.papers.get(s.id), s.year, s.venue, s.id in cited
                )
                for s in answer.sources
            ]
        first_cited = next((it.n for it in ex.items if it.cited), 1)
        state.view = (index, first_cited) if ex.items else (index, 0)
        t = answer.timings
        if answer.refused:
            ex.footer = f"no LLM called · retrieval {_ms(t.get('retrieval_ms'))}"
        else:
            who = answer.backend + (f" {answer.model}" if answer.model else "")
            ex.footer = f"{who} · retrieval {_ms(t.get('retrieval_ms'))} · generation {_ms(t.get('generation_ms'))}"
            if answer.backend != "extractive" and "first_token_ms" in t:
                ex.footer += f" (first token {_ms(t['first_token_ms'])})"
        if not answer.refused and answer.notice:
            ex.notice = answer.notice

    @staticmethod
    def _error_text(exc: BaseException) -> str:
        if isinstance(exc, LLMError):
            return f"The LLM failed: {exc}"
        if isinstance(exc, RagPapersError):
            return str(exc)
        return f"Unexpected error ({type(exc).__name__}: {str(exc)[:200]}). The app is still running; try again."

    def stop(self, state: UIState | None) -> tuple[Any, ...]:
        """Mark a cancelled answer as stopped (the event itself is cancelled by gradio)."""
        if state is None:
            return self._skip()
        if state.exchanges and not state.exchanges[-1].done:
            ex = state.exchanges[-1]
            if ex.stream is not None:
                ex.stream.cancel()  # at once: gradio closes the event's generator only after its current step
            ex.done = True
            ex.stopped = True
            self._forget_failed_turn(state)
        return self._outputs(state, final=True)

    def new_chat(self, state: UIState | None) -> tuple[Any, ...]:
        """Forget the conversation (history, sources, export) but keep the controls."""
        state = state or self.new_state()
        state.session.reset()
        state.exchanges.clear()
        state.view = None
        return (
            [],
            EMPTY_PANEL,
            radio_update(state),
            state,
            gr.update(value=None, interactive=False),
            gr.update(visible=False),
            "",
        )

    def select_source(self, n: Any, state: UIState | None) -> tuple[Any, ...]:
        """The "Show source" picker changed."""
        if state is None or state.view is None or n in (None, ""):
            return gr.skip(), gr.skip()
        state.view = (state.view[0], int(n))
        return sources_panel(state), state

    def on_cite(self, state: UIState | None, evt: gr.EventData) -> tuple[Any, ...]:
        """A citation link was clicked (anywhere on the page): show that exchange's paper."""
        data = evt._data if isinstance(evt._data, dict) else {}
        key = str(data.get("key", ""))
        m = re.fullmatch(r"(\d+)-(\d+)", key)
        if state is None or not m:
            return gr.skip(), gr.skip(), gr.skip()
        idx, n = int(m.group(1)), int(m.group(2))
        if idx >= len(state.exchanges) or not any(it.n == n for it in state.exchanges[idx].items):
            return gr.skip(), gr.skip(), gr.skip()
        state.view = (idx, n)
        return sources_panel(state), radio_update(state), state

    def toggle_rewrite(self, show: bool, state: UIState | None) -> tuple[Any, ...]:
        state = state or self.new_state()
        state.show_rewrite = bool(show)
        return chat_messages(state), state

    def status(self, backend_name: str, model: str) -> str:
        """The status pill for a backend and model choice (a choice the server refuses shows as bad)."""
        try:
            name, value = self.resolve(backend_name, model)
        except RagPapersError as exc:
            return _status_html(str(exc), "bad")
        return _status_html(*backend_status(self.settings, name, value))

    def on_backend(self, backend_name: str) -> tuple[Any, str]:
        """The backend changed: offer its models, its default selected, and check it."""
        return self.refresh_models(backend_name, "")

    def refresh_models(self, backend_name: str, model: str) -> tuple[Any, str]:
        """Page load and "Check LLM": the backend's models now (Ollama may have pulled more), and its status."""
        update = self._model_update(backend_name, model)
        return update, self.status(backend_name, update.get("value") or "")

    # --------------------------------------------------------------------- API
    def api_ask(
        self,
        question: str,
        backend_name: str,
        model: str,
        top_k: float,
        state: UIState | None,
    ) -> tuple[dict[str, Any], UIState]:
        """``/ask``: one turn of this client's conversation; returns the final answer and its sources."""
        state = state or self.new_state()
        question = (question or "").strip()
        if not question:
            return {"error": "empty question"}, state
        try:
            name, model_value = self.resolve(backend_name, model)  # only allowed names; never a path
            backend, _ = self.engine.backend(name, model_value)
            standalone, stream = state.session.ask(question, backend, "", int(top_k or self.settings.top_k))
            for _ in stream:
                pass
            answer = stream.answer
            assert answer is not None
        except Exception as exc:  # noqa: BLE001 - an API caller gets the error as data
            self._forget_failed_turn(state)
            if not isinstance(exc, RagPapersError):
                log.exception("/ask %r failed", question)
            return {"question": question, "error": self._error_text(exc)}, state
        out = answer.to_dict()
        out["question"] = question
        out["standalone"] = standalone
        return out, state

    def api_search(
        self,
        query: str,
        top_k: int = 5,
        year_min: int | None = None,
        year_max: int | None = None,
        venue: str = "",
        keyword: str = "",
    ) -> dict[str, Any]:
        """``/search``: rank papers for a query without generating anything."""
        query = (query or "").strip()
        if not query:
            return {"error": "empty query"}
        try:
            result = self.engine.search(
                query, int(top_k or self.settings.top_k), Filters(year_min, year_max, venue or None, keyword or None)
            )
        except Exception as exc:  # noqa: BLE001
            return {"query": query, "error": self._error_text(exc)}
        return result.to_dict()

    # ------------------------------------------------------------------ layout
    def build(self) -> gr.Blocks:
        s = self.settings
        with gr.Blocks(title="rag-papers", fill_width=False, analytics_enabled=False) as demo:
            state = gr.State(None)
            pending = gr.State(None)
            with gr.Row(elem_id="rp-header"):
                brand = gr.HTML(self.brand_html(self.n_papers), padding=False, scale=3, elem_id="rp-brand")
                status = gr.HTML(
                    _status_html("checking the LLM…", "warn"), elem_id="rp-status-wrap", padding=False, scale=2
                )
            with gr.Row(equal_height=False):
                with gr.Column(scale=7, min_width=420):
                    examples: list[Any] = [{"text": q} for q in _example_questions(self.engine)]
                    chatbot = gr.Chatbot(
                        label="Conversation",
                        show_label=False,
                        height=600,
                        elem_id="rp-chat",
                        placeholder="**Ask about the indexed papers.**<br>Answers stream in with citations like [1]; "
                        "click one to read the paper's abstract.",
                        examples=examples or None,
                        buttons=["copy"],
                        feedback_options=None,
                        layout="bubble",
                    )
                    with gr.Row(elem_id="rp-ask-row"):
                        msg = gr.Textbox(
                            show_label=False,
                            placeholder="Ask a question, e.g. “What does ABBA claim?” — or a follow-up",
                            scale=8,
                            lines=1,
                            max_lines=4,
                            autofocus=True,
                            elem_id="rp-input",
                            container=False,
                        )
                        send = gr.Button("Ask", variant="primary", scale=1, elem_id="rp-send", min_width=90)
                        stop = gr.Button(
                            "Stop", variant="stop", scale=1, visible=False, elem_id="rp-stop", min_width=80
                        )
                    with gr.Row(elem_id="rp-controls"):
                        retrieval_only = gr.Checkbox(
                            label="Retrieval only (list papers, no answer)",
                            value=False,
                            elem_id="rp-retrieval-only",
                            container=False,
                            scale=3,
                        )
                        show_rewrite = gr.Checkbox(
                            label="Show rewritten question",
                            value=False,
                            elem_id="rp-show-rewrite",
                            container=False,
                            scale=3,
                        )
                        new = gr.Button("New chat", size="md", elem_id="rp-new", min_width=100, scale=1)
                        export = gr.DownloadButton(
                            "Export .md",
                            value=None,
                            size="md",
                            interactive=False,
                            elem_id="rp-export",
                            min_width=110,
                            scale=1,
                        )
                with gr.Column(scale=5, min_width=340, elem_id="rp-sources-col"):
                    with gr.Group(elem_id="rp-sources-card"):
                        picker = gr.Radio(
                            choices=[],
                            label="Show source",
                            visible=False,
                            elem_id="rp-source-pick",
                            container=True,
                        )
                        panel = gr.HTML(
                            EMPTY_PANEL,
                            elem_id="rp-panel",
                            js_on_load=JS_ON_LOAD,
                            max_height=560,
                            padding=False,
                        )
                    with gr.Accordion("Answering and retrieval settings", open=False, elem_id="rp-settings"):
                        with gr.Row():
                            first = self.llm if self.llm in backend_names() else "auto"
                            backend = gr.Dropdown(
                                backend_names(),
                                value=first,
                                label="LLM backend",
                                scale=2,
                                elem_id="rp-backend",
                            )
                            # A choice among the names the server allows (its default first), never a path;
                            # the page load adds the models the Ollama server lists.
                            initial = self.model_choices(first, listed=False)
                            model = gr.Dropdown(
                                initial,
                                value=initial[0] if initial else None,
                                label="Model",
                                scale=3,
                                elem_id="rp-model",
                                allow_custom_value=False,
                                interactive=bool(initial),
                            )
                        refresh = gr.Button("↻ Check LLM", size="sm")
                        top_k = gr.Slider(
                            1,
                            20,
                            value=s.top_k,
                            step=1,
                            label="Papers retrieved (top k)",
                            info=f"Search results; an answer reads at most {s.context_papers} of them (context_papers).",
                            elem_id="rp-topk",
                        )
                        year_choices: list[Any] = [ANY, *self.years]
                        with gr.Row(visible=bool(self.years)):
                            year_from = gr.Dropdown(year_choices, value=ANY, label="From year", elem_id="rp-year-from")
                            year_to = gr.Dropdown(year_choices, value=ANY, label="To year", elem_id="rp-year-to")
                        venue = gr.Dropdown(
                            [ANY, *self.venues], value=ANY, label="Venue", visible=bool(self.venues), elem_id="rp-venue"
                        )
                        keyword = gr.Textbox(
                            label="Keyword filter",
                            placeholder="only papers containing these words",
                            elem_id="rp-keyword",
                        )
                        index_line = gr.Markdown(self.index_line(self.n_papers), elem_id="rp-index-line")

            # Hidden components backing the /ask API endpoint: backend and model are checked by
            # ``resolve`` (an error as data), not by a Dropdown's choices (an exception).
            api_question = gr.Textbox(visible=False, label="question")
            api_backend = gr.Textbox(first, visible=False, label="LLM backend")
            api_model = gr.Textbox("", visible=False, label="Model")
            api_out = gr.JSON(visible=False, label="answer")
            api_go = gr.Button(visible=False)

            # ------------------------------------------------------------ events
            chat_outputs = [chatbot, panel, picker, state, export, stop]
            filt = [year_from, year_to, venue, keyword]

            accept_args: dict[str, Any] = {
                "fn": self.accept,
                "inputs": [msg, state, retrieval_only],
                "outputs": [msg, chatbot, panel, picker, export, stop, state, pending],
                "queue": False,
                "api_visibility": "private",
            }

            def chain(accepted: Any) -> Any:
                """Search step, then answer step; each skips itself unless the question is its kind."""
                searched = accepted.then(
                    self.run_search,
                    [pending, state, top_k, *filt],
                    chat_outputs,
                    concurrency_id="search",
                    concurrency_limit=16,
                    api_visibility="private",
                    show_progress="hidden",
                )
                return searched.then(
                    self.run_answer,
                    [pending, state, backend, model, top_k, *filt],
                    chat_outputs,
                    concurrency_id="generate",
                    concurrency_limit=4,
                    api_visibility="private",
                    show_progress="hidden",
                )

            def use_example(evt: gr.SelectData) -> str:
                value = evt.value
                return str(value.get("text", "")) if isinstance(value, dict) else str(value)

            answer_typed = chain(gr.on([msg.submit, send.click], **accept_args))
            answer_example = chain(
                chatbot.example_select(use_example, None, msg, queue=False, api_visibility="private").then(
                    **accept_args
                )
            )
            stop.click(
                self.stop,
                [state],
                chat_outputs,
                cancels=[answer_typed, answer_example],
                queue=False,
                api_visibility="private",
            )
            new.click(
                self.new_chat,
                [state],
                [chatbot, panel, picker, state, export, stop, msg],
                api_name="new_chat",
                queue=False,
                cancels=[answer_typed, answer_example],
            )
            picker.input(self.select_source, [picker, state], [panel, state], queue=False, api_visibility="private")
            panel.cite(self.on_cite, [state], [panel, picker, state], queue=False, api_visibility="private")
            show_rewrite.change(
                self.toggle_rewrite, [show_rewrite, state], [chatbot, state], queue=False, api_visibility="private"
            )

            status_args: dict[str, Any] = {
                "concurrency_id": "status",
                "concurrency_limit": 8,
                "api_visibility": "private",
                "show_progress": "hidden",
            }
            demo.load(self.refresh_models, [backend, model], [model, status], **status_args)
            # The index may have grown since the app started (an `ingest` beside it): say what it holds now.
            demo.load(self.index_info, None, [brand, index_line], queue=False, api_visibility="private")
            backend.change(self.on_backend, [backend], [model, status], **status_args)
            model.input(self.status, [backend, model], status, **status_args)
            refresh.click(self.refresh_models, [backend, model], [model, status], **status_args)

            api_go.click(
                self.api_ask,
                [api_question, api_backend, api_model, top_k, state],
                [api_out, state],
                api_name="ask",
                concurrency_id="generate",
                concurrency_limit=4,
            )
            gr.api(self.api_search, api_name="search", concurrency_id="search", concurrency_limit=16)  # type: ignore[attr-defined,unused-ignore]
        demo.queue(default_concurrency_limit=8)
        blocks: gr.Blocks = demo
        return blocks


# ------------------------------------------------------------------ entry points
def build_app(
    settings: Settings, engine: Engine | None = None, llm: str | None = None, model: str | None = None
) -> gr.Blocks:
    """The Blocks app (queue configured, not launched); ``engine`` defaults to one over ``settings``."""
    return ChatApp(settings, engine or Engine(settings), llm, model).build()


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    """``"user:password"`` → ``("user", "password")``; a value without both parts is an error."""
    if not auth:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise RagPapersError("bad --auth: expected user:password")
    return user, password


def resolve_auth(settings: Settings) -> tuple[str, str] | None:
    """The UI login, from ``auth`` or ``auth_file`` (a file keeps the password out of ``ps`` and shell history)."""
    if settings.auth and settings.auth_file:
        raise RagPapersError("both auth and auth_file are set: give the login one way, not both")
    if settings.auth_file is None:
        return parse_auth(settings.auth)
    path = Path(settings.auth_file)
    try:
        text = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise RagPapersError(f"cannot read auth file {path}: {why}") from None
    user, sep, password = text.partition(":")
    if not sep or not user or not password or "\n" in text:
        raise RagPapersError(f"bad auth file {path}: expected one line user:password")
    return user, password


def is_loopback(host: str) -> bool:
    """Only this machine can reach ``host`` (127.0.0.0/8, ::1, localhost)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings, insecure_no_auth: bool = False) -> None:
    """Refuse to serve an address other machines can reach without a login, unless told so in so many words."""
    if is_loopback(settings.host) or insecure_no_auth or resolve_auth(settings) is not None:
        return
    raise RagPapersError(
        f"refusing to serve on {settings.host or '(all interfaces)'} without a login: anyone who can reach it could "
        "use the whole API; set one with --auth-file FILE (user:password) or RAG_PAPERS_AUTH, "
        "or pass --insecure-no-auth to serve it open anyway"
    )


def serve(
    app: gr.Blocks, settings: Settings, *, block: bool = True, quiet: bool = False, insecure_no_auth: bool = False
) -> str:
    """Launch ``app`` with the product's look and server options; returns the local URL.

    Tests call this with ``block=False`` so they exercise the same options as users.
    """
    check_exposure(settings, insecure_no_auth)
    auth = resolve_auth(settings)
    try:
        _, url, _ = app.launch(
            server_name=settings.host,
            server_port=settings.port,
            auth=auth,
            auth_message="rag-papers: sign in" if auth else None,
            prevent_thread_lock=not block,
            share=False,
            quiet=quiet,
            show_error=False,
            footer_links=["api", "settings"],
            run_history=False,
            enable_monitoring=False,
            mcp_server=False,
            ssr_mode=False,
            theme=_theme(),
            css=CSS,
        )
    except OSError as exc:  # the port is taken, or the host is not an address of this machine
        raise RagPapersError(
            f"cannot serve on {settings.host}:{settings.port}: {str(exc).split('. ')[0]} (choose another --port)"
        ) from None
    return str(url)


def launch(
    settings: Settings, llm: str | None = None, model: str | None = None, *, insecure_no_auth: bool = False
) -> None:
    """``rag-papers chat`` / ``python app.py``: ingest the seeds if the index is empty, then serve.

    A public address without a login is refused before anything is loaded (``check_exposure``).
    """
    from rag_papers.index import Index

    check_exposure(settings, insecure_no_auth)  # also reads and checks the login: fail before loading anything
    auth = resolve_auth(settings)
    if llm is not None and llm not in backend_names():
        raise RagPapersError(f"unknown LLM backend {llm!r}; choose from {', '.join(backend_names())}")
    log_path = log_to_file(settings)
    index = Index(settings)
    if index.count() == 0:
        print(f"The index at {settings.home} is empty: ingesting {settings.seeds_dir} first…", flush=True)
        report = index.ingest([settings.seeds_dir], show_progress=True)
        print(f"{report.total} papers indexed in {report.seconds:.1f} s", flush=True)
    engine = Engine(settings, index)
    print(f"Loading the embedding model ({settings.embed_model})…", flush=True)
    engine.search("warm up", 1)  # load the model now, not on the first question
    line, _ = backend_status(settings, llm, model)
    print(f"{engine.index.count()} papers · {line}", flush=True)
    app = build_app(settings, engine, llm, model)
    where = f"http://{settings.host}:{settings.port}"
    if auth is None and not is_loopback(settings.host):
        print(
            f"warning: serving {settings.host} without a login (--insecure-no-auth): anyone who can reach it "
            "can use the whole API",
            flush=True,
        )
    print(f"rag-papers chat on {where}{' (sign-in required)' if auth else ''}; Ctrl+C to stop", flush=True)
    print(f"log: {log_path}", flush=True)
    serve(app, settings, block=True, quiet=True, insecure_no_auth=insecure_no_auth)


def log_to_file(settings: Settings) -> Path:
    """Errors of a long-running server go to ``HOME/logs/chat.log`` as well as stderr, fatal ones included.

    ``faulthandler`` writes the Python stack of every thread to the same file if the process
    dies on a signal (a segfault in a native library), so a crash that takes the server down
    leaves a trace where the user will look, not only in a terminal that may be gone.
    """
    import faulthandler
    from logging.handlers import RotatingFileHandler

    folder = settings.home / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "chat.log"
    handler = RotatingFileHandler(path, maxBytes=5_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
    global _FAULT_LOG
    _FAULT_LOG = path.open("a", encoding="utf-8")  # kept open: faulthandler writes to it at crash time
    faulthandler.enable(file=_FAULT_LOG, all_threads=True)
    _FAULT_LOG.write(f"{datetime.now():%Y-%m-%d %H:%M:%S} rag-papers {__version__} chat started (pid {os.getpid()})\n")
    _FAULT_LOG.flush()
    return path


_FAULT_LOG: Any = None
