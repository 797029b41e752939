"""Past chats kept in the browser (issue 16): "a reload loses the conversation". A new user holds a three-turn
conversation about two papers, reloads and finds it again, reopens and deletes past chats; what the browser
keeps is data, rendered again by the same templates, and anything malformed in it is skipped."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import one_size
from test_ui import BOT, Served, app_over_seeds, ask, open_app

from rag_papers.llm import ExtractiveBackend

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

TURNS = (
    "Which papers refine or design 3D molecular structures with diffusion?",
    "how do they evaluate them?",
    "what are their limitations?",
)


@pytest.fixture(scope="module")
def server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "history_home", ollama_host="http://127.0.0.1:9") as s:
        yield s


def reload(page: Any) -> None:
    page.reload()
    page.wait_for_selector("#rp-input textarea")


def saved(page: Any, text: str) -> None:
    """Wait until the list of past chats shows ``text``: the browser has stored the conversation."""
    open_past(page)
    page.wait_for_function(
        "t => [...document.querySelectorAll('#rp-past label')].some(l => l.innerText.includes(t))", arg=text
    )


def open_past(page: Any) -> None:
    if not page.locator("#rp-past").is_visible():
        page.get_by_text("Past chats").click()
        page.locator("#rp-past").wait_for(state="visible")


def past_chats(page: Any) -> list[str]:
    open_past(page)
    return [t.strip() for t in page.locator("#rp-past label").all_inner_texts()]


@pytest.mark.browser
@one_size
def test_a_three_turn_conversation_about_two_papers_survives_a_reload(server: Served, screen: Any) -> None:
    page = screen
    open_app(page, server.url)
    page.locator("#rp-show-rewrite input").check()
    replies = [ask(page, q).inner_text() for q in TURNS]
    assert all("[1]" in r for r in replies), replies
    before = page.locator(BOT).all_inner_texts()
    saved(page, "3 questions")  # kept in the browser once its list says so

    reload(page)
    page.wait_for_function("() => document.querySelectorAll(\"#rp-chat [data-testid='bot']\").length === 3")
    page.locator("#rp-show-rewrite input").check()  # a page's own switch: a reload sets it back
    page.wait_for_function("() => document.querySelectorAll('#rp-chat .rp-searched').length === 2")
    assert page.locator(BOT).all_inner_texts() == before  # shown as it was
    assert list(TURNS) == [u.strip() for u in page.locator("#rp-chat [data-testid='user']").all_inner_texts()]
    listed = past_chats(page)
    assert len(listed) == 1 and TURNS[0][:40] in listed[0] and "3 questions" in listed[0], listed

    # The reopened answers work as before: a citation of the first answer opens its paper's abstract.
    page.locator(BOT).first.locator("a.rp-cite").first.click()
    page.wait_for_selector("#rp-panel .rp-src.selected .rp-abstract")
    assert len(page.locator("#rp-panel .rp-src.selected .rp-abstract").inner_text()) > 200

    # And the conversation goes on: a follow-up after the reload is rewritten against the reopened turns.
    follow = ask(page, "which of them is faster?")
    assert follow.locator(".rp-searched").count() == 1
    searched = follow.locator(".rp-searched").inner_text()
    assert "which of them is faster?" in searched and len(searched) > len("Searched for which of them is faster?") + 10


@pytest.mark.browser
@one_size
def test_past_chats_are_listed_reopened_and_deleted(server: Served, screen: Any) -> None:
    page = screen
    open_app(page, server.url)
    ask(page, "What does ABBA claim?")
    page.locator("#rp-new").click()
    page.wait_for_function("() => document.querySelectorAll(\"#rp-chat [data-testid='bot']\").length === 0")
    ask(page, "What is the Bayesian Attention Mechanism?")
    saved(page, "Bayesian Attention")

    reload(page)  # the latest chat comes back by itself
    page.wait_for_function("() => document.querySelectorAll(\"#rp-chat [data-testid='bot']\").length === 1")
    assert "Bayesian Attention" in page.locator("#rp-chat [data-testid='user']").first.inner_text()
    listed = past_chats(page)
    assert len(listed) == 2 and "Bayesian Attention" in listed[0] and "ABBA" in listed[1], listed

    page.locator("#rp-past label", has_text="ABBA").click()  # reopen the older one
    page.wait_for_function(
        "() => [...document.querySelectorAll(\"#rp-chat [data-testid='user']\")].map(e => e.innerText).join()"
        ".includes('ABBA')"
    )
    assert page.locator(BOT).count() == 1 and "ABBA" in page.locator(BOT).first.inner_text()

    page.locator("#rp-forget").click()  # delete the chat on screen: gone from the list and the screen
    page.wait_for_function("() => document.querySelectorAll('#rp-past label').length === 1")
    page.wait_for_function("() => document.querySelectorAll(\"#rp-chat [data-testid='bot']\").length === 0")
    reload(page)
    saved(page, "Bayesian Attention")  # the list is refilled from the browser's store after the page loads
    listed = past_chats(page)
    assert len(listed) == 1 and "Bayesian Attention" in listed[0], listed


def test_what_the_browser_keeps_renders_the_same_and_follow_ups_carry_on(engine: Any) -> None:
    """Saved and restored, a conversation renders exactly as it did, and its turns are back in the session."""
    from rag_papers.chat import ChatSession
    from rag_papers.ui import history
    from rag_papers.ui.chat_app import ChatApp
    from rag_papers.ui.render import chat_messages, sources_panel

    app = ChatApp(engine.settings, engine)
    state = app.new_state()
    for q in TURNS[:2]:
        app.accept(q, state, False)
        for _ in app.run_answer(len(state.exchanges) - 1, state, "extractive", "", 5, None, None, None, ""):
            pass
    stored = history.save([], state)
    assert len(stored) == 1 and stored[0]["id"] == state.chat_id
    again = history.restore(stored, state.chat_id, ChatSession(engine))
    assert again is not None
    again.show_rewrite = state.show_rewrite = True
    assert chat_messages(again) == chat_messages(state)
    assert sources_panel(again) == sources_panel(state)
    assert [t.standalone for t in again.session.turns] == [t.standalone for t in state.session.turns]
    q = TURNS[2]
    assert again.session.condense(q, ExtractiveBackend()) == state.session.condense(q, ExtractiveBackend())


def test_new_chat_keeps_the_conversation_it_clears(engine: Any) -> None:
    """ "New chat" clicked at once after an answer lost that chat (a CI run saw it): saving came from a step
    chained after the answer, which the click cancels or races. The click now saves what it clears."""
    from rag_papers.ui.chat_app import ChatApp

    app = ChatApp(engine.settings, engine)
    state = app.new_state()
    app.accept("What does ABBA claim?", state, False)
    for _ in app.run_answer(0, state, "extractive", "", 5, None, None, None, ""):
        pass
    older = [{"id": "old", "title": "An older chat", "updated": 1, "exchanges": [{"question": "q", "text": "a"}]}]
    out = app.start_over(state, older, "")
    kept = out[-2]
    assert [c["title"] for c in kept][1:] == ["An older chat"] and "ABBA" in kept[0]["title"], kept
    assert not state.exchanges and state.chat_id is None  # and the screen is a fresh conversation
    again = app.start_over(state, kept, "")[-2]  # clearing an empty chat saves nothing new
    assert again == kept


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "not a list",
        [1, "x", None],
        [{"id": "a", "title": "t", "exchanges": "nope"}],
        [{"id": "a", "title": "t", "exchanges": [None, 3, {"question": 5}, {"question": "q", "items": [{"id": 1}]}]}],
        [
            {
                "id": "a",
                "title": "t",
                "updated": 1e300,
                "exchanges": [
                    {"question": "q", "answer": {"answer": "x", "claims": [{"text": "c", "support": "lots"}]}},
                    {"question": "r", "items": [{"id": "p", "title": "t", "score": "high"}], "claims": 7},
                    {"question": "s", "answer": {"answer": "y"}, "context": 3, "items": "abc"},
                ],
            }
        ],
    ],
    ids=["none", "string", "junk", "bad-exchanges", "bad-items", "bad-numbers"],
)
def test_a_malformed_or_tampered_history_is_skipped_not_trusted(stored: Any, engine: Any) -> None:
    from rag_papers.chat import ChatSession
    from rag_papers.ui import history
    from rag_papers.ui.render import chat_messages

    history.choices(stored)
    state = history.restore(stored, "a", ChatSession(engine))
    if state is not None:
        assert all(isinstance(ex.question, str) for ex in state.exchanges)
        assert all(isinstance(it.id, str) for ex in state.exchanges for it in ex.items)
        chat_messages(state)  # renders
    hostile = [
        {
            "id": "h",
            "title": "<img src=x onerror=alert(1)>",
            "updated": 1,
            "exchanges": [{"question": "<script>alert(1)</script>", "text": "<b>bold</b> [1]", "items": []}],
        }
    ]
    state = history.restore(hostile, "h", ChatSession(engine))
    assert state is not None
    html = "".join(m["content"] for m in chat_messages(state))
    assert "<script>" not in html and "<b>" not in html, html
    shown = unescape(html)
    assert "<b>bold</b>" in shown and "<script>alert(1)</script>" in shown  # what was stored, shown as text


def test_a_question_asked_as_the_rewrite_switch_is_ticked_keeps_the_tick(engine: Any) -> None:
    """A CI run showed a conversation asked just after ticking "Show rewritten question" rendered without its
    "Searched for" lines, the switch still ticked: on a fresh page the tick and the question each started from no
    state, and the question's new state, saved last, had the switch off. The question now carries the switch."""
    from rag_papers.ui.chat_app import ChatApp

    app = ChatApp(engine.settings, engine)
    _, ticked = app.toggle_rewrite(True, None)  # both events start before either has stored a state
    asked = app.accept(TURNS[0], None, False, True)[-2]
    assert ticked.show_rewrite and asked.show_rewrite
    assert app.accept(TURNS[1], asked, False, False)[-2].show_rewrite is False  # untick, then ask
