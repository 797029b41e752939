"""Installed, not run from the checkout: a wheel carries its prompts and seeds, and an editable install still
finds the top-level ``prompts/`` and ``seeds/`` folders.

The wheel is built from a copy of the worktree (setuptools leaves ``build/`` behind in the source folder, and a
stale ``build/lib`` would put files into the wheel that the tree no longer has), installed into a fresh venv in
a temporary folder, and run from a folder outside the repository with PYTHONPATH unset. The fresh venv gets its
dependencies from this test's environment through a ``.pth`` line written after the install, so nothing is
downloaded and pip never sees the checkout's own (editable) rag-papers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from rag_papers.config import PROJECT_ROOT

pytestmark = pytest.mark.slow

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
# What a wheel must not carry (caches, builds) and what the build does not need.
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".*_cache", "results"
)
PROBE = """\
import json, sys
import rag_papers
from rag_papers.config import Settings
s = Settings()
print(json.dumps({"file": rag_papers.__file__, "path": sys.path, "prompts": str(s.prompts_dir),
                  "seeds": str(s.seeds_dir)}))
"""

# The UI from the wheel: its templates and static files load, and the app serves its page.
UI_PROBE = """\
import json, socket, urllib.request
import rag_papers.ui as ui
from rag_papers.chat import Engine
from rag_papers.config import Settings
from rag_papers.ui.render import static_text
with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
settings = Settings(port=port)
app = ui.build_app(settings, Engine(settings))
url = ui.serve(app, settings, block=False, quiet=True)
page = urllib.request.urlopen(url, timeout=60).read().decode()
app.close()
print(json.dumps({"file": ui.__file__, "panel": ui.empty_panel(), "css": static_text("app.css"),
                  "js": static_text("app.js"), "page": page}))
"""


def run(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def source_copy(tmp_path: Path) -> Path:
    """The worktree's files (not its builds, caches or venv) in a folder of their own."""
    src = tmp_path / "src"
    shutil.copytree(PROJECT_ROOT, src, ignore=COPY_IGNORE)
    return src


def fresh_venv(tmp_path: Path, wheel: Path) -> tuple[Path, Path]:
    """A venv outside the repository with ``wheel`` installed; (its bin folder, its site-packages)."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    # Installed before the dependencies are visible: pip sees an empty environment, no other rag-papers.
    run([*PIP, "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)
    site = Path(
        run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).stdout.strip()
    )
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "zz_test_dependencies.pth").write_text("".join(f"{d}\n" for d in deps))
    return venv / "bin", site


def clean_env(tmp_path: Path, model_cache: Path) -> dict[str, str]:
    """No PYTHONPATH, no venv or rag-papers settings from outside: a private data dir and the session's model cache."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("RAG_PAPERS_")
    }
    env.update(
        RAG_PAPERS_HOME=str(tmp_path / "home"),
        RAG_PAPERS_MODEL_CACHE=str(model_cache),
        RAG_PAPERS_CONFIG=str(tmp_path / "none.toml"),
        OLLAMA_HOST="http://127.0.0.1:9",
        HF_HUB_OFFLINE="1",
    )
    return env


def probe(py: Path, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    return json.loads(run([str(py), "-c", PROBE], cwd=cwd, env=env).stdout)


def importable_from(info: dict[str, object], cwd: Path) -> list[Path]:
    """Every sys.path entry that holds a ``rag_papers`` package."""
    return [Path(p or cwd).resolve() for p in info["path"] if (Path(p or cwd) / "rag_papers").is_dir()]  # type: ignore[attr-defined]


@pytest.mark.timeout(600)
def test_a_wheel_installed_outside_the_repo_ingests_and_answers(tmp_path: Path, _model_cache: Path) -> None:
    src = source_copy(tmp_path)
    dist = tmp_path / "dist"
    run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(src)], cwd=tmp_path)
    (wheel,) = dist.glob("rag_papers-*.whl")
    bin_dir, site = fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = clean_env(tmp_path, _model_cache)

    # The package imported is the wheel's, and nothing else on sys.path could supply one.
    info = probe(bin_dir / "python", elsewhere, env)
    assert Path(str(info["file"])).resolve().is_relative_to(site.resolve()), info["file"]
    assert importable_from(info, elsewhere) == [site.resolve()]
    assert str(PROJECT_ROOT) not in info["path"] and str(src) not in info["path"]  # type: ignore[operator]
    # Its defaults are the package's own resources, on disk inside the installed package.
    pkg = site / "rag_papers"
    assert Path(str(info["prompts"])) == pkg / "prompts" and (pkg / "prompts" / "answer_system.txt").is_file()
    assert Path(str(info["seeds"])) == pkg / "seeds"

    ingest = run([str(bin_dir / "rag-papers"), "ingest", "--json", "--no-progress"], cwd=elsewhere, env=env)
    report = json.loads(ingest.stdout)
    assert report["total"] == 38 and report["added"] == 38, report

    ask = run(
        [str(bin_dir / "rag-papers"), "ask", "--json", "--llm", "extractive", "What does ABBA claim?"],
        cwd=elsewhere,
        env=env,
    )
    answer = json.loads(ask.stdout)
    assert answer["refused"] is False and answer["backend"] == "extractive", answer
    assert answer["answer"].startswith("From the abstracts (quoted, no LLM):"), answer["answer"]  # the packaged prompt
    assert "[1]" in answer["answer"] and "ABBA" in answer["answer"]
    assert answer["citations"] and answer["sources"][0]["title"].startswith("ABBA"), answer["sources"][:1]

    # prompts_dir stays overridable (here from the environment) in an installed package.
    mine = tmp_path / "my-prompts"
    shutil.copytree(pkg / "prompts", mine)
    assert probe(bin_dir / "python", elsewhere, {**env, "RAG_PAPERS_PROMPTS_DIR": str(mine)})["prompts"] == str(mine)

    # eval's Q&A file belongs to the source checkout: an installed package says so in one line.
    res = subprocess.run(
        [str(bin_dir / "rag-papers"), "eval"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--qa" in res.stderr and "Traceback" not in res.stderr
    # With a Q&A file, results go under the data directory, never into the package or a checkout's eval/results.
    qa = tmp_path / "mine.jsonl"
    qa.write_text("".join(line + "\n" for line in (PROJECT_ROOT / "eval" / "qa.jsonl").read_text().splitlines()[:6]))
    committed = {p.name: p.stat().st_mtime_ns for p in (PROJECT_ROOT / "eval" / "results").iterdir()}
    run([str(bin_dir / "rag-papers"), "eval", "--qa", str(qa), "--configs", "bm25"], cwd=elsewhere, env=env)
    assert (tmp_path / "home" / "eval" / "results.json").is_file() and (
        tmp_path / "home" / "eval" / "report.md"
    ).is_file()
    assert {p.name: p.stat().st_mtime_ns for p in (PROJECT_ROOT / "eval" / "results").iterdir()} == committed
    assert not (pkg / "eval").exists() and not (elsewhere / "eval").exists()

    # The UI renders from the wheel's templates and static files and serves its page.
    shown = json.loads(run([str(bin_dir / "python"), "-c", UI_PROBE], cwd=elsewhere, env=env).stdout.splitlines()[-1])
    assert Path(shown["file"]).resolve().is_relative_to(site.resolve()), shown["file"]
    assert shown["panel"].startswith('<div class="rp-empty">') and "<svg" in shown["panel"]
    assert "#rp-header" in shown["css"] and "trigger('cite'" in shown["js"]
    assert "rag-papers" in shown["page"]

    # The wheel carries every prompt, seed and UI file of the tree, and no repository folder at the top level.
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("prompts", "seeds"):
        for f in (PROJECT_ROOT / folder).iterdir():
            assert f"rag_papers/{folder}/{f.name}" in names, f
    for folder in ("templates", "static"):
        for f in (PROJECT_ROOT / "rag_papers" / "ui" / folder).iterdir():
            assert f"rag_papers/ui/{folder}/{f.name}" in names, f
    assert not any(n.startswith(("prompts/", "seeds/", "eval/", "tests/")) for n in names)
    # Every module of the corpus package and its readers (packages pyproject.toml must list), and every word list.
    corpus = list((PROJECT_ROOT / "rag_papers" / "corpus").rglob("*.py"))
    assert {"rag_papers/corpus/__init__.py", "rag_papers/corpus/readers/__init__.py"} <= names
    for f in corpus:
        assert f.relative_to(PROJECT_ROOT).as_posix() in names, f
    for f in (PROJECT_ROOT / "rag_papers" / "words").iterdir():
        assert f"rag_papers/words/{f.name}" in names, f
    assert {f"rag_papers/words/{w}.txt" for w in ("stopwords", "generic_words", "generic_acronyms")} <= names


def test_an_editable_install_reads_the_top_level_folders(tmp_path: Path, _model_cache: Path) -> None:
    """What scripts/setup does (pip install -e .): the defaults are the checkout's prompts/ and seeds/."""
    src = source_copy(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    build = "import sys; from setuptools import build_meta as b; print(b.build_editable(sys.argv[1]))"
    run([sys.executable, "-c", build, str(dist)], cwd=src)
    (wheel,) = dist.glob("*.whl")
    bin_dir, _ = fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    info = probe(bin_dir / "python", elsewhere, clean_env(tmp_path, _model_cache))
    assert Path(str(info["file"])).resolve() == (src / "rag_papers" / "__init__.py").resolve()
    assert Path(str(info["prompts"])).resolve() == (src / "prompts").resolve()
    assert Path(str(info["seeds"])).resolve() == (src / "seeds").resolve()
