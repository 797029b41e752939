"""Corpus stage: the seeds format, JSONL/CSV readers, ids, derived titles, dedupe and bad input.

Expectations come from the input files themselves (the seeds are re-parsed here with a
plain blank-line split), never from running the readers and pasting what they printed.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import SEEDS, run_main

from rag_papers.config import Settings
from rag_papers.corpus import (
    CorpusError,
    content_hash,
    derive_title,
    plain_text,
    read_file,
    sentences,
    to_paper,
    validate,
)
from rag_papers.index import Index
from rag_papers.ingest import Ingester

SEED_FILES = sorted(SEEDS.glob("*.txt"))


def plain_paragraphs(path: Path) -> list[tuple[int, str]]:
    """(first line number, whitespace-collapsed text) of each blank-line separated paragraph."""
    out: list[tuple[int, str]] = []
    start, buf = 0, list[str]()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines() + [""], 1):
        if line.strip():
            if not buf:
                start = n
            buf.append(line.strip())
        elif buf:
            out.append((start, " ".join(" ".join(buf).split())))
            buf = []
    return out


def seed_abstracts() -> list[str]:
    """Every abstract in the shipped seeds: all paragraphs but each file's header line."""
    out: list[str] = []
    for f in SEED_FILES:
        paras = plain_paragraphs(f)
        assert paras[0][1] == "ICLR 2026 Papers"
        out.extend(text for _, text in paras[1:])
    return out


def introducing(name: str) -> list[str]:
    """Abstracts that coin ``name``: it follows 'we introduce/propose' or 'this paper introduces'."""
    pat = re.compile(rf"\b(?:[Ww]e|[Tt]his paper)\s+(?:introduce|propose)s?\b[^.]*?\b{re.escape(name)}\b")
    return [a for a in seed_abstracts() if pat.search(a)]


ABSTRACT_X = (
    "We study how sparse attention patterns emerge in small transformers trained on modular arithmetic, "
    "and show that the emergent circuits are stable across random seeds and model widths."
)
ABSTRACT_Y = (
    "Graph neural networks for molecule property prediction are evaluated on twelve benchmarks, revealing "
    "that simple message passing baselines remain competitive with recent equivariant architectures."
)
ABSTRACT_Z = (
    "A survey of curriculum learning for reinforcement learning agents, organising methods by how they "
    "select tasks and measuring their benefit in procedurally generated environments."
)


def wrap(text: str, width: int = 40) -> str:
    """Re-wrap a paragraph over several lines with ragged indentation."""
    words, lines, cur = text.split(), [], ""
    for w in words:
        if len(cur) + len(w) > width:
            lines.append(cur)
            cur = ""
        cur = f"{cur}  {w}" if cur else w
    lines.append(cur)
    return "\n".join(("   " if i % 2 else "") + ln + ("\t " if i % 3 == 0 else "") for i, ln in enumerate(lines))


# ------------------------------------------------------------------- seeds format
def test_seeds_header_gives_venue_and_year_and_all_38_abstracts() -> None:
    expected = seed_abstracts()
    assert len(expected) == 38
    records = [r for f in SEED_FILES for r in read_file(f)]
    assert [r.abstract for r in records] == expected
    assert all(r.venue == "ICLR" and r.year == 2026 for r in records)
    # The source points at the file and the line each abstract starts on.
    for f in SEED_FILES:
        starts = [f"{f}:{n}" for n, _ in plain_paragraphs(f)[1:]]
        assert [r.source for r in read_file(f)] == starts
    assert validate(SEED_FILES) == 38


def test_seeds_without_header_and_with_wrapped_paragraphs(tmp_path: Path) -> None:
    f = tmp_path / "plain.txt"
    f.write_text(wrap(ABSTRACT_X) + "\n\n\n" + wrap(ABSTRACT_Y) + "\n", encoding="utf-8")
    recs = list(read_file(f))
    assert [r.abstract for r in recs] == [ABSTRACT_X, ABSTRACT_Y]
    assert all(r.venue is None and r.year is None for r in recs)
    assert recs[0].source == f"{f}:1"


def test_content_hash_ids_survive_rewrapping(tmp_path: Path) -> None:
    one = tmp_path / "one.txt"
    many = tmp_path / "many.txt"
    one.write_text(f"NeurIPS 2024\n\n{ABSTRACT_X}\n", encoding="utf-8")
    many.write_text(f"NeurIPS 2024\n\n{wrap(ABSTRACT_X, 25)}\n", encoding="utf-8")
    assert "\n" in wrap(ABSTRACT_X, 25)
    (a,) = [to_paper(r) for r in read_file(one)]
    (b,) = [to_paper(r) for r in read_file(many)]
    assert a.id == b.id == content_hash(ABSTRACT_X)
    assert a.title == b.title
    assert content_hash("  " + ABSTRACT_X.replace(" ", "\n ")) == content_hash(ABSTRACT_X)
    assert content_hash(ABSTRACT_X) != content_hash(ABSTRACT_Y)
    assert re.fullmatch(r"[0-9a-f]{16}", a.id)


# ------------------------------------------------------------------- JSONL and CSV
def test_jsonl_reader_keeps_all_fields(tmp_path: Path) -> None:
    f = tmp_path / "papers.jsonl"
    rows = [
        {
            "id": "p-1",
            "title": "Sparse  Circuits",
            "abstract": ABSTRACT_X,
            "authors": ["Ada Lovelace", "Alan Turing"],
            "year": 2024,
            "venue": "NeurIPS",
            "url": "https://example.org/p1",
        },
        {"abstract": ABSTRACT_Y, "authors": "Grace Hopper; Edsger Dijkstra", "year": "2023"},
    ]
    f.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    a, b = read_file(f)
    assert (a.id, a.title, a.abstract, a.authors, a.year, a.venue, a.url) == (
        "p-1",
        "Sparse Circuits",
        ABSTRACT_X,
        ["Ada Lovelace", "Alan Turing"],
        2024,
        "NeurIPS",
        "https://example.org/p1",
    )
    assert a.source == f"{f}:1"
    assert (b.id, b.title, b.authors, b.year, b.venue, b.url) == (
        None,
        None,
        ["Grace Hopper", "Edsger Dijkstra"],
        2023,
        None,
        None,
    )
    assert b.source == f"{f}:3"  # the blank line 2 is skipped but counted
    pa, pb = to_paper(a), to_paper(b)
    assert pa.id == "p-1" and pa.title == "Sparse Circuits"
    assert pb.id == content_hash(ABSTRACT_Y) and pb.title == derive_title(ABSTRACT_Y)


def test_csv_reader_keeps_all_fields(tmp_path: Path) -> None:
    f = tmp_path / "papers.csv"
    multi_line = ABSTRACT_Y.replace("revealing that", "revealing\nthat")
    f.write_text(
        "ID,Title,Abstract,Authors,Year,Venue,URL\n"
        f'c1,"Curricula, surveyed","{ABSTRACT_Z}","Ann Smith; Bo Li",2022,ICML,https://example.org/c1\n'
        f',,"{multi_line}",,,,\n',
        encoding="utf-8",
    )
    a, b = read_file(f)
    assert (a.id, a.title, a.abstract, a.authors, a.year, a.venue, a.url) == (
        "c1",
        "Curricula, surveyed",
        ABSTRACT_Z,
        ["Ann Smith", "Bo Li"],
        2022,
        "ICML",
        "https://example.org/c1",
    )
    assert a.source == f"{f}:2"
    assert b.abstract == ABSTRACT_Y  # the quoted newline is folded into a space
    assert (b.id, b.title, b.authors, b.year) == (None, None, None, None)


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("noabs.csv", "title,year\nA,2020\n", "noabs.csv:1: CSV needs an 'abstract' column"),
        ("year.csv", f"abstract,year\n{ABSTRACT_X},soon\n", "year.csv:2: 'year' must be a whole number"),
        ("noabs.jsonl", json.dumps({"title": "t"}) + "\n", "noabs.jsonl:1: record has no 'abstract'"),
        ("list.jsonl", json.dumps([1, 2]) + "\n", "list.jsonl:1: expected a JSON object"),
        ("authors.jsonl", json.dumps({"abstract": ABSTRACT_X, "authors": 3}) + "\n", "authors.jsonl:1: 'authors'"),
    ],
)
def test_structured_reader_errors_name_file_and_line(tmp_path: Path, name: str, content: str, needle: str) -> None:
    f = tmp_path / name
    f.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        list(read_file(f))
    assert needle in str(err.value)


# ------------------------------------------------------------------- derived titles
def test_derived_titles_are_unique_and_deterministic_across_processes() -> None:
    abstracts = seed_abstracts()
    titles = [derive_title(a) for a in abstracts]
    assert len(set(titles)) == 38
    assert all(t and t == t.strip() and len(t) < 120 for t in titles)
    assert titles == [derive_title(a) for a in abstracts]
    # Another interpreter with another hash seed (set/dict order) must agree.
    code = (
        "import json,sys; from rag_papers.corpus import derive_title; "
        "print(json.dumps([derive_title(a) for a in json.load(sys.stdin)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(abstracts),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert json.loads(out.stdout) == titles


@pytest.mark.parametrize("name", ["ABBA", "SWAX", "DirMoE", "TemGX"])
def test_derived_title_leads_with_the_coined_name(name: str) -> None:
    coiners = introducing(name)
    assert len(coiners) == 1, f"{name} should be introduced by exactly one seed abstract"
    assert derive_title(coiners[0]).startswith(f"{name}: ")
    others = [derive_title(a) for a in seed_abstracts() if a is not coiners[0] and a != coiners[0]]
    assert not any(name in t for t in others)


def test_background_acronyms_are_not_taken_as_the_coined_name() -> None:
    # ABBA's abstract names LoRA, HiRA and PEFT before introducing ABBA; TemGX's names TGNN first.
    (abba,) = introducing("ABBA")
    assert abba.index("LoRA") < abba.index("ABBA")
    assert not derive_title(abba).startswith(("LoRA", "HiRA", "PEFT"))
    (temgx,) = introducing("TemGX")
    assert not derive_title(temgx).startswith("TGNN")
    plain = "we study the effect of learning rate warmup on the stability of training small language models."
    assert ":" not in derive_title(plain)


def test_seeded_index_uses_the_derived_titles(seeded: Settings) -> None:
    index = Index(seeded)
    papers = list(index.papers())
    assert {p.id: p.title for p in papers} == {content_hash(a): derive_title(a) for a in seed_abstracts()}
    index.close()


# ------------------------------------------------------------------- dedupe via Ingester.ingest
@pytest.fixture
def small_index(settings: Settings, embedder: object) -> Iterator[Index]:
    index = Index(settings, embedder=embedder)  # type: ignore[arg-type]
    yield index
    index.close()


def test_duplicate_within_one_file_is_one_paper(tmp_path: Path, small_index: Index) -> None:
    f = tmp_path / "dups.jsonl"
    f.write_text(
        "\n".join(json.dumps({"abstract": a}) for a in (ABSTRACT_X, ABSTRACT_Y, ABSTRACT_X.replace(" ", "  "))) + "\n",
        encoding="utf-8",
    )
    report = Ingester(small_index.store).ingest([f], show_progress=False)
    assert (report.records, report.added, report.duplicates, report.total) == (3, 2, 1, 2)
    x = small_index.get([content_hash(ABSTRACT_X)])[content_hash(ABSTRACT_X)]
    assert x.sources == [f"{f.resolve()}:1", f"{f.resolve()}:3"]
    # Again: nothing new, the duplicate is still a duplicate and both sources are kept.
    again = Ingester(small_index.store).ingest([f], show_progress=False)
    assert (again.added, again.unchanged, again.duplicates, again.removed, again.total) == (0, 2, 1, 0, 2)
    assert small_index.get([x.id])[x.id].sources == x.sources


def test_duplicate_across_files_is_one_paper_with_two_sources(tmp_path: Path, small_index: Index) -> None:
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.txt"
    a.write_text(json.dumps({"abstract": ABSTRACT_X, "venue": "NeurIPS", "year": 2024}) + "\n", encoding="utf-8")
    b.write_text(f"ICML 2025 Papers\n\n{ABSTRACT_Z}\n\n{wrap(ABSTRACT_X)}\n", encoding="utf-8")
    report = Ingester(small_index.store).ingest([a, b], show_progress=False)
    assert (report.files, report.records, report.added, report.duplicates, report.total) == (2, 3, 2, 1, 2)
    pid = content_hash(ABSTRACT_X)
    paper = small_index.get([pid])[pid]
    assert paper.sources == [f"{a.resolve()}:1", f"{b.resolve()}:5"]
    assert (paper.venue, paper.year) == ("NeurIPS", 2024)  # the first occurrence wins
    # Dropping it from one file keeps the paper (the other source remains).
    b.write_text(f"ICML 2025 Papers\n\n{ABSTRACT_Z}\n", encoding="utf-8")
    report = Ingester(small_index.store).ingest([b], show_progress=False)
    assert report.removed == 0
    assert small_index.get([pid])[pid].sources == [f"{a.resolve()}:1"]


# ------------------------------------------------------------------- bad input
PNG_HEADER = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"


def _missing(d: Path) -> tuple[Path, str]:
    return d / "nowhere.txt", "no such file"


def _empty(d: Path) -> tuple[Path, str]:
    p = d / "empty.txt"
    p.write_bytes(b"")
    return p, "empty"


def _binary(d: Path) -> tuple[Path, str]:
    p = d / "figure.png"
    p.write_bytes(PNG_HEADER + bytes(range(256)) * 4)
    return p, "binary"


def _late_nul(d: Path) -> tuple[Path, str]:
    p = d / "late_nul.txt"
    p.write_bytes(b"ICLR 2026 Papers\n\n" + (ABSTRACT_X.encode() + b"\n\n") * 60 + b"abc\x00def\n")
    return p, "late_nul.txt:123:"


def _latin1(d: Path) -> tuple[Path, str]:
    p = d / "latin1.txt"
    p.write_bytes(
        f"ICLR 2026 Papers\n\n{ABSTRACT_X}\n\nCaf\u00e9 culture and research: {ABSTRACT_Y}\n".encode("latin-1")
    )
    return p, "latin1.txt:5: not valid UTF-8"


def _header_only(d: Path) -> tuple[Path, str]:
    p = d / "header_only.txt"
    p.write_text("ICLR 2026 Papers\n\n\n", encoding="utf-8")
    return p, "no abstracts"


def _bad_jsonl(d: Path) -> tuple[Path, str]:
    p = d / "broken.jsonl"
    good = json.dumps({"abstract": ABSTRACT_X})
    p.write_text(f"{good}\n\n{good[:-1]}\n{json.dumps({'abstract': ABSTRACT_Y})}\n", encoding="utf-8")
    return p, "broken.jsonl:3: malformed JSON"


def _huge_line(d: Path) -> tuple[Path, str]:
    p = d / "huge.txt"
    with p.open("wb") as fh:
        fh.write(b"word " * 2_000_000 + b"\n")  # 10 MB, one line
    return p, "huge.txt:1:"


BAD_INPUTS: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "missing": _missing,
    "empty": _empty,
    "binary": _binary,
    "late_nul": _late_nul,
    "latin1": _latin1,
    "header_only": _header_only,
    "bad_jsonl": _bad_jsonl,
    "huge_line": _huge_line,
}


def _db_rows(settings: Settings) -> tuple[list[tuple], list[tuple]]:
    import sqlite3

    with sqlite3.connect(settings.in_home("papers.sqlite")) as db:
        papers = db.execute("SELECT * FROM papers ORDER BY id").fetchall()
        sources = db.execute("SELECT * FROM sources ORDER BY paper_id, file, loc").fetchall()
    return papers, sources


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_library(case: str, tmp_path: Path, seeded: Settings) -> None:
    path, needle = BAD_INPUTS[case](tmp_path)
    with pytest.raises(CorpusError) as err:
        validate([path])
    msg = str(err.value)
    assert path.name in msg and needle in msg
    assert "\n" not in msg and len(msg) < 300
    before = _db_rows(seeded)
    index = Index(seeded)  # no embedder given: bad input must fail before any model is needed
    with pytest.raises(CorpusError) as err2:
        Ingester(index.store).ingest([SEED_FILES[0], path], show_progress=False)
    assert str(err2.value) == msg
    assert index.store._embedder is None
    assert _db_rows(seeded) == before
    index.close()


def test_good_file_with_bad_file_adds_nothing(tmp_path: Path, seeded: Settings) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"abstract": ABSTRACT_Z}) + "\n", encoding="utf-8")
    bad, _ = _bad_jsonl(tmp_path)
    index = Index(seeded)
    with pytest.raises(CorpusError, match="broken.jsonl:3"):
        Ingester(index.store).ingest([good, bad], show_progress=False)
    assert index.count() == 38
    assert index.get([content_hash(ABSTRACT_Z)]) == {}
    assert index.store.vectors.collection("chunks").get(where={"paper_id": content_hash(ABSTRACT_Z)})["ids"] == []
    index.close()


def test_bad_input_cli_leaves_index_untouched(tmp_path: Path, seeded: Settings) -> None:
    def papers_json() -> list[dict]:
        res = run_main("papers", "--json")
        assert res.returncode == 0, res.stderr
        return [json.loads(line) for line in res.stdout.splitlines()]

    before = papers_json()
    assert len(before) == 38
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"abstract": ABSTRACT_Z}) + "\n", encoding="utf-8")
    cases = [BAD_INPUTS[c](tmp_path) for c in BAD_INPUTS]
    runs = [([str(p)], p, needle) for p, needle in cases]
    broken = next(p for p, _ in cases if p.name == "broken.jsonl")
    runs.append(([str(good), str(broken)], broken, "broken.jsonl:3"))
    for args, path, needle in runs:
        res = run_main("ingest", "--no-progress", *args)
        lines = res.stderr.splitlines()
        assert res.returncode != 0, (args, res.stdout)
        assert len(lines) == 1, (args, res.stderr)
        assert lines[0].startswith("rag-papers: error:"), lines
        assert path.name in lines[0] and needle in lines[0], lines
        assert res.stdout == ""
    after = papers_json()
    assert after == before
    assert content_hash(ABSTRACT_Z) not in {p["id"] for p in after}
    (abba,) = introducing("ABBA")
    res = run_main("search", "--json", "What does ABBA claim?")
    assert res.returncode == 0, res.stderr
    hit = json.loads(res.stdout)
    assert hit["relevant"] is True
    assert hit["results"][0]["id"] == content_hash(abba)


def test_one_user_id_for_two_abstracts_in_one_ingest_is_an_error_naming_both_lines(
    tmp_path: Path, small_index: Index
) -> None:
    """Reported failure: the second use was silently renamed ("2 added, 0 duplicates")."""
    before = small_index.count()
    f = tmp_path / "ids.jsonl"
    f.write_text(json.dumps({"id": "p1", "abstract": ABSTRACT_X}) + "\n", encoding="utf-8")
    g = tmp_path / "more.jsonl"
    g.write_text(
        "\n".join(json.dumps({"id": i, "abstract": a}) for i, a in (("q", ABSTRACT_Z), ("p1", ABSTRACT_Y))) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(CorpusError) as err:
        Ingester(small_index.store).ingest([f, g], show_progress=False)
    msg = str(err.value)
    assert f"{g}:2" in msg and f"{f}:1" in msg and "'p1'" in msg and "\n" not in msg
    assert small_index.count() == before  # nothing written
    # The same id with the same text twice is one paper, as any duplicate.
    h = tmp_path / "same.jsonl"
    h.write_text("".join(json.dumps({"id": "p1", "abstract": ABSTRACT_X}) + "\n" for _ in range(2)), encoding="utf-8")
    report = Ingester(small_index.store).ingest([h], show_progress=False)
    assert (report.added, report.duplicates, report.renamed) == (1, 1, [])


def test_an_id_taken_by_an_indexed_paper_is_renamed_and_reported(tmp_path: Path, seeded: Settings) -> None:
    """Another file's id that an indexed paper (from a file not re-read) holds for other text: kept apart, and said."""
    f = tmp_path / "ids.jsonl"
    f.write_text(json.dumps({"id": "p1", "abstract": ABSTRACT_X}) + "\n", encoding="utf-8")
    g = tmp_path / "more.jsonl"
    g.write_text(json.dumps({"id": "p1", "abstract": ABSTRACT_Z}) + "\n", encoding="utf-8")
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    assert run_main("ingest", str(f), "--no-progress", env=env).returncode == 0
    done = run_main("ingest", str(g), "--no-progress", env=env)
    assert done.returncode == 0, done.stderr
    new_id = f"p1-{content_hash(ABSTRACT_Z)[:8]}"
    assert f"id 'p1' belongs to an indexed paper with a different abstract: indexed as '{new_id}'" in done.stderr
    assert "1 added" in done.stdout and "1 renamed" in done.stdout
    as_json = run_main("ingest", str(g), "--json", env=env)  # unchanged now: nothing renamed this time
    assert json.loads(as_json.stdout)["renamed"] == []
    papers = {json.loads(line)["id"] for line in run_main("papers", "--json", env=env).stdout.splitlines()}
    assert {"p1", new_id} <= papers


def test_one_clip_rule_cuts_at_characters_or_at_a_whole_word() -> None:
    """Issue 29: chat.py had its own ``_clip`` (whole words, for the rewrite prompt) beside ``corpus.clip``."""
    from rag_papers import chat
    from rag_papers.corpus import clip

    assert not hasattr(chat, "_clip")
    text = "alpha  beta,\ngamma delta"
    assert clip(text, 100) == clip(text, 100, words=True) == "alpha beta, gamma delta"
    assert clip(text, 14) == "alpha beta, g…"
    assert clip(text, 14, words=True) == "alpha beta…"  # no half word, no dangling comma
    assert clip(text, 12, words=True) == "alpha beta…"  # the cut falls right after a word: it stays
    for n in range(2, 24):
        assert len(clip(text, n)) <= n and len(clip(text, n, words=True)) <= n


# ----------------------------------------------------------------------------- the package's layout (issue 27)
PACKAGE = Path(__file__).resolve().parent.parent / "rag_papers"
CORPUS = PACKAGE / "corpus"
# What a module of rag_papers/corpus may import besides the standard library and the corpus modules: the export
# formats' parsers, and of rag_papers only the package root (RagPapersError) and where the word lists lie.
PARSERS = {"bibtexparser", "rispy", "pylatexenc"}
OURS = {"rag_papers", "rag_papers.paths"}


def corpus_modules() -> dict[str, Path]:
    """Every module of rag_papers/corpus by its dotted name."""
    out = {}
    for f in sorted(CORPUS.rglob("*.py")):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def imported(module: str, path: Path) -> list[str]:
    """The modules ``path`` imports, function-level imports too: ``from p import m`` of a module m is ``p.m``."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            name = (f"{base}.{node.module}" if node.module else base) if node.level else str(node.module)
            out.extend(f"{name}.{a.name}" if is_module(f"{name}.{a.name}") else name for a in node.names)
    return out


def test_the_corpus_package_imports_only_the_stdlib_its_parsers_and_itself_without_a_cycle() -> None:
    """rag_papers/corpus stands alone: no module of it imports the rest of rag_papers (the index, the UI,
    pydantic settings), its modules import each other by name (never the package, which re-exports them),
    and no two of them import each other round a cycle."""
    modules = corpus_modules()
    assert {"rag_papers.corpus.text", "rag_papers.corpus.readers.base", "rag_papers.corpus.read"} <= set(modules)
    packages = {m for m, f in modules.items() if f.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        where = path.relative_to(PACKAGE.parent)
        deps = imported(name, path)
        for dep in deps:
            top = dep.split(".")[0]
            assert top in sys.stdlib_module_names or top in PARSERS or dep in OURS or dep in modules, (where, dep)
            assert name in packages or dep not in packages, f"{where} imports the package {dep}: import the module"
        graph[name] = {d for d in deps if d in modules and d not in packages}

    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, f"import cycle: {' -> '.join([*path, m, d])}"
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_pyproject_lists_every_package_of_rag_papers() -> None:
    """setuptools installs only the packages pyproject.toml lists: a subpackage left out (corpus/readers) would be
    missing from the wheel while every test run from the checkout passes (tests/test_packaging.py builds one)."""
    import tomllib

    listed = set(
        tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    )
    found = {".".join(f.parent.relative_to(PACKAGE.parent).parts) for f in PACKAGE.rglob("__init__.py")}
    assert {"rag_papers.corpus", "rag_papers.corpus.readers"} <= found <= listed


def test_no_module_but_corpus_text_splits_sentences_of_its_own() -> None:
    """One sentence splitter (``corpus.text.sentences``): issue 27 found nine regex splitters in seven modules,
    and a quote the answer cut one way that the panel cut another was never highlighted."""
    own = CORPUS / "text.py"
    found = [
        f"{f.relative_to(PACKAGE.parent)}:{n}"
        for f in sorted(PACKAGE.rglob("*.py"))
        if f != own
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if "(?<=[.!?])" in line
    ]
    assert found == []
    assert "(?<=[.!?])" in own.read_text(encoding="utf-8")
    assert not (PACKAGE / "formats.py").exists() and not (PACKAGE / "corpus.py").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We use e.g. the model. It works.", ["We use e.g. the model.", "It works."]),
        ("Both, i.e. a and b. Then more.", ["Both, i.e. a and b.", "Then more."]),
        ("Smith et al. show it. Next one.", ["Smith et al. show it.", "Next one."]),
        ("It gains 3.5 points. 12 more follow.", ["It gains 3.5 points.", "12 more follow."]),
        ("Models (e.g. BERT) cf. GPT vs. T5 work. Done.", ["Models (e.g. BERT) cf. GPT vs. T5 work.", "Done."]),
        (
            'Ends! "Quoted" next? (Paren) yes. $x$ is. \\alpha too.',
            ["Ends!", '"Quoted" next?', "(Paren) yes.", "$x$ is.", "\\alpha too."],
        ),
        ("A  wrapped\nsentence. and lower-case after a stop.", ["A wrapped sentence. and lower-case after a stop."]),
        ("", []),
    ],
)
def test_the_one_sentence_splitter(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_every_sentence_an_answer_can_quote_is_one_sentence_the_panel_highlights() -> None:
    """The invariant behind the one splitter: an extractive answer quotes a sentence of an abstract as a reader
    sees it, and the sources panel, cutting the same abstract, marks exactly that sentence "quoted"."""
    from rag_papers.answer import extractive_text
    from rag_papers.corpus import quotable_sentences
    from rag_papers.judge import Verdict
    from rag_papers.retrieve import Hit
    from rag_papers.ui.render import marked_sentences

    def norm(s: str) -> str:
        return " ".join(s.split()).lower()

    settings = Settings()
    papers = [to_paper(rec) for f in SEED_FILES for rec in read_file(f)]
    assert len(papers) == 38
    quoted = 0
    for paper in papers:
        used = [(Hit(paper.id, paper.title, 1.0, 1.0, 0.0, ""), paper)]
        shown = plain_text(paper.abstract)  # what the panel cuts (ui/render.py: _panel_body)
        for sentence in quotable_sentences(paper.abstract):
            for listing in (False, True):  # "- sentence [1]", and "- Title — sentence [1]" in a list of papers
                verdict = Verdict("rules", quotes=[(paper.id, sentence)], listing=listing, titled=listing)
                answer = "".join(extractive_text(verdict, used, settings))
                marked = [s for kind, s in marked_sentences(shown, "", answer) if kind == "quoted"]
                assert [norm(s) for s in marked] == [norm(sentence)], (paper.title, sentence, marked)
            quoted += 1
    assert quoted > 38 * 4
