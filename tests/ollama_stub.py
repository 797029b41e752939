"""A local, stdlib-only stand-in for the Ollama HTTP API, for tests.

It speaks enough of the real server's protocol (``/api/tags``, ``/api/show``,
``/api/chat``, ``/api/generate``, ``/api/version``, ``GET|HEAD /``) for the
official ``ollama`` Python client and ``llama_index.llms.ollama.Ollama`` to
work against it unchanged::

    with OllamaStub(models=["llama3.2:3b"], reply="Answer text [1].") as stub:
        client = ollama.Client(host=stub.url)
        ...
        assert stub.requests[-1][1]["options"]["num_ctx"] == 4096

Behaviour knobs are plain attributes and may be changed while the server runs:

* ``reply`` -- the assistant text, or a callable ``(request_json) -> str``.
* ``token_delay`` -- seconds slept between streamed tokens.
* ``first_token_delay`` -- seconds slept before the response starts (like a
  model load / prompt evaluation; the status line and headers are only sent
  afterwards, as with the real server).
* ``die_after_tokens`` -- when an int, a streaming response is cut off by
  closing the socket abruptly after that many tokens (no final chunk, no
  ``done`` line); a non-streaming response is cut off before any byte is
  sent.
* ``models`` -- list of installed model names.
* ``thinking_models`` -- models with the ``thinking`` capability (qwen3, deepseek-r1, gpt-oss): they reason before
  answering, in ``message.thinking`` chunks (``response``'s ``thinking`` for /api/generate), whenever the
  request's ``think`` is absent, true or a level, and not when it is false.
* ``thinking`` -- the reasoning text, or a callable ``(request_json) -> str``.
* ``always_think`` -- thinking models that cannot turn thinking off (gpt-oss): ``think: false`` is ignored, and
  they take a level (``"low"``, ``"medium"``, ``"high"``).
* ``legacy`` -- speak as a server older than thinking support (version 0.6.3): no ``capabilities`` in
  /api/show, ``think`` in a request ignored, and a thinking model's reasoning inline at the start of the
  content, ``<think>...</think>``, as DeepSeek-R1 and Qwen3 GGUFs wrote it there.
* ``version`` -- what /api/version says (``LEGACY_VERSION`` under ``legacy``).
* ``judge_reply`` -- the reply to a request that holds the output to a JSON schema (``format``: the LLM judge's),
  a string or a callable ``(request_json) -> str``; by default a verdict of "yes" (score 8) for every source the
  prompt numbers (``<source n="N">``), so an answer asked after it reads every source.
* ``judge_delay`` -- seconds slept before answering such a request (a judge that times out).

Today's server (the default) also refuses ``think`` for a model without the capability (HTTP 400, as Ollama
0.9 and later do), and stops at the request's ``num_predict`` tokens, thinking included, with
``done_reason`` ``length``.

Every POST body received is recorded in ``stub.requests`` as ``(path, json)``.
``stop()`` shuts the server down *and* severs open keep-alive connections, so
clients see the server as down; ``start()`` brings it back on the same port.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["OllamaStub", "judge_verdict", "sources_shown", "tokenize"]

ReplySource = str | Callable[[dict[str, Any]], str]

OLLAMA_VERSION = "0.12.6"  # thinking in its own field, ``capabilities`` in /api/show, ``think`` levels
LEGACY_VERSION = "0.6.3"  # before any of that
THINK_LEVELS = ("low", "medium", "high")
CONTEXT_LENGTH = 131072
_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>"
    "{{ range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
    "{{ .Content }}<|eot_id|>{{ end }}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
# A thinking model's template (Qwen3's, cut down): it mentions the reasoning block.
_THINK_TEMPLATE = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}"
)
_PARAMETERS = (
    'stop                           "<|start_header_id|>"\n'
    'stop                           "<|end_header_id|>"\n'
    'stop                           "<|eot_id|>"'
)
_TOKEN_RE = re.compile(r"\s+|\S+\s*")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into small streaming pieces (words with trailing spaces).

    ``"".join(tokenize(text)) == text`` always holds.
    """
    return _TOKEN_RE.findall(text)


def sources_shown(data: dict[str, Any]) -> list[int]:
    """The source numbers a request's prompt shows (``<source n="N">``), in order."""
    text = " ".join(str(m.get("content") or "") for m in data.get("messages") or [] if isinstance(m, dict))
    return [int(n) for n in re.findall(r'<source n="(\d+)">', text + str(data.get("prompt") or ""))]


def judge_verdict(
    data: dict[str, Any], addresses: str | Callable[[int], str], score: int = 8, missing: str = ""
) -> str:
    """A judge's verdict on every source ``data``'s prompt shows: ``addresses`` for each (or a function of its number)."""
    papers = [
        {
            "n": n,
            "addresses": addresses(n) if callable(addresses) else addresses,
            "score": score,
            "evidence": "",
            "missing": missing,
        }
        for n in sources_shown(data)
    ]
    return json.dumps({"papers": papers})


def _now_rfc3339() -> str:
    """A timestamp formatted like Ollama's (RFC 3339, nanosecond precision)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z"


def _normalise(name: str) -> str:
    """Ollama treats ``foo`` as ``foo:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _family(name: str) -> str:
    base = name.rsplit("/", 1)[-1].split(":", 1)[0].lower().replace("-", "")
    for fam in (
        "llama",
        "qwen2",
        "qwen3",
        "gemma3",
        "gemma2",
        "gemma",
        "mistral",
        "phi3",
        "gptoss",
    ):
        if base.startswith(fam):
            return fam
    return re.sub(r"[^a-z]+.*$", "", base) or "llama"


def _parameter_size(name: str) -> str:
    tag = _normalise(name).rsplit(":", 1)[-1].lower()
    match = re.search(r"(\d+(?:\.\d+)?)b", tag)
    return f"{match.group(1).upper()}B" if match else "3.2B"


def _count_words(chunks: Iterable[Any]) -> int:
    return sum(len(str(chunk).split()) for chunk in chunks if chunk)


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that keeps a back-reference to its stub."""

    daemon_threads = True
    allow_reuse_address = True
    stub: OllamaStub

    def __init__(self, address: tuple[str, int], stub: OllamaStub) -> None:
        self.stub = stub
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    """Request handler implementing the Ollama endpoints."""

    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "ollama-stub"
    sys_version = ""

    # ----------------------------------------------------------------- plumbing
    @property
    def stub(self) -> OllamaStub:
        return self.server.stub

    def setup(self) -> None:
        super().setup()
        self.stub._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.stub._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.stub.verbose:
            super().log_message(format, *args)

    def _send_bytes(
        self,
        status: int,
        body: bytes,
        content_type: str,
        *,
        head_only: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only:
            self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode("utf-8")
        self._send_bytes(status, body, "application/json; charset=utf-8")

    def _send_error_json(self, status: int, message: str) -> None:
        self._send_json(status, {"error": message})

    def _abort(self) -> None:
        """Drop the connection without a proper HTTP ending (server crash)."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass

    def _read_json(self) -> dict[str, Any] | None:
        """Read and parse the request body; send a 400 and return None on error."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            self.stub._record(self.path, None)
            self._send_error_json(HTTPStatus.BAD_REQUEST, f"invalid request body: {exc}")
            return None
        if not isinstance(data, dict):
            self.stub._record(self.path, data)
            self._send_error_json(HTTPStatus.BAD_REQUEST, "invalid request body")
            return None
        self.stub._record(self.path, data)
        return data

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
        self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ------------------------------------------------------------------- routes
    def do_HEAD(self) -> None:
        if self.path.split("?", 1)[0] == "/":
            self._send_bytes(
                HTTPStatus.OK,
                b"Ollama is running",
                "text/plain; charset=utf-8",
                head_only=True,
            )
        else:
            self._send_bytes(
                HTTPStatus.NOT_FOUND,
                b"404 page not found",
                "text/plain",
                head_only=True,
            )

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/":
            self._send_bytes(HTTPStatus.OK, b"Ollama is running", "text/plain; charset=utf-8")
        elif path == "/api/version":
            self._send_json(HTTPStatus.OK, {"version": self.stub.server_version})
        elif path == "/api/tags":
            self._send_json(
                HTTPStatus.OK,
                {"models": [self.stub._tag_entry(m) for m in self.stub.models]},
            )
        elif path == "/api/ps":
            self._send_json(HTTPStatus.OK, {"models": []})
        else:
            self._send_bytes(HTTPStatus.NOT_FOUND, b"404 page not found", "text/plain")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        routes: dict[str, Callable[[dict[str, Any]], None]] = {
            "/api/show": self._show,
            "/api/chat": self._chat,
            "/api/generate": self._generate,
        }
        handler = routes.get(path)
        if handler is None:
            # Drain the body so keep-alive stays in sync, then 404.
            length = int(self.headers.get("Content-Length") or 0)
            if length > 0:
                self.rfile.read(length)
            self._send_bytes(HTTPStatus.NOT_FOUND, b"404 page not found", "text/plain")
            return
        data = self._read_json()
        if data is not None:
            handler(data)

    def _show(self, data: dict[str, Any]) -> None:
        name = str(data.get("model") or data.get("name") or "")
        known = self.stub._find_model(name)
        if known is None:
            self._send_error_json(HTTPStatus.NOT_FOUND, f"model '{name}' not found")
            return
        self._send_json(HTTPStatus.OK, self.stub._show_entry(known))

    def _thinks(self, model: str, data: dict[str, Any]) -> bool | str:
        """Whether this request thinks (False), and how: True for today's separate field, "inline" for a legacy
        server's ``<think>`` in the content; or an error message (a str starting "!") for an HTTP 400."""
        stub = self.stub
        thinker = model in stub.thinking_models or model in stub.always_think
        if stub.legacy:  # an old server does not know ``think``: a thinking model always reasons, inline
            return "inline" if thinker else False
        think = data.get("think")
        if think is not None and not isinstance(think, bool) and think not in THINK_LEVELS:
            return f"!invalid think value: {think!r} (must be true, false or one of {', '.join(THINK_LEVELS)})"
        if think not in (None, False) and not thinker:
            return f'!"{model}" does not support thinking'
        if isinstance(think, str) and model not in stub.always_think:
            return True  # a level for a model without levels is taken as on
        if think is False:
            return model in stub.always_think
        return thinker

    def _chat(self, data: dict[str, Any]) -> None:
        self._complete(data, chat=True)

    def _generate(self, data: dict[str, Any]) -> None:
        self._complete(data, chat=False)

    def _complete(self, data: dict[str, Any], *, chat: bool) -> None:
        stub = self.stub
        name = str(data.get("model") or "")
        if not name:
            self._send_error_json(HTTPStatus.BAD_REQUEST, "model is required")
            return
        model = stub._find_model(name)
        if model is None:
            self._send_error_json(HTTPStatus.NOT_FOUND, f'model "{name}" not found, try pulling it first')
            return

        started = time.perf_counter_ns()
        thinks = self._thinks(model, data)
        if isinstance(thinks, str) and thinks.startswith("!"):
            self._send_error_json(HTTPStatus.BAD_REQUEST, thinks[1:])
            return
        reply = stub._judge_reply_for(data) if data.get("format") else stub._reply_for(data)
        thought = stub._thinking_for(data) if thinks else ""
        if thinks == "inline":
            reply, thought = f"<think>\n{thought}\n</think>\n\n{reply}", ""
        # (kind, text) pieces: the reasoning first, then the answer; cut at num_predict as the server cuts.
        pieces = [("thinking", t) for t in tokenize(thought)] + [("content", t) for t in tokenize(reply)]
        options = data.get("options")
        limit = options.get("num_predict") if isinstance(options, dict) else None
        done_reason = "stop"
        if isinstance(limit, int) and 0 <= limit < len(pieces):
            pieces, done_reason = pieces[:limit], "length"
        tokens = [t for kind, t in pieces if kind == "content"]
        reply = "".join(tokens)
        thought = "".join(t for kind, t in pieces if kind == "thinking")
        stream = data.get("stream", True) is not False
        die_after = stub.die_after_tokens

        if chat:
            prompt_chunks = [m.get("content") for m in data.get("messages") or [] if isinstance(m, dict)]
        else:
            prompt_chunks = [data.get("system"), data.get("prompt")]
        prompt_eval_count = max(1, _count_words(prompt_chunks))

        # Model load / prompt evaluation: nothing (not even headers) is sent yet.
        if data.get("format") and not stub._sleep(stub.judge_delay):
            self._abort()
            return
        if not stub._sleep(stub.first_token_delay):
            self._abort()
            return

        def piece(content: str, *, done: bool, thinking: str = "") -> dict[str, Any]:
            obj: dict[str, Any] = {"model": name, "created_at": _now_rfc3339()}
            if chat:
                obj["message"] = {"role": "assistant", "content": content}
                if thinking:
                    obj["message"]["thinking"] = thinking
            else:
                obj["response"] = content
                if thinking:
                    obj["thinking"] = thinking
            obj["done"] = done
            return obj

        def final(content: str, thinking: str = "") -> dict[str, Any]:
            obj = piece(content, done=True, thinking=thinking)
            total = time.perf_counter_ns() - started
            obj.update(
                {
                    "done_reason": done_reason,
                    "total_duration": total,
                    "load_duration": 1_000_000,
                    "prompt_eval_count": prompt_eval_count,
                    "prompt_eval_duration": 2_000_000,
                    "eval_count": len(pieces),
                    "eval_duration": max(1, total - 3_000_000),
                }
            )
            if not chat:
                obj["context"] = list(range(1, prompt_eval_count + len(pieces) + 1))
            return obj

        if not stream:
            if die_after is not None:
                for _ in pieces[:die_after]:
                    if not stub._sleep(stub.token_delay):
                        break
                self._abort()
                return
            for _ in pieces[1:]:
                if not stub._sleep(stub.token_delay):
                    self._abort()
                    return
            self._send_json(HTTPStatus.OK, final(reply, thought))
            return

        try:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index, (kind, token) in enumerate(pieces):
                if die_after is not None and index >= die_after:
                    self._abort()
                    return
                if index > 0 and not stub._sleep(stub.token_delay):
                    self._abort()
                    return
                chunk = piece("", done=False, thinking=token) if kind == "thinking" else piece(token, done=False)
                self._write_chunk(json.dumps(chunk).encode("utf-8") + b"\n")
            if die_after is not None and len(pieces) <= die_after and die_after >= 0:
                # Asked to die after at least as many tokens as there are: die
                # right before the final "done" line.
                self._abort()
                return
            self._write_chunk(json.dumps(final("")).encode("utf-8") + b"\n")
            self._end_chunks()
        except OSError:
            # Client went away (e.g. it timed out); nothing more to do.
            self.close_connection = True


class OllamaStub:
    """Threaded fake Ollama server on ``127.0.0.1`` and a free port."""

    def __init__(
        self,
        models: Iterable[str] = ("llama3.2:3b",),
        reply: ReplySource = "Answer text [1].",
        token_delay: float = 0.0,
        first_token_delay: float = 0.0,
        die_after_tokens: int | None = None,
        thinking_models: Iterable[str] = (),
        thinking: ReplySource = "The user asks about the abstracts. Source 1 answers it, so the answer cites [1].",
        always_think: Iterable[str] = (),
        legacy: bool = False,
        version: str | None = None,
        judge_reply: ReplySource | None = None,
        judge_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
    ) -> None:
        self.models: list[str] = list(models)
        self.reply: ReplySource = reply
        self.token_delay: float = token_delay
        self.first_token_delay: float = first_token_delay
        self.die_after_tokens: int | None = die_after_tokens
        self.thinking_models: set[str] = {_normalise(m) for m in thinking_models} | set(thinking_models)
        self.always_think: set[str] = {_normalise(m) for m in always_think} | set(always_think)
        self.thinking: ReplySource = thinking
        self.legacy: bool = legacy
        self.version: str | None = version
        self.judge_reply: ReplySource | None = judge_reply
        self.judge_delay: float = judge_delay
        self.verbose: bool = verbose
        self.requests: list[tuple[str, Any]] = []
        self.host: str = host
        self.port: int = port
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321``."""
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> Self:
        """Start serving (again, on the same port if it was started before)."""
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self.port), self)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"OllamaStub:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and sever all open connections ("server down")."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        self._server = None
        self._thread = None
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._connections)
            self._connections.clear()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)

    close = stop

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def server_version(self) -> str:
        """What /api/version says: ``version`` if set, else today's or (``legacy``) the old one."""
        return self.version or (LEGACY_VERSION if self.legacy else OLLAMA_VERSION)

    # --------------------------------------------------------------- helpers
    def requests_to(self, path: str) -> list[Any]:
        """Bodies of the recorded requests sent to ``path`` (e.g. ``/api/chat``)."""
        with self._lock:
            return [body for p, body in self.requests if p == path]

    def last_request(self, path: str | None = None) -> Any:
        """Body of the most recent recorded request (to ``path`` if given)."""
        with self._lock:
            for p, body in reversed(self.requests):
                if path is None or p == path:
                    return body
        raise LookupError(f"no request recorded for {path or 'any path'}")

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    # ----------------------------------------------------- internal (handler)
    def _record(self, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append((path.split("?", 1)[0], body))

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _sleep(self, seconds: float) -> bool:
        """Sleep, waking early on stop(). Returns False if the stub is stopping."""
        if seconds and seconds > 0:
            self._stopping.wait(seconds)
        return not self._stopping.is_set()

    def _reply_for(self, data: dict[str, Any]) -> str:
        reply = self.reply
        return str(reply(data)) if callable(reply) else str(reply)

    def _judge_reply_for(self, data: dict[str, Any]) -> str:
        reply = self.judge_reply
        if reply is not None:
            return str(reply(data)) if callable(reply) else str(reply)
        return judge_verdict(data, "yes")

    def _thinking_for(self, data: dict[str, Any]) -> str:
        thinking = self.thinking
        return str(thinking(data)) if callable(thinking) else str(thinking)

    def _find_model(self, name: str) -> str | None:
        if not name:
            return None
        wanted = _normalise(name)
        for model in list(self.models):
            if model == name or _normalise(model) == wanted:
                return model
        return None

    @staticmethod
    def _details(name: str) -> dict[str, Any]:
        family = _family(name)
        return {
            "parent_model": "",
            "format": "gguf",
            "family": family,
            "families": [family],
            "parameter_size": _parameter_size(name),
            "quantization_level": "Q4_K_M",
        }

    @classmethod
    def _tag_entry(cls, name: str) -> dict[str, Any]:
        full = _normalise(name)
        return {
            "name": full,
            "model": full,
            "modified_at": "2025-01-01T12:00:00.000000000Z",
            "size": 2_019_393_189,
            "digest": hashlib.sha256(full.encode("utf-8")).hexdigest(),
            "details": cls._details(name),
        }

    def _show_entry(self, name: str) -> dict[str, Any]:
        family = _family(name)
        thinker = name in self.thinking_models or name in self.always_think
        entry: dict[str, Any] = {
            "license": "Stub license.",
            "modelfile": f"# Modelfile generated by ollama-stub\nFROM {_normalise(name)}\n",
            "parameters": _PARAMETERS,
            "template": _THINK_TEMPLATE if thinker else _TEMPLATE,
            "details": self._details(name),
            "model_info": {
                "general.architecture": family,
                "general.basename": name.split(":", 1)[0],
                "general.parameter_count": 3_212_749_888,
                "general.quantization_version": 2,
                f"{family}.context_length": CONTEXT_LENGTH,
                "llama.context_length": CONTEXT_LENGTH,
                f"{family}.embedding_length": 3072,
                f"{family}.block_count": 28,
            },
            "capabilities": ["completion", "tools", *(["thinking"] if thinker else [])],
            "modified_at": "2025-01-01T12:00:00.000000000Z",
        }
        if self.legacy:
            del entry["capabilities"]  # a server older than 0.6.4 sends none
        return entry
