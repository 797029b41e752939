"""The Papers tab's "Add papers" and "Remove": the index written from the browser.

Why it is built this way:

* One code path with the CLI. An upload is ``Ingester.ingest`` over the files, a removal ``Ingester.remove``, and
  the line shown is the one the CLI prints (``IngestReport.summary``, ``removal_line``). Every format the
  CLI reads is read, by the same readers; a record without an abstract is skipped and counted.
* All or nothing per upload. ``ingest`` reads every file of a call through before it writes anything, so
  one bad file among several refuses the whole upload in one line that names it, and nothing is added
  from the others (the CLI does the same for the files of one command). The files are first copied to
  ``HOME/uploads/<time>-…/`` so that the papers' sources name a file that lasts (gradio's cache is swept);
  a refused upload's copy is deleted again.
* One writer at a time. In this process a lock: a second upload or removal is told so at once, rather than
  queued behind an embedding that may take minutes. Across processes, the index's own writer lock refuses
  with "another ingest or removal is writing this index" before anything is written.
* A size limit (``upload_max_mb``): gradio refuses bigger files at its upload route (``launch.serve``), and
  the handler checks again, since the route is not the only way a path reaches it.
* Who may write: behind a login, whoever signed in (gradio asks for it on every route, uploads included);
  without one, only when no other machine can reach the app. An open public server (``--insecure-no-auth``)
  only reads: the tab says so and the handlers refuse.
* The open chat searches the same ``Store`` the writes go to (its ``Index``'s): its next question sees the
  papers added, and no longer the papers removed, without a restart.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import gradio as gr

from rag_papers import RagPapersError
from rag_papers.config import Settings
from rag_papers.corpus import FORMATS, SUPPORTED_SUFFIXES
from rag_papers.index import Index
from rag_papers.ingest import Ingester, removal_line
from rag_papers.ui.access import is_loopback, resolve_auth
from rag_papers.ui.papers import PapersTab, picks
from rag_papers.ui.render import _macro

log = logging.getLogger(__name__)

MB = 1024 * 1024  # gradio's "mb" (``max_file_size``): both limits count the same way
MAX_PICKED = 1000  # papers selected for one removal (the selection is kept in the session)
CONFIRM_LISTED = 10  # papers named in the confirmation; the rest are counted
BUSY = "Another upload or removal is under way in this app; wait for it to finish."
# gradio shows a bar for a handler whose parameter defaults to a Progress: this one follows the ingest's
# own tqdm bar (``progress.progress_bar``), so the page shows the papers embedded so far, with no second count.
TRACK_INGEST = gr.Progress(track_tqdm=True)
READ_ONLY = (
    "Adding and removing papers needs a login: this server is open to other machines without one "
    "(serve it with --auth-file to allow them)."
)


def writes_allowed(settings: Settings) -> bool:
    """Whether the browser may add and remove papers: behind a login, or where only this machine can reach it."""
    try:
        return resolve_auth(settings) is not None or is_loopback(settings.host)
    except RagPapersError:  # a bad login setting: launch refuses it before building; here, read only
        return False


def notice_html(text: str, level: str) -> str:
    """One status line (level "ok", "busy" or "bad"), the text inert (it may name a file or a paper)."""
    return _macro("papers.html", "notice", " ".join(text.split()), level)


def upload_hint(settings: Settings) -> str:
    """What the upload box takes, under it."""
    return (
        f"Any of: {FORMATS}. Up to {settings.upload_max_mb:g} MB a file (upload_max_mb). Every file is checked "
        "before anything is added: one bad file adds nothing. Records without an abstract are skipped."
    )


class Library:
    """Handlers of "Add papers" and "Remove"; one per built app, shared by every session."""

    def __init__(
        self,
        settings: Settings,
        index: Index,
        papers: PapersTab,
        header: Callable[[], tuple[str, str]],
        writable: bool,
    ) -> None:
        self.settings = settings
        self.index = index
        self.papers = papers
        self.header = header  # (brand, index line) with the current count: ``ChatApp.index_info``
        self.writable = writable
        self._lock = threading.Lock()

    @functools.cached_property
    def writer(self) -> Ingester:
        """The writes to the store the app reads, as the CLI makes them; made at the first write (under the
        lock), so an app that only reads never has one."""
        return Ingester(self.index.store)

    # ------------------------------------------------------------------ add
    def check(self, paths: list[Path]) -> str | None:
        """Why these files cannot be taken (type, size), before anything is copied or read; None if they can."""
        limit = self.settings.upload_max_mb * MB
        for path in paths:
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                return f"{path.name}: not a supported file type; supported formats: {FORMATS}"
            try:
                size = path.stat().st_size
            except OSError:
                return f"{path.name}: the upload did not arrive; try again"
            if size > limit:
                return (
                    f"{path.name} is {size / MB:.1f} MB: the app takes files of up to {self.settings.upload_max_mb:g} "
                    "MB (upload_max_mb); add bigger ones with `rag-papers ingest FILE`"
                )
        return None

    def add(
        self, files: Any, view: Any, picked: Any, progress: gr.Progress = TRACK_INGEST
    ) -> Iterator[tuple[Any, ...]]:
        """An upload: check, keep, ingest (its progress bar shown), then the report line and the list redrawn.

        Yields (notice, list, view, brand, index line, upload box); the box is emptied at the end.
        """
        paths = [Path(str(f)) for f in (files if isinstance(files, list) else [files] if files else [])]
        if not paths:
            return
        if not self.writable:
            yield self._said(READ_ONLY, "bad")
            return
        problem = self.check(paths)
        if problem:
            yield self._said(problem, "bad")
            return
        if not self._lock.acquire(blocking=False):
            yield self._said(BUSY, "bad")
            return
        try:
            n = len(paths)
            yield self._said(f"Checking {n} file{'s' if n != 1 else ''}, then adding the papers…", "busy", keep=True)
            folder = self._keep(paths)
            try:
                report = self.writer.ingest(sorted(folder.iterdir()), show_progress=True)
            except Exception as exc:  # noqa: BLE001 - one line in the tab; the app keeps serving
                self._drop_unless_used(folder)
                if isinstance(exc, RagPapersError):
                    yield self._said(str(exc).replace(f"{folder}/", ""), "bad")
                else:
                    log.exception("adding %s failed", [p.name for p in paths])
                    yield self._said(f"Unexpected error ({type(exc).__name__}); the app is still running.", "bad")
                return
            html, shown = self.papers.redraw(view, picked)
            line = report.summary()
            if report.damaged:  # named as the CLI names them (FILE:LINE: why), by the names the user gave the files
                named = "; ".join(d.replace(f"{folder}/", "") for d in report.damaged[:3])
                more = f" (and {len(report.damaged) - 3} more)" if len(report.damaged) > 3 else ""
                line += f". Skipped: {named}{more}"
            yield (notice_html(line, "ok"), html, shown, *self.header(), None)
        finally:
            self._lock.release()

    def _said(self, text: str, level: str, keep: bool = False) -> tuple[Any, ...]:
        """Outputs of ``add`` that only say something (the upload box emptied unless ``keep``)."""
        return (notice_html(text, level), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip() if keep else None)

    def _keep(self, paths: list[Path]) -> Path:
        """The uploaded files copied to a new folder of ``HOME/uploads`` (0700), under their own names."""
        root = self.settings.in_home("uploads")
        root.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=root))
        for path in paths:
            target = folder / path.name
            n = 1
            while target.exists():  # two files of one name (from two folders): both kept
                n += 1
                target = folder / f"{path.stem}-{n}{path.suffix}"
            shutil.copyfile(path, target)
        return folder

    def _drop_unless_used(self, folder: Path) -> None:
        """Delete a failed upload's copy, unless papers were registered from it (a batch written before a
        disk filled): their sources then still name a file."""
        from rag_papers.registry import connect

        prefix = f"{folder}/"
        try:
            with closing(connect(self.settings.in_home("papers.sqlite"))) as db:
                used = db.execute(
                    "SELECT 1 FROM sources WHERE substr(file, 1, ?) = ? LIMIT 1", (len(prefix), prefix)
                ).fetchone()
        except Exception:  # noqa: BLE001 - cannot tell: keep the files
            log.exception("looking up the sources of %s failed", folder)
            return
        if used is None:
            shutil.rmtree(folder, ignore_errors=True)

    # ------------------------------------------------------------------ remove
    @staticmethod
    def remove_button(n: int) -> Any:
        return gr.update(value=f"Remove selected ({n:,})" if n else "Remove selected", interactive=n > 0)

    def pick(self, picked: Any, evt: gr.EventData) -> tuple[Any, Any]:
        """A row's box ticked or cleared: (the selection, the Remove button)."""
        data = evt._data if isinstance(evt._data, dict) else {}
        pid = str(data.get("id", ""))[:1000]
        chosen = picks(picked)
        if pid and data.get("on"):
            if pid not in chosen:
                if len(chosen) >= MAX_PICKED:
                    gr.Warning(f"At most {MAX_PICKED:,} papers are removed at once.")
                else:
                    chosen.append(pid)
        elif pid in chosen:
            chosen.remove(pid)
        return chosen, self.remove_button(len(chosen))

    def ask_remove(self, picked: Any) -> tuple[Any, Any, Any]:
        """The Remove button: the confirmation step, naming the papers (confirm text, its box, notice)."""
        ids = picks(picked)
        if not self.writable:
            return gr.skip(), gr.skip(), notice_html(READ_ONLY, "bad")
        if not ids:
            return gr.skip(), gr.update(visible=False), notice_html("Select papers to remove first.", "bad")
        found = self.index.get(ids)  # at most MAX_PICKED, by primary key
        present = [found[i] for i in ids if i in found]
        if not present:
            return gr.skip(), gr.update(visible=False), notice_html("The selected papers are no longer indexed.", "bad")
        listed = present[:CONFIRM_LISTED]
        html = _macro("papers.html", "confirm", listed, len(present) - len(listed))
        return html, gr.update(visible=True), ""

    def remove(self, view: Any, picked: Any) -> tuple[Any, ...]:
        """Confirmed: the selected papers removed (``Ingester.remove``, as ``rag-papers remove``).

        Returns (notice, list, view, selection, Remove button, confirm box, brand, index line).
        """
        hide = gr.update(visible=False)
        ids = picks(picked)

        def said(text: str) -> tuple[Any, ...]:
            return (notice_html(text, "bad"), gr.skip(), gr.skip(), gr.skip(), gr.skip(), hide, gr.skip(), gr.skip())

        if not self.writable:
            return said(READ_ONLY)
        if not ids:
            return said("Select papers to remove first.")
        if not self._lock.acquire(blocking=False):
            return said(BUSY)
        try:
            n = self.writer.remove(ids)
            left = self.index.count()
        except Exception as exc:  # noqa: BLE001 - one line in the tab; the app keeps serving
            if not isinstance(exc, RagPapersError):
                log.exception("removing %d papers failed", len(ids))
                return said(f"Unexpected error ({type(exc).__name__}); the app is still running.")
            return said(str(exc))
        finally:
            self._lock.release()
        html, shown = self.papers.redraw(view, [])
        return (
            notice_html(removal_line(n, left), "ok"),
            html,
            shown,
            [],
            self.remove_button(0),
            hide,
            *self.header(),
        )

    @staticmethod
    def cancel() -> tuple[Any, Any]:
        """Cancel: the confirmation goes, the selection stays."""
        return "", gr.update(visible=False)
