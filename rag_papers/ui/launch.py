"""Serving the UI: the login guard, launching, and the server's log file.

It builds the app (``chat_app.build_app``) and serves it; nothing the app is built from imports it. Who may
reach the app is decided in ``access.py``, which both use.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import signal
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
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
from rag_papers.ui.access import check_exposure, client_address, is_loopback, proxy_networks, resolve_auth
from rag_papers.ui.chat_app import backend_status, build_app
from rag_papers.ui.files import remove_server_folder
from rag_papers.ui.library import MB
from rag_papers.ui.render import static_text

# A failed login makes the same client wait before its next attempt: LOGIN_DELAY_S after the first failure,
# doubling with each further one up to LOGIN_DELAY_MAX_S; forgotten after LOGIN_FORGET_S without a failure. The
# client is the socket's peer (``access.client_address``): a forwarded header counts only from a trusted proxy.
LOGIN_DELAY_S = 0.5
LOGIN_DELAY_MAX_S = 10.0
LOGIN_FORGET_S = 900.0
CLIENTS_KEPT = 10_000  # clients whose failures are remembered at once (the oldest go first): memory stays bounded
# Whatever the address, an account takes at most ACCOUNT_FAILURES_MAX failed logins in any ACCOUNT_WINDOW_S: past
# that, a try is answered 429 without its password being checked, until the oldest failure leaves the window.
# Many machines guessing at once get 10 guesses in 5 minutes between them; the user who mistypes a few times
# never meets it. Usernames other than the app's own share one count, so that inventing names neither gets an
# attacker fresh counts nor pushes the real account's out of memory.
ACCOUNT_FAILURES_MAX = 10
ACCOUNT_WINDOW_S = 300.0
LOGIN_BODY_MAX = 64 * 1024  # a login form is two short fields: a bigger body is refused unread
OTHER_USERS = "\x00other"  # the shared count's key: no username gradio accepts is this
# gradio's routes that answer without a login although they act on a session: /cancel stops a running
# answer (the Stop button), /reset is a no-op kept for old clients. Behind a login, they need it too.
SESSION_ROUTES = ("/gradio_api/cancel", "/gradio_api/reset")


@dataclass
class _Client:
    failures: int = 0
    last: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Account:
    failures: deque[float] = field(default_factory=deque)  # when each failed login of the window was checked

    def wait(self, now: float) -> float:
        """Seconds until this account may be tried again (0: now), the failures that left the window dropped."""
        while self.failures and now - self.failures[0] >= ACCOUNT_WINDOW_S:
            self.failures.popleft()
        if len(self.failures) < ACCOUNT_FAILURES_MAX:
            return 0.0
        return max(0.001, self.failures[0] + ACCOUNT_WINDOW_S - now)


class _Gone(Exception):
    """The client went away before its login form was read."""


async def _read_body(receive: Callable[..., Any], limit: int) -> bytes | None:
    """The request's whole body, or None when it is over ``limit`` bytes (``_Gone``: the client left)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _Gone
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Callable[..., Any]) -> Callable[..., Any]:
    """A ``receive`` that gives ``body`` again, then whatever the client sends next (its disconnect)."""
    sent = False

    async def again() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: dict[str, Any] = await receive()
        return message

    return again


async def _refuse(send: Callable[..., Any], status: int, detail: str, headers: list[tuple[bytes, bytes]]) -> None:
    """An answer of the Guard's own, as gradio words its login errors (``{"detail": ...}``)."""
    body = json.dumps({"detail": detail}).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware in front of gradio's routes: a growing delay after each failed login, per client
    address, a bound on failed logins per account whatever the address, and a login for the session routes
    gradio leaves open (``SESSION_ROUTES``).

    Middleware because gradio's ``/login`` route and its login check are closures inside ``App.create_app``:
    there is no hook for either. The login check below reads the same cookies gradio's ``get_current_user``
    does, and a client's attempts are taken one at a time, so parallel guesses wait their turn as well.
    ``serve`` has uvicorn trust no forwarded header (it would rewrite the client address before this sees it):
    which to believe is decided here, from ``trusted`` (the ``trusted_proxies`` setting).
    """

    def __init__(self, app: Callable[..., Any], trusted: Sequence[str] = (), users: Iterable[str] = ()) -> None:
        self.app = app
        self.trusted = proxy_networks(trusted)
        self.users = set(users)
        self.clients: OrderedDict[str, _Client] = OrderedDict()
        self.accounts: dict[str, _Account] = {}

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

    @staticmethod
    async def _username(scope: dict[str, Any], body: bytes) -> str:
        """The form's username as gradio reads it (stripped), from either encoding a login form comes in."""
        from starlette.requests import Request

        try:
            form = await Request(scope, _replay(body, _nothing)).form()
        except Exception:  # noqa: BLE001 - a body that is no form: gradio refuses it too; counted as no user
            return ""
        user = form.get("username")
        return user.strip() if isinstance(user, str) else ""

    async def _login(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        peer = (scope.get("client") or ("?", 0))[0]
        client = self._client(client_address(peer, scope.get("headers") or [], self.trusted))
        async with client.lock:
            if client.failures:
                await asyncio.sleep(min(LOGIN_DELAY_S * 2 ** (client.failures - 1), LOGIN_DELAY_MAX_S))
            try:
                body = await _read_body(receive, LOGIN_BODY_MAX)
            except _Gone:
                return
            if body is None:
                client.failures += 1
                client.last = time.monotonic()
                await _refuse(send, 413, "A sign-in form is two short fields; this one is too large.", [])
                return
            user = await self._username(scope, body)
            account = self.accounts.setdefault(user if user in self.users else OTHER_USERS, _Account())
            now = time.monotonic()
            wait = account.wait(now)
            if wait:
                client.failures += 1
                client.last = now
                retry = str(math.ceil(wait)).encode()
                detail = f"Too many failed sign-ins for this account: try again in {math.ceil(wait)} s."
                await _refuse(send, 429, detail, [(b"retry-after", retry)])
                return
            account.failures.append(now)  # the slot is taken before the check: parallel tries count at once
            status: list[int] = []

            async def watch(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status.append(int(message["status"]))
                await send(message)

            try:
                await self.app(scope, _replay(body, receive), watch)
            finally:
                failed = bool(status) and 400 <= status[0] < 500
                if not failed:  # signed in (the account's count starts again), or the server failed: no guess
                    if status and status[0] == 200:
                        account.failures.clear()
                        client.failures = 0
                    elif now in account.failures:
                        account.failures.remove(now)
                else:
                    client.failures += 1
                client.last = time.monotonic()


async def _nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}


class _InWords(gr.Error):
    """A ``gr.Error`` whose ``str`` is its message: gradio's validator path answers ``str(error)`` as the HTTP
    400's detail, and ``gr.Error`` quotes itself there."""

    def __str__(self) -> str:
        return str(self.message)


def _parameter_names(block_fn: Any) -> list[str]:
    names = list(getattr(block_fn, "input_parameter_names", None) or [])
    return names if len(names) == len(block_fn.inputs) else [f"#{i + 1}" for i in range(len(block_fn.inputs))]


def _inputs_in_words(app: gr.Blocks) -> None:
    """An API call whose inputs gradio cannot take is answered in words, naming the parameter.

    gradio answers too few inputs with its own text, the components' Python reprs included (``<gradio.components.
    api_component.Api object at 0x...>``), and a value a component cannot preprocess (``top_k`` "abc" for the
    slider behind ``/ask``) with an error it hides (``show_error=False``: ``{"error": null}``). Both come through
    two methods of the Blocks, wrapped here on this app only; what they accept is unchanged.
    """
    from gradio.exceptions import ComponentProcessingError

    validate, preprocess = app.validate_inputs, app.preprocess_data

    def validate_inputs(block_fn: Any, inputs: list[Any]) -> None:
        if len(inputs) < len(block_fn.inputs):
            names = _parameter_names(block_fn)
            raise _InWords(
                f"{len(inputs)} of the {len(names)} parameters given ({', '.join(names)}): give all {len(names)}, "
                "null where the default will do"
            )
        validate(block_fn, inputs)

    async def preprocess_data(block_fn: Any, inputs: list[Any], state: Any, explicit_call: bool = False) -> Any:
        try:
            return await preprocess(block_fn, inputs, state, explicit_call)
        except ComponentProcessingError as exc:
            m = re.search(r"at index (\d+)", str(exc))
            i = int(m.group(1)) if m else -1
            if not 0 <= i < len(inputs):
                raise _InWords("a parameter has a value of the wrong type") from None
            value = repr(inputs[i])
            raise _InWords(
                f"{_parameter_names(block_fn)[i]}: {value[:80]} is not a value this parameter takes"
            ) from None

    app.validate_inputs = validate_inputs  # type: ignore[method-assign]
    app.preprocess_data = preprocess_data  # type: ignore[method-assign]


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
    trusted = list(settings.trusted_proxies)
    proxy_networks(trusted)  # a bad entry: one line now, not a failure inside the server
    guard = Middleware(Guard, trusted=trusted, users=[auth[0]] if auth else [])
    _inputs_in_words(app)
    try:
        with _no_forwarded_addresses():
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
                    "middleware": [guard],
                },
            )
    except OSError as exc:  # the port is taken, or the host is not an address of this machine
        raise RagPapersError(
            f"cannot serve on {settings.host}:{settings.port}: {str(exc).split('. ')[0]} (choose another --port)"
        ) from None
    return str(url)


@contextmanager
def _no_forwarded_addresses() -> Iterator[None]:
    """uvicorn, as gradio starts it, takes the client's address from X-Forwarded-For whenever the peer is this
    machine (its ``forwarded_allow_ips``, read from FORWARDED_ALLOW_IPS when its Config is made, inside
    ``launch``): one machine could then claim a new address for every login guess. Trusting nobody there leaves
    the socket's peer in the request, and ``Guard`` believes a forwarded address only from ``trusted_proxies``."""
    saved = os.environ.get("FORWARDED_ALLOW_IPS")
    os.environ["FORWARDED_ALLOW_IPS"] = ""  # no address matches the empty name
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("FORWARDED_ALLOW_IPS", None)
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = saved


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
