"""Who may reach the app: the login, and the refusal to serve it to other machines without one.

A module of its own, used by what builds the app (``library.writes_allowed``: may the browser add and
remove papers?) and by what serves it (``launch.py``), so neither imports the other, and the rules can
be read, and tested, on their own.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from rag_papers import RagPapersError
from rag_papers.config import Settings


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    """``"user:password"`` → ``("user", "password")``; a value without both parts is an error."""
    if not auth:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise RagPapersError("bad --auth: expected user:password")
    return user, password


def resolve_auth(settings: Settings) -> tuple[str, str] | None:
    """The UI login, from ``auth`` or ``auth_file`` (a file keeps the password out of ``ps`` and shell history)."""
    if settings.auth and settings.auth_file:
        raise RagPapersError("both auth and auth_file are set: give the login one way, not both")
    if settings.auth_file is None:
        return parse_auth(settings.auth)
    path = Path(settings.auth_file)
    try:
        text = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise RagPapersError(f"cannot read auth file {path}: {why}") from None
    user, sep, password = text.partition(":")
    if not sep or not user or not password or "\n" in text:
        raise RagPapersError(f"bad auth file {path}: expected one line user:password")
    return user, password


def is_loopback(host: str) -> bool:
    """Only this machine can reach ``host`` (127.0.0.0/8, ::1, localhost)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings, insecure_no_auth: bool = False) -> None:
    """Refuse to serve an address other machines can reach without a login, unless told so in so many words."""
    if is_loopback(settings.host) or insecure_no_auth or resolve_auth(settings) is not None:
        return
    raise RagPapersError(
        f"refusing to serve on {settings.host or '(all interfaces)'} without a login: anyone who can reach it could "
        "use the whole API; set one with --auth-file FILE (user:password) or RAG_PAPERS_AUTH, "
        "or pass --insecure-no-auth to serve it open anyway"
    )
