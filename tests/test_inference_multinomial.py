"""Coefficient inference of the multinomial LogisticRegression(solver='newton'):
the sandwich against a brute-force one (finite-difference curvature,
pseudo-inverse on the complement of the shift directions), the stream's
closed form, the spread over simulated data sets, coverage, the API."""

import numpy as np
import pytest
from _inference_simulation import assert_covers, assert_spread_matches, simulate

from skfedpriv import LogisticRegression

# class-major true parameters (intercept, coefficients), each column summing
# to zero over the classes: the centred parametrization the fit reports
THETA = np.array([[0.3, 0.6, -0.5], [0.0, -0.4, 0.2], [-0.3, -0.2, 0.3]])
CLASSES = [0, 1, 2]


def _rows(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, THETA.shape[1] - 1))
    scores = THETA[:, 0] + X @ THETA[:, 1:].T
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return X, y


def _theta(clf):
    """Class-major parameters, the order of ``coef_cov_``."""
    return np.column_stack([clf.intercept_, clf.coef_]).ravel()


def _row_scores(X, y, theta, alpha, fit_intercept=True):
    """Each row's score of ``Σ_i ℓ_i + (α n / 2) ‖β‖²`` in the class-major
    order: ``(p_i - e_{y_i}) ⊗ x̄_i + α P θ``."""
    Xb = np.column_stack([np.ones(len(X)), X]) if fit_intercept else X
    T = theta.reshape(len(CLASSES), -1)
    s = Xb @ T.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    residual = p - np.eye(len(CLASSES))[y]
    mask = np.ones_like(T)
    if fit_intercept:
        mask[:, 0] = 0.0
    return np.einsum("ik,ij->ikj", residual, Xb).reshape(len(X), -1) + alpha * (mask * T).ravel()


def _brute_sandwich(X, y, theta, alpha, fit_intercept=True, step=1e-6):
    """``H⁺ B H⁺``: ``H`` by central differences of the summed scores, the
    pseudo-inverse on the complement of the shift directions (a vector
    added to every class's parameters)."""
    def gradient(t):
        return _row_scores(X, y, t, alpha, fit_intercept).sum(axis=0)

    size = len(theta)
    H = np.empty((size, size))
    for j in range(size):
        e = np.zeros(size)
        e[j] = step
        H[:, j] = (gradient(theta + e) - gradient(theta - e)) / (2 * step)
    H = 0.5 * (H + H.T)
    scores = _row_scores(X, y, theta, alpha, fit_intercept)
    B = scores.T @ scores
    n_params = size // len(CLASSES)
    shifts = np.kron(np.ones((len(CLASSES), 1)), np.eye(n_params)) / np.sqrt(len(CLASSES))
    basis = np.linalg.svd(np.eye(size) - shifts @ shifts.T)[0][:, :size - n_params]
    inner = np.linalg.inv(basis.T @ H @ basis)
    return basis @ inner @ basis.T @ B @ basis @ inner @ basis.T, H


@pytest.mark.parametrize("fit_intercept, alpha", [(True, 0.02), (False, 0.02), (True, 0.0)])
def test_offline_covariance_is_the_brute_force_sandwich(fit_intercept, alpha):
    """α = 0.02: large enough for the ridge terms to matter; α = 0: no ridge
    fixes the coefficients' shifts, the pseudo-inverse still applies."""
    X, y = _rows(300, 0)
    clf = LogisticRegression(alpha=alpha, inference=True, fit_intercept=fit_intercept).fit(X, y)
    theta = _theta(clf) if fit_intercept else clf.coef_.ravel()
    expected, _ = _brute_sandwich(X, y, theta, alpha, fit_intercept)
    np.testing.assert_allclose(clf.coef_cov_[0], expected, rtol=1e-5, atol=1e-10)
    std = np.sqrt(np.diag(expected)).reshape(len(CLASSES), -1)
    np.testing.assert_allclose(clf.coef_se_, std[:, int(fit_intercept):], rtol=1e-5)
    if fit_intercept:
        np.testing.assert_allclose(clf.intercept_se_, std[:, 0], rtol=1e-5)
    else:
        np.testing.assert_array_equal(clf.intercept_se_, np.zeros(len(CLASSES)))
    # identified directions only: every feature's parameters sum to zero
    n_params = len(theta) // len(CLASSES)
    shift = np.kron(np.ones(len(CLASSES)), np.eye(n_params)[0])
    np.testing.assert_allclose(clf.coef_cov_[0] @ shift, 0.0, atol=1e-12)
    assert np.linalg.matrix_rank(clf.coef_cov_[0], tol=1e-10) == (len(CLASSES) - 1) * n_params


def test_finite_difference_curvature_is_the_sites_curvature():
    """The sites' closed-form multinomial curvature (plus the ridge) is the
    derivative of the summed scores."""
    from skfedpriv.linear_model._inference_multinomial import site_multinomial_inference

    X, y = _rows(200, 1)
    alpha = 0.05
    theta = THETA.ravel() + 0.1
    _, H = _brute_sandwich(X, y, theta, alpha)
    summary = site_multinomial_inference(X, np.eye(3)[y], np.ones(len(y)),
                                         theta.reshape(3, -1).T, True)
    order = np.arange(9).reshape(3, 3).T.ravel()  # class-major -> solver order
    ridge = alpha * len(y) * np.diag(np.repeat([0.0, 1.0, 1.0], 3))
    np.testing.assert_allclose(H[np.ix_(order, order)], summary.curvature[0] + ridge,
                               rtol=1e-6, atol=1e-6)


def test_stream_covariance_is_the_closed_form_of_the_recursion():
    """The renewable recursion equals ``(Σ_j H_j)⁺ (Σ_j B_j) (Σ_j H_j)⁺``,
    ``H_j``, ``B_j`` each batch's sums at that batch's estimate; after the
    first batch, the offline sandwich of that batch."""
    X, y = _rows(600, 2)
    alpha = 0.01
    clf = LogisticRegression(alpha=alpha, inference=True)
    H_sum = B_sum = 0.0
    for b, rows in enumerate(np.array_split(np.arange(len(y)), 4)):
        clf.partial_fit(X[rows], y[rows], classes=CLASSES)
        theta = _theta(clf)
        scores = _row_scores(X[rows], y[rows], theta, alpha)
        _, H = _brute_sandwich(X[rows], y[rows], theta, alpha)
        H_sum, B_sum = H_sum + H, B_sum + scores.T @ scores
        if b == 0:
            offline = LogisticRegression(alpha=alpha, inference=True).fit(X[rows], y[rows])
            np.testing.assert_allclose(clf.coef_cov_, offline.coef_cov_, rtol=1e-8, atol=1e-14)
    n_params = 3
    shifts = np.kron(np.ones((3, 1)), np.eye(n_params)) / np.sqrt(3)
    basis = np.linalg.svd(np.eye(9) - shifts @ shifts.T)[0][:, :6]
    inner = np.linalg.inv(basis.T @ H_sum @ basis)
    expected = basis @ inner @ basis.T @ B_sum @ basis @ inner @ basis.T
    np.testing.assert_allclose(clf.coef_cov_[0], expected, rtol=1e-4, atol=1e-9)


# -- against the spread over simulated data sets, and coverage --------------------

REPS, N, BATCHES = 200, 600, 3


@pytest.fixture(scope="module")
def simulation():
    """REPS multinomial data sets (α = 1e-6: the target is the centred
    THETA), offline and as a stream."""
    return simulate(_rows, CLASSES, reps=REPS, n=N, batches=BATCHES)


@pytest.mark.parametrize("key", ["offline", "stream"])
def test_standard_errors_match_the_spread_over_data_sets(simulation, key):
    assert_spread_matches(*simulation[key][:2])


@pytest.mark.parametrize("key", ["offline", "stream"])
def test_coverage_of_the_centred_true_parameters(simulation, key):
    covered = assert_covers(simulation[key][2], THETA.ravel())
    assert covered.mean(axis=0).min() >= 0.85, covered.mean(axis=0)


# -- API -------------------------------------------------------------------------


def test_summary_and_confint_of_every_class():
    X, y = _rows(300, 3)
    clf = LogisticRegression(inference=True).fit(X, y)
    table = clf.summary()
    assert [r.model for r in table.records] == [str(k) for k in CLASSES for _ in range(3)]
    np.testing.assert_allclose(table.records.std_err,
                               np.column_stack([clf.intercept_se_, clf.coef_se_]).ravel())
    intervals = clf.confint(0.9)
    assert intervals.shape == (3, 3, 2)
    np.testing.assert_allclose(intervals.mean(axis=-1), np.column_stack([clf.intercept_,
                                                                         clf.coef_]))
    np.testing.assert_array_equal(clf.release().confint(), clf.confint())


def test_every_partial_fit_batch_publishes_standard_errors():
    X, y = _rows(400, 4)
    clf = LogisticRegression(inference=True)
    widths = []
    for rows in np.array_split(np.arange(len(y)), 4):
        clf.partial_fit(X[rows], y[rows], classes=CLASSES)
        assert np.all(np.isfinite(clf.coef_se_)) and np.all(clf.coef_se_ > 0)
        widths.append(clf.coef_se_.mean())
    assert widths == sorted(widths, reverse=True)  # more rows, narrower intervals


def test_sites_without_the_inference_summary_are_refused_and_change_nothing():
    from skfedpriv.linear_model._multinomial_sites import MultinomialSites

    class QuietSites(MultinomialSites):
        offers_inference = False

    X, y = _rows(300, 5)
    clf = LogisticRegression(inference=True).fit(X, y)
    before = clf.coef_se_.copy(), clf.coef_.copy()
    sites = QuietSites(X, y, np.ones(len(y)), np.zeros(len(y), dtype=int), 1)
    with pytest.raises(NotImplementedError, match="does not offer"):
        clf.fit_sites(sites, classes=CLASSES)
    np.testing.assert_array_equal(clf.coef_se_, before[0])
    np.testing.assert_array_equal(clf.coef_, before[1])
