"""The Gradio chat UI: streamed, cited answers beside a panel showing the papers they cite.

Where things are:

* ``state.py``: what a browser session owns (``UIState``, one ``Exchange`` per question).
* ``render.py`` with ``templates/``: that state as the HTML the chat and the panel show.
* ``export.py``: that state as a Markdown file; ``files.py``: the private folders it is written to.
* ``chat_app.py``: the Blocks layout and its event handlers (``ChatApp``); the page's CSS and
  the panel's JavaScript are the files of ``static/``.
* ``papers.py``: the Papers tab (the corpus a page at a time, searched with the keyword index);
  ``library.py``: its "Add papers" (upload and ingest) and "Remove" (the CLI's code paths);
  ``refs.py``: a paper's "derived title" label, first sentence, link and copyable reference;
  ``suggest.py``: the chat's suggested questions.
* ``access.py``: the login, and the refusal to expose the app without one (``library.py`` asks it who may write).
* ``launch.py``: building and serving the app (the login guard), the log file.

Design notes (why it is built this way):

* All conversation state lives in a per-browser-session ``gr.State`` holding a
  ``ChatSession``; nothing about a conversation is module-global, so concurrent users
  never see each other's history. The state starts as ``None`` (gradio deep-copies a
  State's initial value per session, and an ``Engine`` cannot be copied) and is
  created on the first request of each session.
* Citations ``[n]`` are rendered as ``<a href="#cite-E-N">`` (E = exchange, N = source
  number). The sources panel is a ``gr.HTML`` whose ``js_on_load`` catches clicks on
  such links anywhere on the page and fires a custom ``cite`` event, which selects
  that paper. Citations in older answers therefore still open *their* paper.
* The papers shown are ``retrieve.Hit`` records, the same ones an answer's sources are: the
  UI converts nothing, it numbers search hits the way an answer numbers its sources.
* Corpus and model text is never markup. The Chatbot renders messages as GFM Markdown
  (links, images, autolinks, ``$$`` LaTeX) and its sanitiser keeps ``<a>`` and ``<img>``, so
  ``html.escape`` is not enough: ``inert`` turns every ASCII punctuation character of such
  text into a numeric entity, which neither Markdown nor HTML (nor gr.HTML's templates) can
  act on and the browser shows as the same character. The templates apply it to every value
  they print; our own tags (citation links, badges) are written in the templates around it.
  The Markdown export uses ``md_inert`` (backslash escapes) for the same reason.
* Clients choose models by name among those the server allows (``llm.allowed_models``);
  a client's string never reaches the filesystem. A public address needs a login.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is first imported

from rag_papers.ui.files import process_folder  # noqa: E402 - standard library only

process_folder()  # gradio's folders in a private one (ui/files.py): also before gradio is first imported

from rag_papers.ui.access import check_exposure, is_loopback, parse_auth, resolve_auth  # noqa: E402
from rag_papers.ui.chat_app import ChatApp, backend_status, build_app, radio_update  # noqa: E402
from rag_papers.ui.export import export_markdown  # noqa: E402
from rag_papers.ui.launch import launch, log_to_file, serve  # noqa: E402
from rag_papers.ui.render import (  # noqa: E402
    answer_html,
    chat_messages,
    empty_panel,
    inert,
    md_inert,
    render_exchange,
    sources_panel,
    status_html,
)
from rag_papers.ui.state import Exchange, UIState  # noqa: E402

__all__ = [
    "ChatApp",
    "Exchange",
    "UIState",
    "answer_html",
    "backend_status",
    "build_app",
    "chat_messages",
    "check_exposure",
    "empty_panel",
    "export_markdown",
    "inert",
    "is_loopback",
    "launch",
    "log_to_file",
    "md_inert",
    "parse_auth",
    "radio_update",
    "render_exchange",
    "resolve_auth",
    "serve",
    "sources_panel",
    "status_html",
]
