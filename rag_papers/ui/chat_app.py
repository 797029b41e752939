"""The Blocks app: layout and event handlers, one ``ChatApp`` shared by every browser session.

How a question runs, and why:

* A question is a chain of three events: a non-queued step that shows the question at once, a
  *search* step and an *answer* step, each in its own concurrency group. Retrieval-only requests
  are served by the search group, so a slow LLM generation never blocks them.
* The handlers hold no conversation: each session's ``UIState`` comes in as an input and goes
  back as an output, and every output is rebuilt from it by ``render.py``.
* Every failure (LLM gone mid-answer, bad settings, a bug) becomes a ``⚠`` message in the chat;
  the app keeps serving.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import gradio as gr

from rag_papers import RagPapersError
from rag_papers.answer import Answer
from rag_papers.chat import ChatSession, Engine
from rag_papers.choices import AUTO
from rag_papers.config import Settings
from rag_papers.corpus import SUPPORTED_SUFFIXES
from rag_papers.llm import (
    ExtractiveBackend,
    LLMError,
    allowed_models,
    backend_names,
    backend_spec,
    get_backend,
    resolve_model,
    with_default_model,
)
from rag_papers.retrieve import Filters, Hit, SearchRequest, SearchResult
from rag_papers.ui import files, history
from rag_papers.ui.export import REFERENCE_CHOICES, answer_source_ids, export_markdown, write_references
from rag_papers.ui.library import READ_ONLY, Library, notice_html, upload_hint, writes_allowed
from rag_papers.ui.papers import SORTS, PapersTab, picked_papers
from rag_papers.ui.render import (
    brand_html,
    chat_messages,
    empty_panel,
    filter_chips,
    index_line,
    sources_panel,
    static_text,
    status_html,
)
from rag_papers.ui.state import Exchange, UIState
from rag_papers.ui.suggest import suggested_questions
from rag_papers.venues import venue_groups, venue_name

log = logging.getLogger(__name__)

T = TypeVar("T")
ANY = "Any"
STREAM_INTERVAL = 0.03  # seconds between UI updates while streaming (tokens are batched)
QUEUE_SHOWN_MS = 300.0  # a wait behind other sessions shorter than this is not worth a word
GENERATE_LIMIT = 4  # answers written at once (the "generate" group: the chat's and /ask's); more wait their turn
N_CHAT = 9  # the outputs of every chat step: chatbot, panel, picker, state, export, stop, Ask, busy note, Edit
# Why Ask is off while an answer runs (under the input); said louder when a question is sent anyway.
BUSY_NOTE = "Answering… Ask is back when this answer is done; press Stop to ask something else now."
BUSY_AGAIN = (
    "Still answering the previous question: your text stays in the box. Ask it when this answer is done, or press Stop."
)


def _ms(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"


def radio_update(state: UIState | None) -> dict[str, Any]:
    """The "Show source" picker for the exchange shown in the panel."""
    if state is None or state.view is None or state.view[0] >= len(state.exchanges):
        return gr.update(choices=[], value=None, visible=False)
    idx, sel = state.view
    items = state.exchanges[idx].items
    return gr.update(choices=[(f"[{it.n}]", it.n) for it in items], value=sel if items else None, visible=bool(items))


def model_info(choices: list[str]) -> str:
    """The line under the model box: the backend's default (first in its choices), whatever is selected."""
    return f"default: {choices[0]}" if choices else "no model: the answer quotes the abstracts"


# The model box while ``auto`` finds no LLM: it names no model, since none answers (issue 45: it showed Ollama's
# default, which answered nothing).
NO_LLM_INFO = "no LLM reachable: the answer quotes the abstracts (start one, then ↻ Check LLM)"


def demo_note(settings: Settings, took: float | None = None) -> str:
    """What the pill adds for the demo model: not to be trusted, and how long its answer may take (the last one's
    time when this app has written one). Its answers are cut at ``demo_answer_tokens`` by the backend."""
    last = f"; the last one took {took:.0f} s" if took is not None else ""
    return (
        f"demo model: answers are unreliable, each cut at {settings.demo_answer_tokens} tokens and may take a minute "
        f"or two on a small CPU{last}"
    )


def backend_status(
    settings: Settings, name: str | None, model: str | None, took: float | None = None
) -> tuple[str, str]:
    """(line, level) describing what will answer, e.g. "Ollama at …, model llama3.2:3b"; ``took``: the seconds
    the demo model's last answer took here."""
    line, level, _ = backend_check(settings, name, model, took)
    return line, level


def backend_check(
    settings: Settings, name: str | None, model: str | None, took: float | None = None
) -> tuple[str, str, bool]:
    """``backend_status``'s (line, level), and whether ``auto`` found no LLM (the answer quotes the abstracts)."""
    try:
        backend, why = get_backend(settings, name or None, (model or "").strip() or None)
    except RagPapersError as exc:
        return str(exc), "bad", False
    if not backend.extractive:
        if backend.demo:  # working, but not to be trusted: amber, and said so
            return f"{why} ({demo_note(settings, took)})", "warn", False
        return why, "ok", False
    if (name or settings.llm) != AUTO:  # chosen, not what auto fell back to
        return "Extractive answers: quotes from the abstracts, no LLM", "ok", False
    # No LLM to be had: what the user gets, and how to get more, in one calm line (issue 28: not an error).
    advice = why.split(";", 1)[0].rsplit(": ", 1)[-1] if ": " in why else ""
    if "ollama serve" in advice:
        advice = "start Ollama with `ollama serve`"
    elif not advice.startswith("run "):
        advice = "choose an LLM beside the question box"
    return f"Quoting the abstracts, no LLM · for written answers, {advice}", "info", True


def _example_questions(engine: Engine, limit: int = 3) -> list[str]:
    """The chat's suggested questions: a method's claim, a comparison, a "which papers" (ui/suggest.py)."""
    try:
        return suggested_questions(engine.index, limit)
    except Exception:  # noqa: BLE001 - suggestions are a nicety: an odd index must not stop the app
        log.exception("suggesting questions failed")
        return []


# What the browser keeps of the settings, beside the past chats (``Parts.settings_box``'s order): a reload brings
# them back (``ChatApp.restore_settings``).
KEEP_SETTINGS_JS = """(backend, model, top_k, year_from, year_to, venue, keyword, show_rewrite) =>
  ({backend, model, top_k, year_from, year_to, venue, keyword, show_rewrite})"""

# The top-k slider's range: enough for a list question; a larger ``top_k`` setting widens it (the CLI and the
# API take up to ``config.TopK``'s bound).
SLIDER_TOP_K = 20
_QUIET: dict[str, Any] = {"queue": False, "api_visibility": "private", "show_progress": "hidden"}
# The events that take the model box's value: the server checks it (``ChatApp.resolve``, a refusal in words), not
# gradio against the box's choices. A page load's status check (or "Check LLM") may change those choices in the
# server's copy of the session while the page still holds the older value: a question sent meanwhile reached the
# answer step with it, gradio refused it ("Value: llama3.2:3b is not in the list of choices: []") and no reply
# came. Their other inputs are states, the backend (fixed choices, resolved too) and values the search step
# before the answer has preprocessed from the same page.
_MODEL_CHECKED_BY_SERVER: dict[str, Any] = {"preprocess": False}


class Parts(SimpleNamespace):
    """The app's components by name, as the layout methods make them, for the wiring methods (``ChatApp.build``)."""

    @property
    def chat_outputs(self) -> list[Any]:
        """What every step of a chat turn redraws."""
        return [
            self.chatbot, self.panel, self.picker, self.state, self.export, self.stop, self.send, self.busy, self.edit,
        ]  # fmt: skip

    @property
    def filt(self) -> list[Any]:
        """The filter controls, in ``ChatApp.filters``'s order."""
        return [self.year_from, self.year_to, self.venue, self.keyword]

    @property
    def filter_choices(self) -> list[Any]:
        """The filters whose choices follow the index (``ChatApp.filter_choices``): the years' row, both years, venue."""
        return [self.years_row, self.year_from, self.year_to, self.venue]

    @property
    def settings_box(self) -> list[Any]:
        """The settings kept in the browser, in ``KEEP_SETTINGS_JS``'s order."""
        return [self.backend, self.model, self.top_k, *self.filt, self.show_rewrite]


class AnswerSlots:
    """The answers this app is writing (its "generate" group: the chat's and /ask's), and whether the group was
    full at some time since a moment: only then did an answer wait behind others. Why not the time between the
    question and its answer step: that holds the steps before it, a slow link's round trips included (issue 45:
    "waited 361 ms behind other answers" with none running)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self._full_since: float | None = None  # the group is full now, since then
        self._full_until = float("-inf")  # it was last full until then
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.running += 1
            if self.running >= self.limit and self._full_since is None:
                self._full_since = time.monotonic()

    def leave(self) -> None:
        with self._lock:
            if self.running >= self.limit:
                self._full_until, self._full_since = time.monotonic(), None
            self.running = max(0, self.running - 1)

    def full_since(self, moment: float) -> bool:
        """Whether every slot was taken at some time since ``moment`` (``time.monotonic``)."""
        with self._lock:
            return self._full_since is not None or self._full_until >= moment

    def counted(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` (an answer written outside the chat: ``/ask``) holding a slot while it runs."""

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> T:
            self.enter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return run


class ChatApp:
    """Handlers and layout; one instance per built app, shared by all sessions (holds no chat state)."""

    def __init__(self, settings: Settings, engine: Engine, llm: str | None = None, model: str | None = None) -> None:
        self.llm = llm or settings.llm
        self.model = (model or "").strip()
        # The operator's --model (a name, or a GGUF path on their machine) is the backend's default.
        self.settings = with_default_model(settings, self.llm, self.model) if self.llm in backend_names() else settings
        self.engine = engine
        self._filter_cache: tuple[tuple[int, int], list[int], list[str]] | None = None
        self.years, self.venues = self.filter_values()  # what the page is built with; each page load reads them anew
        self.n_papers = engine.index.count()
        self._claim_lock = threading.Lock()
        self.files: Path | None = None  # this server's private folder (``build``): exports and gradio's cache
        self.slots = AnswerSlots(GENERATE_LIMIT)
        self.demo_seconds: float | None = None  # how long the demo model's last answer here took (the pill says)

    # ------------------------------------------------------------------ helpers
    def index_line(self, n_papers: int) -> str:
        return index_line(n_papers, self.settings.embed_model, self.settings.retrieval)

    def index_info(self) -> tuple[str, str]:
        """Header and settings line with the index's current size (another process may have ingested)."""
        n = self.engine.index.count()
        self.n_papers = n
        return brand_html(n), self.index_line(n)

    def _extra_models(self, name: str) -> dict[str, str]:
        """A plugin backend's --model from the command line, allowed beside its default."""
        plugin = name == self.llm and name in backend_names() and not backend_spec(name).builtin
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
        return gr.update(choices=choices, value=value, interactive=bool(choices), info=model_info(choices))

    def first_backend(self) -> str:
        """The backend the picker starts on: the operator's choice when the registry knows it, else ``auto``."""
        return self.llm if self.llm in backend_names() else AUTO

    def new_state(self) -> UIState:
        return UIState(ChatSession(self.engine))

    def filter_values(self) -> tuple[list[int], list[str]]:
        """The years and venues the filters offer: those of the papers indexed now (papers come and go from the
        Papers tab, or another process), each venue once under the name ``rag_papers.venues`` gives it.

        Two queries of the registry's DISTINCT values (at a million papers of 400 venues, about 70 and 350 ms):
        kept while the paper count and the newest paper are the same, which an add, a removal or a replaced
        paper changes."""
        store = self.engine.index.store
        key = (store.count_cached(), store.max_seq())
        if self._filter_cache is None or self._filter_cache[0] != key:
            index = self.engine.index
            years = sorted({int(y) for y in index.field_values("year") if y is not None})
            venues = list(venue_groups(str(v) for v in index.field_values("venue") if v))
            self._filter_cache = (key, years, venues)
        return list(self._filter_cache[1]), list(self._filter_cache[2])

    def filter_choices(self, year_from: Any = ANY, year_to: Any = ANY, venue: Any = ANY) -> tuple[Any, ...]:
        """The years' row and the year and venue boxes with the index's values now, each keeping its value while
        that is still offered (else "Any"); (row, from, to, venue)."""
        self.years, self.venues = self.filter_values()
        years: list[Any] = [ANY, *self.years]
        venues: list[Any] = [ANY, *self.venues]

        def kept(value: Any, allowed: list[Any]) -> Any:
            return value if value in allowed else ANY

        return (
            gr.update(visible=bool(self.years)),
            gr.update(choices=years, value=kept(year_from, years)),
            gr.update(choices=years, value=kept(year_to, years)),
            gr.update(choices=venues, value=kept(venue, venues), visible=bool(self.venues)),
        )

    def filters(self, year_from: Any, year_to: Any, venue: Any, keyword: Any) -> Filters:
        def year(v: Any) -> int | None:
            return None if v in (None, "", ANY) else int(v)

        return Filters(
            year(year_from),
            year(year_to),
            None if venue in (None, "", ANY) else str(venue),
            (str(keyword).strip() or None) if keyword else None,
        )

    @staticmethod
    def _numbered(result: SearchResult, limit: int) -> list[Hit]:
        """The first ``limit`` hits, numbered [1]..[limit] for the panel and the citation links."""
        return [h.numbered(n) for n, h in enumerate(result.results[:limit], 1)]

    def _export(self, state: UIState | None) -> dict[str, Any]:
        """Write the conversation to a fresh Markdown file (0600, in this server's private folder) for the button."""
        if state is None or not any(ex.done for ex in state.exchanges):
            return gr.update(value=None, interactive=False)
        if self.files is None:  # handlers called on an app never built (tests)
            self.files = files.server_folder()
        path = files.write_export(self.files, export_markdown(state))
        state.export_dirs.append(path.parent)
        return gr.update(value=str(path), interactive=True)

    def _folder(self) -> Path:
        if self.files is None:  # handlers called on an app never built (tests)
            self.files = files.server_folder()
        return self.files

    def _export_references(self, state: UIState | None, choice: str) -> dict[str, Any]:
        """The last answer's sources as a reference file (0600, private, deleted with the chat like the .md)."""
        ids = answer_source_ids(state) if state is not None else []
        found = self.engine.index.get(ids) if ids else {}
        papers = [found[i] for i in ids if i in found]
        if state is None or not papers:
            return gr.update(value=None, interactive=False)
        path = write_references(self._folder(), papers, choice)
        state.export_dirs.append(path.parent)
        return gr.update(value=str(path), interactive=True)

    def _export_picked(self, picked: Any, choice: str) -> dict[str, Any]:
        """The Papers tab's ticked papers as a reference file (0600, private, removed by the exports' sweep)."""
        papers = picked_papers(self.engine.index, picked)
        if not papers:
            return gr.update(value=None, interactive=False)
        return gr.update(value=str(write_references(self._folder(), papers, choice)), interactive=True)

    def _outputs(self, state: UIState, *, panel: bool = True, final: bool = False) -> tuple[Any, ...]:
        """Values for (chatbot, panel, picker, state, export, stop, Ask, busy note, Edit), the outputs of every
        chat step; ``final``: the answer is over, so Stop goes, Ask comes back, and Edit while there is a question."""
        return (
            chat_messages(state),
            sources_panel(state) if panel else gr.skip(),
            radio_update(state) if panel else gr.skip(),
            state,
            self._export(state) if final else gr.skip(),
            *(self._busy(False, editable=bool(state.exchanges)) if final else (gr.skip(),) * 4),
        )

    @staticmethod
    def _busy(on: bool, again: bool = False, editable: bool = False) -> tuple[Any, Any, Any, Any]:
        """(Stop, Ask, note, Edit) while an answer runs (``on``) or not: Ask is off, and the note says why; "Edit
        last question" is on only when there is a last question to take back (``editable``) and none runs."""
        note = f'<div class="rp-busy{" rp-again" if again else ""}" role="status">{BUSY_AGAIN if again else BUSY_NOTE}</div>'
        return (
            gr.update(visible=on),
            gr.update(interactive=not on),
            gr.update(value=note if on else "", visible=on),
            gr.update(interactive=editable and not on),
        )

    @staticmethod
    def _skip(n: int = N_CHAT) -> tuple[Any, ...]:
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
    def accept(
        self, question: str, state: UIState | None, retrieval_only: bool, show_rewrite: bool | None = None
    ) -> tuple[Any, ...]:
        """Show the question at once (not queued), so the user sees it before any work starts.

        The rewrite switch comes with the question: on a fresh page a tick and a question sent together each
        start from no state, and the one saved last would otherwise decide whether the switch holds.
        """
        state = state or self.new_state()
        if show_rewrite is not None:
            state.show_rewrite = bool(show_rewrite)
        question = (question or "").strip()
        if not question:
            return ("", *self._skip(4), *self._skip(4), state, None)
        if state.busy():  # said by the input, where the user looks (a toast from this step never showed)
            return (question, *self._skip(4), *self._busy(True, again=True), state, gr.skip())
        state.exchanges.append(Exchange(question, "search" if retrieval_only else "answer", again=state.regenerate))
        state.regenerate = False
        return (
            "",
            chat_messages(state),
            gr.skip(),
            gr.skip(),
            gr.skip(),
            *self._busy(True),
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
            filters = self.filters(year_from, year_to, venue, keyword)
            ex.filters = filters.describe()
            result = self.engine.search(ex.standalone, int(top_k), filters)
            ex.items, ex.papers = self._numbered(result, int(top_k)), result.papers
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
        # In the "generate" queue behind other sessions' answers: only if every slot was taken meanwhile (the
        # time since the question was sent holds the steps before this one too).
        crowded = self.slots.full_since(ex.started)
        self.slots.enter()
        ex.queued = time.monotonic() - ex.started if crowded else 0.0
        try:
            backend_name, model_value = self.resolve(backend_name, model)
        except RagPapersError as exc:  # a name the server does not allow: shown, nothing looked up
            ex.error, ex.done = str(exc), True
            self.slots.leave()
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
            self.slots.leave()
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
            ex.filters = filters.describe()
            # Rewriting a follow-up (with the model, when there is one) and searching can take seconds: run
            # them aside and say so, with the clock, instead of a still "Searching the abstracts…".
            ex.phase = "rewriting" if not backend.extractive and state.session.turns else "searching"
            standalone, stream = yield from self._while_waiting(
                state, lambda: state.session.ask(ex.question, backend, top_k=top_k, filters=filters)
            )
            ex.standalone = standalone
            # Provisional sources (the prompt's papers, in order) so citations work while streaming:
            # the search returned top_k papers, of which the prompt takes context_papers at most.
            limit = self.settings.context_papers
            ex.items = self._numbered(stream.result, limit) if stream.result.relevant else []
            ex.papers = stream.result.papers
            state.view = (index, 1) if ex.items else state.view
            ex.stream = stream
            ex.phase = stream.phase
            yield self._outputs(state)
            last = 0.0
            waiting_since: float | None = time.perf_counter() if stream.phase == "waiting" else None
            model_wait = 0.0  # the model busy with another session's answer (a one-at-a-time backend)
            for chunk in stream:
                ex.text += chunk
                ex.reasoning, ex.thinking_s = stream.reasoning, stream.thinking_seconds
                now = time.perf_counter()
                phase, ex.phase = ex.phase, stream.phase
                if ex.phase == "waiting" and waiting_since is None:
                    waiting_since = now
                elif ex.phase != "waiting" and waiting_since is not None:
                    model_wait += now - waiting_since
                    waiting_since = None
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
                self._finish(state, index, ex, answer, stream.result, model_wait * 1000)
                if backend.demo and "generation_ms" in answer.timings:  # the pill says how long it takes here
                    self.demo_seconds = answer.timings["generation_ms"] / 1000
        except Exception as exc:  # noqa: BLE001 - LLMError, RagPapersError or a bug: shown, never a traceback
            if not isinstance(exc, RagPapersError):
                log.exception("answering %r failed", ex.question)
            ex.error = self._error_text(exc)
            ex.footer = f"failed after {_ms((time.perf_counter() - t0) * 1000)}"
            self._forget_failed_turn(state)
        ex.done = True
        yield self._outputs(state, final=True)

    def _while_waiting(self, state: UIState, work: Callable[[], T]) -> Generator[tuple[Any, ...], None, T]:
        """``work()`` in a worker thread; meanwhile the chat is redrawn every second (its clock runs)."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["out"] = work()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller below
                box["err"] = exc
            finally:
                done.set()

        threading.Thread(target=run, name="rp-prepare", daemon=True).start()
        while not done.wait(1.0):
            yield self._outputs(state, panel=False)
        if "err" in box:
            raise box["err"]
        result: T = box["out"]
        return result

    def _finish(
        self, state: UIState, index: int, ex: Exchange, answer: Answer, result: SearchResult, model_wait_ms: float = 0.0
    ) -> None:
        ex.answer = answer
        ex.text = answer.answer
        ex.refused = answer.refused
        # A refusal made before any LLM has no sources: the panel shows the closest papers instead, as many as
        # an answer would have read (context_papers, the number the provisional sources use too).
        if answer.sources or not answer.refused:
            ex.items = list(answer.sources)
        else:
            ex.items = self._numbered(result, self.settings.context_papers)
        ex.papers = result.papers
        first_cited = next((it.n for it in ex.items if it.cited), 1)
        state.view = (index, first_cited) if ex.items else (index, 0)
        t = answer.timings
        if answer.refused and not answer.model_refused:
            ex.footer = f"no LLM called · retrieval {_ms(t.get('retrieval_ms'))}"
        else:
            who = answer.backend + (f" {answer.model}" if answer.model else "")
            # Time spent behind other sessions is said apart, and not counted as the model's first token.
            queued_ms = ex.queued * 1000 + model_wait_ms
            generation = max(0.0, t.get("generation_ms", 0.0) - model_wait_ms) if "generation_ms" in t else None
            ex.footer = f"{who} · retrieval {_ms(t.get('retrieval_ms'))} · generation {_ms(generation)}"
            if "first_token_ms" in t:  # a backend that generates (an extractive answer has no first token)
                ex.footer += f" (first token {_ms(max(0.0, t['first_token_ms'] - model_wait_ms))})"
            if queued_ms >= QUEUE_SHOWN_MS:
                ex.footer += f" · waited {_ms(queued_ms)} behind other answers"
        if ex.again:
            ex.footer += " · regenerated"
        if (not answer.refused or answer.model_refused) and answer.notice:
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
        """Forget the conversation (history, sources, export) but keep the controls; the chat outputs and the input."""
        state = state or self.new_state()
        state.session.reset()
        state.exchanges.clear()
        state.view = None
        state.chat_id = None  # the next question starts a new entry in the browser's history
        return (*self._outputs(state, final=True), "")

    def start_over(self, state: UIState | None, stored: Any, query: Any = "") -> tuple[Any, ...]:
        """ "New chat" and the Chatbot's trash icon: the conversation on screen saved to the browser's history
        first, then cleared. Saving is done here, not left to the step chained after the answer: a click right
        after an answer cancels or races that step, and the chat was lost. (chat outputs, input, stored, past)"""
        kept = history.save(stored, state) if state is not None and state.exchanges else history.entries(stored)
        cleared = self.new_chat(state)
        return (*cleared, kept, self._past_update(kept, None, query))

    def regenerate(self, state: UIState | None) -> tuple[Any, ...]:
        """The retry icon on the last answer: its question taken back, to be asked again (marked "regenerated")."""
        if state is not None and state.exchanges and not state.busy():
            state.regenerate = True
        return self.take_back_last(state)

    def take_back_last(self, state: UIState | None) -> tuple[Any, ...]:
        """Regenerate and "Edit last question": the last exchange is taken back (from the screen and from the
        conversation a follow-up is rewritten against), its question put back in the input box; (input, chat
        outputs). Regenerate then asks it again as it is; Edit leaves it there to change and send."""
        if state is None or not state.exchanges or state.busy():
            return (gr.skip(), *self._skip())
        last = state.exchanges.pop()
        # The session's turns are those of the answered exchanges, in order: keep the ones still shown.
        answered = sum(
            1
            for ex in state.exchanges
            if ex.mode == "answer" and ex.answer is not None and not ex.error and not ex.stopped
        )
        del state.session.turns[answered:]
        if state.view is not None and state.view[0] >= len(state.exchanges):
            state.view = None
        return (last.question, *self._outputs(state, final=True))

    # ------------------------------------------------------------ past chats (kept in the browser)
    @staticmethod
    def _past_update(stored: list[dict[str, Any]], current: str | None, query: Any = "") -> Any:
        """The list of past chats (those ``query`` finds); a search that finds none says so under the label."""
        query = str(query or "")
        listed = history.choices(stored, query)
        words = " ".join(re.sub(r"[^\w\s'.,:;?!/-]", " ", query).split())[:80]  # the box's info reads Markdown
        missed = f"No past chat holds every word of “{words}”." if words and not listed else ""
        return gr.update(choices=listed, value=current if any(v == current for _, v in listed) else None, info=missed)

    def remember(self, state: UIState | None, stored: Any, query: Any = "") -> tuple[Any, Any]:
        """After each answer (or Stop): this conversation saved first in the browser's history."""
        if state is None or not state.exchanges:
            return gr.skip(), gr.skip()
        kept = history.save(stored, state)
        return kept, self._past_update(kept, state.chat_id, query)

    def search_past(self, query: Any, stored: Any, state: UIState | None) -> Any:
        """The list of past chats narrowed to those whose name, questions or answers hold the words typed."""
        return self._past_update(history.entries(stored), state.chat_id if state is not None else None, query)

    def rename_past(self, chat_id: Any, title: Any, stored: Any, query: Any) -> tuple[Any, Any, Any]:
        """Name the selected past chat (the name stays as the chat goes on); the box is emptied."""
        if not chat_id or not str(title or "").strip():
            return gr.skip(), gr.skip(), gr.skip()
        kept = history.rename(stored, str(chat_id), str(title))
        return kept, self._past_update(kept, str(chat_id), query), ""

    def reopen(self, chat_id: Any, stored: Any, state: UIState | None, show_rewrite: bool = False) -> tuple[Any, ...]:
        """Open a past chat: shown as it was, and its answered turns back in the session for follow-ups."""
        restored = history.restore(stored, str(chat_id or ""), ChatSession(self.engine))
        if restored is None:
            return self._skip()
        restored.show_rewrite = state.show_rewrite if state is not None else show_rewrite
        return self._outputs(restored, final=True)

    def on_load(self, stored: Any, kept_settings: Any = None) -> tuple[Any, ...]:
        """A fresh page (a reload too): the past chats listed, the latest reopened, with the rewrites shown if
        the kept settings say so (read here: the switch's own restore may land before or after this)."""
        kept = history.entries(stored)
        latest = kept[0]["id"] if kept else None
        show = isinstance(kept_settings, dict) and kept_settings.get("show_rewrite") is True
        shown = self.reopen(latest, kept, None, show) if latest else self._skip()
        return (*shown, self._past_update(kept, latest))

    def forget(self, chat_id: Any, stored: Any, state: UIState | None, query: Any = "") -> tuple[Any, ...]:
        """Delete a past chat from the browser; deleting the one on screen also clears the screen and deletes
        its exported files from the server's disk (nothing of it is left)."""
        kept = history.remove(stored, str(chat_id or ""))
        if state is not None and chat_id and state.chat_id == chat_id:
            for folder in state.export_dirs:
                shutil.rmtree(folder, ignore_errors=True)
            state.export_dirs.clear()
            cleared = self.new_chat(state)[:N_CHAT]  # the chat outputs, without the input box
        else:
            cleared = self._skip()
        return (*cleared, kept, self._past_update(kept, state.chat_id if state is not None else None, query))

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

    # ------------------------------------------------------------ settings (kept in the browser)
    def restore_settings(self, kept: Any) -> tuple[Any, ...]:
        """A page load: the year and venue boxes offer the index's values now, and the kept settings go back in
        their controls (backend, model, top k, years, venue, keyword, the rewrite switch), each only if this
        server still offers it; anything else (absent, tampered) is left as the page has it.

        Outputs: backend, model, top k, the years' row, from, to, venue, keyword, show rewrite."""
        kept = kept if isinstance(kept, dict) else {}
        row, *boxes = self.filter_choices()
        years: list[Any] = [ANY, *self.years]
        name = kept.get("backend")
        name_ok = isinstance(name, str) and name in backend_names()
        choices = self.model_choices(name if name_ok else None, listed=False)
        model = kept.get("model")
        model_update = (
            gr.update(choices=choices, value=model, interactive=bool(choices), info=model_info(choices))
            if name_ok and (model in choices or (model is None and not choices))
            else gr.skip()
        )
        top_k = kept.get("top_k")
        venue = kept.get("venue")
        venue = venue_name(venue) if isinstance(venue, str) and venue != ANY else venue  # a spelling kept before
        for box, value, allowed in zip(
            boxes, (kept.get("year_from"), kept.get("year_to"), venue), (years, years, [ANY, *self.venues]), strict=True
        ):
            if value in allowed:
                box["value"] = value
        keyword, show = kept.get("keyword"), kept.get("show_rewrite")
        return (
            name if name_ok else gr.skip(),
            model_update,
            int(top_k) if isinstance(top_k, int | float) and 1 <= top_k <= 20 else gr.skip(),
            row,
            *boxes,
            keyword[:200] if isinstance(keyword, str) else gr.skip(),
            show if isinstance(show, bool) else gr.skip(),
        )

    def filter_chips(self, year_from: Any, year_to: Any, venue: Any, keyword: Any) -> tuple[str, Any]:
        """The chips by the input and the clear button, for the filters as they are now."""
        parts = self.filters(year_from, year_to, venue, keyword).parts()
        return filter_chips(parts), gr.update(visible=bool(parts))

    @staticmethod
    def clear_filters() -> tuple[Any, ...]:
        """One click: every filter back to "any", the chips and the button gone."""
        return ANY, ANY, ANY, "", filter_chips([]), gr.update(visible=False)

    def toggle_rewrite(self, show: bool, state: UIState | None) -> tuple[Any, ...]:
        """The user ticked or cleared "Show rewritten question" (its ``input``: a restored value is applied by
        ``on_load`` instead, which a redraw from no state here could overwrite)."""
        state = state or self.new_state()
        state.show_rewrite = bool(show)
        return chat_messages(state), state

    def _check(self, backend_name: str, model: str) -> tuple[str, bool]:
        """The status pill for a backend and model choice (a choice the server refuses shows as bad), and whether
        ``auto`` found no LLM to answer."""
        try:
            name, value = self.resolve(backend_name, model)
        except RagPapersError as exc:
            return status_html(str(exc), "bad"), False
        line, level, quoting = backend_check(self.settings, name, value, self.demo_seconds)
        return status_html(line, level), quoting

    def status(self, backend_name: str, model: str) -> str:
        """The status pill for a backend and model choice."""
        return self._check(backend_name, model)[0]

    def on_backend(self, backend_name: str) -> tuple[Any, str]:
        """The backend changed: offer its models, its default selected, and check it."""
        return self.refresh_models(backend_name, "")

    def refresh_models(self, backend_name: str, model: str) -> tuple[Any, str]:
        """Page load and "Check LLM": the backend's models now (Ollama may have pulled more), and its status. With
        ``auto`` and no LLM reachable no model answers, and the box names none."""
        update = self._model_update(backend_name, model)
        pill, quoting = self._check(backend_name, update.get("value") or "")
        if quoting:
            update = gr.update(choices=[], value=None, interactive=False, info=NO_LLM_INFO)
        return update, pill

    # --------------------------------------------------------------------- API
    def api_ask(
        self,
        question: str,
        backend_name: str,
        model: str,
        top_k: Any,  # a number from the slider; from a raw API call, whatever was sent
        state: UIState | None,
    ) -> tuple[dict[str, Any], UIState]:
        """``/ask``: one turn of this client's conversation; returns the final answer and its sources."""
        state = state or self.new_state()
        question = (question or "").strip() if isinstance(question, str) else ""
        if not question:
            return {"error": "empty question"}, state
        # The slider behind top_k has checked it already (launch._inputs_in_words words its refusal); these are
        # the CLI's rules again, so that no value reaches the turn that int() or the retriever would fail on.
        given = top_k if top_k not in (None, "") else None
        bad = {**SearchRequest.problems(top_k=given), **self._api_numbers({"top_k": given})}
        if bad:
            return {"question": question, "error": f"bad parameters: {'; '.join(bad.values())}"}, state
        try:
            name, model_value = self.resolve(backend_name, model)  # only allowed names; never a path
            backend, _ = self.engine.backend(name, model_value)
            k = int(given) if given is not None else self.settings.top_k
            standalone, stream = state.session.ask(question, backend, top_k=k)
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
        top_k: int | None = None,
        year_min: int | None = None,
        year_max: int | None = None,
        venue: str = "",
        keyword: str = "",
    ) -> dict[str, Any]:
        """``/search``: rank papers for a query without generating anything (``top_k`` default: the setting).

        The parameters are checked first (``check_search``, the CLI's rules): gradio answers a bad one
        with 422 and the message before queuing; a caller that gets here anyway has it as ``error``.
        """
        given = {"query": query, "top_k": top_k, "year_min": year_min, "year_max": year_max}
        bad = self._api_numbers(given)
        if bad:
            return {"error": f"bad search parameters: {'; '.join(bad.values())}"}
        try:
            request = SearchRequest.checked(**given, venue=venue, keyword=keyword)
        except RagPapersError as exc:
            return {"error": str(exc)}
        text = (request.query or "").strip()
        if not text:
            return {"error": "empty query"}
        try:
            result = self.engine.search(text, request.top_k or self.settings.top_k, request.filters())
        except Exception as exc:  # noqa: BLE001
            return {"query": text, "error": self._error_text(exc)}
        return result.to_dict()

    @staticmethod
    def check_search(
        query: Any, top_k: Any = None, year_min: Any = None, year_max: Any = None, venue: Any = "", keyword: Any = ""
    ) -> list[dict[str, Any]]:
        """``/search``'s validator: one ``gr.validate`` per parameter, in ``api_search``'s order."""
        given = {"query": query, "top_k": top_k, "year_min": year_min, "year_max": year_max}
        bad = {**SearchRequest.problems(**given, venue=venue, keyword=keyword), **ChatApp._api_numbers(given)}
        names = ("query", "top_k", "year_min", "year_max", "venue", "keyword")
        return [gr.validate(name not in bad, bad.get(name, "")) for name in names]

    @staticmethod
    def _api_numbers(given: dict[str, Any]) -> dict[str, str]:
        """The API's number parameters that are JSON true or false: pydantic's lax mode (``SearchRequest``) takes
        ``true`` for 1, so ``top_k: true`` searched for one paper. Not a number in any API client's eyes: refused."""
        return {
            name: f"{name}: Input should be a whole number, not {str(value).lower()}"
            for name, value in given.items()
            if name != "query" and isinstance(value, bool)
        }

    # ------------------------------------------------------------------ layout
    def build(self) -> gr.Blocks:
        """The app: its layout (``_layout_*``, top to bottom), then what each control does (``_wire_*``)."""
        self.files = files.server_folder()  # before the Blocks: its components take their cache folder when built
        ui = Parts()
        with gr.Blocks(
            title="rag-papers",
            fill_width=False,
            analytics_enabled=False,
            delete_cache=(files.EXPORT_SWEEP_S, files.EXPORT_KEEP_S),
        ) as ui.demo:
            self._layout_header(ui)
            # One tab per way in: the conversation, and (added beside it) the corpus to browse.
            with gr.Tabs(elem_id="rp-tabs") as ui.tabs:
                with gr.Tab("Chat", id="chat", elem_id="rp-tab-chat"):  # noqa: SIM117 - a tab holds a layout
                    with gr.Row(equal_height=False):
                        with gr.Column(scale=7, min_width=420):
                            self._layout_ask(ui)
                            self._layout_llm_row(ui)
                            self._layout_history(ui)
                            self._layout_controls(ui)
                        with gr.Column(scale=5, min_width=340, elem_id="rp-sources-col"):
                            self._layout_sources(ui)
                # The corpus, a page at a time (rag_papers/ui/papers.py): search, sort, open, ask about one.
                with gr.Tab("Papers", id="papers", elem_id="rp-tab-papers"):
                    self._layout_papers(ui)
            self._layout_api(ui)
            self._wire_chat(ui)
            self._wire_history(ui)
            self._wire_settings(ui)
            self._wire_api(ui)
            self._wire_papers(ui)
        ui.demo.queue(default_concurrency_limit=8)
        blocks: gr.Blocks = ui.demo
        return blocks

    # ------------------------------------------------------------------ layout
    def _layout_header(self, ui: Parts) -> None:
        """The browser-kept state (past chats, settings), the session state, the brand and the LLM status."""
        s = self.settings
        # The past chats, in this browser's localStorage (encrypted with a key kept in the data directory,
        # so they survive a restart of the app as well as a reload of the page).
        ui.stored = gr.BrowserState([], storage_key="rag-papers-chats", secret=history.browser_secret(s.home))
        ui.kept_settings = gr.BrowserState({}, storage_key="rag-papers-settings", secret=history.browser_secret(s.home))
        ui.state = gr.State(None)
        ui.pending = gr.State(None)
        with gr.Row(elem_id="rp-header"):
            ui.brand = gr.HTML(brand_html(self.n_papers), padding=False, scale=3, elem_id="rp-brand")
            ui.status = gr.HTML(
                status_html("checking the LLM…", "warn"), elem_id="rp-status-wrap", padding=False, scale=2
            )

    def _layout_ask(self, ui: Parts) -> None:
        """The conversation, the question box, the filters in force and the busy note."""
        examples: list[Any] = [{"text": q} for q in _example_questions(self.engine)]
        ui.chatbot = gr.Chatbot(
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
            ui.msg = gr.Textbox(
                label="Ask a question about the papers",  # its accessible name
                show_label=False,
                placeholder="Ask a question, e.g. “What does ABBA claim?” — or a follow-up",
                scale=8,
                lines=1,
                max_lines=4,
                autofocus=True,
                elem_id="rp-input",
                container=False,
            )
            ui.send = gr.Button("Ask", variant="primary", scale=1, elem_id="rp-send", min_width=90)
            ui.stop = gr.Button("Stop", variant="stop", scale=1, visible=False, elem_id="rp-stop", min_width=80)
        # The filters in force, by the input where the question is typed (set in the settings).
        with gr.Row(elem_id="rp-filter-row"):
            ui.chips = gr.HTML(filter_chips([]), elem_id="rp-chips", padding=False, scale=4)
            ui.clear_filters = gr.Button(
                "✕ Clear filters",
                size="sm",
                visible=False,
                elem_id="rp-clear-filters",
                scale=1,
                min_width=120,
            )
        ui.busy = gr.HTML("", visible=False, elem_id="rp-busy-note", padding=False)

    def _layout_llm_row(self, ui: Parts) -> None:
        """Which LLM answers, and its model."""
        # Which LLM answers, beside the question (where chat UIs put it), not only in the settings.
        with gr.Row(elem_id="rp-llm-row"):
            first = self.first_backend()
            ui.backend = gr.Dropdown(
                backend_names(),
                value=first,
                label="LLM backend",
                scale=2,
                min_width=130,
                elem_id="rp-backend",
            )
            # A choice among the names the server allows (its default first), never a path;
            # the page load adds the models the Ollama server lists.
            initial = self.model_choices(first, listed=False)
            ui.model = gr.Dropdown(
                initial,
                value=initial[0] if initial else None,
                label="Model",
                info=model_info(initial),
                scale=3,
                min_width=160,
                elem_id="rp-model",
                allow_custom_value=False,
                interactive=bool(initial),
            )
            ui.refresh = gr.Button("↻ Check LLM", size="sm", scale=0, min_width=110, elem_id="rp-refresh")

    def _layout_history(self, ui: Parts) -> None:
        """The past chats kept in this browser: reopen, search, rename, delete."""
        with gr.Accordion("Past chats", open=False, elem_id="rp-history"):
            ui.past = gr.Radio(
                choices=[],
                label="Kept in this browser: pick one to reopen it",
                elem_id="rp-past",
            )
            ui.past_q = gr.Textbox(
                label="Search past chats",
                placeholder="words of a chat's name, questions or answers",
                elem_id="rp-past-search",
                max_lines=1,
            )
            with gr.Row(elem_id="rp-past-actions"):
                ui.new_name = gr.Textbox(
                    label="New name for the selected chat",
                    elem_id="rp-rename-box",
                    max_lines=1,
                    scale=3,
                )
                ui.rename = gr.Button("Rename", size="sm", elem_id="rp-rename", scale=1, min_width=90)
            ui.forget = gr.Button("Delete the selected chat", size="sm", variant="stop", elem_id="rp-forget")

    def _layout_controls(self, ui: Parts) -> None:
        """Retrieval only, the rewritten question, edit, new chat, export."""
        with gr.Row(elem_id="rp-controls"):
            ui.retrieval_only = _toggle("Retrieval only (list papers, no answer)", "rp-retrieval-only")
            ui.show_rewrite = _toggle("Show rewritten question", "rp-show-rewrite")
            # Off until there is a last question to take back (``_busy``).
            ui.edit = gr.Button(
                "✎ Edit last question", size="md", elem_id="rp-edit", min_width=100, scale=1, interactive=False
            )
            ui.new = gr.Button("New chat", size="md", elem_id="rp-new", min_width=100, scale=1)
            ui.export = gr.DownloadButton(
                "Export .md",
                value=None,
                size="md",
                interactive=False,
                elem_id="rp-export",
                min_width=110,
                scale=1,
            )
            # The answer's sources for a reference manager, beside the Markdown export (export.write_references).
            ui.refs_format = gr.Dropdown(
                list(REFERENCE_CHOICES), value="BibTeX", show_label=False, container=False,
                elem_id="rp-refs-format", min_width=110, scale=0,
            )  # fmt: skip
            ui.export_refs = gr.DownloadButton(
                "Export references", value=None, size="md", interactive=False,
                elem_id="rp-export-refs", min_width=110, scale=1,
            )  # fmt: skip

    def _layout_sources(self, ui: Parts) -> None:
        """The sources panel and the answering and retrieval settings."""
        s = self.settings
        with gr.Group(elem_id="rp-sources-card"):
            ui.picker = gr.Radio(
                choices=[],
                label="Show source",
                visible=False,
                elem_id="rp-source-pick",
                container=True,
            )
            ui.panel = gr.HTML(
                empty_panel(),
                elem_id="rp-panel",
                js_on_load=static_text("app.js") + static_text("copy.js"),
                max_height=560,
                padding=False,
            )
        with gr.Accordion("Answering and retrieval settings", open=False, elem_id="rp-settings"):
            ui.top_k = gr.Slider(
                1,
                max(SLIDER_TOP_K, s.top_k),  # a configured top_k above the slider's usual range stays reachable
                value=s.top_k,
                step=1,
                label="Papers retrieved (top k)",
                info=f"Search results; an answer reads at most {s.context_papers} of them (context_papers).",
                elem_id="rp-topk",
            )
            # Their choices follow the index: read anew on each page load and after Add papers or Remove.
            year_choices: list[Any] = [ANY, *self.years]
            with gr.Row(visible=bool(self.years), elem_id="rp-years") as ui.years_row:
                ui.year_from = gr.Dropdown(year_choices, value=ANY, label="From year", elem_id="rp-year-from")
                ui.year_to = gr.Dropdown(year_choices, value=ANY, label="To year", elem_id="rp-year-to")
            ui.venue = gr.Dropdown(
                [ANY, *self.venues],
                value=ANY,
                label="Venue",
                visible=bool(self.venues),
                elem_id="rp-venue",
            )
            ui.keyword = gr.Textbox(
                label="Keyword filter",
                placeholder="only papers containing these whole words (any case)",
                elem_id="rp-keyword",
            )
            ui.index_line = gr.Markdown(self.index_line(self.n_papers), elem_id="rp-index-line")

    def _layout_papers(self, ui: Parts) -> None:
        """The Papers tab: search and sort, add papers, remove selected ones, the list."""
        s = self.settings
        with gr.Row(elem_id="rp-papers-bar"):
            ui.papers_q = gr.Textbox(
                label="Search the papers",
                placeholder="Words of a title or abstract, or a paper's id",
                elem_id="rp-papers-q",
                scale=4,
                max_lines=1,
            )
            ui.papers_sort = gr.Dropdown(
                [(label, value) for value, label in SORTS.items()],
                value="relevance",
                label="Sort by",
                elem_id="rp-papers-sort",
                scale=1,
                min_width=180,
            )
        # Adding and removing papers (library.py): only where the browser may write the index.
        ui.writable = writes_allowed(s)
        with gr.Accordion("Add papers", open=False, elem_id="rp-add", visible=ui.writable):
            ui.upload = gr.File(
                label="Files to add: exports (BibTeX, RIS, CSL-JSON, arXiv, OpenAlex, …) or your own",
                file_count="multiple",
                file_types=list(SUPPORTED_SUFFIXES),
                type="filepath",
                elem_id="rp-upload",
                height=120,
            )
            gr.Markdown(upload_hint(s), elem_id="rp-upload-hint")
        with gr.Row(elem_id="rp-remove-bar", visible=ui.writable):
            ui.remove = gr.Button(
                "Remove selected",
                variant="secondary",
                size="sm",
                interactive=False,
                elem_id="rp-remove",
                scale=0,
                min_width=160,
            )
            ui.picked_format = gr.Dropdown(
                list(REFERENCE_CHOICES), value="BibTeX", show_label=False, container=False,
                elem_id="rp-picked-format", min_width=110, scale=0,
            )  # fmt: skip
            ui.export_picked = gr.DownloadButton(
                "Export selected", value=None, size="sm", interactive=False,
                elem_id="rp-export-picked", min_width=150, scale=0,
            )  # fmt: skip
        with gr.Column(visible=False, variant="panel", elem_id="rp-remove-confirm") as ui.confirm_box:
            ui.confirm_text = gr.HTML("", padding=False, elem_id="rp-confirm-text")
            with gr.Row():
                ui.confirm = gr.Button("Yes, remove them", variant="stop", size="sm", elem_id="rp-confirm")
                ui.cancel = gr.Button("Cancel", size="sm", elem_id="rp-cancel")
        ui.papers_notice = gr.HTML(
            "" if ui.writable else notice_html(READ_ONLY, "bad"), padding=False, elem_id="rp-papers-notice"
        )
        ui.papers_list = gr.HTML(
            "",
            elem_id="rp-papers",
            js_on_load=static_text("papers.js") + static_text("copy.js"),
            padding=False,
        )
        ui.papers_view = gr.State(None)
        ui.papers_picked = gr.State(None)  # the ids selected for removal (papers.picks)

    def _layout_api(self, ui: Parts) -> None:
        """Hidden components backing the /ask and /new_chat API endpoints."""
        first = self.first_backend()
        # Hidden components backing the /ask API endpoint: backend and model are checked by
        # ``resolve`` (an error as data), not by a Dropdown's choices (an exception).
        ui.api_question = gr.Textbox(visible=False, label="question")
        ui.api_backend = gr.Textbox(first, visible=False, label="LLM backend")
        ui.api_model = gr.Textbox("", visible=False, label="Model")
        ui.api_out = gr.JSON(visible=False, label="answer")
        ui.api_go = gr.Button(visible=False)
        ui.api_new = gr.Button(visible=False)

    # ------------------------------------------------------------------ events
    def _wire_chat(self, ui: Parts) -> None:
        """Asking (typed, an example, regenerate), editing the last question, stop, new chat and the trash icon."""
        accept_args: dict[str, Any] = {
            "fn": self.accept,
            "inputs": [ui.msg, ui.state, ui.retrieval_only, ui.show_rewrite],
            "outputs": [
                ui.msg,
                ui.chatbot,
                ui.panel,
                ui.picker,
                ui.export,
                ui.stop,
                ui.send,
                ui.busy,
                ui.edit,
                ui.state,
                ui.pending,
            ],
            "queue": False,
            "api_visibility": "private",
        }

        def chain(accepted: Any) -> Any:
            """Search step, then answer step; each skips itself unless the question is its kind."""
            searched = accepted.then(
                self.run_search,
                [ui.pending, ui.state, ui.top_k, *ui.filt],
                ui.chat_outputs,
                concurrency_id="search",
                concurrency_limit=16,
                api_visibility="private",
                show_progress="hidden",
            )
            answered = searched.then(
                self.run_answer,
                [ui.pending, ui.state, ui.backend, ui.model, ui.top_k, *ui.filt],
                ui.chat_outputs,
                concurrency_id="generate",
                concurrency_limit=4,
                api_visibility="private",
                show_progress="hidden",
                **_MODEL_CHECKED_BY_SERVER,
            )
            answered.then(self.remember, [ui.state, ui.stored, ui.past_q], [ui.stored, ui.past], **_QUIET)
            return answered

        def use_example(evt: gr.SelectData) -> str:
            value = evt.value
            return str(value.get("text", "")) if isinstance(value, dict) else str(value)

        answer_typed = chain(gr.on([ui.msg.submit, ui.send.click], **accept_args))
        answer_example = chain(
            ui.chatbot.example_select(use_example, None, ui.msg, queue=False, api_visibility="private").then(
                **accept_args
            )
        )
        # Regenerate (the Chatbot's retry icon on the last answer): the last question taken back and asked again.
        answer_again = chain(
            ui.chatbot.retry(self.regenerate, [ui.state], [ui.msg, *ui.chat_outputs], **_QUIET).then(**accept_args)
        )
        ui.edit.click(self.take_back_last, [ui.state], [ui.msg, *ui.chat_outputs], **_QUIET).then(
            None, js="() => { const t = document.querySelector('#rp-input textarea'); if (t) t.focus(); }"
        )
        ui.stop.click(
            self.stop,
            [ui.state],
            ui.chat_outputs,
            cancels=[answer_typed, answer_example, answer_again],
            queue=False,
            api_visibility="private",
        ).then(self.remember, [ui.state, ui.stored, ui.past_q], [ui.stored, ui.past], **_QUIET)
        # "New chat" and the Chatbot's own trash icon: a clean conversation (not only a cleared screen), the one
        # cleared kept in the past chats. The API's /new_chat (_wire_api) has no browser history to keep.
        gr.on(
            [ui.new.click, ui.chatbot.clear],
            self.start_over,
            [ui.state, ui.stored, ui.past_q],
            [*ui.chat_outputs, ui.msg, ui.stored, ui.past],
            queue=False,
            cancels=[answer_typed, answer_example, answer_again],
            api_visibility="private",
        )

    def _wire_history(self, ui: Parts) -> None:
        """Past chats (reopen, delete, search, rename; restored on load) and the export."""
        ui.past.input(self.reopen, [ui.past, ui.stored, ui.state], ui.chat_outputs, **_QUIET)
        ui.forget.click(
            self.forget, [ui.past, ui.stored, ui.state, ui.past_q], [*ui.chat_outputs, ui.stored, ui.past], **_QUIET
        )
        ui.past_q.change(self.search_past, [ui.past_q, ui.stored, ui.state], ui.past, **_QUIET)
        gr.on(
            [ui.rename.click, ui.new_name.submit],
            self.rename_past,
            [ui.past, ui.new_name, ui.stored, ui.past_q],
            [ui.stored, ui.past, ui.new_name],
            **_QUIET,
        )
        ui.demo.load(self.on_load, [ui.stored, ui.kept_settings], [*ui.chat_outputs, ui.past], **_QUIET)
        # A click writes the file afresh (the old one may have been removed, EXPORT_KEEP_S): the next click has it.
        ui.export.click(self._export, [ui.state], [ui.export], **_QUIET)
        # The references follow the Markdown export (written anew at the end of each answer) and the format chosen.
        gr.on(
            [ui.export.change, ui.refs_format.change, ui.export_refs.click],
            self._export_references,
            [ui.state, ui.refs_format],
            [ui.export_refs],
            **_QUIET,
        )

    def _wire_settings(self, ui: Parts) -> None:
        """The sources panel, the filters and their chips, the kept settings, the LLM choice and its status."""
        ui.picker.input(
            self.select_source, [ui.picker, ui.state], [ui.panel, ui.state], queue=False, api_visibility="private"
        )
        ui.panel.cite(self.on_cite, [ui.state], [ui.panel, ui.picker, ui.state], queue=False, api_visibility="private")
        ui.show_rewrite.input(
            self.toggle_rewrite,
            [ui.show_rewrite, ui.state],
            [ui.chatbot, ui.state],
            queue=False,
            api_visibility="private",
        )
        for box in (ui.year_from, ui.year_to, ui.venue, ui.keyword):
            box.change(self.filter_chips, ui.filt, [ui.chips, ui.clear_filters], queue=False, api_visibility="private")
        ui.clear_filters.click(
            self.clear_filters, None, [*ui.filt, ui.chips, ui.clear_filters], queue=False, api_visibility="private"
        )

        status_args: dict[str, Any] = {
            "concurrency_id": "status",
            "concurrency_limit": 8,
            "api_visibility": "private",
            "show_progress": "hidden",
            **_MODEL_CHECKED_BY_SERVER,
        }
        # The kept settings first (with the filters' choices now), then the models and the status for them (a
        # user's change of backend is .input: restoring one must not reset the model to the backend's default).
        restored = [ui.backend, ui.model, ui.top_k, ui.years_row, *ui.filt, ui.show_rewrite]
        ui.demo.load(self.restore_settings, [ui.kept_settings], restored, **_QUIET).then(
            self.refresh_models, [ui.backend, ui.model], [ui.model, ui.status], **status_args
        ).then(self.filter_chips, ui.filt, [ui.chips, ui.clear_filters], **_QUIET)
        # Kept by the page itself, with no request: a server-side handler took the controls' values as inputs,
        # and a change fired while a restore was half applied sent the model box's old value against its new
        # choices, which gradio answered with HTTP 500 on every load (issue 45).
        gr.on(
            [box.change for box in ui.settings_box],
            None,
            ui.settings_box,
            ui.kept_settings,
            js=KEEP_SETTINGS_JS,
            **_QUIET,
        )
        # The index may have grown since the app started (an `ingest` beside it): say what it holds now.
        # Hidden progress: a refresh of lines already shown, which gradio would otherwise fade while it runs.
        ui.demo.load(self.index_info, None, [ui.brand, ui.index_line], **_QUIET)
        ui.backend.input(self.on_backend, [ui.backend], [ui.model, ui.status], **status_args)
        ui.model.input(self.status, [ui.backend, ui.model], ui.status, **status_args)
        ui.refresh.click(self.refresh_models, [ui.backend, ui.model], [ui.model, ui.status], **status_args)

    def _wire_api(self, ui: Parts) -> None:
        """The /ask, /new_chat and /search API endpoints."""
        ui.api_go.click(
            self.slots.counted(self.api_ask),  # it takes a slot of the answers' group: a chat answer may wait for it
            [ui.api_question, ui.api_backend, ui.api_model, ui.top_k, ui.state],
            [ui.api_out, ui.state],
            api_name="ask",
            concurrency_id="generate",
            concurrency_limit=4,
        )
        ui.api_new.click(self.new_chat, [ui.state], [*ui.chat_outputs, ui.msg], api_name="new_chat", queue=False)
        searched = gr.api(self.api_search, api_name="search", concurrency_id="search", concurrency_limit=16)  # type: ignore[attr-defined,unused-ignore]
        # gr.api takes no validator, unlike event listeners: its function gets one the same way, so a
        # bad parameter is answered 422 with the message before the search is queued.
        ui.demo.fns[searched["id"]].validator = self.check_search

    def _wire_papers(self, ui: Parts) -> None:
        """The Papers tab: each page is one registry query, a search one keyword-index query (papers.py)."""
        papers_tab = PapersTab(self.engine.index, removable=ui.writable)
        papers_args: dict[str, Any] = {
            "concurrency_id": "papers",
            "concurrency_limit": 8,
            "api_visibility": "private",
            "show_progress": "hidden",
        }
        # The sort box shows the sort applied (search sets it), so only the user's own choice (.input) sorts anew.
        listed = [ui.papers_list, ui.papers_view, ui.papers_sort]
        gr.on(
            [ui.demo.load, ui.papers_q.submit, ui.papers_q.change],
            papers_tab.search,
            [ui.papers_q, ui.papers_sort, ui.papers_picked, ui.papers_view],
            listed,
            trigger_mode="always_last",
            **papers_args,
        )
        ui.papers_sort.input(
            papers_tab.sort_by,
            [ui.papers_q, ui.papers_sort, ui.papers_picked],
            listed,
            trigger_mode="always_last",
            **papers_args,
        )
        ui.papers_list.goto(
            papers_tab.go, [ui.papers_view, ui.papers_picked], [ui.papers_list, ui.papers_view], **papers_args
        )

        # Add papers and Remove (library.py): one writer at a time in this app (its lock says so at once),
        # so the group allows two, and the second is refused in a line rather than queued behind the first.
        library = Library(self.settings, self.engine.index, papers_tab, self.index_info, ui.writable)
        write_args: dict[str, Any] = {
            "concurrency_id": "write",
            "concurrency_limit": 2,
            "api_visibility": "private",
        }
        ui.upload.upload(
            library.add,
            [ui.upload, ui.papers_view, ui.papers_picked],
            [ui.papers_notice, ui.papers_list, ui.papers_view, ui.brand, ui.index_line, ui.upload],
            show_progress="full",
            **write_args,
        ).then(self.filter_choices, ui.filter_choices[1:], ui.filter_choices, **_QUIET)
        # Ticks are taken one at a time (each is a change to the session's selection, applied in order).
        ui.papers_list.pick(
            library.pick,
            [ui.papers_picked],
            [ui.papers_picked, ui.remove],
            concurrency_id="pick",
            concurrency_limit=1,
            api_visibility="private",
            show_progress="hidden",
        )
        gr.on(
            [ui.papers_picked.change, ui.picked_format.change, ui.export_picked.click],
            self._export_picked,
            [ui.papers_picked, ui.picked_format],
            [ui.export_picked],
            **_QUIET,
        )
        ui.remove.click(
            library.ask_remove, [ui.papers_picked], [ui.confirm_text, ui.confirm_box, ui.papers_notice], **_QUIET
        )
        ui.cancel.click(library.cancel, None, [ui.confirm_text, ui.confirm_box], **_QUIET)
        ui.confirm.click(
            library.remove,
            [ui.papers_view, ui.papers_picked],
            [
                ui.papers_notice,
                ui.papers_list,
                ui.papers_view,
                ui.papers_picked,
                ui.remove,
                ui.confirm_box,
                ui.brand,
                ui.index_line,
            ],
            show_progress="minimal",
            **write_args,
        ).then(self.filter_choices, ui.filter_choices[1:], ui.filter_choices, **_QUIET)
        ui.papers_list.ask(papers_tab.ask, None, [ui.tabs, ui.msg], queue=False, api_visibility="private").then(
            None, js="() => { const t = document.querySelector('#rp-input textarea'); if (t) t.focus(); }"
        )


# ------------------------------------------------------------------ entry points
def build_app(
    settings: Settings, engine: Engine | None = None, llm: str | None = None, model: str | None = None
) -> gr.Blocks:
    """The Blocks app (queue configured, not launched); ``engine`` defaults to one over ``settings``."""
    return ChatApp(settings, engine or Engine(settings), llm, model).build()


def _toggle(label: str, elem_id: str) -> gr.Checkbox:
    """One of the chat's switches under the input: off at the start, no frame around it."""
    return gr.Checkbox(label=label, value=False, elem_id=elem_id, container=False, scale=3)
