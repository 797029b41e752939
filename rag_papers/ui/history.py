"""Conversations kept in the browser (a ``gr.BrowserState``), so a reload or a restart loses nothing.

Why in the browser and not on the server: a conversation is the reader's, and the UI may serve several
people; each browser keeps its own. What is kept is data, never markup: each exchange's question,
answer text, sources and footer, rendered again by the same autoescaped templates when reopened, so a
tampered localStorage can show odd text but no markup. Anything malformed is skipped, not trusted.
Abstracts are not kept (the index has them): reopening reads them by id.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

from rag_papers.answer import Answer
from rag_papers.chat import ChatSession, Turn
from rag_papers.claims import Claim
from rag_papers.paths import home_path
from rag_papers.retrieve import Hit
from rag_papers.ui.state import Exchange, UIState

MAX_CHATS = 30  # conversations kept; the oldest go first
MAX_EXCHANGES = 60  # per conversation, the latest kept
MAX_TEXT = 20_000  # characters of one answer kept

_EXCHANGE_TEXT = ("question", "standalone", "text", "error", "footer", "notice", "filters")
_EXCHANGE_FLAGS = ("refused", "relevant", "stopped")


def _hit(data: Any) -> Hit | None:
    """A source or listed paper from stored data; None when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("title"), str):
        return None
    try:
        return Hit(
            id=data["id"],
            title=data["title"],
            score=float(data.get("score") or 0.0),
            dense_score=float(data.get("dense_score") or 0.0),
            keyword_score=float(data.get("keyword_score") or 0.0),
            passage=str(data.get("passage") or ""),
            year=int(data["year"]) if isinstance(data.get("year"), int) else None,
            venue=str(data["venue"]) if isinstance(data.get("venue"), str) else None,
            n=int(data.get("n") or 0),
            cited=bool(data.get("cited")),
        )
    except (TypeError, ValueError):
        return None


def _hit_data(hit: Hit) -> dict[str, Any]:
    return {k: getattr(hit, k) for k in ("id", "title", "score", "passage", "year", "venue", "n", "cited")}


def _answer(data: Any, items: list[Hit]) -> Answer | None:
    """The parts of an answer the UI shows again (claims, caveat, refusal kind) and a follow-up needs."""
    if not isinstance(data, dict) or not isinstance(data.get("answer"), str):
        return None
    claims = []
    for c in data.get("claims") or []:
        if isinstance(c, dict) and isinstance(c.get("text"), str):
            found = c.get("evidence")
            evidence = (
                {"id": found["id"], "sentence": found["sentence"]}
                if isinstance(found, dict) and all(isinstance(found.get(k), str) for k in ("id", "sentence"))
                else None
            )
            claims.append(
                Claim(
                    text=c["text"],
                    citations=[str(x) for x in c.get("citations") or [] if isinstance(x, str)],
                    support=float(c.get("support") or 0.0),
                    supported=bool(c.get("supported")),
                    evidence=evidence,
                )
            )
    return Answer(
        question=str(data.get("question") or ""),
        answer=data["answer"][:MAX_TEXT],
        citations=[str(x) for x in data.get("citations") or [] if isinstance(x, str)],
        sources=items,
        refused=bool(data.get("refused")),
        backend=str(data.get("backend") or ""),
        model=str(data["model"]) if isinstance(data.get("model"), str) else None,
        notice=str(data["notice"]) if isinstance(data.get("notice"), str) else None,
        filtered_out=bool(data.get("filtered_out")),
        claims=claims,
        caveat=str(data["caveat"]) if isinstance(data.get("caveat"), str) else None,
        uncovered=[str(x)[:200] for x in data.get("uncovered") or [] if isinstance(x, str)][:20],
    )


def exchange_data(ex: Exchange, context: tuple[str, ...] = ()) -> dict[str, Any]:
    """What is kept of a finished exchange (``context``: the titles its follow-up rewrite carried, ``Turn.context``)."""
    out: dict[str, Any] = {k: getattr(ex, k) for k in _EXCHANGE_TEXT}
    out["context"] = list(context)
    out["text"] = out["text"][:MAX_TEXT]
    out.update({k: getattr(ex, k) for k in _EXCHANGE_FLAGS})
    out["mode"] = ex.mode
    out["items"] = [_hit_data(it) for it in ex.items]
    if ex.answer is not None:
        a = ex.answer
        out["answer"] = {
            "question": a.question,
            "answer": a.answer[:MAX_TEXT],
            "citations": a.citations,
            "refused": a.refused,
            "backend": a.backend,
            "model": a.model,
            "notice": a.notice,
            "filtered_out": a.filtered_out,
            "claims": [c.to_dict() for c in a.claims],
            "caveat": a.caveat,
            "uncovered": a.uncovered,
        }
    return out


def exchange_from(data: Any) -> Exchange | None:
    """A finished exchange from stored data; None when it is not one (a value of the wrong kind anywhere in it)."""
    try:
        return _exchange(data)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def _exchange(data: Any) -> Exchange | None:
    if not isinstance(data, dict) or not isinstance(data.get("question"), str):
        return None
    mode = "search" if data.get("mode") == "search" else "answer"
    ex = Exchange(data["question"], mode, done=True)
    for k in _EXCHANGE_TEXT[1:]:
        value = data.get(k)
        setattr(ex, k, value[:MAX_TEXT] if isinstance(value, str) else "")
    for k in _EXCHANGE_FLAGS:
        setattr(ex, k, bool(data.get(k, k == "relevant")))
    ex.items = [h for h in (_hit(d) for d in data.get("items") or []) if h is not None]
    if mode == "answer":
        ex.answer = _answer(data.get("answer"), [it for it in ex.items if it.n])
    return ex


def title_of(state: UIState) -> str:
    """A past chat's name in the list: its first question."""
    first = state.exchanges[0].question if state.exchanges else "New chat"
    first = " ".join(first.split())
    return first if len(first) <= 70 else first[:69] + "…"


def save(history: Any, state: UIState) -> list[dict[str, Any]]:
    """``history`` with this conversation stored first (its finished exchanges), at most ``MAX_CHATS``."""
    old = next((c for c in entries(history) if c["id"] == state.chat_id), None)
    chats = [c for c in entries(history) if c["id"] != state.chat_id]
    done = [ex for ex in state.exchanges if ex.done][-MAX_EXCHANGES:]
    if not done:
        return chats
    if state.chat_id is None:
        state.chat_id = uuid.uuid4().hex[:12]
    carried = {(t.question, t.standalone): t.context for t in state.session.turns}
    named = old is not None and old.get("named") is True  # a name the user gave it stays
    entry = {
        "id": state.chat_id,
        "title": old["title"] if old is not None and named else title_of(state),
        "named": named,
        "updated": time.time(),
        "exchanges": [exchange_data(ex, carried.get((ex.question, ex.standalone), ())) for ex in done],
    }
    return [entry, *chats][:MAX_CHATS]


def rename(history: Any, chat_id: str | None, title: str) -> list[dict[str, Any]]:
    """``history`` with chat ``chat_id`` named ``title`` (one line, at most 70 characters; kept from now on)."""
    title = " ".join(str(title).split())[:70]
    chats = entries(history)
    if title:
        for c in chats:
            if c["id"] == chat_id:
                c["title"], c["named"] = title, True
    return chats


def matches(chat: dict[str, Any], query: str) -> bool:
    """Whether every word of ``query`` is in the chat's name or one of its questions or answers (any case)."""
    text = " ".join(
        [
            chat["title"],
            *(str(ex.get(k) or "") for ex in chat["exchanges"] if isinstance(ex, dict) for k in ("question", "text")),
        ]
    ).lower()
    return all(w in text for w in query.lower().split())


def entries(history: Any) -> list[dict[str, Any]]:
    """The well-formed conversations of a stored history, newest first."""
    if not isinstance(history, list):
        return []
    ok = [
        c
        for c in history
        if isinstance(c, dict)
        and isinstance(c.get("id"), str)
        and isinstance(c.get("exchanges"), list)
        and isinstance(c.get("title"), str)
    ]
    return sorted(ok, key=lambda c: -float(c.get("updated") or 0) if isinstance(c.get("updated"), int | float) else 0)


def remove(history: Any, chat_id: str | None) -> list[dict[str, Any]]:
    return [c for c in entries(history) if c["id"] != chat_id]


def choices(history: Any, query: str = "") -> list[tuple[str, str]]:
    """(label, id) for the list of past chats (those ``query`` finds): its name and when it was last used."""
    out = []
    for c in entries(history):
        if query and not matches(c, query):
            continue
        try:
            stamp = time.strftime("%d %b %H:%M", time.localtime(float(c.get("updated", ""))))
        except (TypeError, ValueError, OverflowError, OSError):  # absent, or no time a clock can show
            stamp = ""
        n = len(c["exchanges"])
        out.append((f"{c['title']} · {n} question{'s' if n != 1 else ''}{' · ' + stamp if stamp else ''}", c["id"]))
    return out


def restore(history: Any, chat_id: str | None, session: ChatSession) -> UIState | None:
    """The stored conversation ``chat_id`` as a session's state: shown as it was, and its answered turns
    back in the chat session, so a follow-up after a reload is understood as before. None if absent."""
    entry = next((c for c in entries(history) if c["id"] == chat_id), None)
    if entry is None:
        return None
    state = UIState(session)
    state.chat_id = entry["id"]
    papers = session.engine.index.get(
        list(dict.fromkeys(it["id"] for ex in entry["exchanges"] if isinstance(ex, dict) for it in _items(ex)))
    )
    for data in entry["exchanges"][-MAX_EXCHANGES:]:
        ex = exchange_from(data)
        if ex is None:
            continue
        ex.papers = {it.id: papers[it.id] for it in ex.items if it.id in papers}
        state.exchanges.append(ex)
        if ex.mode == "answer" and ex.answer is not None and not ex.error and not ex.stopped:
            carried = data.get("context")
            context = tuple(t for t in carried if isinstance(t, str)) if isinstance(carried, list) else ()
            session.turns.append(Turn(ex.question, ex.standalone or ex.question, ex.answer, context))
    if state.exchanges:
        last = len(state.exchanges) - 1
        first_cited = next((it.n for it in state.exchanges[last].items if it.cited), 1)
        state.view = (last, first_cited) if state.exchanges[last].items else None
    return state


def browser_secret(home: Path) -> str:
    """The key the browser's copy is encrypted with: made once per data directory (a random one per run when the
    directory cannot be written, and then the past chats last as long as the app does)."""
    path = home_path(home, "ui-secret")
    try:
        secret = path.read_text(encoding="ascii").strip()
        if len(secret) >= 16:
            return secret
    except (OSError, UnicodeDecodeError):
        pass
    secret = secrets.token_urlsafe(24)
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secret)
    except OSError:
        pass
    return secret


def _items(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in data.get("items") or [] if isinstance(d, dict) and isinstance(d.get("id"), str)]
