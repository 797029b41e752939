"""Embedding models at run time: the ``Embedder`` protocol and the backends that implement it.

Part of the index stage, kept in its own module so the runtime can be swapped without
touching storage code. Where a model's files come from is model_files.py's job, and the
one-time ONNX export is onnx_export.py's: this module only loads a model and embeds. Three
backends, one interface (the ``Embedder`` protocol: ``name``, ``dim``, ``max_tokens``,
``count_tokens``, ``embed_documents``, ``embed_array``, ``embed_query``, ``llama_index``):

- ``torch``: sentence-transformers through llama-index's ``HuggingFaceEmbedding``;
- ``onnx`` (the default): the same network exported once to ONNX with
  ``torch.onnx.export`` (fused with onnxruntime's transformer optimizer) and run with
  onnxruntime directly, with the model folder's own pooling and normalisation. Its
  vectors match torch's and query time imports neither torch nor sentence-transformers,
  so a one-shot ``rag-papers search`` starts fast;
- ``onnx-int8``: the plain export with its weight matrices quantized to int8 (dynamic,
  per output channel): measured faster than ``onnx``, with vectors slightly off fp32's,
  which moved a few paraphrase questions on eval/qa.jsonl. Figures:
  eval/results/embedding.md and docs/design-notes.md.

``load_embedder(settings)`` picks one. Exported graphs are cached in ``settings.models_dir``
(the ``model_cache`` setting, by default one cache per user: ``config.user_model_cache``);
see onnx_export.py.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rag_papers import RagPapersError
from rag_papers.choices import EMBED_BACKENDS
from rag_papers.model_files import default_model_cache, resolve_model_path
from rag_papers.onnx_export import OnnxVariant, export_info, export_onnx, import_onnxruntime, read_model_info

if TYPE_CHECKING:
    from rag_papers.config import Settings

# The int8 graph is used only if, on this machine, its vectors stay this close to fp32 (mean
# cosine on fixed probe texts): int8 kernels differ between CPUs (what one CPU gave: docs/design-notes.md).
INT8_MIN_COSINE = 0.985


class TextEmbedder(Protocol):
    """What the answer stage needs of an embedding model (the claim check, question coverage, quote ranking):
    sentence and query vectors. The one protocol for it, so a test's small fake model satisfies it too."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


class Embedder(TextEmbedder, Protocol):
    """What the index and retrieval need of an embedding model, whichever runtime runs it.

    A protocol, not a base class: the torch and ONNX implementations share no code or state,
    and the ONNX one must not import torch.
    """

    name: str  # the embed_model setting it was loaded from
    backend: str  # the embed_backend it implements: "torch", "onnx" or "onnx-int8"
    path: Path  # the model folder
    dim: int
    max_tokens: int  # longer texts are truncated
    tokens_embedded: int  # model tokens run through embed_documents/embed_array so far (the bench's work measure)
    embed_seconds: float  # wall time spent embedding them

    def count_tokens(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens or truncation (for chunking)."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_array(self, texts: Sequence[str]) -> Any:
        """(n, dim) float32 array, the form Chroma takes."""
        ...

    def embed_query(self, text: str) -> list[float]: ...

    def llama_index(self) -> Any:
        """A llama-index ``BaseEmbedding`` over this model (for the llama-index baselines)."""
        ...


class TorchEmbedder:
    """Sentence-transformers through llama-index's ``HuggingFaceEmbedding``, loaded offline."""

    backend: str = "torch"
    # Model tokens run through embed_documents so far, by anyone (special tokens included,
    # after truncation): the bench compares ingest work with the baseline's by this.
    tokens_embedded: int = 0
    embed_seconds: float = 0.0  # wall time spent embedding them: the share of an ingest the model takes

    def __init__(self, model: str, batch_size: int = 64, threads: int = 0, cache_dir: Path | None = None) -> None:
        path = resolve_model_path(model, cache_dir)
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
        # Keep the model's limit: in sentence-transformers >= 5 ``max_seq_length`` *is*
        # ``tokenizer.model_max_length``, so lifting it would silently disable truncation.
        self.tokenizer = st.tokenizer

    def count_tokens(self, text: str) -> list[int]:
        # verbose=False: counting whole abstracts past the window is the point (chunking), not an error.
        return list(self.tokenizer.encode(text, add_special_tokens=False, verbose=False))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        t0 = time.perf_counter()
        if texts:
            enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_tokens)
            self.tokens_embedded += sum(len(ids) for ids in enc["input_ids"])
        out = [list(v) for v in self._emb.get_text_embedding_batch(list(texts))]
        self.embed_seconds += time.perf_counter() - t0
        return out

    def embed_array(self, texts: Sequence[str]) -> Any:
        """(n, dim) float32 array, the form the ONNX backend produces and Chroma takes."""
        import numpy as np

        return np.asarray(self.embed_documents(texts), dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, text: str) -> list[float]:
        return list(self._emb.get_query_embedding(text))

    def llama_index(self) -> Any:
        """llama-index's ``HuggingFaceEmbedding`` this embedder runs on."""
        return self._emb


# ------------------------------------------------------------------ ONNX runtime
class OnnxEmbedder:
    """The same model run by onnxruntime: tokenizers + InferenceSession + numpy pooling.

    An ``Embedder`` by shape, not by inheritance: it shares nothing with ``TorchEmbedder``
    and never imports torch once the graph is exported.
    """

    tokens_embedded: int = 0
    embed_seconds: float = 0.0

    def __init__(
        self,
        model: str,
        batch_size: int = 64,
        threads: int = 0,
        variant: OnnxVariant = "fp32",
        cache_dir: Path | None = None,
        max_batch_tokens: int = 2048,
        onnx_path: Path | None = None,
    ) -> None:
        import numpy as np
        from tokenizers import Tokenizer

        ort = import_onnxruntime()

        self._np = np
        cache = cache_dir if cache_dir is not None else default_model_cache()
        self.path = resolve_model_path(model, cache)
        self.name = model
        self.variant: OnnxVariant = variant
        self.backend = "onnx" if variant == "fp32" else f"onnx-{variant}"
        self.batch_size = max(1, batch_size)
        # Rows x padded width per onnxruntime call. Small batches of long texts ran faster here (and
        # attention memory grows with rows x width^2): 8 abstracts of 256 tokens, 64 short queries.
        self.max_batch_tokens = max_batch_tokens
        self.info = read_model_info(self.path)
        self.max_tokens = self.info.max_tokens
        self.dim = self.info.dim
        if onnx_path is None:
            onnx_path = export_onnx(self.path, variant, cache, runtime=OnnxEmbedder)
        self.onnx_path = onnx_path

        tok_file = self.path / "tokenizer.json"
        if not tok_file.is_file():
            raise RagPapersError(
                f"{self.path}: no tokenizer.json (a fast tokenizer) for the ONNX backend; use embed_backend=torch"
            )
        self._counter = Tokenizer.from_file(str(tok_file))
        self._counter.no_truncation()
        self._counter.no_padding()
        self._tok = Tokenizer.from_file(str(tok_file))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=self.max_tokens)
        pad_id = next((i for t in ("[PAD]", "<pad>") if (i := self._tok.token_to_id(t)) is not None), None)
        self._pad_id = int(pad_id) if pad_id is not None else 0

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(0, threads)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # No spin-waiting between runs: on a 2-core machine onnxruntime's idle worker
        # spinning took a core from the SQLite and Chroma work around each query.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(self.onnx_path), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._llama: Any = None

    def count_tokens(self, text: str) -> list[int]:
        return list(self._counter.encode(text, add_special_tokens=False).ids)

    def _prep(self, text: str) -> str:
        text = str(text).strip()  # as sentence-transformers' Transformer.tokenize does
        return text.lower() if self.info.lowercase else text

    def _run(self, encodings: Sequence[Any]) -> Any:
        np = self._np
        width = max(len(e.ids) for e in encodings)
        n = len(encodings)
        ids = np.full((n, width), self._pad_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for row, e in enumerate(encodings):
            k = len(e.ids)
            ids[row, :k] = e.ids
            mask[row, :k] = 1
            types[row, :k] = e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        hidden = self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
        m = mask[..., None].astype(np.float32)
        pooling = self.info.pooling
        if pooling == "cls":
            vec = hidden[:, 0]
        elif pooling == "max":
            vec = np.where(m > 0, hidden, -1e9).max(axis=1)
        else:
            counts = np.maximum(m.sum(axis=1), 1e-9)
            vec = (hidden * m).sum(axis=1) / (np.sqrt(counts) if pooling == "mean_sqrt_len" else counts)
        if self.info.normalize:
            vec = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
        return vec.astype(np.float32)

    def embed_array(self, texts: Sequence[str]) -> Any:
        """(n, dim) float32 array; batches are formed from similar lengths to pad little."""
        np = self._np
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        t0 = time.perf_counter()
        encodings = self._tok.encode_batch([self._prep(t) for t in texts])
        self.tokens_embedded += sum(len(e.ids) for e in encodings)
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        out = np.zeros((len(encodings), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            # Longest first, so the first row sets the padded width: fill up to the token budget.
            width = len(encodings[order[start]].ids)
            rows = max(1, min(self.batch_size, self.max_batch_tokens // max(width, 1)))
            idx = order[start : start + rows]
            out[idx] = self._run([encodings[i] for i in idx])
            start += rows
        self.embed_seconds += time.perf_counter() - t0
        return out

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return list(self.embed_array(list(texts)).tolist())

    def embed_query(self, text: str) -> list[float]:
        return list(self._run([self._tok.encode(self._prep(text))])[0].tolist())

    def llama_index(self) -> Any:
        """A llama-index ``BaseEmbedding`` over this model (made once; imports llama-index)."""
        if self._llama is None:
            self._llama = _wrap_for_llama_index(self)
        return self._llama


def _wrap_for_llama_index(embedder: OnnxEmbedder) -> Any:
    """A llama-index ``BaseEmbedding`` that calls ``embedder``."""
    from llama_index.core.embeddings import BaseEmbedding
    from pydantic import PrivateAttr

    class _Wrapped(BaseEmbedding):
        _inner: OnnxEmbedder = PrivateAttr()

        def __init__(self, inner: OnnxEmbedder) -> None:
            super().__init__(model_name=inner.name, embed_batch_size=inner.batch_size)
            self._inner = inner

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._inner.embed_query(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._inner.embed_query(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._inner.embed_documents([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return self._inner.embed_documents(texts)

    return _Wrapped(embedder)


def load_embedder(settings: Settings, backend: str | None = None, model: str | None = None) -> Embedder:
    """The embedder ``settings.embed_backend`` (or ``backend``) asks for, of ``settings.embed_model`` (or ``model``:
    the second model, ``embed_model_2``, runs on the same backend)."""
    name = backend or getattr(settings, "embed_backend", "torch")
    model_name = model or settings.embed_model
    cache = settings.models_dir
    if name == "torch":
        return TorchEmbedder(model_name, settings.embed_batch_size, settings.embed_threads, cache)
    if name in ("onnx", "onnx-int8"):
        variant: OnnxVariant = "int8" if name == "onnx-int8" else "fp32"
        if variant == "int8":
            graph = export_onnx(model_name, "int8", cache, runtime=OnnxEmbedder)
            cos = float(export_info(graph).get("cosine_mean", 1.0))
            if cos < INT8_MIN_COSINE:
                # e.g. u8s8 saturation on CPUs without VNNI: measured at export, not assumed.
                print(
                    f"rag-papers: int8 embeddings on this CPU are too far from fp32 (cosine {cos:.4f} < "
                    f"{INT8_MIN_COSINE}); using embed_backend=onnx instead",
                    file=sys.stderr,
                )
                variant = "fp32"
        return OnnxEmbedder(model_name, settings.embed_batch_size, settings.embed_threads, variant, cache)
    raise RagPapersError(f"unknown embed_backend {name!r}; choose from {', '.join(EMBED_BACKENDS)}")
