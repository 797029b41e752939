"""Tests proving that ``tests/ollama_stub.py`` speaks the Ollama HTTP API.

They drive the stub with the official ``ollama`` client and with llama-index's
``Ollama`` LLM class exactly as production code would against a real server.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.llms.ollama import Ollama

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ollama_stub import OllamaStub, tokenize

MODEL = "llama3.2:3b"
REPLY = "Answer text [1]. The sky is blue because of Rayleigh scattering [2]."


@pytest.fixture
def stub() -> Iterator[OllamaStub]:
    with OllamaStub(models=[MODEL], reply=REPLY, token_delay=0.0) as server:
        yield server


def _client(stub: OllamaStub, timeout: float | None = 5.0) -> ollama.Client:
    return ollama.Client(host=stub.url, timeout=timeout)


def _llm(stub: OllamaStub, **kwargs: Any) -> Ollama:
    params: dict[str, Any] = {
        "model": MODEL,
        "base_url": stub.url,
        "request_timeout": 5.0,
    }
    params.update(kwargs)
    return Ollama(**params)


USER_MSG = [ChatMessage(role=MessageRole.USER, content="Why is the sky blue?")]


# --------------------------------------------------------------------- basics
def test_tokenize_round_trips() -> None:
    for text in [REPLY, "", "  lead and trail  ", "one", "multi\nline\n\ntext [3]."]:
        assert "".join(tokenize(text)) == text
    assert len(tokenize(REPLY)) > 5


def test_root_and_version(stub: OllamaStub) -> None:
    with urllib.request.urlopen(stub.url + "/", timeout=5) as resp:
        assert resp.status == 200
        assert resp.read() == b"Ollama is running"
    head = urllib.request.Request(stub.url + "/", method="HEAD")
    with urllib.request.urlopen(head, timeout=5) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(stub.url + "/api/version", timeout=5) as resp:
        assert "version" in json.loads(resp.read())


def test_url_is_local_free_port(stub: OllamaStub) -> None:
    assert stub.url.startswith("http://127.0.0.1:")
    assert stub.port > 0
    with OllamaStub() as other:
        assert other.port != stub.port


# --------------------------------------------------------- official client
def test_client_lists_models(stub: OllamaStub) -> None:
    stub.models = [MODEL, "qwen2.5:7b"]
    listed = _client(stub).list()
    names = [m.model for m in listed.models]
    assert names == [MODEL, "qwen2.5:7b"]
    first = listed.models[0]
    assert first.details is not None
    assert first.details.family == "llama"
    assert first.details.format == "gguf"
    assert first.details.parameter_size == "3B"
    assert first.details.quantization_level
    assert first.size and first.digest and first.modified_at is not None
    raw = json.loads(urllib.request.urlopen(stub.url + "/api/tags", timeout=5).read())
    assert raw["models"][0]["name"] == MODEL


def test_client_shows_model(stub: OllamaStub) -> None:
    shown = _client(stub).show(MODEL)
    assert shown.modelinfo is not None
    assert shown.modelinfo["llama.context_length"] == 131072
    assert shown.details is not None and shown.details.family == "llama"
    assert shown.template and shown.parameters
    assert stub.last_request("/api/show") == {"model": MODEL}


def test_client_show_unknown_model_is_404(stub: OllamaStub) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        _client(stub).show("nope:1b")
    assert info.value.status_code == 404
    assert info.value.error == "model 'nope:1b' not found"


def test_client_streams_chat(stub: OllamaStub) -> None:
    chunks = list(
        _client(stub).chat(
            MODEL,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            options={"num_ctx": 8192, "temperature": 0.1},
        )
    )
    assert len(chunks) == len(tokenize(REPLY)) + 1
    assert all(not c.done for c in chunks[:-1])
    assert "".join(c.message.content or "" for c in chunks) == REPLY
    last = chunks[-1]
    assert last.done and last.done_reason == "stop"
    assert last.eval_count == len(tokenize(REPLY))
    assert last.prompt_eval_count and last.total_duration
    body = stub.last_request("/api/chat")
    assert body["stream"] is True
    assert body["options"] == {"num_ctx": 8192, "temperature": 0.1}
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_client_chat_without_stream(stub: OllamaStub) -> None:
    resp = _client(stub).chat(MODEL, messages=[{"role": "user", "content": "hi"}], stream=False)
    assert resp.message.role == "assistant"
    assert resp.message.content == REPLY
    assert resp.done and resp.done_reason == "stop"


def test_client_chat_unknown_model_is_404(stub: OllamaStub) -> None:
    client = _client(stub)
    messages = [{"role": "user", "content": "x"}]
    expected = 'model "missing:7b" not found, try pulling it first'
    with pytest.raises(ollama.ResponseError) as info:
        client.chat("missing:7b", messages=messages, stream=False)
    assert info.value.status_code == 404
    assert info.value.error == expected
    with pytest.raises(ollama.ResponseError) as info:
        list(client.chat("missing:7b", messages=messages, stream=True))
    assert info.value.status_code == 404
    assert info.value.error == expected


def test_client_generate(stub: OllamaStub) -> None:
    client = _client(stub)
    parts = list(client.generate(MODEL, prompt="hello", stream=True))
    assert "".join(p.response or "" for p in parts) == REPLY
    assert parts[-1].done and parts[-1].done_reason == "stop"
    whole = client.generate(MODEL, prompt="hello", stream=False)
    assert whole.response == REPLY
    assert stub.last_request("/api/generate")["prompt"] == "hello"


def test_untagged_name_matches_latest(stub: OllamaStub) -> None:
    stub.models = ["mistral:latest"]
    resp = _client(stub).chat("mistral", messages=[{"role": "user", "content": "x"}], stream=False)
    assert resp.message.content == REPLY


def test_callable_reply_can_echo_prompt(stub: OllamaStub) -> None:
    stub.reply = lambda req: "You said: " + req["messages"][-1]["content"]
    resp = _client(stub).chat(MODEL, messages=[{"role": "user", "content": "ping pong"}])
    assert resp.message.content == "You said: ping pong"


def test_concurrent_streams(stub: OllamaStub) -> None:
    """Four streams are served at once: every one is still in flight when the last one starts (an overlap,
    not a wall-clock bound, so a loaded machine cannot fail it)."""
    stub.token_delay = 0.05  # each stream lasts at least len(tokens) x 50 ms
    results: list[str] = []
    spans: list[tuple[float, float]] = []

    def worker() -> None:
        chunks = _client(stub).chat(MODEL, messages=[{"role": "user", "content": "x"}], stream=True)
        first = None
        parts = []
        for c in chunks:
            first = time.monotonic() if first is None else first
            parts.append(c.message.content or "")
        spans.append((first or 0.0, time.monotonic()))
        results.append("".join(parts))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert results == [REPLY] * 4
    # Served in parallel, not one after another: the last stream's first token came before any stream ended.
    assert max(start for start, _ in spans) < min(end for _, end in spans)


# ------------------------------------------------------------- llama-index
def test_llama_index_stream_chat(stub: OllamaStub) -> None:
    llm = _llm(stub, context_window=4096)
    responses = list(llm.stream_chat(USER_MSG))
    deltas = [r.delta for r in responses]
    assert len([d for d in deltas if d]) == len(tokenize(REPLY))
    assert "".join(d or "" for d in deltas) == REPLY
    # Each response carries the text so far: it grows incrementally.
    texts = [r.message.content or "" for r in responses]
    assert all(REPLY.startswith(t) for t in texts)
    assert texts == sorted(texts, key=len)
    assert texts[-1] == REPLY
    body = stub.last_request("/api/chat")
    assert body["options"]["num_ctx"] == 4096
    assert body["stream"] is True
    assert body["messages"][-1] == {"role": "user", "content": "Why is the sky blue?"}
    # context_window given: no /api/show round-trip needed.
    assert stub.requests_to("/api/show") == []


def test_llama_index_chat(stub: OllamaStub) -> None:
    resp = _llm(stub, context_window=2048).chat(USER_MSG)
    assert resp.message.content == REPLY
    assert resp.raw is not None and resp.raw["usage"]["completion_tokens"] == len(tokenize(REPLY))
    body = stub.last_request("/api/chat")
    assert body["stream"] is False
    assert body["options"]["num_ctx"] == 2048


def test_llama_index_reads_context_window_from_show(stub: OllamaStub) -> None:
    llm = _llm(stub)  # context_window defaults to -1 -> asks /api/show
    assert llm.metadata.context_window == 131072
    llm.chat(USER_MSG)
    assert stub.requests_to("/api/show") == [{"model": MODEL}]
    assert stub.last_request("/api/chat")["options"]["num_ctx"] == 131072


# ----------------------------------------------------------------- failures
def test_die_after_tokens_official_client(stub: OllamaStub) -> None:
    stub.die_after_tokens = 3
    got: list[str] = []
    with pytest.raises(httpx.HTTPError):
        for chunk in _client(stub).chat(MODEL, messages=[{"role": "user", "content": "x"}], stream=True):
            got.append(chunk.message.content or "")
    assert got == tokenize(REPLY)[:3]


def test_die_after_tokens_llama_index(stub: OllamaStub) -> None:
    stub.die_after_tokens = 2
    deltas: list[str] = []
    with pytest.raises(Exception) as info:  # any transport error is fine
        for resp in _llm(stub, context_window=4096).stream_chat(USER_MSG):
            deltas.append(resp.delta or "")
    assert isinstance(info.value, (httpx.HTTPError, ConnectionError))
    assert deltas == tokenize(REPLY)[:2]
    # Non-streaming request also fails when the server dies.
    with pytest.raises((httpx.HTTPError, ConnectionError)):
        _llm(stub, context_window=4096).chat(USER_MSG)
    # And the server is still alive for the next request once the knob is reset.
    stub.die_after_tokens = None
    assert _llm(stub, context_window=4096).chat(USER_MSG).message.content == REPLY


def test_slow_server_times_out(stub: OllamaStub) -> None:
    stub.token_delay = 3.0
    llm = _llm(stub, context_window=4096, request_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        list(llm.stream_chat(USER_MSG))
    assert time.monotonic() - start < 2.0


def test_slow_first_token_times_out(stub: OllamaStub) -> None:
    stub.first_token_delay = 3.0
    start = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        _llm(stub, context_window=4096, request_timeout=0.3).chat(USER_MSG)
    assert time.monotonic() - start < 2.0


def test_stopped_server_refuses_connections() -> None:
    stub = OllamaStub(models=[MODEL], reply=REPLY).start()
    client = _client(stub)
    assert client.list().models  # opens a keep-alive connection
    stub.stop()
    assert not stub.running
    with pytest.raises(ConnectionError):
        client.list()
    with pytest.raises(ConnectionError):
        _client(stub).show(MODEL)
    with pytest.raises((ConnectionError, httpx.ConnectError)):
        list(_llm(stub, context_window=4096).stream_chat(USER_MSG))
    # It can come back on the same port.
    port = stub.port
    with stub:
        assert stub.port == port
        assert client.chat(MODEL, messages=[{"role": "user", "content": "x"}]).message.content == REPLY


def test_stop_interrupts_in_flight_stream() -> None:
    stub = OllamaStub(models=[MODEL], reply=REPLY, token_delay=5.0).start()
    got: list[str] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for chunk in _client(stub).chat(MODEL, messages=[{"role": "user", "content": "x"}], stream=True):
                got.append(chunk.message.content or "")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    reader = threading.Thread(target=consume)
    reader.start()
    deadline = time.monotonic() + 3
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    stub.stop()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert time.monotonic() - start < 2.0
    assert got == tokenize(REPLY)[:1]
    assert errors
    assert isinstance(errors[0], httpx.HTTPError)
