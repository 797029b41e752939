"""Prompts: the templates in ``prompts/``, and corpus text made safe to put inside one.

Shared by the answer stage (the answer's prompt) and the LLM judge (its verdict's prompt): one fence for every
abstract a model reads, so an abstract cannot pose as another source, the question or a chat turn in either.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.corpus import Paper


@lru_cache(maxsize=32)
def _read_prompt(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load_prompt(settings: Settings, name: str) -> str:
    path = settings.prompts_dir / f"{name}.txt"
    if not path.is_file():
        raise RagPapersError(f"prompt template {path} is missing (prompts_dir={settings.prompts_dir})")
    return _read_prompt(path)


# Each source goes into the prompt inside its own fence, made here and not by ``source.txt``, so
# an edited template cannot lose it; the system prompt says what is inside a fence is data.
SOURCE_OPEN = '<source n="{n}">'
SOURCE_CLOSE = "</source>"
# Corpus text is data, never prompt structure: in a title or an abstract, whatever the prompt itself
# uses to mark where a source, the question or a chat turn begins is rendered harmless, in this order.
_AS_DATA: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"<\|[^|<>\n]{0,40}\|>|<\||\|>"), " "),  # chat-template tokens: <|im_start|>, <|eot_id|>
    # Other families' turn markers, which llama.cpp reads as special tokens in a prompt (Gemma's, Llama 2 and
    # Mistral's [INST], Mistral v7's [SYSTEM_PROMPT]), and the reasoning blocks (``llm.THINK_TAGS``).
    (
        re.compile(
            r"<\s*/?\s*(?:start_of_turn|end_of_turn|bos|eos|s|think|thinking)\s*>"
            r"|\[\s*/?\s*(?:INST|SYSTEM_PROMPT|THINK|AVAILABLE_TOOLS|TOOL_CALLS)\s*\]",
            re.IGNORECASE,
        ),
        " ",
    ),
    (re.compile(r"<\s*/?\s*source\b[^<>]*>?", re.IGNORECASE), " "),  # the fence's own tags
    # Source numbers, [2] or [1, 3]: in fullwidth brackets they read the same and are no citation.
    (re.compile(r"\[(\s*\d+\s*(?:[,;\u2013-]\s*\d+\s*)*)\]"), "\uff3b\\1\uff3d"),
    # The prompt's labels ("Question:", "Answer (with [n] citations):", "Abstracts:") and chat roles.
    (
        re.compile(
            r"\b(question|answer|abstracts?|system|assistant|instructions?)(\s*(?:\([^()\n]{0,60}\))?)\s*:", re.I
        ),
        r"\1\2 -",
    ),
]


def as_data(text: str) -> str:
    """Corpus text for the prompt: on one line, with nothing that could pose as another source, the question
    or a chat turn (``_AS_DATA``). For the model only; readers see the text as stored."""
    for pattern, repl in _AS_DATA:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def source_block(template: str, n: int, paper: Paper, abstract: str) -> str:
    """One abstract as a model reads it: in its own fence, its text through ``as_data``."""
    body = template.format(n=n, title=as_data(paper.title), id=as_data(paper.id), abstract=as_data(abstract))
    return f"{SOURCE_OPEN.format(n=n)}\n{body.strip()}\n{SOURCE_CLOSE}"


def judge_messages(question: str, papers: list[Paper], settings: Settings) -> list[dict[str, str]]:
    """The LLM judge's prompt (``prompts/judge_system.txt``, ``judge_user.txt``): each abstract fenced as the
    answer's prompt fences it, numbered as the verdict must number them."""
    source_t = load_prompt(settings, "source")
    blocks = [source_block(source_t, n, p, p.abstract) for n, p in enumerate(papers, 1)]
    user = load_prompt(settings, "judge_user").format(
        sources="\n\n".join(blocks), question=" ".join(question.split()), count=len(papers)
    )
    return [{"role": "system", "content": load_prompt(settings, "judge_system")}, {"role": "user", "content": user}]
