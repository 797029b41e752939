"""Hostile or odd input never reaches the terminal raw, and never ends in a traceback.

Control characters written as JSON escapes (``\\u001b[31m``, ``\\u0000``) and bidi overrides
are stripped at ingest and on every plain-text print (an index written before that rule
included); bad files, FIFOs, empty queries and filters that exclude every paper give one
clear line, or say so in the result. Everything runs through the console script's entry point
``rag_papers.cli.main`` (in this process: ``run_main``; the unprivileged user's run as a process)
against a real index.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_main

from rag_papers import cli
from rag_papers.config import Settings
from rag_papers.corpus import CorpusError, read_file, safe_text

# Every character the output must never carry raw: C0 (but newline and tab), DEL, C1, and the
# bidi embedding/override/isolate controls and marks.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
ABSTRACT = (
    "We study how sparse attention patterns emerge in small transformers trained on modular arithmetic, "
    "and show that the emergent circuits are stable across random seeds and model widths."
)


def unsafe(text: str) -> list[str]:
    return sorted({repr(c) for c in UNSAFE.findall(text)})


def one_error_line(res: object, *needles: str) -> str:
    """The single ``rag-papers: error:`` line of a failed run (and no traceback)."""
    rc, out, err = res.returncode, res.stdout, res.stderr  # type: ignore[attr-defined]
    assert rc != 0, out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rag-papers: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return str(lines[0])


# ------------------------------------------------------------------ 1. control characters
HOSTILE = {
    "id": "evil\u001b[31mid\u202e",
    "title": "Red \u001b[31mALERT\u001b[0m title\u0007 \u202egnp.exe\u202c",
    "abstract": "We study how sparse attention \u0000patterns emerge in small \u001b]0;pwned\u0007transformers "
    "trained on modular\u0085arithmetic\u001b[2J, and show that the emergent circuits are stable "
    "across random seeds\u200f and \u2066model\u2069 widths.\r",
    "venue": "Neur\u009bIPS\u0008",  # U+009B (C1 CSI) goes alone: the letters after it stay
    "authors": ["Eve \u202eevil", "\u001b[1mBold\u001b[0m Bob"],
    "url": "http://x\u0008.org/\u200ep",
    "year": 2024,
}


def hostile_jsonl(d: Path) -> Path:
    f = d / "hostile.jsonl"
    f.write_text(json.dumps(HOSTILE) + "\n", encoding="utf-8")  # json.dumps writes the \uXXXX escapes
    assert "\\u0000" in f.read_text() and "\x00" not in f.read_text()
    return f


def test_safe_text_strips_controls_escapes_and_bidi() -> None:
    assert safe_text("a\u001b[31mred\u001b[0m b") == "ared b"
    assert safe_text("x\u001b]0;title\u0007y") == "xy"  # an OSC sequence (window title)
    assert safe_text("keep\nlines\tand tabs") == "keep\nlines\tand tabs"
    assert safe_text("keep\nlines\tand tabs", newlines=False) == "keep lines and tabs"
    assert safe_text("over\rwrite\x0bv\x0cf\u0085nel") == "over write v f nel"  # whitespace controls: a space
    assert safe_text("nul\u0000bel\u0007del\u007fc1\u0090") == "nulbeldelc1"
    assert safe_text("\u202egnp.exe\u202c \u2066iso\u2069 \u200el\u200fr\u061c") == "gnp.exe iso lr"
    assert (
        safe_text("caf\u00e9 \u4e2d\u6587 \u05e9\u05dc\u05d5\u05dd")
        == "caf\u00e9 \u4e2d\u6587 \u05e9\u05dc\u05d5\u05dd"
    )


def test_ingest_strips_controls_in_every_field(tmp_path: Path) -> None:
    (rec,) = read_file(hostile_jsonl(tmp_path))
    fields = [rec.abstract, rec.title, rec.id, rec.venue, rec.url, *(rec.authors or [])]
    assert all(isinstance(f, str) and not unsafe(f) for f in fields), [unsafe(str(f)) for f in fields]
    assert rec.title == "Red ALERT title gnp.exe"
    assert rec.id == "evilid"
    assert rec.venue == "NeurIPS"
    assert rec.authors == ["Eve evil", "Bold Bob"]
    assert rec.url == "http://x.org/p"
    # \u0000 inside a JSON string is a character like any other control: stripped (a raw NUL byte
    # in the file is still refused as binary, see test_corpus).
    assert rec.abstract.startswith("We study how sparse attention patterns emerge in small transformers trained")
    assert "modular arithmetic, and show" in rec.abstract and rec.abstract.endswith("random seeds and model widths.")


def test_seeds_and_csv_files_with_raw_escape_bytes_are_cleaned(tmp_path: Path) -> None:
    txt = tmp_path / "raw.txt"
    txt.write_bytes(b"ICLR 2026 Papers\n\n" + ABSTRACT.replace("sparse", "\x1b[5msparse\x1b[0m").encode() + b"\n")
    csv_file = tmp_path / "raw.csv"
    csv_file.write_bytes(b'title,abstract\n"T\x1b[31mx\xe2\x80\xae","' + ABSTRACT.encode() + b'\x07"\n')
    (a,) = read_file(txt)
    (b,) = read_file(csv_file)
    assert a.abstract == ABSTRACT and b.abstract == ABSTRACT and b.title == "Tx"


def test_abstract_of_only_controls_is_no_abstract(tmp_path: Path) -> None:
    f = tmp_path / "blank.jsonl"
    f.write_text(json.dumps({"abstract": "\u0000\u001b[0m\u202e"}) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"blank\.jsonl:1: record has no 'abstract' text"):
        list(read_file(f))


def test_cli_never_prints_control_bytes_from_a_hostile_corpus(tmp_path: Path) -> None:
    f = hostile_jsonl(tmp_path)
    res = run_main("ingest", "--no-progress", str(f))
    assert res.returncode == 0, res.stderr
    papers = run_main("papers")
    assert papers.returncode == 0 and "evilid  Red ALERT title gnp.exe" in papers.stdout, papers
    as_json = json.loads(run_main("papers", "--json").stdout)
    assert not unsafe(json.dumps(as_json, ensure_ascii=False)), as_json
    found = run_main("search", "sparse attention in transformers trained on modular arithmetic", "--top-k", "1")
    assert found.returncode == 0 and "Red ALERT title" in found.stdout, found.stderr
    for out in (papers.stdout, papers.stderr, found.stdout, found.stderr):
        assert not unsafe(out), unsafe(out)


@pytest.fixture
def old_index(seeded: Settings) -> Iterator[tuple[Settings, str]]:
    """The seeds index with ABBA's registry row rewritten as an index made before the rule would hold it."""
    evil = "\u001b[2J\u001b[31m\u202e"
    with sqlite3.connect(seeded.in_home("papers.sqlite")) as db:
        (pid,) = db.execute("SELECT id FROM papers WHERE title LIKE 'ABBA:%'").fetchone()
        db.execute(
            "UPDATE papers SET title = ?, abstract = replace(abstract, 'ABBA', ?) WHERE id = ?",
            (f"ABBA{evil}: pre-trained weights\u0007", f"AB{evil}BA", pid),
        )
        db.execute("UPDATE chunks SET text = replace(text, 'ABBA', ?) WHERE paper_id = ?", (f"AB{evil}BA", pid))
    yield seeded, pid


def test_an_index_written_before_the_rule_prints_no_control_bytes(old_index: tuple[Settings, str]) -> None:
    _, pid = old_index
    runs = [
        run_main("papers"),
        run_main("search", "ABBA Hadamard product of two low-rank matrices", "--top-k", "2"),
        run_main("ask", "--llm", "extractive", "what does ABBA claim about the Hadamard product?"),
    ]
    for res in runs:
        assert res.returncode == 0, res.stderr
        assert not unsafe(res.stdout) and not unsafe(res.stderr), (res.args, unsafe(res.stdout + res.stderr))
    assert f"{pid}  ABBA: pre-trained weights" in runs[0].stdout
    assert "ABBA: pre-trained weights" in runs[1].stdout and "ABBA: pre-trained weights" in runs[2].stdout
    # JSON output keeps the stored text but escaped: no raw control byte on the terminal either.
    res = run_main("search", "--json", "ABBA Hadamard product of two low-rank matrices", "--top-k", "1")
    assert not unsafe(res.stdout) and "\\u001b" in res.stdout
    assert json.loads(res.stdout)["results"][0]["title"].startswith("ABBA\u001b[2J")


def test_user_text_and_error_lines_are_cleaned(tmp_path: Path, seeded: Settings) -> None:
    res = run_main("search", "\u001b[31mABBA\u001b[0m Hadamard\u202e", "--top-k", "1")
    assert res.returncode == 0 and "Query: ABBA Hadamard\n" in res.stdout
    assert not unsafe(res.stdout)
    missing = tmp_path / "no\u001b[31msuch\u202e.jsonl"
    res = run_main("ingest", str(missing))
    line = one_error_line(res, "nosuch.jsonl", "no such file")
    assert not unsafe(line)


# ------------------------------------------------------------------ 2. tracebacks -> one line
def test_llamacpp_with_a_file_that_is_not_a_gguf(tmp_path: Path, seeded: Settings) -> None:
    text = tmp_path / "x.gguf"
    text.write_text("hello, not a model\n")
    fake = tmp_path / "magic.gguf"
    fake.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)  # the magic, then garbage: llama.cpp itself refuses it
    for path in (text, fake):
        res = run_main("ask", "--llm", "llamacpp", "--model", str(path), "what does ABBA claim?")
        one_error_line(res, str(path))
        assert res.returncode == 2


def test_llamacpp_backend_wraps_a_failed_load(tmp_path: Path, settings: Settings) -> None:
    from rag_papers.llm import LlamaCppBackend, LLMError

    fake = tmp_path / "magic.gguf"
    fake.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    backend = LlamaCppBackend(settings, str(fake))
    assert backend.available()[0]  # looks like a GGUF: only loading can tell
    with pytest.raises(LLMError, match=re.escape(str(fake))):
        list(backend.stream([{"role": "user", "content": "hi"}], 8))


def test_eval_with_a_binary_or_non_utf8_qa_file(tmp_path: Path, seeded: Settings) -> None:
    png = tmp_path / "qa.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    one_error_line(run_main("eval", "--qa", str(png)), "qa.png", "binary")
    latin = tmp_path / "qa.jsonl"
    latin.write_bytes(
        json.dumps({"id": "q1", "question": "caf\u00e9?", "gold": []}).encode()
        + b"\n"
        + '{"id": "q2", "question": "Caf\u00e9 culture?", "gold": []}\n'.encode("latin-1")
    )
    res = run_main("eval", "--qa", str(latin))
    one_error_line(res, "qa.jsonl:2:", "UTF-8")
    assert res.returncode == 2
    empty_q = tmp_path / "empty_q.jsonl"
    empty_q.write_text(json.dumps({"id": "q1", "question": "  ", "gold": []}) + "\n")
    one_error_line(run_main("eval", "--qa", str(empty_q)), "empty_q.jsonl:1:", "empty question")


def _unprivileged(work: Path) -> tuple[list[str], dict[str, int]]:
    """How to run a command without root's power to read any file: (command prefix, subprocess kwargs).

    Not root: as is. Root: as user 65534 (nobody) when this interpreter is reachable for that
    user, else as root without the capabilities that bypass file permissions (setpriv), which
    is what makes root ignore them in the first place.
    """
    if os.geteuid() != 0:
        return [], {}
    import subprocess

    from conftest import VENV_BIN

    try:
        probe = subprocess.run(
            [str(VENV_BIN / "python"), "-c", "pass"], user=65534, cwd=work, capture_output=True, timeout=60
        )
        if probe.returncode == 0:
            return [], {"user": 65534}
    except OSError:
        pass  # e.g. the interpreter lives under /root, which nobody may not enter
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root, and neither user 65534 nor setpriv can drop the power to read any file")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"], {}


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can work in (pytest's tmp_path is root's only)."""
    d = Path(tempfile.mkdtemp(prefix="rag-papers-unpriv-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        for q in [d, *d.rglob("*")]:
            q.chmod(0o777)
        shutil.rmtree(d, ignore_errors=True)


def test_unreadable_corpus_for_an_unprivileged_user(shared_dir: Path) -> None:
    """Root reads any file, so the console script runs without that power (see ``_unprivileged``)."""
    import subprocess

    from conftest import VENV_BIN

    secret = shared_dir / "secret.jsonl"
    secret.write_text(json.dumps({"abstract": ABSTRACT}) + "\n")
    secret.chmod(0o000)
    locked = shared_dir / "locked"
    locked.mkdir()
    (locked / "a.jsonl").write_text(json.dumps({"abstract": ABSTRACT}) + "\n")
    locked.chmod(0o000)
    home = shared_dir / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    prefix, kw = _unprivileged(shared_dir)
    env = {
        **os.environ,
        "HOME": str(shared_dir),
        "RAG_PAPERS_HOME": str(home),
        "RAG_PAPERS_MODEL_CACHE": str(shared_dir / "models"),
    }
    for target, needle in ((secret, "secret.jsonl"), (locked, "locked")):
        res = subprocess.run(
            [*prefix, str(VENV_BIN / "rag-papers"), "ingest", "--no-progress", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=shared_dir,
            **kw,
        )  # type: ignore[call-overload]
        line = one_error_line(res, needle, "Permission denied")
        assert res.returncode == 2, line


class Boom(Exception):
    pass


def _boom(args: object) -> int:
    raise Boom("the disk\nsaid no")


def test_unexpected_exception_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(cli.COMMANDS, "papers", _boom)
    monkeypatch.delenv("RAG_PAPERS_DEBUG", raising=False)
    assert cli.main(["papers"]) == 1
    err = capsys.readouterr().err
    assert err == "rag-papers: error: unexpected Boom: the disk said no (rerun with --debug for the traceback)\n"
    for argv, env in ((["--debug", "papers"], None), (["papers", "--debug"], None), (["papers"], "1")):
        if env:
            monkeypatch.setenv("RAG_PAPERS_DEBUG", env)
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "in _boom" in err, argv
        assert err.rstrip().endswith("rag-papers: error: unexpected Boom: the disk said no"), err


def test_interrupt_and_broken_pipe_keep_their_exits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    def piped(args: object) -> int:
        raise BrokenPipeError

    monkeypatch.setitem(cli.COMMANDS, "papers", interrupted)
    assert cli.main(["papers"]) == 130
    assert capsys.readouterr().err == "rag-papers: interrupted\n"
    monkeypatch.setitem(cli.COMMANDS, "papers", piped)
    assert cli.main(["papers"]) == 0


# ------------------------------------------------------------------ 3. empty queries and filters
@pytest.mark.parametrize(
    "argv", [["search", ""], ["search", "   "], ["search", "ABBA", " "], ["ask", ""], ["ask", " ", "\t"]]
)
def test_empty_query_is_an_error(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "never-made"
    assert cli.main([*argv, "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"rag-papers: error: empty (query|question)[^\n]*\n", err), err
    assert not home.exists()  # failed before loading anything


def test_empty_query_prints_no_results_on_a_real_index(seeded: Settings) -> None:
    """The reported case: with an index, `search ""` printed three arbitrary papers and exit 0."""
    for args in (["search", ""], ["search", "--json", "   "], ["ask", "--llm", "extractive", ""]):
        res = run_main(*args)
        one_error_line(res, "empty")
        assert res.returncode == 2 and res.stdout == "", res.stdout


def test_queries_file_with_only_blank_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "q.txt"
    f.write_text("\n   \n\t\n")
    assert cli.main(["search", "--queries-file", str(f), "--home", str(tmp_path / "h")]) == 2
    assert capsys.readouterr().err == f"rag-papers: error: {f}: no queries (only blank lines)\n"


def test_empty_year_range_fails_before_loading(tmp_path: Path) -> None:
    home = tmp_path / "never-made"
    for cmd in (["search", "ABBA"], ["ask", "ABBA"]):
        res = run_main(*cmd, "--year-min", "2030", "--year-max", "2000", "--home", str(home))
        one_error_line(res, "--year-min 2030", "--year-max 2000")
        assert res.returncode == 2
    assert not home.exists()


FILTERS = [(["--year-min", "2030"], "year"), (["--venue", "NOPE"], "NOPE"), (["--keyword", "zzzz"], "zzzz")]


@pytest.mark.parametrize(("flags", "needle"), FILTERS)
def test_filters_that_exclude_every_paper_say_so(flags: list[str], needle: str, seeded: Settings) -> None:
    res = run_main("search", "what does ABBA claim?", *flags)
    assert res.returncode == 0, res.stderr
    assert "the filters excluded every paper" in res.stdout and needle in res.stdout, res.stdout
    assert "don't seem to cover" not in res.stdout
    out = json.loads(run_main("search", "--json", "what does ABBA claim?", *flags).stdout)
    assert out["results"] == [] and out["relevant"] is False
    assert out["filtered_out"] is True and needle in out["filter_reason"]
    ans = run_main("ask", "--llm", "extractive", "what does ABBA claim?", *flags)
    assert ans.returncode == 0 and "filters excluded every paper" in ans.stdout and needle in ans.stdout, ans.stdout
    assert "don't cover" not in ans.stdout
    a = json.loads(run_main("ask", "--json", "--llm", "extractive", "what does ABBA claim?", *flags).stdout)
    assert a["refused"] is True and a["filtered_out"] is True and needle in a["notice"]


def test_filters_that_keep_papers_are_not_reported(engine: object) -> None:
    from rag_papers.retrieve import Filters

    res = engine.search("what does ABBA claim?", 3, Filters(year_min=2026, venue="ICLR"))  # type: ignore[attr-defined]
    assert res.results and res.relevant and res.filtered_out is False and res.filter_reason is None
    off = engine.search("who won the 2022 World Cup?", 3)  # type: ignore[attr-defined]
    assert not off.relevant and off.filtered_out is False  # not covered, but nothing was filtered


def test_ui_says_the_filters_excluded_everything(engine: object, seeded: Settings) -> None:
    from rag_papers.ui import ChatApp, chat_messages, sources_panel

    app = ChatApp(seeded, engine)  # type: ignore[arg-type]
    out = app.api_search("what does ABBA claim?", 3, 2030, None, "", "")
    assert out["filtered_out"] is True and out["results"] == [] and "2030" in out["filter_reason"]
    state = app.new_state()
    app.accept("what does ABBA claim?", state, True)  # retrieval only
    app.run_search(0, state, 3, 2030, None, "", "")
    app.accept("what does ABBA claim?", state, False)  # an answer
    list(app.run_answer(1, state, "extractive", "", 3, 2030, None, "", ""))
    texts = [m["content"] for m in chat_messages(state) if m["role"] == "assistant"]
    assert len(texts) == 2
    assert all("filters excluded every paper" in t and "2030" in t for t in texts), texts
    assert not any("don't cover" in t for t in texts)
    assert "filters excluded every paper" in sources_panel(state)


# ------------------------------------------------------------------ 4. FIFOs and folders
@pytest.mark.timeout(60)  # a read that blocks on the FIFO fails the test here
def test_fifo_and_folder_inputs_do_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "queries.fifo"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    one_error_line(run_main("search", "--queries-file", str(fifo)), str(fifo), "not a regular file")
    one_error_line(run_main("eval", "--qa", str(fifo)), str(fifo), "not a regular file")
    one_error_line(run_main("eval", "--qa", str(tmp_path)), str(tmp_path), "is a directory")
    one_error_line(run_main("search", "--queries-file", str(tmp_path)), "is a directory")
    one_error_line(run_main("ingest", str(fifo)), str(fifo), "not a regular file")


# ------------------------------------------------------------------ 4. values no setting accepts (issue 26)
HUGE = "99999999999999999999"  # past a 64-bit integer: Chroma and SQLite overflowed on it


@pytest.mark.parametrize(
    ("args", "env", "needles"),
    [
        (["search", "ABBA", "--top-k", HUGE], {}, ("top_k", "less than or equal to 1000", HUGE)),
        (["ask", "--llm", "extractive", "ABBA", "--top-k", HUGE], {}, ("top_k", "less than or equal to 1000")),
        (["search", "ABBA", "--top-k", "0"], {}, ("top_k", "greater than or equal to 1")),
        (["search", "ABBA", "--year-min", HUGE], {}, ("year_min", "less than or equal to 9999")),
        (["ask", "--llm", "extractive", "ABBA", "--year-max", HUGE], {}, ("year_max", "9999")),
        (["search", "ABBA"], {"OLLAMA_HOST": "garbage::::"}, ("ollama_host", "not a host[:port] or URL")),
        (["ask", "ABBA"], {"OLLAMA_HOST": "garbage::::"}, ("ollama_host", "garbage::::")),
        (["info"], {"OLLAMA_HOST": "garbage::::"}, ("ollama_host",)),
        (["papers"], {"RAG_PAPERS_OLLAMA_MODELS": "not-json"}, ("bad settings", "ollama_models")),
    ],
)
def test_out_of_range_values_are_one_line_and_exit_2(
    args: list[str], env: dict[str, str], needles: tuple[str, ...], seeded: Settings
) -> None:
    """Reported: `--top-k 99999999999999999999` and OLLAMA_HOST=garbage:::: ended "unexpected …" with exit 1."""
    res = run_main(*args, env=env)
    one_error_line(res, *needles)
    assert res.returncode == 2 and "unexpected" not in res.stderr and res.stdout == ""


def test_ollama_host_forms_that_work_are_kept() -> None:
    for host in ("localhost", "127.0.0.1:11434", "http://[::1]:11434", "https://ollama.example/base"):
        assert Settings(ollama_host=host).ollama_host == host


def test_a_settings_file_that_is_not_toml_is_named(tmp_path: Path, seeded: Settings) -> None:
    """Reported: the TOML error said where in the file, not which file."""
    bad = tmp_path / "rag-papers.toml"
    bad.write_text('top_k = 8\nollama_model = "qwen\n', encoding="utf-8")
    for args in (["search", "ABBA", "--config", str(bad)], ["info"]):
        res = run_main(*args, env={"RAG_PAPERS_CONFIG": str(bad)})
        one_error_line(res, f"bad settings file {bad}", "line 2")
        assert res.returncode == 2


def test_an_unknown_key_in_the_settings_file_is_reported(tmp_path: Path, seeded: Settings) -> None:
    """Reported: unknown keys were ignored silently, so a typo changed nothing without a word."""
    conf = tmp_path / "rag-papers.toml"
    conf.write_text("top-k = 8\n", encoding="utf-8")
    res = run_main("search", "ABBA", "--config", str(conf))
    one_error_line(res, f"bad settings file {conf}", "unknown setting 'top-k'", "did you mean 'top_k'?")
    assert res.returncode == 2
    conf.write_text("top_k = 3\n", encoding="utf-8")  # a known key works as before
    res = run_main("search", "--json", "ABBA", "--config", str(conf))
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["results"]) == 3


def test_a_long_query_is_echoed_clipped(tmp_path: Path, seeded: Settings) -> None:
    """Reported: `search` on a 1 MB query printed it whole above the results."""
    queries = tmp_path / "q.txt"
    queries.write_text("Hadamard product low-rank adaptation " * 30_000 + "\n", encoding="utf-8")  # 1.1 MB
    res = run_main("search", "--queries-file", str(queries), "--top-k", "2")
    assert res.returncode == 0, res.stderr
    echo = res.stdout.splitlines()[0]
    assert echo.startswith("Query: Hadamard product") and len(echo) <= 400, len(echo)
    assert len(res.stdout) < 5_000
