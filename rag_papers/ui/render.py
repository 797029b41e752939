"""UI state to the HTML the chat and the sources panel show: pure functions over ``templates/``.

Why Jinja2: autoescaping by default. Before, the HTML was assembled in f-strings and every
piece of corpus text had to be remembered to be escaped; here the markup lives in templates and
every ``{{ }}`` is escaped unless it is HTML a template made. It goes further than HTML escaping:
the environment's ``finalize`` passes every value through ``inert`` (below), since the Chatbot
renders messages as Markdown, where ``[x](url)`` or a bare URL would come alive in text that
HTML escaping leaves alone. A template that forgets a filter therefore still shows text as text.
Numbers are formatted by the ``fixed`` and ``thousands`` filters.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jinja2
import markupsafe

from rag_papers import __version__
from rag_papers.answer import Answer
from rag_papers.corpus import Paper, clip, plain_text, sentences
from rag_papers.retrieve import Hit
from rag_papers.ui.refs import PaperInfo, first_sentence, paper_info, reference_line
from rag_papers.ui.state import Exchange, UIState

_CITE_RE = re.compile(r"\[(\d+)\]")
_BULLET_RE = re.compile(r"[-*•]\s+(.*)")
# What an answer waits for, in words (``AnswerStream.phase``): never "searching" while the model works.
PHASE_WORDS = {
    "searching": "Searching the abstracts…",
    "rewriting": "The model is rewriting your follow-up as a question of its own, then the abstracts are searched…",
    "waiting": "Waiting for the model: it is writing another answer…",
    "loading": "Loading the model…",
    "reading": "The model is reading the abstracts…",
    "thinking": "The model is thinking before it answers…",
    "judging": "The model is judging which of the abstracts address the question…",
    "writing": "Writing the answer…",
}

# ------------------------------------------------------------------- escaping
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


def _finalize(value: Any) -> markupsafe.Markup:
    """Every ``{{ }}`` of a template: HTML a template built (a macro's output) as it is, anything else inert.

    ``inert``'s output holds no character that HTML or Markdown could act on, so it is marked safe:
    autoescape must not escape its entities a second time.
    """
    if isinstance(value, markupsafe.Markup):
        return value
    return markupsafe.Markup(inert(value))


def _fixed(value: float, digits: int = 3) -> markupsafe.Markup:
    """A score as the panel prints it (``0.512``): digits and a point, nothing to escape."""
    return markupsafe.Markup(f"{float(value):.{digits}f}")


def _thousands(value: int) -> markupsafe.Markup:
    return markupsafe.Markup(f"{int(value):,}")


@cache
def _env() -> jinja2.Environment:
    # Jinja2 because it escapes by default (autoescape): a value a template prints is text unless it is
    # HTML a template made. finalize tightens that from HTML-escaped to inert, for the Chatbot's Markdown.
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rag_papers.ui", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        auto_reload=False,
    )
    env.filters.update(fixed=_fixed, thousands=_thousands, clip=clip, plain=plain_text)
    env.globals["version"] = markupsafe.escape(__version__)
    return env


@cache
def static_text(name: str) -> str:
    """A file of ``static/`` (the page's CSS, the panel's JavaScript), read from the installed package."""
    return (resources.files("rag_papers.ui") / "static" / name).read_text(encoding="utf-8")


def _macro(template: str, name: str, *args: Any) -> str:
    """A macro of a template, rendered (macros return the page's HTML, already escaped)."""
    return str(getattr(_env().get_template(template).module, name)(*args))


# --------------------------------------------------------------------- answers
@dataclass(frozen=True)
class Segment:
    """A run of an answer line: ``text``, a ``cite`` link to source ``n`` (``text``: its title), the
    ``badge`` of a refusal or the streaming ``caret``."""

    kind: str
    text: str = ""
    n: int = 0


Line = list[Segment]


def cite_segments(text: str, items: list[Hit]) -> Line:
    """``text`` split into text and citations; an ``[n]`` with no source n stays text."""
    titles = {it.n: it.title for it in items}
    out: Line = []
    pos = 0
    for m in _CITE_RE.finditer(text):
        n = int(m.group(1))
        if n in titles:
            out += [Segment("text", text[pos : m.start()]), Segment("cite", titles[n], n)]
            pos = m.end()
    out.append(Segment("text", text[pos:]))
    return [s for s in out if s.kind != "text" or s.text]


def answer_blocks(
    text: str, items: list[Hit], refused: bool = False, streaming: bool = False
) -> list[tuple[str, list[Line]]]:
    """An answer's text as blocks: ("p", lines) for paragraphs, ("ul", lines) for "- " lines.

    A refusal's badge leads the first paragraph; while streaming, a caret ends the last line.
    """
    blocks: list[tuple[str, list[Line]]] = []
    for line in text.split("\n"):
        s = line.strip()
        bullet = _BULLET_RE.fullmatch(s)
        kind = "ul" if bullet else "p"
        if not s:
            blocks.append(("", []))
            continue
        body = cite_segments(bullet.group(1) if bullet else s, items)
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(body)
        else:
            blocks.append((kind, [body]))
    blocks = [b for b in blocks if b[0]] or [("p", [[]])]
    if refused:
        if blocks[0][0] == "p":
            blocks[0][1][0][:0] = [Segment("badge"), Segment("text", " ")]
        else:
            blocks.insert(0, ("p", [[Segment("badge")]]))
    if streaming:
        blocks[-1][1][-1] += [Segment("text", " "), Segment("caret")]
    return blocks


def answer_html(text: str, index: int, items: list[Hit], refused: bool = False, streaming: bool = False) -> str:
    """An answer as our own HTML: paragraphs, lists, citations linked to exchange ``index``'s sources.

    The text is inert and no raw newline is left, so the Chatbot's Markdown pass sees a single
    HTML block and can add nothing.
    """
    return _macro("chat.html", "answer", answer_blocks(text, items, refused, streaming), index)


# ------------------------------------------------------------------------ chat
# The answer stage's note for an answer that cites nothing (``answer.AnswerStream``): said in the warning above a
# doubtful answer instead, so it is not said twice.
CITES_NOTHING = "the answer cites no source; treat it with care"


def doubt(answer: Answer | None) -> str | None:
    """The warning that goes above an answer most of whose claims the cited abstracts do not support, or None.

    Why above, with the text folded under it: a reader trusts what they read first, and an LLM's invented prose
    read first misled (issue 45: "⚠ 5 of 5 claims not supported" came only after it). Most: more than half.
    """
    if answer is None or answer.refused or not answer.claims:
        return None
    bad, n = len(answer.unsupported), len(answer.claims)
    if 2 * bad <= n:
        return None
    cites = "" if answer.citations else "; the answer cites no source"
    return (
        f"⚠ {bad} of {n} claim{'s' if n != 1 else ''} not supported by the abstracts cited{cites}: treat it with care"
    )


def _notice_left(notice: str, warned: bool) -> str:
    """An answer's notice, less what the warning above it already says."""
    if not warned:
        return notice
    return "; ".join(p for p in notice.replace(CITES_NOTHING, "").split("; ") if p.strip())


def _filters_first(text: str) -> str:
    """A refusal under filters with the answer stage's filter line first: it names why nothing is answered, and a
    line before it (what the question names that no abstract has) would bury it."""
    at = text.find("The filters (")
    if at <= 0:
        return text
    return f"{text[at:].strip()}\n\n{text[:at].strip()}"


def _names_filters(ex: Exchange) -> bool:
    """Whether the exchange's own text already says the filters narrowed it (the answer stage's refusal, or
    ``run_search``'s line), so the page's note would say it twice."""
    return "The filters" in ex.text


def render_exchange(index: int, ex: Exchange, show_rewrite: bool) -> str:
    """The assistant message (HTML blocks separated by blank lines, for the Chatbot's Markdown) for one exchange."""
    parts: list[str] = []
    if show_rewrite and ex.standalone and ex.standalone != ex.question:
        parts.append(_macro("chat.html", "searched", ex.standalone))
    warning = doubt(ex.answer) if ex.done and not ex.error and ex.mode == "answer" else None
    if warning:  # first of all: most claims fail, so the text below is not to be read as the abstracts'
        parts.append(_macro("chat.html", "doubt", warning))
    if ex.reasoning:  # a thinking model's reasoning: folded, apart from the answer, never part of it
        parts.append(_macro("chat.html", "reasoning", ex.reasoning, ex.thinking_s, ex.phase == "thinking"))
    if ex.mode == "search" and ex.done and not ex.error:
        if not ex.items:  # ex.text: why, when the filters excluded every paper (set by run_search)
            parts.append(_macro("chat.html", "no_match", ex.text))
        else:
            parts.append(_macro("chat.html", "hits_head", len(ex.items), ex.relevant))
            parts.append(_macro("chat.html", "hits", index, ex.items))
    elif ex.text:
        text = _filters_first(ex.text) if ex.refused and ex.filters else ex.text
        caveat = ex.answer.caveat if ex.answer is not None else None
        if caveat:  # the no-LLM answer's first line says it; the note above shows that line instead
            first, _, rest = text.partition("\n")
            parts.append(_macro("chat.html", "caveat", first if first.startswith(caveat) else caveat))
            text = rest if first.startswith(caveat) else text
        shown = answer_html(text, index, ex.items, ex.refused, not ex.done)
        parts.append(_macro("chat.html", "doubtful", markupsafe.Markup(shown)) if warning else shown)
        if ex.done and ex.answer is not None and ex.answer.claims and not ex.refused:
            numbers = {it.id: it.n for it in ex.items}
            parts.append(_macro("chat.html", "claims", index, ex.answer.claims, numbers, bool(warning)))
    elif not ex.done:
        if ex.phase == "rewriting":
            what = PHASE_WORDS["rewriting"]
        elif ex.mode == "search" or ex.phase == "searching" or not ex.items:
            what = PHASE_WORDS["searching"]
        else:
            what = PHASE_WORDS.get(ex.phase, PHASE_WORDS["reading"])
        waited = ex.thinking_s if ex.phase == "thinking" else time.monotonic() - ex.started
        if waited >= 1:  # the clock, for every wait (the chat is redrawn at least every second meanwhile)
            what += f" {waited:.0f} s"
        parts.append(_macro("chat.html", "thinking", what))
    narrowed = ex.refused or (ex.mode == "search" and (not ex.relevant or not ex.items))
    if ex.filters and ex.done and not ex.error and narrowed and not _names_filters(ex):
        parts.append(_macro("filters.html", "narrowed", ex.filters))
    if ex.stopped:
        parts.append(_macro("chat.html", "stopped"))
    if ex.error:
        parts.append(_macro("chat.html", "error", ex.error))
    notice = _notice_left(ex.notice, bool(warning))
    if notice and ex.done and not ex.error:
        parts.append(_macro("chat.html", "notice", notice))
    if ex.footer:
        parts.append(_macro("chat.html", "meta", ex.footer))
    return "\n\n".join(parts)


def chat_messages(state: UIState | None) -> list[dict[str, str]]:
    """The whole conversation in the Chatbot's messages format, rebuilt from state."""
    out: list[dict[str, str]] = []
    if state is None:
        return out
    for i, ex in enumerate(state.exchanges):
        out.append({"role": "user", "content": inert(ex.question)})
        out.append({"role": "assistant", "content": render_exchange(i, ex, state.show_rewrite)})
    return out


# ----------------------------------------------------------------------- panel
def marked_sentences(abstract: str, passage: str, quoted: str = "") -> list[tuple[str, str]]:
    """The abstract's sentences, each marked "quoted" (in the answer), "passage" (retrieved) or ""."""

    def norm(s: str) -> str:
        return " ".join(s.split()).lower()

    p, q = norm(passage), norm(quoted)
    out: list[tuple[str, str]] = []
    for sentence in sentences(abstract):
        ns = norm(sentence)
        if len(ns) > 12 and q and ns in q:
            out.append(("quoted", sentence))
        elif len(ns) > 12 and p and (ns in p or ns[:32] in p or ns[-32:] in p):
            out.append(("passage", sentence))
        else:
            out.append(("", sentence))
    return out


def empty_panel() -> str:
    """The panel before any answer: what it will show."""
    return _macro("panel.html", "empty")


def sources_panel(state: UIState | None) -> str:
    """HTML for the panel, and the citation cards' store (``cite_cards``) for every exchange's citations."""
    return _panel_body(state) + cite_cards(state)


def cite_cards(state: UIState | None) -> str:
    """What a citation's card shows (title, first sentence of the passage, score), for every exchange.

    Kept in the panel (a gr.HTML) because the Chatbot's sanitizer drops ``data-*`` and ``aria-*``
    attributes from messages; app.js reads it by the link's ``#cite-E-N`` key to show the card and
    to name each link ("Source N: title") for assistive technology.
    """
    entries = []
    for index, ex in enumerate(state.exchanges if state is not None else []):
        for it in ex.items:
            first = first_sentence(it.passage, 180)
            entries.append((f"{index}-{it.n}", it.n, it.title, first, f"{it.score:.3f}"))
    return _macro("cards.html", "store", entries)


def _panel_body(state: UIState | None) -> str:
    """The selected exchange's papers, the selected one opened."""
    if state is None or state.view is None or state.view[0] >= len(state.exchanges):
        return empty_panel()
    idx, sel = state.view
    ex = state.exchanges[idx]
    if not ex.items:
        if ex.refused:
            return _macro("panel.html", "not_covered", ex.answer is not None and ex.answer.filtered_out)
        return empty_panel()
    # A refusal the model wrote lists the sources it read, not the closest papers below the threshold.
    model_refused = ex.answer is not None and ex.answer.model_refused
    kind = "search" if ex.mode == "search" else "refused" if ex.refused and not model_refused else "answer"
    quoted = ex.text if ex.mode == "answer" else ""
    opened = next((it for it in ex.items if it.n == sel), None)
    sentences: list[tuple[str, str]] = []
    if opened is not None:
        paper = ex.papers.get(opened.id)
        shown = plain_text((paper.abstract if paper else "") or opened.passage)  # LaTeX and Markdown rendered
        sentences = marked_sentences(shown, plain_text(opened.passage), quoted)
    infos = {it.id: _info(it, ex.papers.get(it.id)) for it in ex.items}
    return _macro("panel.html", "sources", kind, ex.question, ex.items, idx, sel, sentences, infos)


def _info(hit: Hit, paper: Paper | None) -> PaperInfo:
    """A source's label, first sentence, link and reference, from its paper (from the hit alone without one)."""
    if paper is not None:
        return paper_info(paper)
    return PaperInfo(False, "", None, reference_line(hit))


# ---------------------------------------------------------------------- header
def filter_chips(parts: list[str]) -> str:
    """The active filters as chips by the input (nothing when none is on)."""
    return _macro("filters.html", "chips", parts)


def status_html(text: str, level: str) -> str:
    """The LLM status pill; ``level`` is "ok", "info", "warn" or "bad". A command in backticks (`ollama serve`)
    shows as code, not as backticks; the pill's tooltip has the line as plain text."""
    pieces = re.split(r"`([^`]+)`", text)  # text, command, text, ...
    segments = [(i % 2 == 1, piece) for i, piece in enumerate(pieces) if piece]
    return _macro("header.html", "status", segments, "".join(pieces), level)


def brand_html(n_papers: int) -> str:
    return _macro("header.html", "brand", n_papers)


def index_line(n_papers: int, embed_model: str, retrieval: str) -> str:
    """The settings' line about the index (a gr.Markdown, so HTML only)."""
    return _macro("header.html", "index_line", n_papers, embed_model, retrieval)
