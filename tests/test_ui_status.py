"""The UI's word on what will answer (issue 16): the status pill and the model box.

``backend_status`` is what the pill shows; the model box's update says the selected backend's default.
Real backends: llama.cpp with the packaged SmolLM2 GGUF, a second GGUF file, no Ollama server.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rag_papers.config import Settings
from rag_papers.llm import smollm2_path
from rag_papers.ui.chat_app import ChatApp, backend_status


def test_the_packaged_demo_model_is_amber_and_says_its_answers_are_unreliable(tmp_path: Path) -> None:
    """Reported: the pill was green for SmolLM2, which invents facts."""
    settings = Settings(home=tmp_path / "home", ollama_host="http://127.0.0.1:9")
    gguf = smollm2_path()
    assert gguf is not None
    text, level = backend_status(settings, "llamacpp", None)
    assert level == "warn" and "demo model: answers are unreliable" in text, (text, level)
    assert backend_status(settings, "llamacpp", str(gguf)) == (text, level)  # named explicitly: the same file
    # Another GGUF file is the operator's choice: green, no warning.
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + b"\0" * 64)
    text, level = backend_status(settings, "llamacpp", str(other))
    assert level == "ok" and "demo model" not in text and "other.gguf" in text, (text, level)


class _Engine:
    """Just what ``ChatApp.__init__`` reads of an engine: no model, no index files needed for the model box."""

    class index:  # noqa: N801 - stands in for Engine.index
        @staticmethod
        def field_values(name: str) -> list[Any]:
            return []

        @staticmethod
        def count() -> int:
            return 0

        class store:  # noqa: N801 - stands in for Index.store (what the filters' values are kept by)
            @staticmethod
            def count_cached() -> int:
                return 0

            @staticmethod
            def max_seq() -> int:
                return 0


@pytest.mark.parametrize(
    ("backend", "says"),
    [("llamacpp", "SmolLM2"), ("ollama", "llama3.2:3b"), ("auto", "no LLM reachable"), ("extractive", "no model")],
)
def test_the_model_box_says_the_selected_backends_default(backend: str, says: str, tmp_path: Path) -> None:
    """No Ollama here: ``auto`` quotes the abstracts, and its box names no model (issue 45: it named llama3.2:3b,
    which answered nothing)."""
    settings = Settings(home=tmp_path / "home", ollama_host="http://127.0.0.1:9")
    app = ChatApp(settings, _Engine())  # type: ignore[arg-type]
    update, _ = app.on_backend(backend)
    assert says in update["info"], update
    assert ("default" in update["info"]) == (backend in ("llamacpp", "ollama")), update
    assert (update["value"] is None) == (backend in ("auto", "extractive")), update


def test_with_ollama_serving_auto_offers_its_models(tmp_path: Path) -> None:
    from ollama_stub import OllamaStub

    with OllamaStub(models=["llama3.2:3b", "qwen3:4b"]) as stub:
        settings = Settings(home=tmp_path / "home", ollama_host=stub.url)
        update, pill = ChatApp(settings, _Engine()).on_backend("auto")  # type: ignore[arg-type]
    assert update["value"] == "llama3.2:3b" and "qwen3:4b" in update["choices"], update
    assert "default: llama3.2:3b" in update["info"] and "model llama3&#46;2&#58;3b" in pill  # inert text
