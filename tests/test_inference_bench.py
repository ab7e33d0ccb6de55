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


@pytest.fixture(scope="module")
def pool():
    yield from import_benchmark("pool_per_parameter")


def test_pooled_rows_add_an_earlier_runs_counts_and_split_a_miss(bench, pool, tmp_path):
    """Pooling a run with an earlier one's per-parameter CSV gives the
    coverage and one-sided misses of all data sets counted at once; the
    miss splits into bias and SE / SD (normal theory, checked by counting),
    tails (the fixed-width interval of a Laplace error: 1 - exp(-1.96 √2))
    and the standard error's own spread (independent of the error, it
    costs coverage by Jensen's inequality)."""
    rng = np.random.default_rng(1)
    reps, target, z = 20000, np.array([0.0, 1.0, 2.0]), 1.959963984540054
    error = np.column_stack([rng.normal(0.4, 1.0, reps), rng.laplace(0.0, 0.5**0.5, reps),
                             rng.normal(0.0, 1.0, reps)])  # every column of SD 1
    se = np.column_stack([np.full(reps, 0.9), np.ones(reps), rng.uniform(0.5, 1.5, reps)])
    estimates = target + error
    intervals = np.stack([estimates - z * se, estimates + z * se], axis=-1)
    earlier = bench.per_parameter_rows(intervals[:5000], target, n=1, p=2, q=1.0,
                                       classes="4:1", mode="stream")
    bench.write_rows(tmp_path, "earlier", bench.PER_PARAMETER_FIELDS, earlier,
                     bench.per_parameter_markdown)
    counts = pool.earlier_counts(tmp_path / "earlier.csv", (1, 2, 1.0, 4.0), "stream", 3)
    rows = pool.pooled_rows(intervals[5000:], estimates[5000:], target, counts)
    whole = bench.per_parameter_rows(intervals, target)
    for row, full in zip(rows, whole):
        assert row["reps"] == reps and row["reps_raw"] == reps - 5000
        for key in ("coverage", "above", "below", "wilson_low", "wilson_high"):
            assert row[key] == pytest.approx(full[key], abs=1e-12)
    normal, heavy, varying = rows
    tolerance = 4 * np.sqrt(0.1 / (reps - 5000))
    assert abs(normal["coverage_raw"] - normal["normal_coverage"]) < tolerance
    assert normal["fixed_coverage"] == normal["coverage_raw"] and normal["se_cv"] < 1e-12
    assert abs(normal["kurtosis"]) < 0.3
    assert heavy["kurtosis"] > 2.0 and abs(heavy["fixed_coverage"] - 0.937) < 0.01
    assert abs(varying["fixed_coverage"] - 0.95) < tolerance
    assert varying["se_cv"] == pytest.approx(1 / np.sqrt(12), rel=0.05)
    assert varying["coverage_raw"] < varying["fixed_coverage"] - 0.01
