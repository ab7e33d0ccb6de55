"""The coverage study's per-parameter statistics (benchmarks/bench_inference.py)."""

import numpy as np
import pytest
from conftest import import_benchmark
from scipy.stats import binomtest


@pytest.fixture(scope="module")
def bench():
    yield from import_benchmark("bench_inference")


def test_per_parameter_rows_count_coverage_misses_and_wilson_interval(bench):
    """Coverage, one-sided misses and bias by direct counting; the Monte
    Carlo interval against scipy's Wilson interval."""
    rng = np.random.default_rng(0)
    reps, target = 400, np.array([0.0, 1.0, -2.0])
    estimates = target + rng.normal(loc=[0.0, 0.5, -0.3], size=(reps, 3))
    se = rng.uniform(0.5, 1.5, size=(reps, 3))
    z = 1.959963984540054
    intervals = np.stack([estimates - z * se, estimates + z * se], axis=-1)
    rows = bench.per_parameter_rows(intervals, target, n=1, p=2, q=1.0, classes="4:1",
                                    mode="stream")
    assert [r["parameter"] for r in rows] == ["intercept", "coef 1", "coef 2"]
    for j, row in enumerate(rows):
        low, high = intervals[:, j, 0], intervals[:, j, 1]
        covered = int(np.sum((low <= target[j]) & (target[j] <= high)))
        assert row["coverage"] == covered / reps
        assert row["above"] == np.mean(low > target[j])
        assert row["below"] == np.mean(high < target[j])
        assert row["coverage"] + row["above"] + row["below"] == pytest.approx(1.0)
        wilson = binomtest(covered, reps).proportion_ci(0.95, method="wilson")
        assert (row["wilson_low"], row["wilson_high"]) == pytest.approx(
            (wilson.low, wilson.high), abs=1e-6)
        spread = estimates[:, j].std(ddof=1)
        assert row["bias_sd"] == pytest.approx((estimates[:, j].mean() - target[j]) / spread)
        assert row["se_sd"] == pytest.approx(se[:, j].mean() / spread)
    assert rows[1]["bias_sd"] > 0.3 and rows[2]["bias_sd"] < -0.1
