"""A refused `search` greys out its scores (issue 16, CLI polish).

When the abstracts do not seem to cover a query, `rag-papers search` still prints the closest papers; their
scores are dim (ANSI SGR 2, reset after) on a terminal, so they do not read as matches. Never an escape code
off a terminal, with NO_COLOR set (https://no-color.org) or with `--color never`; `--color always` forces it.
Without colour the refusal line says in words that these are the closest papers, not matches.
"""

from __future__ import annotations

import io
import os
import pty
import re
import sqlite3
import sys
import termios
from pathlib import Path

import pytest
from conftest import run_main

from rag_papers import cli
from rag_papers.config import Settings

REFUSED = "who won the 2022 World Cup?"
RELEVANT = "what does ABBA claim?"
DIM, RESET = "\x1b[2m", "\x1b[0m"
# A result row: rank, then the score (and a rerank score), dimmed or not, then the title.
ROW = re.compile(r"^ *\d+\. (\x1b\[2m)?(\d\.\d{3}(?: \(rerank -?\d\.\d{3}\))?)(\x1b\[0m)?  \S", re.M)
# Every character the output must never carry raw but for our own dim/reset codes (as in test_clean_io).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def rows(out: str) -> list[tuple[bool, str]]:
    """(dimmed, score) of each result row; a row dimmed on one side only fails."""
    found = []
    for m in ROW.finditer(out):
        assert bool(m.group(1)) == bool(m.group(3)), f"dim without reset (or reset without dim): {m.group(0)!r}"
        found.append((bool(m.group(1)), m.group(2)))
    return found


def run_on_a_terminal(monkeypatch: pytest.MonkeyPatch, *args: str, env: dict[str, str] | None = None) -> str:
    """``rag-papers ARGS`` run in this process with its stdout on a pseudo-terminal: what appeared there."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n": the text as printed
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    sys.stdout.flush()
    saved_fd, saved_stream = os.dup(1), sys.stdout
    os.dup2(slave, 1)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    try:
        code = cli.main(list(args))
    finally:
        sys.stdout.close()
        sys.stdout = saved_stream
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the terminal's other side is closed and everything has been read
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert code == 0
    return b"".join(chunks).decode("utf-8")


def test_forced_colour_dims_the_scores_of_a_refused_search_and_not_a_relevant_ones(seeded: Settings) -> None:
    refused = run_main("search", "--top-k", "3", "--color", "always", REFUSED)
    assert refused.returncode == 0, refused.stderr
    got = rows(refused.stdout)
    assert len(got) == 3 and all(dimmed for dimmed, _ in got), refused.stdout
    # Only the scores: the query line, titles and passages are as before.
    assert refused.stdout.count(DIM) == 3 and refused.stdout.count(RESET) == 3, refused.stdout
    relevant = run_main("search", "--top-k", "3", "--color", "always", RELEVANT)
    assert relevant.returncode == 0, relevant.stderr
    got = rows(relevant.stdout)
    assert len(got) == 3 and not any(dimmed for dimmed, _ in got), relevant.stdout
    assert "\x1b" not in relevant.stdout


def test_the_refusal_says_in_words_that_these_are_the_closest_papers_not_matches(seeded: Settings) -> None:
    res = run_main("search", "--top-k", "2", REFUSED)  # stdout is a file here: no colour
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith(f"Query: {REFUSED}") and "don't seem to cover this" in first, first
    assert "closest" in first and "not matches" in first, first
    assert "\x1b" not in res.stdout
    relevant = run_main("search", "--top-k", "2", RELEVANT)
    assert "closest" not in relevant.stdout.splitlines()[0]


def test_no_colour_codes_off_a_terminal_with_NO_COLOR_or_never(
    seeded: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Off a terminal (a file here; a pipe alike): none, unless forced.
    assert "\x1b" not in run_main("search", "--top-k", "2", REFUSED).stdout
    assert "\x1b" not in run_main("search", "--top-k", "2", "--color", "auto", REFUSED).stdout
    # On a terminal: dim by default ...
    out = run_on_a_terminal(monkeypatch, "search", "--top-k", "2", REFUSED)
    assert [d for d, _ in rows(out)] == [True, True], out
    # ... and none with NO_COLOR set to anything (no-color.org), or with --color never.
    out = run_on_a_terminal(monkeypatch, "search", "--top-k", "2", REFUSED, env={"NO_COLOR": "1"})
    assert "\x1b" not in out and [d for d, _ in rows(out)] == [False, False], out
    out = run_on_a_terminal(monkeypatch, "search", "--top-k", "2", "--color", "never", REFUSED)
    assert "\x1b" not in out and len(rows(out)) == 2, out


def test_a_real_pipe_gets_no_colour(seeded: Settings) -> None:
    """The console script with stdout on a pipe, as in `rag-papers search ... | less`."""
    from conftest import run_cli

    res = run_cli("search", "--top-k", "2", REFUSED, env={"NO_COLOR": ""})
    assert res.returncode == 0, res.stderr
    assert len(rows(res.stdout)) == 2 and "\x1b" not in res.stdout, res.stdout


class Tty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("mode", "tty", "env", "expected"),
    [
        (None, True, {}, True),
        ("auto", True, {}, True),
        (None, False, {}, False),
        (None, True, {"NO_COLOR": "1"}, False),
        (None, True, {"NO_COLOR": ""}, True),  # no-color.org: set *and not empty*
        (None, True, {"TERM": "dumb"}, False),
        ("never", True, {}, False),
        ("always", False, {}, True),
        ("always", True, {"NO_COLOR": "1"}, True),  # no-color.org: a flag given on the command line wins
    ],
)
def test_colour_policy(
    mode: str | None, tty: bool, env: dict[str, str], expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.use_colour(mode, Tty(tty)) is expected


def test_the_colour_flag_is_checked_before_anything_loads(tmp_path: Path) -> None:
    home = tmp_path / "never-made"
    res = run_main("search", "--color", "sometimes", "x", "--home", str(home))
    assert res.returncode == 2 and "--color" in res.stderr and "always" in res.stderr
    assert not home.exists()


@pytest.fixture
def hostile_title(seeded: Settings) -> Settings:
    """ABBA's title and passage as an index written before ingest stripped controls would hold them."""
    evil = "\u001b[2J\u001b[31m\u202e"
    with sqlite3.connect(seeded.in_home("papers.sqlite")) as db:
        (pid,) = db.execute("SELECT id FROM papers WHERE title LIKE 'ABBA:%'").fetchone()
        db.execute("UPDATE papers SET title = ? WHERE id = ?", (f"ABBA{evil}: pre-trained weights\u0007", pid))
        db.execute("UPDATE chunks SET text = replace(text, 'ABBA', ?) WHERE paper_id = ?", (f"AB{evil}BA", pid))
    return seeded


def test_coloured_output_is_still_sanitised(hostile_title: Settings) -> None:
    """Our dim and reset codes are the only escapes: corpus and query text stay stripped (``cli._safe``)."""
    res = run_main("search", "--top-k", "50", "--color", "always", f"\u001b[31m{REFUSED}\u202e")
    assert res.returncode == 0, res.stderr
    assert "ABBA: pre-trained weights" in res.stdout and f"Query: {REFUSED}" in res.stdout, res.stdout
    got = rows(res.stdout)
    assert got and all(dimmed for dimmed, _ in got)
    plain = res.stdout.replace(DIM, "").replace(RESET, "")
    assert not UNSAFE.findall(plain), sorted({repr(c) for c in UNSAFE.findall(plain)})
