"""Who may reach the app: the login, and the refusal to serve it to other machines without one.

A module of its own, used by what builds the app (``library.writes_allowed``: may the browser add and
remove papers?) and by what serves it (``launch.py``), so neither imports the other, and the rules can
be read, and tested, on their own.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
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


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(trusted: Iterable[str]) -> list[Network]:
    """``trusted_proxies`` (addresses or networks, ``10.0.0.5``, ``10.0.0.0/8``, ``::1``) as networks; a bad
    entry is a one-line error before anything is served."""
    networks: list[Network] = []
    for entry in trusted:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise RagPapersError(
                f"bad trusted_proxies entry {entry!r}: give the address or network (CIDR) of a proxy in front of the app"
            ) from None
    return networks


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as X-Forwarded-For or Forwarded write one: ``1.2.3.4``, ``1.2.3.4:80``, ``"[::1]:80"``, ``::1``."""
    text = value.strip().strip('"')
    m = re.fullmatch(r"\[([^\]]+)\](?::\d+)?", text) or re.fullmatch(r"([\d.]+):\d+", text)
    try:
        return ipaddress.ip_address(m.group(1) if m else text)
    except ValueError:
        return None  # "unknown", an obfuscated name (RFC 7239 6.3), garbage


def _forwarded_chain(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The addresses a request passed through, nearest the client first: X-Forwarded-For's list, else the
    ``for=`` values of Forwarded (RFC 7239); every header line of the name, in order."""
    xff: list[str] = []
    forwarded: list[str] = []
    for name, value in headers:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == "x-forwarded-for":
            xff += [part for part in text.split(",") if part.strip()]
        elif key == "forwarded":
            for element in text.split(","):
                for pair in element.split(";"):
                    k, _, v = pair.partition("=")
                    if k.strip().lower() == "for" and v.strip():
                        forwarded.append(v)
    return xff or forwarded


def client_address(peer: str | None, headers: Iterable[tuple[bytes, bytes]], trusted: Sequence[Network]) -> str:
    """Who is signing in, as the login's delay counts them: the socket's peer, unless the peer is one of the
    ``trusted`` proxies; then the address its forwarded headers name nearest to it that is not itself trusted.

    A header is anyone's to write: trusted from any peer, it let one machine claim a new address for every
    guess and never wait (issue 47). So with no proxy configured no header is read at all.
    """
    here = _address(peer or "")
    if here is None or not any(here in net for net in trusted):
        return peer or "?"
    for hop in reversed(_forwarded_chain(headers)):  # the last hop is the one our proxy wrote: walk back from it
        address = _address(hop)
        if address is None:
            break  # a hop that is no address: nothing before it can be believed either
        if not any(address in net for net in trusted):
            return str(address)
        here = address
    return str(here)
