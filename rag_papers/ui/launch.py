"""Serving the UI: the login, the refusal to expose it without one, launching, and the server's log file.

Apart from the Blocks (``chat_app.py``) so that what decides who may reach the app can be read,
and tested, on its own.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import IO

import gradio as gr

from rag_papers import RagPapersError, __version__
from rag_papers.chat import Engine
from rag_papers.config import Settings
from rag_papers.llm import backend_names
from rag_papers.ui.chat_app import backend_status, build_app
from rag_papers.ui.render import static_text


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
            css=static_text("app.css"),
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


_FAULT_LOG: IO[str] | None = None  # kept open: faulthandler writes to it at crash time


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
    _FAULT_LOG = path.open("a", encoding="utf-8")
    faulthandler.enable(file=_FAULT_LOG, all_threads=True)
    _FAULT_LOG.write(f"{datetime.now():%Y-%m-%d %H:%M:%S} rag-papers {__version__} chat started (pid {os.getpid()})\n")
    _FAULT_LOG.flush()
    return path
