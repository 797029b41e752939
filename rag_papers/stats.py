"""One definition of a percentile for every report (``rag-papers bench`` and ``eval``), so "p95" means one thing.

Linear interpolation between the closest ranks: numpy's default and the standard library's ``inclusive``
quantiles (Hyndman and Fan's definition 7); on a handful of latencies it moves less from run to run than
the nearest rank does.
"""

from __future__ import annotations

import statistics

PERCENTILE_RULE = "Percentiles (p50, p95) interpolate linearly between the closest ranks (numpy's default)."


def percentile(xs: list[float], p: int) -> float:
    """The ``p``-th percentile (1 to 99) of ``xs`` by ``PERCENTILE_RULE``; 0.0 for no sample."""
    if len(xs) < 2:  # statistics.quantiles wants two points
        return float(xs[0]) if xs else 0.0
    return statistics.quantiles(xs, n=100, method="inclusive")[p - 1]
