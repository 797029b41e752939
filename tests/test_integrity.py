"""Nothing lost, no silent corruption: a full disk, a switched or deleted vector store, a damaged
store or registry, a kill during the one-time ONNX export, an ingest beside a running reader.

Each test drives the console script's entry point (in this process, ``run_main``; as a process
where the test is about another process or a killed one) or the real ``Index`` over real files: a
tmpfs that really fills up, a real `chroma run` server, real SQLite and Chroma files damaged the
way a full disk or a bad copy damages them.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SEEDS, VENV_BIN, run_cli, run_main

from rag_papers.config import Settings
from rag_papers.corpus import content_hash
from rag_papers.index import Index
from rag_papers.ingest import Ingester

ABBA_QUERY = "What does ABBA claim?"


def abba_id() -> str:
    text = (SEEDS / "004_5aae81baa8261116.txt").read_text(encoding="utf-8")
    (para,) = [" ".join(p.split()) for p in text.split("\n\n") if "We introduce ABBA" in p]
    return content_hash(para)


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    """The run failed with exactly one ``rag-papers: error:`` line and no traceback."""
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert len(lines) == 1 and lines[0].startswith("rag-papers: error: "), res.stderr
    return lines[0]


def search_json(env: dict[str, str], *extra: str, query: str = ABBA_QUERY) -> dict[str, Any]:
    res = run_main("search", "--json", query, *extra, env=env)
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def synth(path: Path, n: int, seed: int = 7) -> Path:
    res = run_main("synth", str(n), str(path), "--no-seeds", "--seed", str(seed))
    assert res.returncode == 0, res.stderr
    return path


# ------------------------------------------------------------------ disk full
@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 5 MB tmpfs (root can mount one, here and in CI); the test may remount it larger."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def remount(mnt: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)


@pytest.mark.slow
def test_a_full_disk_stops_ingest_cleanly_and_a_rerun_completes(tmpfs: Path, tmp_path: Path, seeds_home: Path) -> None:
    """Reported: chromadb's raw InternalError, then "Error deserializing pickle file" for good."""
    home = tmpfs / "home"
    # 2 MB kept free instead of the default 16 and batches of 8, so that a small disk (and a short test) shows it.
    env = {"RAG_PAPERS_HOME": str(home), "RAG_PAPERS_MIN_FREE_MB": "2", "RAG_PAPERS_EMBED_BATCH_SIZE": "16"}
    shutil.copytree(seeds_home, home)  # the seeds, indexed: they fit
    # 80 abstracts would fit, but not with the room the stores need to grow: the check stops the ingest
    # first (a corpus that really overflows the disk: the next test).
    corpus = synth(tmp_path / "big.jsonl", 80)

    res = run_main("ingest", "--no-progress", str(corpus), env=env)
    line = one_error_line(res)
    assert f"not enough free space in {home}" in line and " MB" in line and "rerun `rag-papers ingest`" in line
    assert shutil.disk_usage(tmpfs).free > 2_000_000  # stopped before the disk filled, not by it
    stopped_at = json.loads(run_main("info", "--json", env=env).stdout)["papers"]
    assert 38 <= stopped_at < 118
    hit = search_json(env)  # the index as it was is searchable, dense side included
    assert hit["results"][0]["id"] == abba_id() and hit["results"][0]["dense_score"] > 0.15

    remount(tmpfs, "300m")  # space freed
    done = run_main("ingest", "--no-progress", str(corpus), env=env)
    assert done.returncode == 0, done.stderr
    assert f"{118 - stopped_at} added" in done.stdout and "118 papers indexed" in done.stdout
    assert search_json(env)["results"][0]["id"] == abba_id()
    synthetic = json.loads(corpus.read_text(encoding="utf-8").splitlines()[-1])
    found = search_json(env, query=synthetic["title"])["results"][0]
    assert found["id"] == synthetic["id"] and found["dense_score"] > 0.15


@pytest.mark.slow
def test_a_write_that_hits_a_full_disk_anyway_is_one_line_and_the_next_ingest_repairs(
    tmpfs: Path, tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch, seeds_home: Path
) -> None:
    """Another program fills the disk after our check: the write fails for real, in one line; after
    space is freed, the next ingest repairs whatever the store lost and completes."""
    from rag_papers import ingest as ingest_module
    from rag_papers.vectors import DiskFullError

    home = tmpfs / "home"
    shutil.copytree(seeds_home, home)  # the seeds, indexed
    settings = Settings(home=home, min_free_mb=2, embed_batch_size=16)
    index = Index(settings, embedder=embedder)  # type: ignore[arg-type]
    corpus = synth(tmp_path / "big.jsonl", 60)
    balloon = tmpfs / "balloon"  # the other program: it leaves 0.5 MB free
    with balloon.open("wb") as fh:
        fh.truncate(0)
        fh.write(b"\0" * (shutil.disk_usage(tmpfs).free - 500_000))
    monkeypatch.setattr(
        ingest_module, "free_bytes", lambda _p: 10**12
    )  # our check sees plenty: the disk says otherwise
    with pytest.raises(DiskFullError) as err:
        Ingester(index.store).ingest([corpus], show_progress=False)
    assert str(home) in str(err.value) and "\n" not in str(err.value)
    monkeypatch.undo()
    index.close()

    balloon.unlink()  # space freed, and more of it for the 60 abstracts
    remount(tmpfs, "300m")
    env = {"RAG_PAPERS_HOME": str(home)}
    done = run_main("ingest", "--no-progress", str(corpus), env=env)
    assert done.returncode == 0, done.stderr
    assert "98 papers indexed" in done.stdout
    hit = search_json(env)
    assert hit["results"][0]["id"] == abba_id() and hit["results"][0]["dense_score"] > 0.15
    fresh = Index(settings, embedder=embedder)  # type: ignore[arg-type]
    assert fresh.store.vector_gaps(sample=500) is None  # every registered paper has its vectors
    fresh.close()


def fill_to_the_last_byte(mnt: Path) -> None:
    """Another program takes every free byte of the file system (a balloon file, written until ENOSPC)."""
    fd = os.open(mnt / "balloon", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = b"\0" * 4096
    try:
        while True:
            os.write(fd, chunk)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert shutil.disk_usage(mnt).free < 4096


@pytest.mark.slow
def test_a_disk_full_to_the_last_byte_is_named_by_every_command(tmpfs: Path, tmp_path: Path, seeds_home: Path) -> None:
    """Reported: on a 100% full disk the read commands said "the registry ... failed (disk I/O error)", with
    no word about space; after an ingest that filled it, search said "no space left ... papers indexed so far
    stay searchable" and failed in the same breath."""
    home = tmpfs / "home"
    shutil.copytree(seeds_home, home)
    env = {"RAG_PAPERS_HOME": str(home), "RAG_PAPERS_MIN_FREE_MB": "0"}
    fill_to_the_last_byte(tmpfs)

    ingest = run_main("ingest", "--no-progress", str(synth(tmp_path / "more.jsonl", 20)), env=env)
    line = one_error_line(ingest)
    assert str(home) in line and ("no space left" in line or "not enough free space" in line), line
    assert "free some space" in line and "searchable" not in line, line

    for args in (["search", ABBA_QUERY], ["ask", "--llm", "extractive", ABBA_QUERY], ["info"], ["papers"]):
        res = run_main(*args, env=env)
        if res.returncode == 0:  # a command that needs no byte of space may still work: then it is right
            continue
        line = one_error_line(res)
        assert f"no space left on the device holding {home}" in line, (args, line)
        assert "free some space" in line and "run the command again" in line, (args, line)
        assert "searchable" not in line and "disk I/O error" not in line, (args, line)
    search = run_main("search", ABBA_QUERY, env=env)
    assert search.returncode == 2, search.stdout  # the reported case: search cannot run on it

    (tmpfs / "balloon").unlink()  # space freed: everything works again, nothing was lost
    hit = search_json(env)
    assert hit["results"][0]["id"] == abba_id()
    assert json.loads(run_main("info", "--json", env=env).stdout)["papers"] >= 38


# ------------------------------------------------------------------ the registry is the source of truth
def damage_chroma_sqlite(home: Path) -> None:
    with (home / "chroma" / "chroma.sqlite3").open("r+b") as fh:
        fh.write(os.urandom(4096))


def cut_hnsw_pickles(home: Path) -> int:
    """Truncate the HNSW metadata as a full disk does mid-write ("Error deserializing pickle file")."""
    pickles = list((home / "chroma").glob("*/index_metadata.pickle"))
    for p in pickles:
        os.truncate(p, p.stat().st_size // 2)
    return len(pickles)


def fill_past_hnsw_persist(settings: Settings) -> None:
    """1,100 filler vectors: chromadb writes its HNSW files (the pickle among them) only past
    1,000 vectors in a collection, far more than the seeds' chunks."""
    import numpy as np

    from rag_papers.vectors import VectorStore

    store = VectorStore(settings)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(1100, 384)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = [f"filler-{i}" for i in range(1100)]
    store.upsert("chunks", ids, vectors, [{"document_id": "filler"} for _ in ids])
    store.close()


@pytest.mark.parametrize("damage", ["chroma.sqlite3", "hnsw pickle"])
def test_repair_rebuilds_an_unreadable_vector_store_from_the_registry_alone(
    damage: str, seeded: Settings, tmp_path: Path
) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    if damage == "hnsw pickle":
        fill_past_hnsw_persist(seeded)
        assert cut_hnsw_pickles(seeded.home) >= 1
    else:
        damage_chroma_sqlite(seeded.home)
    n = json.loads(run_main("info", "--json", env=env).stdout)["papers"]

    line = one_error_line(run_main("search", ABBA_QUERY, env=env))
    assert str(seeded.home / "chroma") in line and "run `rag-papers repair`" in line

    # Without the corpus files: repair reads the registry only.
    shutil.copytree(seeded.home, tmp_path / "copy")
    env = {"RAG_PAPERS_HOME": str(tmp_path / "copy")}
    res = run_main("repair", "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    assert f"{n:,} re-embedded" in res.stdout and "moved the unreadable vector store aside" in res.stderr
    assert len(list((tmp_path / "copy").glob("chroma.damaged-*"))) == 1  # kept, never deleted
    hit = search_json(env)
    assert hit["results"][0]["id"] == abba_id() and hit["results"][0]["dense_score"] > 0.15
    again = run_main("repair", "--no-progress", "--json", env=env)
    assert json.loads(again.stdout)["reembedded"] == 0  # nothing left to do


def test_a_deleted_chroma_folder_is_reported_and_the_next_ingest_reembeds_it(seeded: Settings) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    shutil.rmtree(seeded.home / "chroma")
    line = one_error_line(run_main("search", ABBA_QUERY, env=env))
    assert "does not match the registry" in line and "0 papers" in line and "run `rag-papers repair`" in line
    info = json.loads(run_main("info", "--json", env=env).stdout)  # info reports it, and does not fail on it
    assert info["papers"] == 38 and "does not match the registry" in info["vectors"]
    res = run_main("ingest", "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    assert "0 added, 38 unchanged" in res.stdout
    assert "re-embedded 38 papers" in res.stderr
    hit = search_json(env)
    assert hit["results"][0]["id"] == abba_id() and hit["results"][0]["dense_score"] > 0.15
    assert json.loads(run_main("info", "--json", env=env).stdout)["vectors"] == "in step with the registry"


@pytest.mark.slow
def test_switching_to_a_chroma_server_reconciles_the_registry_into_it(seeded: Settings, chroma_server: str) -> None:
    """Reported: "0 added, 38 unchanged", an empty server, and every dense score 0.0."""
    embedded = {"RAG_PAPERS_HOME": str(seeded.home)}
    env = {
        **embedded,
        "RAG_PAPERS_COLLECTION": f"switch{uuid.uuid4().hex[:8]}",
    }  # a fresh collection on the shared server
    line = one_error_line(run_main("search", ABBA_QUERY, "--chroma-url", chroma_server, env=env))
    # The fix it names is for this store: `repair` alone would fill the embedded one (reported).
    assert "does not match the registry" in line and f"run `rag-papers repair --chroma-url {chroma_server}`" in line

    res = run_main("ingest", "--no-progress", "--chroma-url", chroma_server, env=env)
    assert res.returncode == 0, res.stderr
    assert (
        "0 added, 38 unchanged" in res.stdout
        and f"re-embedded 38 papers (67 chunks) from the registry into the vector store at {chroma_server}"
        in res.stderr
    )
    server_hit = search_json(env, "--chroma-url", chroma_server)
    embedded_hit = search_json(embedded)
    assert server_hit["results"][0]["id"] == abba_id()
    assert all(r["dense_score"] > 0 for r in server_hit["results"])
    assert [r["id"] for r in server_hit["results"]] == [r["id"] for r in embedded_hit["results"]]
    again = run_main("ingest", "--no-progress", "--chroma-url", chroma_server, env=env)
    assert "re-embedded" not in again.stderr  # in step now: nothing to do


# ------------------------------------------------------------------ a damaged registry
def garbage_over_header(db: Path) -> None:
    with db.open("r+b") as fh:
        fh.write(os.urandom(512))


def cut_in_half(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


@pytest.mark.parametrize("damage", [garbage_over_header, cut_in_half], ids=["garbage", "cut"])
def test_a_damaged_registry_is_one_line_naming_it_and_ingest_rebuild_recovers(damage: Any, seeded: Settings) -> None:
    """Reported: sqlite3.DatabaseError tracebacks from search, papers, info and ingest."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    db = seeded.home / "papers.sqlite"
    con = __import__("sqlite3").connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file, as after a clean exit
    con.close()
    damage(db)
    for args in (["search", ABBA_QUERY], ["papers"], ["info"], ["ingest", "--no-progress"], ["ask", ABBA_QUERY]):
        line = one_error_line(run_main(*args, env=env))
        assert str(db) in line and "ingest --rebuild" in line, (args, line)
    res = run_main("ingest", "--no-progress", "--rebuild", env=env)
    assert res.returncode == 0, res.stderr
    assert "moved it aside" in res.stderr and "38 added" in res.stdout
    assert len(list(seeded.home.glob("papers.sqlite.damaged-*"))) == 1
    assert search_json(env)["results"][0]["id"] == abba_id()


# ------------------------------------------------------------------ ONNX export
@pytest.mark.slow
def test_a_killed_onnx_export_leaves_no_half_written_folders(seeded: Settings, tmp_path: Path) -> None:
    cache = tmp_path / "fresh_cache"
    env = {"RAG_PAPERS_HOME": str(seeded.home), "RAG_PAPERS_MODEL_CACHE": str(cache)}

    def exporting() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [str(VENV_BIN / "rag-papers"), "search", ABBA_QUERY],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not list(cache.rglob(".export-*")):
            assert proc.poll() is None and time.monotonic() < deadline, "the export never started"
            time.sleep(0.05)
        time.sleep(0.5)
        return proc

    proc = exporting()
    proc.send_signal(signal.SIGTERM)  # a polite kill: the export cleans up on its way out
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not list(cache.rglob(".export-*"))

    proc = exporting()
    proc.kill()  # SIGKILL: nothing can run; the next export clears what it left
    proc.communicate(timeout=60)
    assert list(cache.rglob(".export-*"))
    res = run_main("search", ABBA_QUERY, env=env)
    assert res.returncode == 0, res.stderr
    assert not list(cache.rglob(".export-*"))
    assert list(cache.rglob("*.onnx"))


# Where, within a one-time job, a SIGTERM can land. The job's body runs in a second interpreter, so the
# signal's default action (the process dies) cannot take pytest with it.
SCRATCH_JOB = """
import os, signal, sys, time
from pathlib import Path
from rag_papers.model_files import scratch_dir

where, parent = sys.argv[1], Path(sys.argv[2])
if where == "creation":  # the moment the folder exists, before the job has begun
    mkdir = os.mkdir
    def made(path, *a, **k):
        mkdir(path, *a, **k)
        if Path(path).name.startswith(".export-"):
            os.kill(os.getpid(), signal.SIGTERM)
    os.mkdir = made

class Noisy:
    def __del__(self):  # Python runs a signal handler here too, and ignores what it raises
        os.kill(os.getpid(), signal.SIGTERM)

with scratch_dir(parent, ".export-") as work:
    (work / "half.onnx").write_bytes(b"x" * 1000)
    if where == "del":
        Noisy()
    for _ in range(50):  # the job goes on: a SIGTERM that was swallowed would let it finish
        time.sleep(0.01)
    (work / "graph.onnx").write_bytes(b"done")
    os.replace(work / "graph.onnx", parent / "graph.onnx")
print("finished")
"""


@pytest.mark.parametrize("where", ["creation", "del"])
def test_a_sigterm_anywhere_in_a_one_time_job_ends_it_and_removes_its_folder(where: str, tmp_path: Path) -> None:
    """Reported (CI): after a SIGTERM during the ONNX export, a `.export-*` folder was left behind.
    Two ways it happened: the signal came between the folder's creation and the handler's install
    (the default action killed the process there), or the handler's SystemExit was raised inside a
    ``__del__``, where Python prints it and carries on."""
    import sys

    parent = tmp_path / "cache"
    res = subprocess.run(
        [sys.executable, "-c", SCRATCH_JOB, where, str(parent)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 128 + signal.SIGTERM, (res.returncode, res.stdout, res.stderr)
    assert "finished" not in res.stdout
    assert not list(parent.glob(".export-*")), list(parent.iterdir())
    assert not (parent / "graph.onnx").exists()


# ------------------------------------------------------------------ another process's writes
def test_a_running_reader_sees_papers_another_process_ingests(
    seeded: Settings, embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reported: a UI running while `ingest` adds papers kept the old count (and its vector store
    never saw the new vectors) until restarted."""
    from rag_papers import store as store_module
    from rag_papers.chat import Engine

    monkeypatch.setattr(store_module, "WATCH_SECONDS", 0.2, raising=False)
    engine = Engine(seeded, Index(seeded, embedder=embedder))  # type: ignore[arg-type]
    corpus = synth(tmp_path / "new.jsonl", 40)
    newest = json.loads(corpus.read_text(encoding="utf-8").splitlines()[-1])
    first = engine.search(newest["title"], 5)
    assert first.results[0].id != newest["id"]

    res = run_cli("ingest", "--no-progress", str(corpus), env={"RAG_PAPERS_HOME": str(seeded.home)})
    assert res.returncode == 0, res.stderr
    time.sleep(0.3)
    after = engine.search(newest["title"], 5)
    top = after.results[0]
    assert top.id == newest["id"] and top.dense_score > 0.15  # found, by its vectors too
    engine.index.close()


def test_a_chroma_url_that_answers_but_is_not_chroma_says_so(seeded: Settings) -> None:
    """Reported: an HTML page as the error message."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        env = {"RAG_PAPERS_HOME": str(seeded.home)}
        for args in (["search", ABBA_QUERY], ["ingest", "--no-progress"]):
            line = one_error_line(run_main(*args, "--chroma-url", url, env=env))
            assert f"{url} answered, but not as a Chroma server" in line and "<" not in line, line
    finally:
        server.shutdown()


def test_a_running_reader_survives_a_rebuild_in_another_process(seeded: Settings, embedder: Any) -> None:
    """`ingest --rebuild` of the same corpus elsewhere drops the collections this reader holds, and
    leaves the paper count as it was: the reader must still find its way to the new ones."""
    from rag_papers import store as store_module
    from rag_papers.chat import Engine

    store_module.WATCH_SECONDS, saved = 0.1, store_module.WATCH_SECONDS
    try:
        engine = Engine(seeded, Index(seeded, embedder=embedder))  # type: ignore[arg-type]
        assert engine.search(ABBA_QUERY, 3).results[0].id == abba_id()
        res = run_cli("ingest", "--no-progress", "--rebuild", env={"RAG_PAPERS_HOME": str(seeded.home)})
        assert res.returncode == 0, res.stderr
        time.sleep(0.2)
        hit = engine.search(ABBA_QUERY, 3).results[0]
        assert hit.id == abba_id() and hit.dense_score > 0.15
        engine.index.close()
    finally:
        store_module.WATCH_SECONDS = saved


@pytest.mark.slow
def test_searches_from_many_threads_beside_an_ingest_never_hang(
    seeded: Settings, embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reopen that follows another process's writes must not deadlock with searches in flight
    (the index's two pool threads run parts of every search)."""
    import threading

    from rag_papers import store as store_module
    from rag_papers.chat import Engine

    monkeypatch.setattr(store_module, "WATCH_SECONDS", 0.05)
    monkeypatch.setattr(store_module, "REOPEN_SECONDS", 0.0, raising=False)
    engine = Engine(seeded, Index(seeded, embedder=embedder))  # type: ignore[arg-type]
    corpus = synth(tmp_path / "more.jsonl", 30)
    proc = subprocess.Popen(
        [str(VENV_BIN / "rag-papers"), "ingest", "--no-progress", str(corpus)],
        env={**os.environ, "RAG_PAPERS_HOME": str(seeded.home), "RAG_PAPERS_EMBED_BATCH_SIZE": "16"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[BaseException] = []
    searches = [0]

    def search_loop() -> None:
        while proc.poll() is None:
            try:
                engine.search(ABBA_QUERY, 5)
                searches[0] += 1
                time.sleep(0.01)  # searches stay in flight through every reopen, without starving the ingest of CPU
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)
                return

    threads = [threading.Thread(target=search_loop, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    out, err = proc.communicate(timeout=300)
    for t in threads:
        t.join(30)
    assert proc.returncode == 0, err
    assert not any(t.is_alive() for t in threads), "a search hung"
    assert not errors, errors
    assert searches[0] > 6, searches
    engine.search(ABBA_QUERY, 5)
    assert engine.index.count() == 68
    engine.index.close()


def test_only_unreadable_files_count_as_a_damaged_store(settings: Settings) -> None:
    """A slow, busy or unreachable store is never set aside (nor a server's collections deleted)."""
    from rag_papers.vectors import VectorStore, VectorStoreError

    store = VectorStore(settings)
    cases = {
        "Error deserializing pickle file: eval error at offset 135166: EOF while parsing": True,
        "error returned from database: (code: 26) file is not a database": True,
        "timed out": False,
        "database is locked": False,
        "Connection reset by peer": False,
        "[Errno 24] Too many open files": False,
    }
    for text, damaged in cases.items():
        with pytest.raises(VectorStoreError) as err, store.guard("reading"):
            raise RuntimeError(text)
        assert err.value.damaged is damaged, text
        assert ("repair" in str(err.value)) is damaged, str(err.value)


def test_noticing_another_process_never_waits_for_searches_in_flight(
    seeded: Settings, embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword side runs in the index's pool and looks for other processes' writes; it must not
    wait there for searches in flight to end (they wait on the pool: a deadlock under load)."""
    import threading

    from rag_papers import store as store_module
    from rag_papers.chat import Engine

    monkeypatch.setattr(store_module, "WATCH_SECONDS", 0.0)
    engine = Engine(seeded, Index(seeded, embedder=embedder))  # type: ignore[arg-type]
    engine.search(ABBA_QUERY, 3)
    corpus = synth(tmp_path / "few.jsonl", 3)
    assert run_cli("ingest", "--no-progress", str(corpus), env={"RAG_PAPERS_HOME": str(seeded.home)}).returncode == 0
    in_flight = engine.index.store.vector_lock.read()  # a search reading the vector store, as on another thread
    in_flight.__enter__()
    try:
        done = threading.Event()

        def keyword_side() -> None:
            engine.index.keyword("ABBA Hadamard", 5)
            done.set()

        worker = threading.Thread(target=keyword_side, daemon=True)
        worker.start()
        assert done.wait(10), "the keyword side waited for the search in flight"
    finally:
        in_flight.__exit__(None, None, None)
    assert engine.search(synth_title(corpus), 3).results[0].id == json.loads(corpus.read_text().splitlines()[-1])["id"]
    engine.index.close()


def synth_title(corpus: Path) -> str:
    return str(json.loads(corpus.read_text(encoding="utf-8").splitlines()[-1])["title"])
