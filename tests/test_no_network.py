"""Nothing phones home: ingest, search, ask and the chat UI run under strace, and every
outbound socket call is checked.

The README promises a fully offline tool. Libraries break that promise quietly (onnxruntime's
telemetry resolved ``mobile.events.data.microsoft.com`` on every session it created), so
the test watches the system calls rather than trusting environment switches: any
``connect``/``sendto``/``sendmsg``/``sendmmsg`` to a non-loopback IPv4/IPv6 address fails,
and so does any DNS traffic at all (port 53, loopback resolvers included), because a
lookup is already a message to the outside world.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SEEDS, VENV_BIN, free_port, wait_http

from rag_papers.config import Settings

pytestmark = pytest.mark.slow  # every product test runs the console script under strace

TRACED = "connect,sendto,sendmsg,sendmmsg"
# Every process and thread (-f), stopped only at the traced calls: --seccomp-bpf installs a filter in the
# traced command (inherited by every thread and child it starts) that hands strace just those calls, so
# the millions of other calls an import of torch or chromadb makes run at full speed instead of each
# stopping for strace. What is seen is the same: every connect/send of every process and thread.
STRACE_FLAGS = ("-f", "--seccomp-bpf", "-qq")
# One socket address as strace prints it, IPv4 or IPv6 (the port first, then the address).
_ADDR = re.compile(
    r"sa_family=(?P<fam>AF_INET6?),\s*sin6?_port=htons\((?P<port>\d+)\),\s*"
    r"(?:sin_addr=inet_addr\(\"(?P<v4>[^\"]+)\"\)|sin6_flowinfo=[^,]*,\s*inet_pton\(AF_INET6,\s*\"(?P<v6>[^\"]+)\")"
)
_CALL = re.compile(r"^(?P<pid>\d+)\s+(?P<call>connect|sendto|sendmsg|sendmmsg)\((?P<fd>\d+),")


def offending(log: str) -> list[str]:
    """The strace lines that reach beyond this machine: non-loopback IP addresses, or DNS (port 53) anywhere.

    A resolver connects its UDP socket and then sends without an address, so sends on a socket
    that was connected to an outside address or port 53 are listed too: they carry the query
    (the name looked up shows in the payload).
    """
    bad: list[str] = []
    outside: set[tuple[str, str]] = set()  # (pid, fd) connected beyond loopback or to port 53
    for line in log.splitlines():
        call = _CALL.match(line.strip())
        if not call:
            continue
        key = (call["pid"], call["fd"])
        flagged = False
        for m in _ADDR.finditer(line):
            port = int(m.group("port"))
            addr = ipaddress.ip_address(m.group("v4") or m.group("v6"))
            if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
                addr = addr.ipv4_mapped
            flagged = flagged or port == 53 or not addr.is_loopback
        if call["call"] == "connect":
            if flagged:
                outside.add(key)
            else:
                outside.discard(key)
        elif key in outside and ("NULL, 0)" in line or "msg_name=NULL" in line or call["call"] == "sendmmsg"):
            flagged = True  # a send on that connected socket
        if flagged:
            bad.append(line.strip())
    return bad


def assert_offline(log_file: Path, what: str) -> None:
    """Fail with the offending strace lines (and how many calls were seen) if any left the machine."""
    log = log_file.read_text(encoding="utf-8", errors="replace")
    bad = offending(log)
    if bad:
        shown = "\n  ".join(line[:240] for line in bad[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        pytest.fail(
            f"{what} sent {len(bad)} outbound socket call(s) (non-loopback address or DNS, port 53); "
            f"strace log {log_file}:\n  {shown}{more}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def strace() -> str:
    """strace itself, checked to work here (ptrace may be forbidden in some containers)."""
    exe = shutil.which("strace") or ("/usr/bin/strace" if Path("/usr/bin/strace").is_file() else None)
    if exe is None:
        pytest.fail("strace is not installed: run scripts/setup --dev (it installs Debian's strace)", pytrace=False)
    probe = subprocess.run(
        [exe, *STRACE_FLAGS, "-e", "trace=connect", "-o", os.devnull, "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.strip()[:200]}")
    return exe


# Switches the code must set by itself: the tests' own environment must not do it for them.
SWITCHES = (
    "GRADIO_ANALYTICS_ENABLED",
    "ANONYMIZED_TELEMETRY",
    "HF_HUB_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
    "TRANSFORMERS_OFFLINE",
    "ORT_DISABLE_TELEMETRY",
)


def bare_env(**extra: str) -> dict[str, str]:
    """This environment without any telemetry or offline switch (the product sets its own)."""
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    return {**env, **extra}


def traced(strace: str, log: Path, *argv: str) -> list[str]:
    return [strace, *STRACE_FLAGS, "-s", "64", "-e", f"trace={TRACED}", "-o", str(log), *argv]


def run_traced(
    strace: str, log: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        traced(strace, log, str(VENV_BIN / "rag-papers"), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=bare_env(**(env or {})),
    )
    assert res.returncode == 0, f"rag-papers {' '.join(args)} failed: {res.stderr[-2000:]}"
    return res


# ------------------------------------------------------------------ the check itself
def test_parser_flags_outside_addresses_and_any_dns() -> None:
    lines = [
        '12 connect(14, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0',
        '12 sendto(14, "\\200\\220\\1\\0\\0\\1\\0\\0\\0\\0\\0\\0\\6mobile\\6events"..., 50, MSG_NOSIGNAL, NULL, 0) = 50',
        '12 connect(3, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("127.0.0.53")}, 16) = 0',
        '13 connect(5, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("20.42.65.92")}, 16 <unfinished ...>',
        '14 sendto(4, "x"..., 30, 0, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
        'inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = 30',
        "15 sendmsg(6, {msg_name={sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), "
        'inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, msg_namelen=28}, 0) = 40',
    ]
    fine = [
        '20 connect(50, {sa_family=AF_INET, sin_port=htons(7999), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
        "21 connect(7, {sa_family=AF_INET6, sin6_port=htons(8000), sin6_flowinfo=htonl(0), "
        'inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0',
        "22 connect(8, {sa_family=AF_INET6, sin6_port=htons(80), sin6_flowinfo=htonl(0), "
        'inet_pton(AF_INET6, "::ffff:127.0.0.1", &sin6_addr), sin6_scope_id=0}, 28) = 0',
        '23 connect(9, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT',
        '24 sendto(50, "GET / HTTP/1.1"..., 171, 0, NULL, 0) = 171',
        "24 <... connect resumed>) = 0",
    ]
    assert offending("\n".join(lines + fine)) == lines


def test_a_real_lookup_is_caught(strace: str, tmp_path: Path) -> None:
    """The check sees a resolver call made from a worker thread, whatever the machine's resolver is."""
    log = tmp_path / "lookup.strace"
    code = (
        "import socket, threading\n"
        "def look():\n"
        "    try: socket.getaddrinfo('mobile.events.data.microsoft.com', 443)\n"
        "    except OSError: pass\n"
        "t = threading.Thread(target=look); t.start(); t.join()\n"
    )
    subprocess.run(traced(strace, log, sys.executable, "-c", code), capture_output=True, timeout=60)
    assert offending(log.read_text()), "a getaddrinfo for an outside host left no trace: the check is blind"


# ------------------------------------------------------------------ the product
def test_ingest_with_a_fresh_model_cache_stays_offline(strace: str, tmp_path: Path) -> None:
    """The first ingest on a machine also exports the model to ONNX (about a minute): covered too."""
    log = tmp_path / "ingest.strace"
    cache = tmp_path / "fresh-model-cache"
    # A few seed abstracts: the export is what this adds to the other offline tests, not the embedding of 38.
    paragraphs = [
        p for p in next(iter(sorted(SEEDS.glob("*.txt")))).read_text(encoding="utf-8").split("\n\n") if p.strip()
    ]
    corpus = tmp_path / "few.txt"
    corpus.write_text("\n\n".join(paragraphs[:4]) + "\n", encoding="utf-8")  # the header line and three abstracts
    res = run_traced(
        strace,
        log,
        "ingest",
        "--no-progress",
        str(corpus),
        env={"RAG_PAPERS_MODEL_CACHE": str(cache), "RAG_PAPERS_HOME": str(tmp_path / "home")},
    )
    assert "3 papers indexed" in res.stdout
    assert list(cache.glob("*.onnx")), "the fresh cache was not used: no ONNX export happened"
    # Issue 16: the one-time export says what it is doing, in one line, instead of transformers' loading bar.
    assert res.stderr.count("exporting the embedding model") == 1, res.stderr
    assert "Loading weights" not in res.stderr, res.stderr
    assert_offline(log, "rag-papers ingest (fresh model cache)")


def test_search_and_extractive_ask_stay_offline(strace: str, tmp_path: Path, seeded: Settings) -> None:
    log = tmp_path / "search.strace"
    res = run_traced(strace, log, "search", "--json", "what does ABBA claim?")
    assert '"relevant": true' in res.stdout
    assert_offline(log, "rag-papers search")
    log = tmp_path / "ask.strace"
    res = run_traced(strace, log, "ask", "--llm", "extractive", "what does ABBA claim?")
    assert "[1]" in res.stdout
    assert_offline(log, "rag-papers ask --llm extractive")


def _tracee(strace_pid: int) -> int | None:
    """The command strace started (its only direct child)."""
    try:
        kids = Path(f"/proc/{strace_pid}/task/{strace_pid}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def test_chat_ui_stays_offline(strace: str, tmp_path: Path, seeded: Settings) -> None:
    """The UI serves its page and a /search API call over loopback; nothing else leaves the process."""
    from gradio_client import Client

    log = tmp_path / "chat.strace"
    port = free_port()
    out = (tmp_path / "chat.out").open("w")
    proc = subprocess.Popen(
        traced(strace, log, str(VENV_BIN / "rag-papers"), "chat", "--port", str(port), "--llm", "extractive"),
        stdout=out,
        stderr=subprocess.STDOUT,
        env=bare_env(),
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url, 180)  # GET /: the page itself
        client = Client(url, verbose=False)
        result = client.predict("what does ABBA claim?", 3, api_name="/search")
        assert result["results"], result
        time.sleep(2)  # give background threads (telemetry uploaders, version checks) their chance
    finally:
        pid = _tracee(proc.pid)
        if pid is not None:
            os.kill(pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
        out.close()
    assert_offline(log, "rag-papers chat")
