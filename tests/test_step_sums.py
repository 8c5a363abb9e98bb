"""`step.pairwise_span`: row sums over the leading columns it names are numpy's whole-row sums, bit for bit,
when the columns past `width` are zero (the first-draw metric's sums over a pool cap far above the pools)."""

from __future__ import annotations

import numpy as np
import pytest

from repro.sampling.step import pairwise_span


@pytest.mark.parametrize("length", [1, 7, 8, 100, 128, 129, 136, 200, 255, 256, 257, 1000, 4096, 4100, 8192, 16384])
def test_leading_columns_sum_as_whole_rows(length: int) -> None:
    rng = np.random.default_rng(length)
    for width in sorted({0, 1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 129, length // 3, length // 2, length - 1, length}):
        if not 0 <= width <= length:
            continue
        rows = np.zeros((64, length))
        # magnitudes far apart, so that a different grouping of the additions shows in the last bits
        rows[:, :width] = rng.standard_normal((64, width)) * 10.0 ** rng.integers(-12, 12, size=(64, width))
        rows[0, :width] = -0.0
        span = pairwise_span(length, width)
        assert width <= span <= length
        whole, lead = rows.sum(axis=1), rows[:, :span].sum(axis=1)
        assert whole.tobytes() == lead.tobytes()


def test_a_span_shorter_than_the_rule_would_change_the_bits() -> None:
    # the check above can fail: summing only the nonzero columns groups the additions differently
    rng = np.random.default_rng(0)
    rows = np.zeros((256, 4096))
    rows[:, :300] = rng.standard_normal((256, 300)) * 10.0 ** rng.integers(-12, 12, size=(256, 300))
    assert pairwise_span(4096, 300) == 512
    for span in (300, 504):
        assert rows.sum(axis=1).tobytes() != rows[:, :span].sum(axis=1).tobytes()
