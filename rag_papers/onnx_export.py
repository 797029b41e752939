"""The ONNX export: a model folder's transformer as an onnxruntime graph, made once and cached.

``export_onnx`` runs ``torch.onnx.export`` (the only place torch and transformers are needed by
the ``onnx`` backends), then fuses the graph with onnxruntime's transformer optimizer (``fp32``) or
quantizes its weights to int8 (``int8``), and measures how close the result's vectors stay to the
plain export's on fixed probe texts. Graphs are cached in ``settings.models_dir`` keyed by model
folder and variant, and written atomically (a scratch folder, then renames).

Its own module so the runtime (embedding.py's ``OnnxEmbedder``) reads as inference only. It sits
below that runtime, which exports through it, so the fidelity check is handed the runtime
(``runtime=OnnxEmbedder``) rather than importing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from rag_papers import RagPapersError
from rag_papers.model_files import resolve_model_path, scratch_dir, writable_cache

OnnxVariant = Literal["fp32", "int8"]
# Bump when the export recipe changes, so stale cached graphs are not reused.
EXPORT_VERSION = 1


class GraphVectors(Protocol):
    """What the fidelity check needs of a loaded graph: vectors of texts, as the runtime computes them."""

    def embed_array(self, texts: Sequence[str]) -> Any: ...


class Runtime(Protocol):
    """The runtime that runs an exported graph (``embedding.OnnxEmbedder``), given the model and the graph."""

    def __call__(self, model: str, *, onnx_path: Path) -> GraphVectors: ...


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


def import_onnxruntime() -> Any:
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


def _export_raw(info: ModelInfo, dest: Path) -> None:
    """The transformer (without pooling) as ONNX: inputs ids/mask/types, output last_hidden_state."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    # Its "Loading weights" bar is not this job's progress: export_onnx says what is happening.
    hf_logging.disable_progress_bar()
    model = AutoModel.from_pretrained(str(info.path), attn_implementation="eager").eval()

    import inspect

    # BERT-style models take token types, MPNet-style ones do not: export what the model accepts.
    with_types = "token_type_ids" in inspect.signature(model.forward).parameters

    class Wrapped(torch.nn.Module):  # type: ignore[misc]  # torch is not analysed (pyproject.toml): Any
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

    import_onnxruntime()
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

    import_onnxruntime()
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


def _fidelity(runtime: Runtime, model_path: Path, reference: Path, candidate: Path) -> dict[str, float]:
    """Cosine of ``candidate``'s vectors to ``reference``'s on the probe texts (same CPU, same kernels)."""
    import numpy as np

    texts = _probe_texts()
    ref = runtime(str(model_path), onnx_path=reference).embed_array(texts)
    got = runtime(str(model_path), onnx_path=candidate).embed_array(texts)
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


def export_onnx(model: str | Path, variant: OnnxVariant, cache_dir: Path, *, runtime: Runtime) -> Path:
    """The cached ONNX graph for this model folder and variant, exporting it first if needed.

    Needs torch and transformers (only here, once); the file appears atomically, so a
    killed export never leaves a half-written graph behind and concurrent exports are safe.
    Next to it, ``<name>.json`` records how close its vectors are to the plain fp32 export
    on this machine (int8 kernels differ between CPUs), measured with ``runtime``
    (``embedding.OnnxEmbedder``); ``load_embedder`` reads it.
    """
    if variant not in ("fp32", "int8"):
        raise RagPapersError(f"unknown ONNX variant {variant!r}; choose fp32 or int8")
    path = resolve_model_path(str(model), cache_dir)
    final = onnx_cache_path(path, variant, cache_dir)
    if final.is_file():
        return final
    writable_cache(final.parent)
    onnxruntime = import_onnxruntime()
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
            check = _fidelity(runtime, path, raw, tmp)
        else:
            try:
                _optimize(raw, tmp, info)
                check = _fidelity(runtime, path, raw, tmp)
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
