"""Every flag of every command says what it does and, unless it is an on/off switch, what it defaults to
(issue 16: `--top-k`, `--json`, chat `--port` and `--llm` had no help or no default)."""

from __future__ import annotations

import argparse
import re

import pytest

from rag_papers.cli import build_parser
from rag_papers.config import Settings


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def options(command: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in command._actions if a.option_strings and a.dest != "help"]


SWITCHES = (argparse._StoreTrueAction, argparse._StoreFalseAction)


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_flag_has_help_and_every_value_flag_its_default(name: str) -> None:
    command = commands()[name]
    for action in options(command):
        flag = action.option_strings[-1]
        shown = command.format_help()
        assert action.help, f"{name} {flag}: no help text"
        if not isinstance(action, SWITCHES):
            assert re.search(r"\bdefault\b", action.help % vars(action)), (
                f"{name} {flag}: no default in {action.help!r}"
            )
        assert flag in shown


# Flags read into a setting: the help names the setting's own default, so the two cannot drift apart.
SETTING_OF = {
    "--top-k": "top_k",
    "--retrieval": "retrieval",
    "--port": "port",
    "--host": "host",
    "--embed-backend": "embed_backend",
    "--rerank-candidates": "rerank_candidates",
}


def test_flags_read_into_settings_name_the_settings_defaults() -> None:
    seen = set()
    for name, command in commands().items():
        for action in options(command):
            field = SETTING_OF.get(action.option_strings[-1])
            if field is None:
                continue
            default = Settings.model_fields[field].default
            assert f"default: {default}" in (action.help or ""), (name, action.option_strings, action.help, default)
            seen.add(field)
    assert seen == set(SETTING_OF.values())
    llm = [a for c in commands().values() for a in options(c) if a.option_strings[-1] == "--llm"]
    assert llm and all(f"default: {Settings.model_fields['llm'].default}" in (a.help or "") for a in llm)
