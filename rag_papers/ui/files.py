"""Where the UI's files go: private folders, so that a conversation exported on a shared machine stays its user's.

gradio copies every file a component serves into its cache, by default the shared ``TMPDIR/gradio``
(0755 folders, files kept after the server stops), and some of its folders are fixed when gradio is
imported. So, before gradio is first imported (``rag_papers/ui/__init__.py``), the process gets its own
folder (``process_folder``: mode 0700, removed when the process exits), which ``GRADIO_TEMP_DIR``, gradio's
one setting for it, names. Each server built then gets a folder of its own inside it (``server_folder``),
which is its gradio cache: exports are written there, 0600 (``write_export``), so gradio serves them from
where they are instead of copying them. Old exports are removed while the server runs (gradio's
``delete_cache``, ``EXPORT_KEEP_S``), the server's folder when it stops (``remove_server_folder``).

Standard library only: this module runs before gradio is imported.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path

# An export file is removed this long after it was written, looked for every EXPORT_SWEEP_S (gradio's
# ``delete_cache``); a click on "Export .md" writes it afresh, so a page left open still exports.
EXPORT_KEEP_S = 900
EXPORT_SWEEP_S = 60

_process: Path | None = None
_servers: set[Path] = set()  # the server folders made in this process (only those are ever removed)


def process_folder() -> Path:
    """This process's private folder (0700), made once and named by ``GRADIO_TEMP_DIR``; removed at exit."""
    global _process
    if _process is None:
        _process = Path(tempfile.mkdtemp(prefix="rag-papers-ui-"))  # mkdtemp makes it 0700
        atexit.register(shutil.rmtree, _process, ignore_errors=True)
        os.environ["GRADIO_TEMP_DIR"] = str(_process)
    return _process


def server_folder() -> Path:
    """A new 0700 folder for the server built next, made gradio's cache for it.

    Each component reads ``GRADIO_TEMP_DIR`` when it is built and the server when it is launched, so it
    is set here, before the Blocks is built.
    """
    folder = Path(tempfile.mkdtemp(prefix="server-", dir=process_folder()))
    _servers.add(folder)
    os.environ["GRADIO_TEMP_DIR"] = str(folder)
    return folder


def remove_server_folder(folder: Path) -> None:
    """Remove a folder ``server_folder`` made, with everything in it (the server stopped); no other folder."""
    if folder not in _servers:
        return
    _servers.discard(folder)
    shutil.rmtree(folder, ignore_errors=True)
    if os.environ.get("GRADIO_TEMP_DIR") == str(folder) and _process is not None:
        os.environ["GRADIO_TEMP_DIR"] = str(_process)  # nothing built later writes into a removed folder


def write_export(folder: Path, text: str) -> Path:
    """``text`` as a new file, mode 0600, in a new 0700 folder of its own under ``folder``.

    A folder per export keeps the name the browser saves (``rag-papers-chat-DATE.md``) free of clashes
    between sessions; the emptied folders of exports gradio removed are removed here.
    """
    for old in folder.glob("export-*"):
        try:
            if time.time() - old.stat().st_mtime > EXPORT_KEEP_S:
                old.rmdir()  # only when empty: its file is gone
        except OSError:
            pass
    sub = Path(tempfile.mkdtemp(prefix="export-", dir=folder))
    path = sub / f"rag-papers-chat-{datetime.now():%Y%m%d-%H%M%S}.md"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path
