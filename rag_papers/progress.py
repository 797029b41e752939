"""One progress bar style for every long step (ingest, repair, the keyword index's rebuild, fetch).

A module of its own so that the store, the ingest stage and fetch can all draw it without importing
each other.
"""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(total: int | None, desc: str, enabled: bool, unit: str = "abstract", initial: int = 0) -> Any:
    """tqdm on stderr with rate and ETA; silent when not wanted or not a terminal in tests. One style for
    every long step (ingest, repair, fetch); ``initial`` is what a resumed step had done already."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr, dynamic_ncols=True, mininterval=0.5
    )
