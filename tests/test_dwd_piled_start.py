"""Few rows (issue #23): the first step's direction from piled margins
(``linear_model/_piled_start.py``) is the weighted ridge regression it
claims, and fits that start from it reach the optimum."""

import numpy as np
import pytest
from _reference import gendwd_relative_gaps
from scipy.optimize import brentq

from skfedpriv import DWDClassifier
from skfedpriv._loss import GenDWDLoss
from skfedpriv.linear_model import _newton
from skfedpriv.linear_model._factored_curvature import CurvatureStack, RowBlock
from skfedpriv.linear_model._piled_start import piled_direction

ALPHA = 1e-3


class _Sites:
    """Rows in blocks, with targets and weights (what the direction reads)."""

    def __init__(self, parts, fit_intercept):
        self.parts = parts
        self._blocks = [RowBlock(X, fit_intercept) for X, _, _ in parts]

    def row_blocks(self):
        return self._blocks


def _ridge_by_normal_equations(X, Y, w, q, alpha, fit_intercept):
    """The piled direction computed independently: ``u*`` by Brent's method
    on ``u α W² / S = -V'(u)``, then the dense weighted normal equations."""
    loss, total = GenDWDLoss(q), w.sum()
    Xbar = np.hstack([np.ones((len(X), 1)), X]) if fit_intercept else X
    out = []
    for y in Y.T:
        S = (w * y) @ X @ X.T @ (w * y)
        u = brentq(lambda t, S=S: t * alpha * total**2 / S + loss.derivative(t), 1e-8, 1e12,
                   xtol=1e-14, rtol=1e-14)
        curvature = loss.curvature(u)
        ridge = np.full(Xbar.shape[1], alpha * total / curvature)
        if fit_intercept:
            ridge[0] = 0.0
        targets = y * (-loss.derivative(u) / curvature + u)
        system = Xbar.T @ (w[:, None] * Xbar) + np.diag(ridge)
        out.append(np.linalg.solve(system, Xbar.T @ (w * targets)))
    return np.array(out).T


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_the_piled_direction_is_the_weighted_ridge_regression(q, fit_intercept):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((25, 60))
    Y = np.where(rng.random((25, 2)) < 0.5, -1.0, 1.0)
    w = rng.uniform(0.5, 2.0, 25)
    parts = [(X[:10], Y[:10], w[:10]), (X[10:], Y[10:], w[10:])]
    direction = piled_direction(_Sites(parts, fit_intercept), GenDWDLoss(q), ALPHA,
                                fit_intercept)
    reference = _ridge_by_normal_equations(X, Y, w, q, ALPHA, fit_intercept)
    np.testing.assert_allclose(direction, reference, rtol=1e-7,
                               atol=1e-9 * np.abs(reference).max())


def test_no_direction_for_rows_without_weight():
    # the gradient's direction is kept (the caller's fallback)
    X = np.random.default_rng(5).standard_normal((8, 30))
    Y = np.where(np.arange(8)[:, None] % 2 == 0, 1.0, -1.0)
    assert piled_direction(_Sites([(X, Y, np.ones(8))], True), GenDWDLoss(1.0), ALPHA,
                           True) is not None
    assert piled_direction(_Sites([(X, Y, np.zeros(8))], True), GenDWDLoss(1.0), ALPHA,
                           True) is None


def _history(monkeypatch):
    """The objective histories of every solve (captured)."""
    seen, original = [], _newton.NewtonSolver.finish

    def finish(self, n_iter):
        out = original(self, n_iter)
        seen.append(out[2]["objective"])
        return out
    monkeypatch.setattr(_newton.NewtonSolver, "finish", finish)
    return seen


@pytest.mark.parametrize("n, p, q, n_classes, weighted", [
    (100, 2_000, 1.0, 2, False), (40, 500, 0.5, 2, True), (100, 500, 4.0, 2, False),
    (60, 1_000, 1.0, 3, True)])
def test_fits_from_the_piled_start_reach_the_optimum(monkeypatch, n, p, q, n_classes,
                                                     weighted):
    rng = np.random.default_rng(n + p)
    y = rng.integers(0, n_classes, n)
    X = rng.standard_normal((n, p))
    X[:, :20] += 0.5 * (y[:, None] - (n_classes - 1) / 2)
    weights = rng.uniform(0.5, 2.0, n) if weighted else np.ones(n)
    histories = _history(monkeypatch)
    clf = DWDClassifier(q=q, alpha=ALPHA).fit(X, y, sample_weight=weights)
    assert isinstance(clf.curvature_, CurvatureStack)
    assert np.all(gendwd_relative_gaps(clf, X, y, q, ALPHA, weights) <= 1e-10)
    # the grid along the piled direction lands closer to the optimum than the
    # grid along the gradient (the solver of before)
    monkeypatch.setattr(_newton, "piled_direction", lambda *args: None)
    DWDClassifier(q=q, alpha=ALPHA).fit(X, y, sample_weight=weights)
    piled, gradient = histories
    assert np.all(piled[1] < gradient[1])
    np.testing.assert_allclose(piled[-1], gradient[-1], rtol=1e-11)


@pytest.mark.parametrize("n, p, q, n_classes", [(60, 700, 0.5, 2), (80, 400, 4.0, 3),
                                                (200, 30, 1.0, 2)])
def test_the_grid_objectives_in_one_array_are_the_objective_at_each_point(
        monkeypatch, n, p, q, n_classes):
    """The first step's grid objectives formed in one array (without a
    prior) are ``objective`` at each grid point: the fit is bitwise the one
    whose grid calls it point by point (few rows and dense rows)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((n, p))
    y = rng.integers(0, n_classes, n)
    X[:, 0] += y
    history = _history(monkeypatch)
    at_once = DWDClassifier(q=q).fit(X, y)
    monkeypatch.setattr(_newton, "_GRID_AT_ONCE", -1)
    by_point = DWDClassifier(q=q).fit(X, y)
    for name in ("coef_", "intercept_", "n_iter_"):
        assert np.array_equal(getattr(at_once, name), getattr(by_point, name)), name
    # every objective value, the grid's best point's included
    assert len(history) == 2 and np.array_equal(history[0], history[1])
