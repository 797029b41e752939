"""Serving the UI: the login guard, launching, and the server's log file.

It builds the app (``chat_app.build_app``) and serves it; nothing the app is built from imports it. Who may
reach the app is decided in ``access.py``, which both use.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import gradio as gr

from rag_papers import RagPapersError, __version__
from rag_papers.chat import Engine
from rag_papers.config import Settings
from rag_papers.llm import backend_names
from rag_papers.ui.access import check_exposure, is_loopback, resolve_auth
from rag_papers.ui.chat_app import backend_status, build_app
from rag_papers.ui.files import remove_server_folder
from rag_papers.ui.library import MB
from rag_papers.ui.render import static_text

# A failed login makes the same client wait before its next attempt: LOGIN_DELAY_S after the first failure,
# doubling with each further one up to LOGIN_DELAY_MAX_S; forgotten after LOGIN_FORGET_S without a failure.
LOGIN_DELAY_S = 0.5
LOGIN_DELAY_MAX_S = 10.0
LOGIN_FORGET_S = 900.0
CLIENTS_KEPT = 10_000  # clients whose failures are remembered at once (the oldest go first): memory stays bounded
# gradio's routes that answer without a login although they act on a session: /cancel stops a running
# answer (the Stop button), /reset is a no-op kept for old clients. Behind a login, they need it too.
SESSION_ROUTES = ("/gradio_api/cancel", "/gradio_api/reset")


@dataclass
class _Client:
    failures: int = 0
    last: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Guard:
    """ASGI middleware in front of gradio's routes: a growing delay after each failed login, per client
    address, and a login for the session routes gradio leaves open (``SESSION_ROUTES``).

    Middleware because gradio's ``/login`` route and its login check are closures inside ``App.create_app``:
    there is no hook for either. The login check below reads the same cookies gradio's ``get_current_user``
    does, and a client's attempts are taken one at a time, so parallel guesses wait their turn as well.
    """

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.clients: OrderedDict[str, _Client] = OrderedDict()

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        served = scope.get("app")
        if scope["type"] != "http" or getattr(served, "auth", None) is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", "")).rstrip("/")
        if path.endswith("/login"):
            await self._login(scope, receive, send)
        elif path.endswith(SESSION_ROUTES) and not self._signed_in(served, scope):
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Not authenticated"})
        else:
            await self.app(scope, receive, send)

    @staticmethod
    def _signed_in(served: Any, scope: dict[str, Any]) -> bool:
        from starlette.requests import Request

        cookies = Request(scope).cookies
        token = cookies.get(f"access-token-{served.cookie_id}") or cookies.get(
            f"access-token-unsecure-{served.cookie_id}"
        )
        return token is not None and token in served.tokens

    def _client(self, address: str) -> _Client:
        now = time.monotonic()
        while self.clients:  # the oldest first: drop the forgotten ones, and any beyond CLIENTS_KEPT
            oldest = next(iter(self.clients.values()))
            if now - oldest.last < LOGIN_FORGET_S and len(self.clients) < CLIENTS_KEPT:
                break
            if oldest.lock.locked():
                break
            self.clients.popitem(last=False)
        client = self.clients.pop(address, None) or _Client(last=now)
        self.clients[address] = client  # now the newest
        return client

    async def _login(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        address = (scope.get("client") or ("?", 0))[0]
        client = self._client(address)
        async with client.lock:
            if client.failures:
                await asyncio.sleep(min(LOGIN_DELAY_S * 2 ** (client.failures - 1), LOGIN_DELAY_MAX_S))
            status: list[int] = []

            async def watch(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status.append(int(message["status"]))
                await send(message)

            await self.app(scope, receive, watch)
            if status and status[0] == 200:
                client.failures = 0
            elif status and 400 <= status[0] < 500:
                client.failures += 1
            client.last = time.monotonic()


def _remove_at_stop(folder: Path) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A FastAPI lifespan that removes the app's private folder (``files.server_folder``) when the server stops."""

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            remove_server_folder(folder)

    return lifespan


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
    from starlette.middleware import Middleware

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
            # "Add papers" (library.py): gradio's upload route refuses bigger files before they are stored.
            max_file_size=int(settings.upload_max_mb * MB),
            # FastAPI's own schema at /openapi.json would list every route without a login (gradio's
            # /gradio_api/openapi.json asks for one); the guard and the private folder: see above.
            app_kwargs={
                "openapi_url": None,
                "lifespan": _remove_at_stop(Path(app.GRADIO_CACHE)),
                "middleware": [Middleware(Guard)],
            },
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
    from rag_papers.ingest import Ingester

    check_exposure(settings, insecure_no_auth)  # also reads and checks the login: fail before loading anything
    auth = resolve_auth(settings)
    if llm is not None and llm not in backend_names():
        raise RagPapersError(f"unknown LLM backend {llm!r}; choose from {', '.join(backend_names())}")
    log_path = log_to_file(settings)
    index = Index(settings)
    if index.count() == 0:
        print(f"The index at {settings.home} is empty: ingesting {settings.seeds_dir} first…", flush=True)
        report = Ingester(index.store).ingest([settings.seeds_dir], show_progress=True)
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
    # SIGTERM (a service manager, `kill`) stops the server as Ctrl+C does: gradio then shuts it down,
    # which removes its private folder with the exports; the default action would leave them behind.
    if threading.current_thread() is threading.main_thread():  # only there may a handler be set
        signal.signal(signal.SIGTERM, _interrupt)
    serve(app, settings, block=True, quiet=True, insecure_no_auth=insecure_no_auth)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


_FAULT_LOG: IO[str] | None = None  # kept open: faulthandler writes to it at crash time


def log_to_file(settings: Settings) -> Path:
    """Errors of a long-running server go to ``HOME/logs/chat.log`` as well as stderr, fatal ones included.

    ``faulthandler`` writes the Python stack of every thread to the same file if the process
    dies on a signal (a segfault in a native library), so a crash that takes the server down
    leaves a trace where the user will look, not only in a terminal that may be gone.
    """
    import faulthandler
    from logging.handlers import RotatingFileHandler

    folder = settings.in_home("logs")
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
