"""Damaged files of a real index, injected as a bad disk or a bad copy leaves them (issue 26): the tantivy keyword
index (half of each posting list zeroed, a term dictionary damaged, random bytes over every file's first bytes) and
the SQLite registry damaged inside the file, past its header.

Each fault is put into the files of a real index built from the seeds; the commands run through the console
script's entry point (``run_main``) and must end in one line naming the way out, or recover by themselves, and
``repair`` or ``ingest`` must give back a search with the right results.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import VENV_BIN, run_main
from test_integrity import ABBA_QUERY, abba_id, one_error_line, search_json, synth

from rag_papers.config import Settings
from rag_papers.index import Index
from rag_papers.keyword import SEGMENT_SUFFIXES, damaged_files

# A query whose keyword side matters: ABBA is a made-up name only the keyword index knows well.
KEYWORD_QUERY = "ABBA Hadamard product adaptation"


# ------------------------------------------------------------------ the keyword index
def segment_files(home: Path, suffix: str) -> list[Path]:
    files = sorted((home / "keyword").glob(f"*{suffix}"))
    assert files, f"no {suffix} file in {home / 'keyword'}"
    return files


def zero_half_of_each_idx(home: Path) -> None:
    """Reported: a Rust panic ("index out of bounds") from tantivy, then a Python traceback."""
    for f in segment_files(home, ".idx"):
        with f.open("r+b") as fh:
            fh.write(b"\0" * (f.stat().st_size // 2))


def damage_term_files(home: Path) -> None:
    """Reported: "unexpected ValueError: ... Fst data is corrupted"."""
    rng = random.Random(26)
    for f in segment_files(home, ".term"):
        with f.open("r+b") as fh:
            fh.seek(f.stat().st_size // 3)
            fh.write(rng.randbytes(64))


def random_bytes_over_headers(home: Path) -> None:
    """Reported: scores changed, silently (over the posting lists' first bytes, ABBA's keyword share went from
    0.70 to 0.90, and another paper joined the top five)."""
    rng = random.Random(100)
    for f in segment_files(home, ".idx"):
        with f.open("r+b") as fh:
            fh.write(rng.randbytes(100))


KEYWORD_FAULTS = [zero_half_of_each_idx, damage_term_files, random_bytes_over_headers]
KEYWORD_IDS = ["idx-zeroed", "term-damaged", "headers"]


def ranking(env: dict[str, str], query: str = KEYWORD_QUERY) -> list[tuple[str, float, float]]:
    """(id, keyword score, score) of each result: what a damaged keyword index changed silently."""
    return [(r["id"], r["keyword_score"], r["score"]) for r in search_json(env, query=query)["results"]]


@contextmanager
def writer_held(home: Path) -> Iterator[None]:
    """Another process's ingest, as tantivy sees it: its writer lock (an exclusive flock on the lock file) is held."""
    path = home / "keyword" / ".tantivy-writer.lock"
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


@pytest.mark.parametrize("damage", KEYWORD_FAULTS, ids=KEYWORD_IDS)
def test_a_damaged_keyword_index_is_rebuilt_from_the_registry_by_a_search(
    damage: Callable[[Path], None], seeded: Settings
) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    before = ranking(env)
    assert before[0][0] == abba_id() and before[0][1] > 0
    damage(seeded.home)
    assert damaged_files(seeded.in_home("keyword"), full=True)  # tantivy's own checksums see it

    # The writer's lock is free: the search rebuilds the keyword index from the registry, and ranks as before.
    assert ranking(env) == before
    assert damaged_files(seeded.in_home("keyword"), full=True) == []
    assert ranking(env) == before


@pytest.mark.parametrize("damage", KEYWORD_FAULTS, ids=KEYWORD_IDS)
def test_a_damaged_keyword_index_beside_a_writer_is_one_line_and_repair_restores_it(
    damage: Callable[[Path], None], seeded: Settings
) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    before = ranking(env)
    damage(seeded.home)
    with writer_held(seeded.home):
        for args in (["search", KEYWORD_QUERY], ["ask", ABBA_QUERY]):
            line = one_error_line(run_main(*args, env=env))
            assert str(seeded.in_home("keyword")) in line and "damaged" in line and "`rag-papers repair`" in line, line
    res = run_main("repair", "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    assert f"the keyword index {seeded.in_home('keyword')} was damaged" in res.stderr
    assert "rebuilt it from the registry" in res.stderr and "Traceback" not in res.stderr
    assert ranking(env) == before
    again = run_main("repair", "--no-progress", env=env)
    assert again.returncode == 0 and "keyword index" not in again.stderr  # nothing left to do


@pytest.mark.parametrize("damage", KEYWORD_FAULTS, ids=KEYWORD_IDS)
def test_ingest_rebuilds_a_damaged_keyword_index(damage: Callable[[Path], None], seeded: Settings) -> None:
    """Reported: `ingest` said it succeeded and left the damaged files in place."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    before = ranking(env)
    damage(seeded.home)
    res = run_main("ingest", "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    assert "0 added, 38 unchanged" in res.stdout and "rebuilt it from the registry" in res.stderr
    assert damaged_files(seeded.in_home("keyword"), full=True) == []
    assert ranking(env) == before


def test_the_chat_starts_on_a_damaged_keyword_index(seeded: Settings, embedder: Any) -> None:
    """Reported: `chat` died at start (its suggested questions read the keyword index)."""
    from rag_papers.chat import Engine
    from rag_papers.ui.suggest import suggested_questions

    zero_half_of_each_idx(seeded.home)
    engine = Engine(seeded, Index(seeded, embedder=embedder))  # type: ignore[arg-type]
    try:
        assert suggested_questions(engine.index, 3)
        assert engine.search(ABBA_QUERY, 3).results[0].id == abba_id()
    finally:
        engine.index.close()


def test_the_checksums_are_read_once_per_file(seeded: Settings) -> None:
    """A search's open reads only files not already found intact; `repair` reads every one."""
    from rag_papers import keyword

    reads: list[str] = []
    real = keyword.footer_intact

    def counted(f: Path) -> bool:
        reads.append(f.name)
        return real(f)

    (seeded.in_home("keyword") / keyword.VERIFIED_NAME).unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keyword, "footer_intact", counted)
        assert damaged_files(seeded.in_home("keyword")) == []
        first = len(reads)
        assert first >= len(SEGMENT_SUFFIXES)
        assert damaged_files(seeded.in_home("keyword")) == []
        assert len(reads) == first  # nothing changed: nothing read again
        assert damaged_files(seeded.in_home("keyword"), full=True) == []
        assert len(reads) == 2 * first


# ------------------------------------------------------------------ the registry, damaged inside
def checkpoint(db: Path) -> None:
    """Everything in the main file, as after a clean exit (the damage must not sit in a -wal SQLite can replay)."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def page_size(db: Path) -> int:
    page = int.from_bytes(db.read_bytes()[16:18], "big")
    return 65536 if page == 1 else page


def random_pages_after_the_first(db: Path) -> None:
    """Every page but the first (the header and the schema): every table and index is unreadable."""
    rng = random.Random(5)
    size = page_size(db)
    with db.open("r+b") as fh:
        fh.seek(size)
        fh.write(rng.randbytes(db.stat().st_size - size))


def zero_the_chunks_root_page(db: Path) -> None:
    """One table's root page zeroed: the papers (and their count) still read, their chunk texts do not."""
    con = sqlite3.connect(db)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks'").fetchone()
    con.close()
    size = page_size(db)
    with db.open("r+b") as fh:
        fh.seek((root - 1) * size)
        fh.write(b"\0" * size)


def set_aside_registries(home: Path) -> list[Path]:
    """The registries moved aside (their -wal and -shm files go with them, under the same name)."""
    return [p for p in home.glob("papers.sqlite.damaged-*") if not p.name.endswith(("-wal", "-shm"))]


@pytest.mark.parametrize("damage", [random_pages_after_the_first, zero_the_chunks_root_page], ids=["pages", "chunks"])
def test_a_registry_damaged_inside_is_one_line_and_ingest_rebuild_moves_it_aside(
    damage: Callable[[Path], None], seeded: Settings
) -> None:
    """Reported: "unexpected DatabaseError: database disk image is malformed" from search, ask, ingest, info and
    repair; `ingest --rebuild` said the damaged file "is kept aside", but none was."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    db = seeded.in_home("papers.sqlite")
    checkpoint(db)
    damage(db)
    commands = [["search", ABBA_QUERY], ["ask", ABBA_QUERY], ["repair"]]
    if damage is random_pages_after_the_first:
        # With the chunk texts alone damaged these read nothing there (`repair` reads every page).
        commands += [["info"], ["papers"], ["ingest", "--no-progress"]]
    for args in commands:
        line = one_error_line(run_main(*args, env=env))
        assert f"the registry {db} is damaged" in line and "`rag-papers ingest --rebuild [FILES]`" in line, (args, line)

    res = run_main("ingest", "--no-progress", "--rebuild", env=env)
    assert res.returncode == 0, res.stderr
    aside = set_aside_registries(seeded.home)
    assert len(aside) == 1 and aside[0].is_file() and aside[0].stat().st_size > 0  # kept, never deleted
    assert f"moved it aside to {aside[0]}" in res.stderr and "38 added" in res.stdout
    if damage is zero_the_chunks_root_page:
        assert "it held 38 papers from" in res.stderr  # what was lost, as far as it can be read
    else:
        assert "how many papers it held cannot be read" in res.stderr
    assert "ingest those files again" in res.stderr
    assert search_json(env)["results"][0]["id"] == abba_id()
    assert run_main("repair", "--no-progress", env=env).returncode == 0


def test_after_a_killed_write_the_registry_is_checked_when_opened(seeded: Settings, tmp_path: Path) -> None:
    """A write that did not end (SIGKILL) leaves its marker: the next open runs PRAGMA quick_check, so damage
    that no query of the command would reach (`info` reads no chunk text) is still reported, at once."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    db = seeded.in_home("papers.sqlite")
    marker = Path(f"{db}.writing")
    corpus = synth(tmp_path / "more.jsonl", 30)
    proc = subprocess.Popen(
        [str(VENV_BIN / "rag-papers"), "ingest", "--no-progress", str(corpus)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert marker.exists()  # left behind by the killed writer
    checkpoint(db)
    zero_the_chunks_root_page(db)  # what a power cut can leave on a disk that lied about its writes

    held = tmp_path / "marker"
    marker.rename(held)
    assert run_main("info", env=env).returncode == 0  # without the marker: no full read, and `info` sees nothing
    held.rename(marker)
    line = one_error_line(run_main("info", env=env))
    assert f"the registry {db} is damaged" in line and "ingest --rebuild" in line, line
    res = run_main("ingest", "--no-progress", "--rebuild", env=env)
    assert res.returncode == 0, res.stderr
    assert not marker.exists() and len(set_aside_registries(seeded.home)) == 1
    assert json.loads(run_main("info", "--json", env=env).stdout)["papers"] == 38


def test_an_intact_registry_after_a_killed_write_is_checked_once(seeded: Settings) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    marker = Path(f"{seeded.in_home('papers.sqlite')}.writing")
    marker.touch()  # as a killed ingest leaves it: nobody holds its lock
    assert search_json(env)["results"][0]["id"] == abba_id()
    assert not marker.exists()  # checked intact: the next opens read nothing more
