"""One percentile for every report (issue 29): the bench interpolated and eval took the nearest rank, so "p95"
meant two things in two reports."""

from __future__ import annotations

import numpy as np
import pytest

from rag_papers import bench, evaluate
from rag_papers.stats import PERCENTILE_RULE, percentile

SAMPLES = ([12.0], [3.0, 1.0], [5.0, 1.0, 4.0, 2.0, 3.0], [float(x * x % 17) for x in range(40)])


@pytest.mark.parametrize("xs", SAMPLES)
@pytest.mark.parametrize("p", [50, 95])
def test_percentile_is_numpys_linear_interpolation(xs: list[float], p: int) -> None:
    assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)))


def test_an_empty_sample_has_no_latency() -> None:
    assert percentile([], 95) == 0.0


def test_bench_and_eval_use_the_one_percentile_and_their_reports_name_it() -> None:
    lat = [5.0, 1.0, 4.0, 2.0, 3.0, 40.0]
    for module in (bench, evaluate):
        assert module.percentile(lat, 95) == pytest.approx(float(np.percentile(lat, 95))), module.__name__
    meta = {"questions": 0, "qa": "qa.jsonl", "papers": 0, "date": "today", "seconds": 0.0}
    assert PERCENTILE_RULE in evaluate.markdown([], meta, None)
    machine = {"cpus": 2, "loadavg_at_start": 0.0}
    assert PERCENTILE_RULE in bench.markdown({"machine": machine, "date": "today", "backend": "onnx"})
