"""One model cache per user (issue 16, CLI polish): the one-time ONNX export is shared by every data directory.

Without a ``model_cache`` setting, exports (and unpacked split-zip models, and hub downloads) go to
``$XDG_CACHE_HOME/rag-papers/models``, else ``~/.cache/rag-papers/models``, not into each data directory. These
tests point XDG_CACHE_HOME into their own folder (never the real user cache) and link the graph the suite already
exported there, so nothing is exported again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SEEDS, VENV_BIN, run_main

from rag_papers.config import Settings
from rag_papers.embedding import OnnxEmbedder


def link_graph(embedder: OnnxEmbedder, folder: Path) -> list[str]:
    """The suite's exported MiniLM graph (and its side file) in ``folder``, as an earlier export would leave it."""
    folder.mkdir(parents=True, exist_ok=True)
    graph = embedder.onnx_path
    for f in (graph, graph.with_suffix(".json")):
        try:
            os.link(f, folder / f.name)
        except OSError:  # another file system
            shutil.copyfile(f, folder / f.name)
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def xdg_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No model_cache setting, and XDG_CACHE_HOME in this test's folder: the defaults as a user gets them."""
    monkeypatch.delenv("RAG_PAPERS_MODEL_CACHE", raising=False)
    xdg = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    return xdg


@pytest.fixture
def few(tmp_path: Path) -> Path:
    """Three seed abstracts: an ingest that costs little beside loading the model."""
    paragraphs = [
        p for p in next(iter(sorted(SEEDS.glob("*.txt")))).read_text(encoding="utf-8").split("\n\n") if p.strip()
    ]
    corpus = tmp_path / "few.txt"
    corpus.write_text("\n\n".join(paragraphs[:4]) + "\n", encoding="utf-8")
    return corpus


def test_the_default_cache_is_one_per_user_and_follows_XDG_CACHE_HOME(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAG_PAPERS_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    a, b = Settings(home=tmp_path / "a"), Settings(home=tmp_path / "b")
    assert a.models_dir == b.models_dir == tmp_path / "xdg" / "rag-papers" / "models"
    # Without XDG_CACHE_HOME (or with a relative one, which the XDG spec says to ignore): ~/.cache.
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for value in (None, "", "relative/cache"):
        if value is None:
            monkeypatch.delenv("XDG_CACHE_HOME")
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert Settings(home=tmp_path / "a").models_dir == tmp_path / "user" / ".cache" / "rag-papers" / "models"
    # The setting (or RAG_PAPERS_MODEL_CACHE) still wins.
    assert Settings(home=tmp_path / "a", model_cache=tmp_path / "mine").models_dir == tmp_path / "mine"
    monkeypatch.setenv("RAG_PAPERS_MODEL_CACHE", str(tmp_path / "env"))
    assert Settings(home=tmp_path / "a").models_dir == tmp_path / "env"


def test_two_data_directories_share_one_export(
    xdg_cache: Path, few: Path, tmp_path: Path, embedder: OnnxEmbedder
) -> None:
    """The second data directory finds the graph the first one's export left: no second "exporting" line."""
    shared = xdg_cache / "rag-papers" / "models"
    a, b = tmp_path / "a", tmp_path / "b"
    assert Settings(home=a).models_dir == Settings(home=b).models_dir == shared
    files = link_graph(embedder, shared)  # the first ingest's export, without its minute
    for home in (a, b):
        res = run_main("ingest", "--no-progress", "--home", str(home), str(few))
        assert res.returncode == 0 and "3 papers indexed" in res.stdout, res.stderr
        assert "exporting" not in res.stderr, res.stderr
        found = run_main("search", "--json", "--home", str(home), "low-rank adaptation")
        assert found.returncode == 0 and json.loads(found.stdout)["results"], found.stderr
        assert "exporting" not in found.stderr, found.stderr
        assert not (home / "models").exists()  # no cache of its own
    assert sorted(p.name for p in shared.iterdir()) == files  # nothing exported beside it


def test_info_says_where_the_model_cache_is(xdg_cache: Path, tmp_path: Path) -> None:
    shared = xdg_cache / "rag-papers" / "models"
    res = run_main("info", "--home", str(tmp_path / "a"))
    assert res.returncode == 0, res.stderr
    line = next(line for line in res.stdout.splitlines() if line.strip().startswith("model_cache:"))
    assert str(shared) in line and "every data directory" in line, line
    info = json.loads(run_main("info", "--json", "--home", str(tmp_path / "a")).stdout)
    assert info["model_cache"] == str(shared)
    mine = tmp_path / "mine"
    res = run_main("info", "--home", str(tmp_path / "a"), env={"RAG_PAPERS_MODEL_CACHE": str(mine)})
    line = next(line for line in res.stdout.splitlines() if line.strip().startswith("model_cache:"))
    assert str(mine) in line and "setting" in line, line


def test_a_data_directory_with_an_earlier_export_keeps_using_it(
    xdg_cache: Path, few: Path, tmp_path: Path, embedder: OnnxEmbedder
) -> None:
    """An index made before the per-user cache, whose HOME/models holds its export (and maybe hub downloads that
    an offline machine could not fetch again), keeps reading its own cache: no new export, nothing written to the
    per-user one; `info` says so and how to share."""
    home = tmp_path / "old"
    link_graph(embedder, home / "models")
    assert Settings(home=home).models_dir == home / "models"
    res = run_main("ingest", "--no-progress", "--home", str(home), str(few))
    assert res.returncode == 0 and "3 papers indexed" in res.stdout, res.stderr
    assert "exporting" not in res.stderr, res.stderr
    assert not xdg_cache.exists()
    line = next(x for x in run_main("info", "--home", str(home)).stdout.splitlines() if "model_cache:" in x)
    assert str(home / "models") in line and "earlier" in line, line
    # An empty (or scratch-only) HOME/models is no earlier cache.
    fresh = tmp_path / "fresh"
    (fresh / "models" / ".export-1-ab").mkdir(parents=True)
    assert Settings(home=fresh).models_dir == xdg_cache / "rag-papers" / "models"


def test_an_unusable_cache_location_is_one_error_line(xdg_cache: Path, few: Path, tmp_path: Path) -> None:
    """A cache that cannot be made (here: a file where a folder should be) fails in one line naming the setting."""
    xdg_cache.write_text("not a folder\n")
    assert Settings(home=tmp_path / "a").models_dir == xdg_cache / "rag-papers" / "models"
    res = run_main("ingest", "--no-progress", "--home", str(tmp_path / "a"), str(few))
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rag-papers: error: "), res.stderr
    assert str(xdg_cache / "rag-papers" / "models") in lines[0], lines[0]
    assert "RAG_PAPERS_MODEL_CACHE" in lines[0] and "model_cache" in lines[0], lines[0]
    assert "Traceback" not in res.stderr and "exporting" not in res.stderr


# Root writes into a read-only folder anyway (CAP_DAC_OVERRIDE): as root, the command runs without that
# capability, as any other user would, so the test runs in CI (which runs as root) too.
AS_A_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


def test_a_read_only_cache_folder_is_one_error_line(xdg_cache: Path, few: Path, tmp_path: Path) -> None:
    models = xdg_cache / "rag-papers" / "models"
    models.mkdir(parents=True)
    models.chmod(0o555)
    drop = AS_A_USER if os.geteuid() == 0 else []
    if drop and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv (util-linux): root writes into a read-only folder anyway")
    try:
        args = [*drop, str(VENV_BIN / "rag-papers"), "ingest", "--no-progress", "--home", str(tmp_path / "a"), str(few)]
        res = subprocess.run(args, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    finally:
        models.chmod(0o755)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "RAG_PAPERS_MODEL_CACHE" in res.stderr and str(models) in res.stderr and "Traceback" not in res.stderr
    assert not list(models.iterdir())  # nothing was written there


def test_a_read_only_cache_that_holds_the_graph_is_read(
    xdg_cache: Path, few: Path, tmp_path: Path, embedder: OnnxEmbedder
) -> None:
    """Only an export writes to the cache: one already there is read from a cache that cannot be written."""
    models = xdg_cache / "rag-papers" / "models"
    link_graph(embedder, models)
    models.chmod(0o555)
    try:
        res = run_main("ingest", "--no-progress", "--home", str(tmp_path / "a"), str(few))
    finally:
        models.chmod(0o755)
    assert res.returncode == 0 and "3 papers indexed" in res.stdout, res.stderr


def test_the_suite_keeps_out_of_the_user_cache() -> None:
    """Every test (and fixture of any scope) runs with the model_cache setting pointing at the run's own folder."""
    assert os.environ.get("RAG_PAPERS_MODEL_CACHE")
    real = Path(os.environ["RAG_PAPERS_MODEL_CACHE"])
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-papers" / "models"
    assert real != user and Settings().models_dir == real
