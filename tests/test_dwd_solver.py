"""The DWD solver's building blocks: what sites send, fast paths, the stream."""

import tracemalloc

import numpy as np
import pytest
from _reference import gendwd_objective
from scipy.optimize import minimize

from skfedpriv import DWDClassifier
from skfedpriv._loss import GenDWDLoss
from skfedpriv._losses import (
    fast_power,
    gendwd_curvature,
    gendwd_derivative,
    gendwd_loss,
    gendwd_smoothed_curvature,
)
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model import _dwd_solver, _newton
from skfedpriv.linear_model._dwd_solver import (
    SiteData,
    augmented_gram,
    site_line_losses,
    site_summary,
    solve_batch,
)


def _count_curvature_matrices(monkeypatch):
    """A list that gets one entry per curvature matrix the solver forms."""
    formed = []
    original = _dwd_solver.augmented_gram

    def counting(*args):
        formed.append(1)
        return original(*args)

    monkeypatch.setattr(_dwd_solver, "augmented_gram", counting)
    return formed


def _problem(n=400, p=6, K=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = np.where(rng.random((n, K)) < 0.5, -1.0, 1.0)
    X += 0.5 * Y[:, :1]
    weights = rng.uniform(0.5, 2.0, n)
    Theta = 0.3 * rng.standard_normal((p + 1, K))
    return X, Y, weights, Theta


@pytest.mark.parametrize("exponent", [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.5, 6.0, 16.0, 0.3, 7.25, 17.0])
def test_power_matches_numpy_power(exponent):
    x = np.random.default_rng(1).uniform(0.0, 1.0, 1000)
    np.testing.assert_allclose(fast_power(x, exponent), x**exponent, rtol=1e-13, atol=0)


@pytest.mark.parametrize("every", [3, 10, None])
def test_gram_equals_weighted_product_and_skips_zero_rows(every):
    # a third of the rows at 0: they are skipped; a tenth: blocks of all rows;
    # None: every row weighted (the path without a row index)
    X, _, weights, _ = _problem(n=9000)
    d = weights.copy()
    if every is not None:
        d[::every] = 0.0
    for fit_intercept in (True, False):
        Xbar = np.hstack([np.ones((len(X), 1)), X]) if fit_intercept else X
        expected = Xbar.T @ (d[:, None] * Xbar)
        gram = augmented_gram(X, d, fit_intercept)
        np.testing.assert_allclose(gram, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(gram, gram.T)
    assert np.all(augmented_gram(X, np.zeros(len(X)), False) == 0)


@pytest.mark.parametrize("pooled", [True, False])
def test_site_requests_are_sums_of_the_defined_quantities(pooled, monkeypatch):
    monkeypatch.setattr("skfedpriv._sites._MIN_ROWS_PER_JOB", 0)  # split even small batches
    X, Y, weights, Theta = _problem()
    q = 1.5
    codes = np.arange(len(X)) % 3
    rows = [np.flatnonzero(codes == s) for s in range(3)]
    sites = SiteData(X, Y, weights, rows, None if pooled else 2, True)
    assert len(sites.parts) == (1 if pooled else 3)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    V = np.random.default_rng(2).standard_normal(Theta.shape)
    # curvature-vector products: the curvature matrix (brute force) times V
    product = sites.curvature_product(Theta, V, q)
    for k in range(Y.shape[1]):
        d = weights * gendwd_smoothed_curvature(Y[:, k] * (Xbar @ Theta[:, k]), q)
        np.testing.assert_allclose(product[:, k], Xbar.T @ (d * (Xbar @ V[:, k])),
                                   rtol=1e-10, atol=1e-10)
    # with V_q'' itself for the models asked (generalized at the kink): some
    # of them, and every one (then the smoothed curvature is not formed)
    for exact in (np.arange(Y.shape[1]) % 2 == 0, np.ones(Y.shape[1], dtype=bool)):
        product = sites.curvature_product(Theta, V, q, exact)
        for k in range(Y.shape[1]):
            curvature = gendwd_curvature if exact[k] else gendwd_smoothed_curvature
            d = weights * curvature(Y[:, k] * (Xbar @ Theta[:, k]), q)
            np.testing.assert_allclose(product[:, k], Xbar.T @ (d * (Xbar @ V[:, k])),
                                       rtol=1e-10, atol=1e-10)
    # line losses: the loss sum at each point of the line
    steps = [1.0, 0.5, 0.125]
    losses = sites.line_losses(Theta, V, steps, q)
    for j, t in enumerate(steps):
        expected = weights @ gendwd_loss(Y * (Xbar @ (Theta + t * V)), q)
        np.testing.assert_allclose(losses[j], expected, rtol=1e-12)
    # after advancing, summaries at the new point are those of a fresh site
    new = sites.advance(Theta, V, np.array([0.5, 0.125]))
    np.testing.assert_allclose(new, Theta + np.array([0.5, 0.125]) * V)
    loss, grad, _ = sites.summaries(new, q, False)
    fresh_loss, fresh_grad, _ = site_summary(X, Y, weights, new, q, True, False)
    np.testing.assert_allclose(loss, fresh_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, fresh_grad, rtol=1e-10, atol=1e-10)
    # every request counted; replies are O(p1 K) numbers, the matrix O(p1² K)
    p1, K = Theta.shape
    assert sites.rounds == 5
    assert sites.floats_sent == 3 * p1 * K + len(steps) * K + (K + p1 * K)
    # a model whose CG is done (a zero column of V): zero, the others as defined
    done = V * np.array([0.0, 1.0])
    for exact in (None, np.array([False, True])):
        product = sites.curvature_product(Theta, done, q, exact)
        assert np.all(product[:, 0] == 0)
        curvature = gendwd_smoothed_curvature if exact is None else gendwd_curvature
        d = weights * curvature(Y[:, 1] * (Xbar @ Theta[:, 1]), q)
        np.testing.assert_allclose(product[:, 1], Xbar.T @ (d * (Xbar @ V[:, 1])),
                                   rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("steps_taken", [[1.0, 4.0], [2.0, 0.0], [0.5, 1.0]])
def test_summary_after_a_line_search_is_that_of_a_fresh_site(steps_taken):
    # in process, a line search over a few steps forms the loss and gradient
    # at each; the summary at the point advanced to is a fresh site's whether
    # or not the search formed it (0.5 was not searched: computed afresh)
    X, Y, weights, Theta = _problem(n=12000, p=6, K=2, seed=7)
    assert X.size >= _dwd_solver._FUSED_SIZE
    q = 1.5
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    direction = np.random.default_rng(8).standard_normal(Theta.shape)
    direction[:, 1] *= steps_taken[1] != 0.0  # a model not searched: zero direction
    trial = [1.0, 2.0, 4.0]
    losses = sites.line_losses(Theta, direction, trial, q)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for j, t in enumerate(trial):
        np.testing.assert_allclose(
            losses[j], weights @ gendwd_loss(Y * (Xbar @ (Theta + t * direction)), q), rtol=1e-12)
    new = sites.advance(Theta, direction, np.array(steps_taken))
    loss, grad, curvature = sites.summaries(new, q, True)
    fresh_loss, fresh_grad, fresh_curvature = site_summary(X, Y, weights, new, q, True, True)
    np.testing.assert_allclose(loss, fresh_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, fresh_grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(curvature, fresh_curvature, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("trial, taken", [([1.0, 2.0, 4.0, 8.0], 4.0),
                                          ([1.0, 2.0, 4.0, 8.0], 2.0), ([4.0, 8.0], 8.0)])
def test_summary_after_a_search_past_the_graded_steps_is_that_of_a_fresh_site(trial, taken):
    # one model: the fused search forms gradients only up to the doubled
    # step; a step past it (or a search of longer steps only) leaves the
    # summary to a fresh pass, a graded one answers it from the search
    X, Y, weights, Theta = _problem(n=12000, p=6, K=1, seed=13)
    q = 4.0
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    direction = 0.05 * np.random.default_rng(14).standard_normal(Theta.shape)
    sites.line_losses(Theta, direction, trial, q)
    new = sites.advance(Theta, direction, np.array([taken]))
    assert (sites._last_summary[0] is not None) == (taken <= _dwd_solver._FUSED_GRADIENT_STEP)
    loss, grad, _ = sites.summaries(new, q, False)
    fresh_loss, fresh_grad, _ = site_summary(X, Y, weights, new, q, True, False)
    np.testing.assert_allclose(loss, fresh_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, fresh_grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("at_zero", [False, True])
@pytest.mark.parametrize("with_curvature", [False, True])
def test_summary_at_a_new_point_is_the_defined_sums(with_curvature, at_zero, monkeypatch):
    # in process, rows of at least _FUSED_SIZE numbers and scores not known at
    # the point (an online Newton step's full step): one read of the rows; at
    # θ = 0 (a fit's start) the scores are known to be 0 (no product X θ)
    X, Y, weights, Theta = _problem(n=12000, p=6, K=2, seed=9)
    assert X.size >= _dwd_solver._FUSED_SIZE
    if at_zero:
        Theta = np.zeros_like(Theta)
    q = 0.5
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    products = []
    original = _dwd_solver.augmented_scores
    monkeypatch.setattr(_dwd_solver, "augmented_scores",
                        lambda *args: products.append(1) or original(*args))
    loss, grad, curvature = sites.summaries(Theta, q, with_curvature)
    assert (len(products) == 0) == at_zero
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    U = Y * (Xbar @ Theta)
    np.testing.assert_allclose(loss, weights @ gendwd_loss(U, q), rtol=1e-12)
    slope = np.where(U > q / (q + 1), -(q / (q + 1) / np.maximum(U, q / (q + 1))) ** (q + 1), -1.0)
    np.testing.assert_allclose(grad, Xbar.T @ (weights[:, None] * Y * slope), rtol=1e-10,
                               atol=1e-10)
    if with_curvature:
        for k in range(2):
            d = weights * gendwd_smoothed_curvature(U[:, k], q)
            np.testing.assert_allclose(curvature[k], Xbar.T @ (d[:, None] * Xbar),
                                       rtol=1e-10, atol=1e-10)
    else:
        assert curvature is None
    # the scores it kept are those at Theta: a later request there agrees
    np.testing.assert_allclose(sites._scores(Theta), Xbar @ Theta, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block_rows", [None, 700])
@pytest.mark.parametrize("q", [0.3, 1.0, 4.0, 16.0, 20.0])
def test_line_losses_from_zero_are_the_defined_sums(q, block_rows, monkeypatch):
    # from θ = 0 over many steps the site counts rows by the step where they
    # pass the kink (q <= 16), a block of rows at a time; the sums are those
    # of the definition, at tiny and huge steps alike, in any order of the
    # steps, in one block or several (the last one partial)
    if block_rows is not None:
        monkeypatch.setattr(_dwd_solver, "_ZERO_GRID_ROWS", block_rows)
    X, Y, weights, _ = _problem(n=3000, p=5, K=2, seed=4)
    direction = np.random.default_rng(5).standard_normal((6, 2))
    steps = np.random.default_rng(6).permutation(2.0 ** np.arange(-24, 25, 2))
    losses = site_line_losses(X, Y, weights, np.zeros((6, 2)), direction, steps, q, True)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for j, t in enumerate(steps):
        expected = weights @ gendwd_loss(Y * (Xbar @ (t * direction)), q)
        np.testing.assert_allclose(losses[j], expected, rtol=1e-12)


@pytest.mark.parametrize("K", [1, 2])
@pytest.mark.parametrize("at_zero", [False, True])
def test_step_summaries_are_the_defined_sums_with_gradients_up_to_longest(K, at_zero):
    # one read of the rows: the losses at every step, the gradients at the
    # steps up to ``longest`` (one model: a product per step; several: one
    # product for all), against the sums of the definition at each point
    X, Y, weights, Theta = _problem(n=12000, p=6, K=K, seed=11)
    if at_zero:
        Theta = np.zeros_like(Theta)
    q = 4.0
    direction = np.random.default_rng(12).standard_normal(Theta.shape)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    steps = [1.0, 2.0, 4.0, 8.0]
    for longest, graded in ((np.inf, steps), (2.0, [1.0, 2.0]), (0.5, [])):
        losses, grads, direction_scores = _dwd_solver._step_summaries(
            X, Y, weights, None if at_zero else Xbar @ Theta, direction, steps, GenDWDLoss(q),
            True, longest=longest)
        np.testing.assert_allclose(direction_scores, Xbar @ direction, rtol=1e-12, atol=1e-12)
        assert losses.shape == (len(steps), K) and grads.shape == (len(graded), len(Theta), K)
        for j, t in enumerate(steps):
            margins = Y * (Xbar @ (Theta + t * direction))
            np.testing.assert_allclose(losses[j], weights @ gendwd_loss(margins, q), rtol=1e-12)
            if t in graded:
                residual = weights[:, None] * Y * gendwd_derivative(margins, q)
                np.testing.assert_allclose(grads[graded.index(t)], Xbar.T @ residual,
                                           rtol=1e-10, atol=1e-10)


def test_summary_where_some_models_moved_is_the_fresh_summary():
    # in process, models whose parameters are the last summary's are answered
    # from it and only the moved ones' columns are read: the same sums as a
    # fresh summary, at a new point and at one whose scores are known
    X, Y, weights, Theta = _problem(n=3000, p=5, K=4, seed=9)
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    rng = np.random.default_rng(10)
    sites.summaries(Theta, 0.5, False)
    for moved in ([1], [0, 3]):
        new = Theta.copy()
        new[:, moved] += 0.1 * rng.standard_normal((Theta.shape[0], len(moved)))
        assert sites._unmoved_models(new, sites._summary_models[0]) is not None
        loss, grad, curvature = sites.summaries(new, 0.5, np.arange(4) == moved[0])
        fresh = site_summary(X, Y, weights, new, 0.5, True, np.arange(4) == moved[0])
        np.testing.assert_allclose(loss, fresh[0], rtol=1e-12)
        np.testing.assert_allclose(grad, fresh[1], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(curvature, fresh[2], rtol=1e-10, atol=1e-10)
        Theta = new


@pytest.mark.parametrize("q", [0.5, 4.0])
def test_product_at_a_kept_matrix_is_the_product_over_all_rows(q):
    # in process, a product at the point of the last float64 matrices is the
    # matrix's product plus the rows where V_q'' differs from the smoothed
    # curvature (within the smoothing window): the product over all rows, on
    # either curvature, for the models with a matrix there; the others read
    # the rows
    X, Y, weights, Theta = _problem(n=3000, p=5, K=3, seed=12)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    margins = Y * (Xbar @ Theta)
    u0 = q / (q + 1.0)
    window = np.abs(margins - u0) < 0.05
    assert window[:, :2].sum(axis=0).min() >= 10  # rows where the curvatures differ
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    flags = np.array([True, True, False])
    sites.summaries(Theta, q, flags)
    V = np.random.default_rng(13).standard_normal(Theta.shape)
    read = []
    original = _dwd_solver.site_curvature_product
    for exact, columns in (([True, False, False], [0, 1]), ([True, True, True], [0, 1]),
                           (None, [0]), ([False, True, False], [1]), ([True, True, True], [2])):
        W = np.zeros_like(V)
        W[:, columns] = V[:, columns]
        calls = len(read)
        _dwd_solver.site_curvature_product = lambda *a, **k: read.append(1) or original(*a, **k)
        try:
            out = sites.curvature_product(Theta, W, q, exact)
        finally:
            _dwd_solver.site_curvature_product = original
        exact_k = np.broadcast_to(np.asarray(exact if exact is not None else False), (3,))
        for k in range(3):
            curvature = (gendwd_curvature(margins[:, k], q) if exact_k[k]
                         else gendwd_smoothed_curvature(margins[:, k], q))
            expected = Xbar.T @ (weights * curvature * (Xbar @ W[:, k]))
            np.testing.assert_allclose(out[:, k], expected, rtol=1e-10, atol=1e-9)
        assert len(read) == calls + (2 in columns)  # only the model without a matrix


def test_line_losses_of_models_not_searched_are_their_losses_at_theta():
    # a zero column of the direction (a model not searched) is at θ at every
    # step (its loss formed once); the searched models' sums are the definition's
    X, Y, weights, _ = _problem(n=500, p=5, K=4, seed=7)
    rng = np.random.default_rng(8)
    Theta, direction = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    direction[:, [0, 2]] = 0.0
    steps = [1.0, 0.5, 0.25, 0.125, 2.0**-4, 2.0**-5]
    losses = site_line_losses(X, Y, weights, Theta, direction, steps, 0.5, True)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for j, t in enumerate(steps):
        expected = weights @ gendwd_loss(Y * (Xbar @ (Theta + t * direction)), 0.5)
        np.testing.assert_allclose(losses[j], expected, rtol=1e-12)


class _SummariesOnly:
    """Sites that answer only ``summaries`` (as an older transport would)."""

    def __init__(self, sites):
        self._sites = sites
        self.weight_sum = sites.weight_sum
        self.n_requests = 0

    def summaries(self, Theta, q, with_curvature):
        self.n_requests += 1
        return self._sites.summaries(Theta, q, with_curvature)

    def majorizer(self, q):
        self.n_requests += 1
        return self._sites.majorizer(q)


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
def test_offline_solve_reaches_stationary_point_with_few_curvature_matrices(q, monkeypatch):
    X, Y, weights, _ = _problem(n=2000, p=8, K=2, seed=3)
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    start = np.zeros((X.shape[1] + 1, 2))
    formed = _count_curvature_matrices(monkeypatch)
    Theta, curvature, info = solve_batch(sites, start, q=q, alpha=1e-3,
                                         fit_intercept=True, tol=1e-8, max_iter=200)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for k in range(2):
        value, grad = gendwd_objective(Theta[:, k], Xbar, Y[:, k], weights, q, 1e-3)
        # the returned curvature is the curvature (plus ridge) at the returned point
        u = Y[:, k] * (Xbar @ Theta[:, k])
        d = weights * gendwd_smoothed_curvature(u, q)
        expected = Xbar.T @ (d[:, None] * Xbar) + np.diag(1e-3 * weights.sum() * np.r_[0, np.ones(8)])
        np.testing.assert_allclose(curvature[k], expected, rtol=1e-9, atol=1e-9)
        # the documented stopping rule holds there: ½ gᵀH⁻¹g <= tol F
        assert 0.5 * grad @ np.linalg.solve(expected, grad) <= 1e-8 * value
        # and the objective is within a relative 1e-8 of an independent minimum
        reference = minimize(gendwd_objective, Theta[:, k],
                             args=(Xbar, Y[:, k], weights, q, 1e-3), jac=True,
                             method="L-BFGS-B", options=dict(gtol=1e-13, ftol=1e-16))
        assert reference.fun <= value <= reference.fun * (1 + 1e-8)
    assert np.all(np.diff(info["objective"], axis=0) <= 0)
    # the O(n p²) matrices are few (one per class each time): not one per iteration
    assert len(formed) < 2 * info["n_iter"]
    # sites that only answer summaries (products from the smoothed matrix, so
    # the local phase's CG on the smoothed curvature): the same optimum
    other, other_curvature, other_info = solve_batch(
        _SummariesOnly(SiteData(X, Y, weights, [np.arange(len(X))], None, True)), start,
        q=q, alpha=1e-3, fit_intercept=True, tol=1e-8, max_iter=200)
    for k in range(2):
        value = gendwd_objective(other[:, k], Xbar, Y[:, k], weights, q, 1e-3)[0]
        best = gendwd_objective(Theta[:, k], Xbar, Y[:, k], weights, q, 1e-3)[0]
        assert abs(value - best) <= 2e-8 * best
        d = weights * gendwd_smoothed_curvature(Y[:, k] * (Xbar @ other[:, k]), q)
        expected = Xbar.T @ (d[:, None] * Xbar) + np.diag(1e-3 * weights.sum() * np.r_[0, np.ones(8)])
        np.testing.assert_allclose(other_curvature[k], expected, rtol=1e-9, atol=1e-9)


def test_published_single_step_is_still_available_and_exact():
    X, y, g, batch = make_federated_gaussians(n_sites=3, n_batches=3, n_per_batch=30,
                                              n_features=4, random_state=4)
    clf = DWDClassifier(online_steps=1)
    first = batch == 0
    clf.partial_fit(X[first], y[first], sample_group=g[first], classes=[-1, 1])
    theta = np.r_[clf.intercept_, clf.coef_.ravel()]
    prior = clf.curvature_[0].copy()
    second = batch == 1
    clf.partial_fit(X[second], y[second], sample_group=g[second])
    # eq. 37 written out: θ - (prior + H̄_b)^{-1} ∇L_b(θ), H̄_b = curvature + n_b λ I
    Xb = np.hstack([np.ones((second.sum(), 1)), X[second]])
    u = y[second] * (Xb @ theta)
    slope = -(0.5 / np.maximum(u, 0.5)) ** 2
    n_b = second.sum()
    grad = Xb.T @ (y[second] * slope) + 1e-3 * n_b * np.r_[0, theta[1:]]
    h_bar = Xb.T @ (gendwd_smoothed_curvature(u, 1.0)[:, None] * Xb) + 1e-3 * n_b * np.eye(5)
    expected = theta - np.linalg.solve(prior + h_bar, grad)
    np.testing.assert_allclose(np.r_[clf.intercept_, clf.coef_.ravel()], expected, rtol=1e-9)


def test_later_batches_with_bad_values_are_still_refused():
    X, y, g, batch = make_federated_gaussians(n_sites=2, n_batches=2, n_per_batch=20,
                                              n_features=3, random_state=5)
    clf = DWDClassifier().partial_fit(X[batch == 0], y[batch == 0], classes=[-1, 1])
    before = clf.coef_.copy()
    bad = X[batch == 1].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.partial_fit(bad, y[batch == 1])
    with pytest.raises(ValueError, match="features"):
        clf.partial_fit(X[batch == 1][:, :2], y[batch == 1])
    with pytest.raises(ValueError):
        clf.partial_fit(X[batch == 1], y[batch == 1][:-1])
    with pytest.raises(ValueError, match="not in classes"):
        clf.partial_fit(X[batch == 1], np.full(int((batch == 1).sum()), 7))
    np.testing.assert_array_equal(clf.coef_, before)
    # a list batch (slow path) and an array batch (fast path) give the same model
    a = DWDClassifier().partial_fit(X[batch == 0], y[batch == 0], classes=[-1, 1])
    b = DWDClassifier().partial_fit(X[batch == 0], y[batch == 0], classes=[-1, 1])
    a.partial_fit(X[batch == 1], y[batch == 1])
    b.partial_fit(X[batch == 1].tolist(), y[batch == 1].tolist())
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_stream_memory_does_not_grow_with_its_length():
    def peak(n_batches):
        rng = np.random.default_rng(0)
        clf = DWDClassifier()
        tracemalloc.start()
        for _ in range(n_batches):
            y = rng.integers(0, 2, 50)
            X = rng.standard_normal((50, 20)) + 0.3 * (2 * y[:, None] - 1)
            clf.partial_fit(X, y, sample_group=np.arange(50) % 5, classes=[0, 1])
        value = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return value

    short, long = peak(20), peak(200)
    assert long < 1.5 * short


@pytest.mark.parametrize("local_matrix", [False, True])
@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
def test_well_conditioned_fit_forms_the_curvature_matrix_only_at_the_optimum(
        q, local_matrix, monkeypatch):
    # with at least _LOCAL_MATRIX_PARAMS parameters the matrix is formed once,
    # at the returned point; below, at most once more, on entering the local
    # phase (it then preconditions the CG), and the returned point is as good
    X, Y, weights, _ = _problem(n=3000, p=10, K=1, seed=6)
    sites = SiteData(X, Y, weights, [np.arange(len(X))], None, True)
    if not local_matrix:
        monkeypatch.setattr(_newton, "_LOCAL_MATRIX_PARAMS", 0)
    formed = _count_curvature_matrices(monkeypatch)
    Theta, curvature, info = solve_batch(sites, np.zeros((11, 1)), q=q, alpha=1e-3,
                                         fit_intercept=True, tol=1e-8)
    assert len(formed) == (2 if local_matrix else 1)
    _, _, expected = site_summary(X, Y, weights, Theta, q, True, True)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    value, grad = gendwd_objective(Theta[:, 0], Xbar, Y[:, 0], weights, q, 1e-3)
    assert 0.5 * grad @ np.linalg.solve(curvature[0], grad) <= 1e-8 * value
    np.testing.assert_allclose(curvature - expected, np.broadcast_to(
        np.diag(1e-3 * weights.sum() * np.r_[0, np.ones(10)]), curvature.shape),
        rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
def test_offline_newton_steps_in_the_local_phase_are_one_request(q):
    # once Newton steps are taken in full, a step is its curvature-vector
    # products and one summary request at the full step (its loss and
    # gradient); the damped phase before it searches the full and longer
    # steps in one round, then asks for the gradient where it went
    requests, exact_flags = [], []

    class Logging(SiteData):
        def summaries(self, Theta, q, with_curvature):
            requests.append("matrix" if with_curvature else "summary")
            return super().summaries(Theta, q, with_curvature)

        def line_losses(self, Theta, S, steps, q):
            requests.append("line")
            return super().line_losses(Theta, S, steps, q)

        def curvature_product(self, Theta, V, q, exact=None):
            requests.append("product")
            exact_flags.append(bool(np.all(exact)) if exact is not None else False)
            return super().curvature_product(Theta, V, q, exact)

    X, Y, weights, _ = _problem(n=3000, p=10, K=1, seed=6)
    sites = Logging(X, Y, weights, [np.arange(len(X))], None, True)
    Theta, _, info = solve_batch(sites, np.zeros((11, 1)), q=q, alpha=1e-3,
                                 fit_intercept=True, tol=1e-8)
    assert info["rounds"] == len(requests)
    last_search = len(requests) - 1 - requests[::-1].index("line")
    assert requests[last_search + 1] == "summary"
    local = "".join(r[0] for r in requests[last_search + 2:])  # p, s, m
    # the stop: the matrix at the returned point, then one product round
    # (a lower bound of the semismooth decrement there)
    assert local.endswith("mp")
    # below _LOCAL_MATRIX_PARAMS parameters the phase opens with the matrix
    # and a direct step on it (no product), which then preconditions the CG
    assert local.startswith("ms")
    steps = local[1:-1].rstrip("m").split("s")[:-1]
    assert len(steps) >= 2 and steps[0] == ""
    assert all(step and set(step) == {"p"} for step in steps[1:])
    # the local phase's products use V_q'' itself, the damped phase's the
    # smoothed curvature (the first product follows the grid step)
    n_local = sum(len(step) for step in steps)
    assert all(exact_flags[-n_local:]) and not exact_flags[0]
    # the same optimum through sites that answer only summaries (each product
    # from the smoothed matrix, each line search one step per round)
    other, _, _ = solve_batch(_SummariesOnly(SiteData(X, Y, weights, [np.arange(len(X))],
                                                      None, True)),
                              np.zeros((11, 1)), q=q, alpha=1e-3, fit_intercept=True, tol=1e-8)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    value = gendwd_objective(other[:, 0], Xbar, Y[:, 0], weights, q, 1e-3)[0]
    best = gendwd_objective(Theta[:, 0], Xbar, Y[:, 0], weights, q, 1e-3)[0]
    assert abs(value - best) <= 2e-8 * best


@pytest.mark.parametrize("q", [0.5, 1.0, 2.0, 4.0])
def test_local_phase_on_the_loss_curvature_shortens_the_linear_tail(q):
    # nearly separable rows (the breast cancer data, standardized): the
    # smoothed curvature is the wrong model for the rows in its window around
    # the kink, and Newton steps on it converge only linearly near the
    # optimum; on V_q'' itself (semismooth Newton) the local phase is short
    from skfedpriv.datasets import load_breast_cancer_sites

    X, y, _ = load_breast_cancer_sites(n_sites=4, random_state=0)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    Y = np.where(y == np.unique(y)[1], 1.0, -1.0)[:, None]
    weights = np.ones(len(X))
    start = np.zeros((X.shape[1] + 1, 1))
    runs = [solve_batch(make(SiteData(X, Y, weights, [np.arange(len(X))], None, True)), start,
                        q=q, alpha=1e-3, fit_intercept=True, tol=1e-12, max_iter=300)
            for make in (lambda sites: sites, _SummariesOnly)]  # exact, smoothed
    (Theta, _, info), (_, _, smoothed_info) = runs
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    values = [gendwd_objective(run[0][:, 0], Xbar, Y[:, 0], weights, q, 1e-3)[0] for run in runs]
    assert abs(values[0] - values[1]) <= 1e-11 * values[1]
    assert info["n_iter"] <= smoothed_info["n_iter"]
    if q == 1.0:  # 19 Newton steps instead of 55
        assert 2 * info["n_iter"] < smoothed_info["n_iter"]


def test_conjugate_gradient_stops_a_model_whose_step_would_overflow():
    import warnings

    from skfedpriv.linear_model._dwd_solver import _conjugate_gradient

    # model 0: a curvature of ~1e-310 along the residual makes the step overflow;
    # model 1: a well-conditioned system solved exactly
    H = [np.diag([1e-310, 1e-310]), np.diag([2.0, 4.0])]
    rhs = np.array([[1e10, 1.0], [1e10, 2.0]])

    def product(V):
        return np.column_stack([H[k] @ V[:, k] for k in range(2)])

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning escapes
        x, used = _conjugate_gradient(product, rhs, [None, None], 1e-12, 10)
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(x[:, 1], [0.5, 0.5])
    np.testing.assert_array_equal(x[:, 0], 0.0)  # stopped at its last finite iterate


def test_stacked_preconditioners_solve_each_model_system():
    # the CG preconditioners applied as a stack of explicit inverses (few
    # parameters) or by triangular solves (many): M_k^-1 r_k for each model,
    # r_k itself for a model without one, against a dense solve
    rng = np.random.default_rng(3)
    for p1 in (7, _newton._INVERSE_PARAMS):
        A = rng.standard_normal((3, p1, p1))
        M = A @ np.swapaxes(A, 1, 2) + p1 * np.eye(p1)
        r = rng.standard_normal((p1, 4))
        factors = _newton._Preconditioners(4)
        for k in (0, 2, 3):
            factors[k] = _newton._factor_psd(M[min(k, 2)])
        assert (factors.stacked is not None) == (p1 < _newton._INVERSE_PARAMS)
        out = _newton._precondition(factors, r)
        for k in (0, 2, 3):
            np.testing.assert_allclose(out[:, k], np.linalg.solve(M[min(k, 2)], r[:, k]),
                                       rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(out[:, 1], r[:, 1])


def _renewable_objective(theta, Xbar, y, weights, q, alpha, prior, center):
    """The renewable objective (30) of one model, written out: the batch's
    genDWD objective plus ``½ (θ - c)ᵀ P (θ - c)``, and its gradient."""
    value, grad = gendwd_objective(theta, Xbar, y, weights, q, alpha)
    pulled = prior @ (theta - center)
    return value + 0.5 * (theta - center) @ pulled, grad + pulled


def _chord_reference(theta, args, curvature, tol, scale):
    """The online iteration written out for one model (eq. 30 with the
    curvature fixed at the start, eq. 35): Newton directions on ``curvature``
    (plus the prior), the full step if it passes Armijo's test, else the
    first of 1/2, 1/4, ..., 1/64 that does; stop once ``½ gᵀH⁻¹g <= tol |F|
    scale / W``. Returns the accepted objective values."""
    Xbar, y, weights, q, alpha, prior, center = args
    system = curvature + prior
    value, grad = _renewable_objective(theta, *args)
    history = [value]
    while True:
        step = -np.linalg.solve(system, grad)
        if -0.5 * grad @ step <= tol * abs(value) * scale / weights.sum():
            return np.array(history)
        for t in 0.5 ** np.arange(7):
            trial_value, trial_grad = _renewable_objective(theta + t * step, *args)
            if trial_value <= value + 1e-4 * t * (grad @ step):
                break
        else:
            raise AssertionError("no Newton step passed: the reference has no fallback")
        theta, value, grad = theta + t * step, trial_value, trial_grad
        history.append(value)


def test_online_solve_asks_each_full_step_once_and_backtracks_per_model():
    X, Y, weights, _ = _problem(n=500, p=5, K=2, seed=8)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    q, alpha, tol, scale = 1.0, 1e-3, 1e-12, 5.0 * weights.sum()
    # the previous estimates: model 0 near this batch's optimum, model 1 three
    # times too long (its margins far past the kink, where the curvature is
    # small) with a weak prior, so that its chord Newton steps overshoot and
    # must backtrack
    fitted, _, _ = solve_batch(SiteData(X, Y, weights, [np.arange(len(X))], None, True),
                               np.zeros((6, 2)), q=q, alpha=alpha, fit_intercept=True)
    center = np.column_stack([fitted[:, 0] + 0.05, 3.0 * fitted[:, 1]])
    rng = np.random.default_rng(9)
    A = rng.standard_normal((2, 6, 6))
    prior = np.stack([200.0 * (A[0] @ A[0].T / 6 + np.eye(6)), 1e-3 * np.eye(6)])

    def solve(models):
        sites = SiteData(X, Y[:, models], weights, [np.arange(len(X))], None, True)
        return solve_batch(sites, center[:, models], q=q, alpha=alpha, fit_intercept=True,
                           prior=prior[models], center=center[:, models], tol=tol,
                           scale=scale, refresh_curvature=False, max_iter=200)

    Theta, curvature, info = solve([0, 1])
    assert np.all(np.diff(info["objective"], axis=0) <= 0)
    for k in range(2):
        args = (Xbar, Y[:, k], weights, q, alpha, prior[k], center[:, k])
        value, grad = _renewable_objective(Theta[:, k], *args)
        # the documented rule with the system the steps solve (curvature at the
        # starting point, eq. 35): ½ gᵀH⁻¹g <= tol |F| scale / W
        system = curvature[k] + prior[k]
        assert 0.5 * grad @ np.linalg.solve(system, grad) <= tol * value * scale / weights.sum()
        reference = minimize(_renewable_objective, Theta[:, k], args=args, jac=True,
                             method="L-BFGS-B", options=dict(gtol=1e-12, ftol=1e-16))
        assert reference.fun <= value * (1 + 1e-10) and value <= reference.fun * (1 + 1e-8)
        # the iterates are those of the iteration written out
        ridge = np.diag(alpha * weights.sum() * np.r_[0.0, np.ones(5)])
        u = Y[:, k] * (Xbar @ center[:, k])
        start_curvature = Xbar.T @ ((weights * gendwd_smoothed_curvature(u, q))[:, None] * Xbar)
        expected = _chord_reference(center[:, k], args, start_curvature + ridge, tol, scale)
        np.testing.assert_allclose(info["objective"][: len(expected), k], expected, rtol=1e-12)
        # one-vs-rest models do not interact: each equals its own solve
        alone, _, alone_info = solve([k])
        np.testing.assert_allclose(alone_info["objective"][:, 0], expected, rtol=1e-12)
        np.testing.assert_allclose(alone[:, 0], Theta[:, k], rtol=1e-10, atol=1e-12)
        steps = len(alone_info["objective"]) - 1
        if k == 0:
            # every step taken in full: the curvature and gradient at the start,
            # then one request per step (its loss and gradient)
            assert alone_info["rounds"] == 1 + steps
        else:
            # full steps refused: backtracking took more requests than steps
            assert alone_info["rounds"] > 1 + steps


def test_summary_curvature_of_the_models_flagged_only():
    X, Y, weights, Theta = _problem(K=3)
    flags = np.array([True, False, True])
    _, _, every = site_summary(X, Y, weights, Theta, 1.5, True, True)
    loss, grad, some = site_summary(X, Y, weights, Theta, 1.5, True, flags)
    np.testing.assert_allclose(some, every[flags], rtol=1e-12)
    assert site_summary(X, Y, weights, Theta, 1.5, True, np.zeros(3, dtype=bool))[2] is None
    for pooled in (True, False):
        codes = np.arange(len(X)) % 2
        sites = SiteData(X, Y, weights, [np.flatnonzero(codes == s) for s in range(2)],
                         None if pooled else 2, True)
        _, _, summed = sites.summaries(Theta, 1.5, flags)
        np.testing.assert_allclose(summed, every[flags], rtol=1e-10, atol=1e-10)
        assert sites.floats_sent == 3 + Theta.size + 2 * Theta.shape[0] ** 2  # two matrices


def test_multiclass_fit_forms_a_model_matrix_only_where_that_model_needs_it(monkeypatch):
    # one-vs-rest models go stale at different iterations: a request asks for
    # the matrices of the models that need one, each (model, point) once, and
    # the returned curvature is every model's at its returned parameters
    X, Y, weights, _ = _problem(n=1500, p=6, K=4, seed=11)
    X[:, :2] *= np.array([30.0, 0.03])  # an ill-conditioned curvature: CG goes stale
    # the Newton steps' requests (a fit of 3+ models runs L-BFGS first, and
    # then asks every model's matrix where the phase handed it over)
    monkeypatch.setattr(_newton, "_QUASI_NEWTON_MODELS", 10**9)
    requests = []

    class Logging(SiteData):
        def summaries(self, Theta, q, with_curvature):
            flags = np.broadcast_to(np.asarray(with_curvature, dtype=bool), Theta.shape[1:])
            if flags.any():
                requests.append((Theta.copy(), flags.copy()))
            return super().summaries(Theta, q, with_curvature)

        def majorizer(self, q):  # the fallback's bound: one Gram matrix
            majorizers.append(1)
            return super().majorizer(q)

    majorizers = []
    formed = _count_curvature_matrices(monkeypatch)
    sites = Logging(X, Y, weights, [np.arange(len(X))], None, True)
    Theta, curvature, _ = solve_batch(sites, np.zeros((7, 4)), q=1.0, alpha=1e-3,
                                      fit_intercept=True, tol=1e-10, max_iter=200)
    assert len(formed) - len(majorizers) == sum(int(flags.sum()) for _, flags in requests)
    assert len(formed) - len(majorizers) < 4 * len(requests)  # not every model's at every request
    asked = [(k, T[:, k].tobytes()) for T, flags in requests for k in np.flatnonzero(flags)]
    assert len(asked) == len(set(asked))
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for k in range(4):
        d = weights * gendwd_smoothed_curvature(Y[:, k] * (Xbar @ Theta[:, k]), 1.0)
        expected = Xbar.T @ (d[:, None] * Xbar) + np.diag(1e-3 * weights.sum() * np.r_[0, np.ones(6)])
        np.testing.assert_allclose(curvature[k], expected, rtol=1e-9, atol=1e-8)


def test_conjugate_gradient_stops_on_a_numerically_singular_direction():
    import warnings

    from skfedpriv.linear_model._dwd_solver import _conjugate_gradient

    # a direction with ~1e-200 curvature (no row with curvature along it)
    # would take a step of ~1e200: the model stops at its last iterate
    H = np.diag([1.0, 1e-200])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, used = _conjugate_gradient(lambda V: H @ V, np.ones((2, 1)), [None], 1e-12, 10)
    assert used[0] == 2 and np.all(np.abs(x) < 10)


@pytest.mark.parametrize("q", [0.5, 2.5, 4.0])
def test_tiny_multiclass_fit_has_no_overflow_and_reaches_the_optimum(q):
    # scikit-learn's check data (30 uniform rows, labels i % 3): after the
    # first step a class model's intercept has no curvature at all; its
    # Newton step was ~1e285 long (overflow warnings, then the fallback)
    import warnings

    X = np.random.RandomState(0).uniform(size=(30, 3))
    y = np.arange(30) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = DWDClassifier(q=q).fit(X, y, sample_weight=[3.0] * 30)
    Xbar = np.hstack([np.ones((30, 1)), X])
    for k in range(3):
        y_pm = np.where(y == k, 1.0, -1.0)
        theta = np.r_[clf.intercept_[k], clf.coef_[k]]
        value = gendwd_objective(theta, Xbar, y_pm, np.full(30, 3.0), q, 1e-3)[0]
        reference = minimize(gendwd_objective, theta, args=(Xbar, y_pm, np.full(30, 3.0), q, 1e-3),
                             jac=True, method="L-BFGS-B", options=dict(gtol=1e-13, ftol=1e-16))
        assert reference.fun <= value <= reference.fun * (1 + 1e-10)


@pytest.mark.parametrize("every", [3, None])
def test_gram_from_float32_products_is_the_weighted_product_to_float32(every):
    X, _, weights, _ = _problem(n=9000)
    d = weights.copy()
    if every is not None:
        d[::every] = 0.0
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    expected = Xbar.T @ (d[:, None] * Xbar)
    single = augmented_gram(X, d, True, single=True)
    assert single.dtype == np.float64
    np.testing.assert_array_equal(single, single.T)
    assert np.abs(single - expected).max() <= 1e-6 * np.abs(expected).max()
    # float64 (the default) is not the float32 sum
    assert np.abs(augmented_gram(X, d, True) - expected).max() <= 1e-12 * np.abs(expected).max()


def _spy_gram_dtypes(monkeypatch):
    dtypes, original = [], _dwd_solver._gram

    def spy(X, row_weights, dtype=np.float64):
        dtypes.append(np.dtype(dtype))
        return original(X, row_weights, dtype)

    monkeypatch.setattr(_dwd_solver, "_gram", spy)
    return dtypes


@pytest.mark.parametrize("n, p, tol", [(2000, 10, 1e-3), (100_000, 50, 1e-8)])
def test_damped_matrix_from_float32_leaves_the_returned_curvature_exact(n, p, tol, monkeypatch):
    # the damped phase's matrix from float32 products (rows of any size here):
    # the returned point is the optimum and the returned curvature the float64
    # matrix there; at a loose tol (the damped step's decrement within it) the
    # model is not stopped on the float32 matrix
    X, y, _, _ = make_federated_gaussians(n_sites=10, n_batches=n // 100, n_per_batch=10,
                                          n_features=p, random_state=0)
    Y = np.where(y == y.max(), 1.0, -1.0)[:, None]
    weights = np.ones(n)
    monkeypatch.setattr(_dwd_solver, "_REDUCED_SIZE", 0)
    dtypes = _spy_gram_dtypes(monkeypatch)
    stopped_on_single, test = [], _newton.NewtonSolver.convergence_test

    def spy(self, newton, direct, iterative):
        single, active = direct & self.single_direct, self.active.copy()
        out = test(self, newton, direct, iterative)
        stopped_on_single.append(bool(np.any(single & active & ~self.active)))
        return out

    monkeypatch.setattr(_newton.NewtonSolver, "convergence_test", spy)
    sites = SiteData(X, Y, weights, [np.arange(n)], None, True)
    Theta, curvature, info = solve_batch(sites, np.zeros((p + 1, 1)), q=4.0, alpha=1e-3,
                                         fit_intercept=True, tol=tol)
    assert dtypes[0] == np.float32 and dtypes[-1] == np.float64
    assert not any(stopped_on_single)
    Xbar = np.hstack([np.ones((n, 1)), X])
    d = weights * gendwd_smoothed_curvature(Y[:, 0] * (Xbar @ Theta[:, 0]), 4.0)
    expected = Xbar.T @ (d[:, None] * Xbar) + np.diag(1e-3 * n * np.r_[0, np.ones(p)])
    np.testing.assert_allclose(curvature[0], expected, rtol=1e-11, atol=1e-9)
    value, grad = gendwd_objective(Theta[:, 0], Xbar, Y[:, 0], weights, 4.0, 1e-3)
    assert 0.5 * grad @ np.linalg.solve(expected, grad) <= tol * value
    reference = minimize(gendwd_objective, Theta[:, 0], args=(Xbar, Y[:, 0], weights, 4.0, 1e-3),
                         jac=True, method="L-BFGS-B", options=dict(gtol=1e-13, ftol=1e-16))
    assert reference.fun <= value <= reference.fun * (1 + 2 * tol)


def test_damped_search_on_an_undamped_matrix_step_asks_the_full_step_only(monkeypatch):
    # a Newton direction solved on a formed matrix without damping is the
    # quadratic model's minimizer: its damped-phase search asks the full step
    # (and halvings) only; loose CG directions still try the longer steps.
    # The fit reaches the optimum of a fit that lengthens every damped step.
    # (n = 1e5, p = 50, q = 4: issue #23's row, whose second step is one)
    X, y, g, _ = make_federated_gaussians(n_sites=10, n_batches=1000, n_per_batch=10,
                                          n_features=50, random_state=0)
    asked, current = [], {}
    take_step, line_losses = _newton.NewtonSolver.take_step, SiteData.line_losses

    def recording_take_step(self, newton, searching, undamped=None):
        current["undamped"] = bool(undamped.any())
        try:
            return take_step(self, newton, searching, undamped)
        finally:
            current.clear()

    def recording_line_losses(self, Theta, S, steps, loss):
        if current:
            asked.append((current["undamped"], [float(t) for t in steps]))
        return line_losses(self, Theta, S, steps, loss)

    monkeypatch.setattr(_newton.NewtonSolver, "take_step", recording_take_step)
    monkeypatch.setattr(SiteData, "line_losses", recording_line_losses)
    fit = DWDClassifier(q=4.0).fit(X, y, sample_group=g)
    assert (True, [1.0]) in asked
    assert (False, [1.0, 2.0, 4.0, 8.0]) in asked
    assert all(max(steps) <= 1.0 for undamped, steps in asked if undamped)
    monkeypatch.setattr(_newton.NewtonSolver, "undamped_direct",
                        lambda self, direct: np.zeros(self.n_models, dtype=bool))
    lengthened = DWDClassifier(q=4.0).fit(X, y, sample_group=g)
    np.testing.assert_allclose(fit.coef_, lengthened.coef_, rtol=1e-6, atol=1e-8)
