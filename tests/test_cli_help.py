"""Every flag of every command says what it does and, unless it is an on/off switch, what it defaults to
(issue 16: `--top-k`, `--json`, chat `--port` and `--llm` had no help or no default)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from rag_papers.cli import build_parser, flag_help
from rag_papers.config import PRESETS, Settings
from rag_papers.evaluate import DEFAULT_CONFIGS


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
            assert re.search(r"\bdefault\b", flag_help(action)), f"{name} {flag}: no default in {action.help!r}"
        assert flag in shown


def stated_default(help_text: str) -> str:
    """What a help text says the default is: the words after "default: " up to the closing bracket."""
    found = re.search(r"\bdefault: ([^)]*)", help_text)
    assert found, help_text
    return found.group(1).strip()


def setting_flags() -> list[tuple[str, argparse.Action]]:
    """Every flag of every command read into a setting: its ``dest`` is a ``Settings`` field."""
    return [(name, a) for name, c in commands().items() for a in options(c) if a.dest in Settings.model_fields]


def test_every_flag_read_into_a_setting_states_the_settings_default_and_the_presets() -> None:
    """Issue 29: help said "default: 5" as fixed text; now every such flag's help states ``Settings``' default,
    then what each preset sets (the quality preset's top_k 6), read from ``Settings`` and ``PRESETS``."""
    seen = set()
    for name, action in setting_flags():
        field = Settings.model_fields[action.dest]
        if field.default_factory is not None:  # home, ollama_host: from the environment, said in words
            continue
        default = "none" if field.default is None else str(field.default)
        presets = [f"{p}: {values[action.dest]}" for p, values in PRESETS.items() if action.dest in values]
        expected = f"{default}; preset {', '.join(presets)}" if presets else default
        assert stated_default(flag_help(action)) == expected, (name, action.option_strings, flag_help(action))
        seen.add(action.dest)
    # The walk reaches the flags that say a number or a name (not only the ones somebody listed).
    assert {"top_k", "retrieval", "port", "host", "embed_backend", "rerank_candidates", "llm", "reranker"} <= seen
    assert "top_k" in seen and "6" in stated_default(
        flag_help(next(a for _, a in setting_flags() if a.dest == "top_k"))
    )


def test_flag_help_follows_the_settings_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The help is read from ``Settings`` when shown: a changed default shows without editing the CLI."""
    monkeypatch.setattr(Settings.model_fields["rerank_candidates"], "default", 31)
    monkeypatch.setattr(Settings.model_fields["ollama_model"], "default", "some-model:1b")
    assert "(default: 31)" in commands()["search"].format_help()
    assert "some-model:1b" in commands()["ask"].format_help()


def test_configs_help_lists_every_default_configuration() -> None:
    """Issue 29: `eval --configs` help listed five configurations while DEFAULT_CONFIGS has six."""
    action = next(a for a in options(commands()["eval"]) if a.dest == "configs")
    assert stated_default(flag_help(action)).split(",") == list(DEFAULT_CONFIGS)


def test_help_is_shown_without_loading_pydantic_until_asked() -> None:
    """Building the parser (every command runs it) stays light: the settings load only to print help."""
    code = (
        "import sys; from rag_papers.cli import build_parser; build_parser().parse_args(['search', 'x']); "
        "print('pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_api_parameters_named_after_a_setting_default_to_the_servers_setting() -> None:
    """Issue 29: ``/search`` had a literal ``top_k: int = 5``, so the quality preset's 6 never reached it. A
    parameter of the /search or /ask API named after a setting has no literal default: None (or required),
    which the server reads as its own settings, presets applied."""
    import inspect

    from rag_papers.ui.chat_app import ChatApp

    checked = []
    for fn in (ChatApp.api_search, ChatApp.api_ask, ChatApp.check_search):
        for param in inspect.signature(fn).parameters.values():
            if param.name in Settings.model_fields:
                assert param.default in (None, inspect.Parameter.empty), (fn.__name__, param)
                checked.append((fn.__name__, param.name))
    assert ("api_search", "top_k") in checked and ("api_ask", "top_k") in checked
