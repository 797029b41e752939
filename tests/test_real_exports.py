"""Issue 44: export files that real tools wrote (tests/fixtures/README.md names each one's source and licence),
read as they come, into a real index of the seeds.

Expectations come from the files themselves (plain regexes and ``json`` over their bytes), never from the readers.
Each test failed on the code before the issue's fixes; what it failed with is said in its docstring.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_main
from test_integrity import one_error_line
from test_validation import papers_json

from rag_papers.config import Settings
from rag_papers.corpus import CorpusError, read_file

FIXTURES = Path(__file__).parent / "fixtures"


def env_of(settings: Settings) -> dict[str, str]:
    return {"RAG_PAPERS_HOME": str(settings.home)}


def copy_fixture(name: str, tmp_path: Path, as_name: str | None = None) -> Path:
    return Path(shutil.copy(FIXTURES / name, tmp_path / (as_name or name)))


def from_file(papers: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    return [p for p in papers if any(s.startswith(f"{path.resolve()}:") for s in p["sources"])]


def bib_entries(path: Path) -> dict[str, tuple[int, str]]:
    """Each entry's key -> (the line it starts on, its text), by a plain scan of the file (a repeated key: its last)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [(i + 1, m.group(1)) for i, line in enumerate(lines) if (m := re.match(r"@\w+\{([^,]+),", line))]
    out: dict[str, tuple[int, str]] = {}
    for (line, key), nxt in zip(starts, [*(s for s, _ in starts[1:]), len(lines) + 1]):
        out[key] = (line, "\n".join(lines[line - 1 : nxt - 1]))
    return out


def bib_field(entry: str, name: str) -> str | None:
    """The braced value of field ``name`` (any case) as written, found by counting braces."""
    m = re.search(rf"^\s*{name}\s*=\s*\{{", entry, re.M | re.I)
    if m is None:
        return None
    depth, i = 1, m.end()
    while i < len(entry) and depth:
        depth += {"{": 1, "}": -1}.get(entry[i], 0)
        i += 1
    return entry[m.end() : i - 1]


# ------------------------------------------------------------------------------------------------ JabRef 2.10
def test_jabref_2_capitalised_fields_give_whole_author_names(seeded: Settings, tmp_path: Path) -> None:
    """Before: ``Author = {Adachi, H. and Takano, M.}`` gave the authors A, d, a, c, h, i, ... (names were split only
    for a lower-case ``author``), and a title's ``{Cu$_2$O}`` stayed ``Cu$_2$O``."""
    path = copy_fixture("jabref-2.10.bib", tmp_path)
    assert "% This file was created with JabRef 2.10." in path.read_text(encoding="utf-8")
    entries = bib_entries(path)
    with_abstract = {k: e for k, (_, e) in entries.items() if bib_field(e, "Abstract")}
    res = run_main("ingest", str(path), "--no-progress", env=env_of(seeded))
    assert res.returncode == 0, res.stderr
    got = {p["title"]: p for p in from_file(papers_json(env_of(seeded)), path)}
    assert len(got) == len(with_abstract) == 3
    for entry in with_abstract.values():
        raw = bib_field(entry, "Author")
        assert raw is not None
        # "Last, First and Last, First" as written -> "First Last" each
        expected = [" ".join(reversed([part.strip() for part in a.split(",", 1)])) for a in raw.split(" and ")]
        title = bib_field(entry, "Title") or ""
        plain = title.replace("{", "").replace("}", "").replace("$_2$", "₂").replace("\\,", " ")
        plain = re.sub(r"\$_\\mathrm(\w+)\$", r"_\1", plain)
        assert plain in got, (plain, list(got))
        assert got[plain]["authors"] == expected
        assert got[plain]["venue"] == bib_field(entry, "Journal")
    assert any("Cu₂O" in t for t in got) and not any("$" in t for t in got)


# ------------------------------------------------------------------------------------------------ same abstract
def test_arxiv_snapshot_records_with_one_abstract_are_two_papers(seeded: Settings, tmp_path: Path) -> None:
    """Before: 0704.0026 and 0704.0112 (the same abstract, two arXiv ids and titles) became one paper; 0704.0112
    was gone and its title found 0704.0026."""
    env = env_of(seeded)
    path = copy_fixture("arxiv-snapshot-0704.json", tmp_path)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    same = [r for r in records if r["id"] in ("0704.0026", "0704.0112")]
    assert len(same) == 2 and " ".join(same[0]["abstract"].split()) == " ".join(same[1]["abstract"].split())
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    ids = {p["id"]: p for p in from_file(papers_json(env), path)}
    assert set(ids) == {f"doi:{r['doi'].lower()}" if r["doi"] else f"arXiv:{r['id']}" for r in records}
    for r in same:
        assert r["doi"] is None
        title = " ".join(r["title"].split())
        assert ids[f"arXiv:{r['id']}"]["title"] == title
        hit = json.loads(run_main("search", "--json", title, env=env).stdout)["results"][0]
        assert hit["id"] == f"arXiv:{r['id']}", (title, hit)
    again = run_main("ingest", str(path), "--json", "--no-progress", env=env)  # re-read: the same two, unchanged
    assert json.loads(again.stdout)["unchanged"] == len(records), again.stdout


def test_book_chapters_that_repeat_the_books_abstract_are_each_a_paper(seeded: Settings, tmp_path: Path) -> None:
    """Before: the chapters of one book, each with the book's abstract (JabRef 5.1), became one paper and the other
    titles were lost; ``Ragnhei{\\d}ur`` lost its ð."""
    env = env_of(seeded)
    path = copy_fixture("jabref-5.1-book-chapters.bib", tmp_path)
    entries = bib_entries(path)
    abstracts = {" ".join((bib_field(e, "abstract") or "").split()) for _, e in entries.values()}
    assert len(entries) == 6 and len(abstracts) == 1 and "" not in abstracts
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    got = from_file(papers_json(env), path)
    assert len(got) == len(entries)
    titles = {p["title"] for p in got}
    for _, entry in entries.values():
        title = re.sub(r"[{}]|\\-", "", bib_field(entry, "title") or "")
        assert title in titles, (title, titles)
    (fleece,) = [p for p in got if p["title"].startswith("Fleece")]
    assert fleece["authors"] == ["Ragnheiður Bogadóttir"]


# ------------------------------------------------------------------------------------------------ damaged files
def test_a_mendeley_export_with_repeated_keys_goes_in(seeded: Settings, tmp_path: Path) -> None:
    """Before: ``malformed BibTeX (the key 'Milazzo2017' is used by two entries)`` and nothing ingested. Now every
    entry is read; the repeats of one paper (one DOI, one title) are one paper, and ingest names the merged records.
    ``--strict`` refuses the file as before."""
    env = env_of(seeded)
    path = copy_fixture("mendeley-repeated-keys.bib", tmp_path)
    text = path.read_text(encoding="utf-8")
    starts = {i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("@article{Milazzo2017,")}
    assert len(starts) == 3
    before = papers_json(env)
    strict = one_error_line(run_main("ingest", str(path), "--strict", "--no-progress", env=env))
    assert "the key 'Milazzo2017' is used by two entries" in strict
    assert papers_json(env) == before
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    got = from_file(papers_json(env), path)
    (milazzo,) = [p for p in got if p["title"].startswith("On White Ignorance")]
    assert {int(s.rpartition(":")[2]) for s in milazzo["sources"]} == starts
    first = min(starts)
    for line in starts - {first}:
        assert f"{path.resolve()}:{line} merged into {milazzo['id']} (the same DOI as {path.resolve()}:{first})" in (
            res.stderr
        ), res.stderr
    keys = re.findall(r"^@\w+\{([^,]+),", text, re.M)
    with_abstract = [k for k, e in zip(keys, re.split(r"\n(?=@)", text)) if re.search(r"^\s*abstract = ", e, re.M)]
    assert len({p["id"] for p in got}) == len(set(with_abstract))  # Milazzo2017 and Mabbott2017 twice, one paper each


def test_a_library_with_unbalanced_braces_goes_in_but_its_damaged_entries(seeded: Settings, tmp_path: Path) -> None:
    """Before: the Better BibTeX library was refused at its first entry with an unbalanced brace. Now the good
    entries go in and each damaged one is named FILE:LINE: reason; ``--strict`` refuses the file and writes
    nothing; ``--json`` lists every skipped record."""
    env = env_of(seeded)
    path = copy_fixture("better-bibtex-unbalanced.bib", tmp_path)
    entries = bib_entries(path)
    # the two entries whose braces do not balance, found by counting them
    broken = sorted(line for line, e in entries.values() if e.count("{") != e.count("}"))
    assert len(broken) == 2
    good = [k for k, (line, e) in entries.items() if line not in broken and bib_field(e, "abstract")]
    before = papers_json(env)
    strict = one_error_line(run_main("ingest", str(path), "--strict", "--no-progress", env=env))
    assert f"{path}:{broken[0]}: malformed BibTeX, an entry is not closed" in strict
    assert papers_json(env) == before
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    for line in broken:
        assert f"rag-papers: skipped {path}:{line}: malformed BibTeX, an entry is not closed" in res.stderr
    assert f"{len(good)} added" in res.stdout and "2 damaged records skipped" in res.stdout, res.stdout
    got = from_file(papers_json(env), path)
    assert len(got) == len(good)
    as_json = json.loads(run_main("ingest", str(path), "--json", "--no-progress", env=env).stdout)
    skipped = as_json["skipped_records"]
    assert [s.split(": ", 1)[0] for s in skipped[:2]] == [f"{path}:{line}" for line in broken]
    no_abstract = [line for k, (line, e) in entries.items() if line not in broken and not bib_field(e, "abstract")]
    assert sorted(s for s in skipped if s.endswith(": no abstract")) == sorted(
        f"{path}:{line}: no abstract" for line in no_abstract
    )


def test_more_damaged_records_than_listed_are_counted(seeded: Settings, tmp_path: Path) -> None:
    """The first 20 damaged records are named one a line, then a count: 25 copies of one unbalanced entry."""
    src = (FIXTURES / "better-bibtex-unbalanced.bib").read_text(encoding="utf-8")
    entries = bib_entries(FIXTURES / "better-bibtex-unbalanced.bib")
    (bad,) = [e for line, e in entries.values() if e.count("{") != e.count("}") and "AGESCHEIDER" in e]
    path = tmp_path / "many.bib"
    path.write_text(src.split("@article{AGESCHEIDER")[0] + (bad + "\n") * 25, encoding="utf-8")
    res = run_main("ingest", str(path), "--no-progress", env=env_of(seeded))
    assert res.returncode == 0, res.stderr
    named = [line for line in res.stderr.splitlines() if line.startswith(f"rag-papers: skipped {path}:")]
    assert len(named) == 20
    assert "rag-papers: ... and 5 more damaged records skipped (see --json)" in res.stderr


def test_a_csl_item_without_date_or_creators_is_one_of_the_files_records(tmp_path: Path) -> None:
    """Before: a Better CSL-JSON item with no ``issued``, ``author`` or ``container-title`` (item 4 here) failed the
    whole file as "not a CSL-JSON record like the ones before it"; and a pretty-printed page cited its records by
    their position (``:2``), not their line."""
    path = copy_fixture("better-csl-json-no-dates.json", tmp_path)
    items = json.loads(path.read_text(encoding="utf-8"))
    assert not any(k in items[3] for k in ("issued", "author", "container-title")) and "abstract" not in str(items)
    with pytest.raises(CorpusError, match=rf"no abstracts found \({len(items)} records skipped: no abstract\)"):
        list(read_file(path))
    page = copy_fixture("better-csl-json.json", tmp_path)
    lines = [i + 1 for i, line in enumerate(page.read_text(encoding="utf-8").splitlines()) if '{"id":' in line]
    assert len(lines) == len(json.loads(page.read_text(encoding="utf-8"))) and lines[0] > 1
    assert [r.source for r in read_file(page)] == [f"{page}:{n}" for n in lines]


# ------------------------------------------------------------------------------------------------ OpenAlex, Atom
def test_an_openalex_work_as_the_api_gives_it(seeded: Settings, tmp_path: Path) -> None:
    """Before: a whole work (one line of about 1 MB, with its 2,918 authorships) was refused: "line is 1,003,852
    bytes; an abstract may be at most 20,000 characters", though its abstract is a few hundred."""
    env = env_of(seeded)
    path = copy_fixture("openalex-work-atlas.jsonl", tmp_path)
    work = json.loads(path.read_text(encoding="utf-8"))
    assert path.stat().st_size > 100_000 and len(work["authorships"]) > 2_000
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    (paper,) = from_file(papers_json(env), path)
    assert paper["title"] == work["title"] and paper["year"] == work["publication_year"]
    assert paper["authors"] == [a["author"]["display_name"] for a in work["authorships"]]
    assert paper["id"] == f"openalex:{work['id'].rsplit('/', 1)[1]}" and paper["url"] == work["host_venue"]["url"]


@pytest.mark.parametrize("name", ["arxiv-api-1605.08386.atom", "arxiv-api-astro-ph-0601001.xml"])
def test_the_arxiv_apis_atom_feed_is_read_as_a_format(name: str, seeded: Settings, tmp_path: Path) -> None:
    """Before: the API's own answer was read as seeds text; a 1-entry feed "added" a paper whose abstract was the
    raw XML."""
    env = env_of(seeded)
    path = copy_fixture(name, tmp_path)
    text = path.read_text(encoding="utf-8")
    entry = text[text.index("<entry>") :]
    summary = html.unescape(" ".join(re.search(r"<summary>(.*?)</summary>", entry, re.S).group(1).split()))  # type: ignore[union-attr]
    title = " ".join(re.search(r"<title>(.*?)</title>", entry, re.S).group(1).split())  # type: ignore[union-attr]
    names = re.findall(r"<name>(.*?)</name>", entry)
    aid = re.search(r"<id>https?://arxiv\.org/abs/(.*?)(?:v\d+)?</id>", entry).group(1)  # type: ignore[union-attr]
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    (paper,) = from_file(papers_json(env), path)
    assert (paper["title"], paper["abstract"], paper["authors"]) == (title, summary, names)
    assert paper["id"] == f"arXiv:{aid}" and paper["url"] == f"https://arxiv.org/abs/{aid}"
    assert paper["year"] == int(re.search(r"<published>(\d{4})", entry).group(1))  # type: ignore[union-attr]


def test_an_atom_feed_of_ten_entries(tmp_path: Path) -> None:
    """Before: a larger feed failed on "the abstract length", not as a format. The feed of tests/fetch (a real arXiv
    answer, arxiv.py's recording) saved as .xml reads as its ten papers."""
    path = Path(shutil.copy(Path(__file__).parent / "fetch" / "arxiv-testing-start0.xml", tmp_path / "feed.xml"))
    ids = re.findall(r"<id>https?://arxiv\.org/abs/([^<]*?)(?:v\d+)?</id>", path.read_text(encoding="utf-8"))
    assert len(ids) == 10
    assert [r.url for r in read_file(path)] == [f"https://arxiv.org/abs/{i}" for i in ids]


# ------------------------------------------------------------------------------------------------ RIS venues
def test_zotero_ris_reads_the_venue_its_bibtex_has(tmp_path: Path) -> None:
    """Before: Zotero's RIS puts a conference's name in C3, which was not read: the venue was missing for the
    conference papers of the RIS export and for none of the same library's BibTeX."""
    ris, bib = copy_fixture("zotero-library.ris", tmp_path), copy_fixture("zotero-library.bib", tmp_path)
    assert "\nC3  - " in ris.read_text(encoding="utf-8")
    from_ris = {r.id: r for r in read_file(ris)}
    from_bib = {r.id: r for r in read_file(bib)}
    assert set(from_ris) == set(from_bib) and len(from_ris) == 4
    for pid, rec in from_ris.items():
        assert rec.venue is not None and rec.venue == from_bib[pid].venue, (pid, rec.venue, from_bib[pid].venue)
        assert rec.authors == from_bib[pid].authors and rec.year == from_bib[pid].year


# ------------------------------------------------------------------------------------------------ one DOI, two papers
def test_one_doi_on_two_papers_whose_title_and_first_author_differ(seeded: Settings, tmp_path: Path) -> None:
    """Two records that share a (wrong) DOI but neither title nor first author are two papers, and a warning names
    them. Constructed: the shared-DOI pairs of the real files at hand either lack abstracts (Better BibTeX's
    ``Branzel:2013bw`` and ``Pierce:2013bw``) or share their first author. Before: one paper, counted as a
    duplicate."""
    env = env_of(seeded)
    path = tmp_path / "theses.ris"
    path.write_text(
        "TY  - THES\nTI  - Thompson Field Theory\nAU  - Stiegemann, Deniz Ekrem\nPY  - 2019\nDO  - 10.15488/5127\n"
        "AB  - We study field theories built on Thompson's groups and their representations on spin chains.\n"
        "ER  - \n\n"
        "TY  - THES\nTI  - Exactly Soluble Models in Many-Body Physics\nAU  - Elman, Samuel\nPY  - 2023\n"
        "DO  - 10.15488/5127\nAB  - Exactly soluble models of interacting quantum many-body systems are "
        "constructed and their phases classified.\nER  - \n",
        encoding="utf-8",
    )
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    got = from_file(papers_json(env), path)
    assert sorted(p["title"] for p in got) == ["Exactly Soluble Models in Many-Body Physics", "Thompson Field Theory"]
    assert f"{path}:9: 10.15488/5127 is also the DOI of doi:10.15488/5127 ({path.resolve()}:1)" in res.stderr
    assert "0 duplicates" in res.stdout
