"""Coefficient inference of LogisticRegression(solver='newton'): the sandwich
from brute-force sums over the rows, the stream's closed form, the spread
over simulated logistic data sets, coverage, and the refusals."""


import numpy as np
import pytest
from _inference_simulation import assert_covers, assert_spread_matches, simulate
from scipy.special import expit
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfedpriv import LogisticRegression
from skfedpriv._param_validation import InvalidParameterError
from skfedpriv.linear_model._dwd_solver import SiteData
from skfedpriv.linear_model._local_steps import BatchLearners

BETA = np.array([0.4, 1.0, -0.7])  # intercept, coefficients


def _logistic_rows(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, len(BETA) - 1))
    y = (rng.random(n) < expit(BETA[0] + X @ BETA[1:])).astype(int)
    return X, y


def _sandwich(X, y, theta, alpha):
    """``H⁻¹ B H⁻¹`` of ``Σ_i log(1 + exp(-y_i x̄_iᵀθ)) + (α n / 2) ‖β‖²`` by
    brute force over the rows (closed-form logistic Hessian)."""
    Xb = np.column_stack([np.ones(len(X)), X])
    s = 2.0 * y - 1.0
    mask = np.r_[0.0, np.ones(X.shape[1])]
    p = expit(Xb @ theta)
    H = (Xb * (p * (1 - p))[:, None]).T @ Xb + alpha * len(X) * np.diag(mask)
    scores = -(s * expit(-s * (Xb @ theta)))[:, None] * Xb + alpha * mask * theta
    return H, scores.T @ scores


def _theta(clf):
    return np.r_[clf.intercept_, clf.coef_[0]]


def test_offline_covariance_is_the_brute_force_sandwich():
    X, y = _logistic_rows(300, 0)
    alpha = 0.02  # large enough for the ridge terms to matter
    clf = LogisticRegression(alpha=alpha, inference=True).fit(X, y)
    H, B = _sandwich(X, y, _theta(clf), alpha)
    expected = np.linalg.solve(H, np.linalg.solve(H, B).T)
    np.testing.assert_allclose(clf.coef_cov_[0], expected, rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(clf.coef_se_[0], np.sqrt(np.diag(expected))[1:], rtol=1e-8)
    np.testing.assert_allclose(clf.intercept_se_, np.sqrt(expected[0, 0]), rtol=1e-8)


def test_near_zero_ridge_is_close_to_the_inverse_fisher_information():
    """The logistic loss is a likelihood: at α -> 0 the sandwich and the
    inverse observed information H⁻¹ agree up to sampling noise."""
    X, y = _logistic_rows(4000, 1)
    clf = LogisticRegression(alpha=1e-8, inference=True).fit(X, y)
    H, _ = _sandwich(X, y, _theta(clf), 1e-8)
    np.testing.assert_allclose(np.diag(clf.coef_cov_[0]), np.diag(np.linalg.inv(H)), rtol=0.1)


def test_stream_covariance_is_the_closed_form_of_the_recursion():
    """The renewable recursion equals ``(Σ_j H_j)⁻¹ (Σ_j B_j) (Σ_j H_j)⁻¹``
    with ``H_j``, ``B_j`` each batch's sums at that batch's estimate."""
    X, y = _logistic_rows(400, 2)
    alpha = 0.01
    clf = LogisticRegression(alpha=alpha, inference=True)
    H_sum = B_sum = 0.0
    for rows in np.array_split(np.arange(len(y)), 4):
        clf.partial_fit(X[rows], y[rows], classes=[0, 1])
        H, B = _sandwich(X[rows], y[rows], _theta(clf), alpha)
        H_sum, B_sum = H_sum + H, B_sum + B
    expected = np.linalg.solve(H_sum, np.linalg.solve(H_sum, B_sum).T)
    np.testing.assert_allclose(clf.coef_cov_[0], expected, rtol=1e-6)


# -- against the spread over simulated data sets, and coverage --------------------

REPS, N, BATCHES = 200, 400, 4


@pytest.fixture(scope="module")
def simulation():
    """REPS logistic data sets (α = 1e-6: the target is the true BETA),
    offline and as a 4-batch stream."""
    return simulate(_logistic_rows, [0, 1], reps=REPS, n=N, batches=BATCHES)


@pytest.mark.parametrize("key", ["offline", "stream"])
def test_standard_errors_match_the_spread_over_data_sets(simulation, key):
    assert_spread_matches(*simulation[key][:2])


@pytest.mark.parametrize("key", ["offline", "stream"])
def test_coverage_of_the_true_coefficients(simulation, key):
    assert_covers(simulation[key][2], BETA)


# -- API -------------------------------------------------------------------------


def test_summary_and_release():
    X, y = _logistic_rows(200, 3)
    clf = LogisticRegression(inference=True).fit(X, y)
    table = clf.summary()
    assert [r.term for r in table.records] == ["intercept", "x0", "x1"]
    np.testing.assert_allclose(table.records.std_err, np.r_[clf.intercept_se_, clf.coef_se_[0]])
    np.testing.assert_array_equal(clf.release().confint(), clf.confint())
    bare = LogisticRegression(inference=True, fit_intercept=False).fit(X, y)
    H, B = _sandwich(X, y, np.r_[0.0, bare.coef_[0]], 1e-4)
    H, B = H[1:, 1:], B[1:, 1:]
    np.testing.assert_allclose(bare.coef_cov_[0], np.linalg.solve(H, np.linalg.solve(H, B).T),
                               rtol=1e-8)
    assert bare.intercept_se_[0] == 0.0


def _state(clf):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(clf).items()}


def _assert_same(before, clf):
    after = vars(clf)
    assert before.keys() == after.keys()
    for key, value in before.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(after[key], value)
        else:
            assert after[key] is value or after[key] == value, key


def test_refusals_change_nothing():
    X, y = _logistic_rows(200, 4)
    with pytest.raises(AttributeError, match="inference=True"):
        LogisticRegression().fit(X, y).confint()
    for params in (dict(mechanism="tree", classes=[0, 1], n_rounds=2),
                   dict(solver="local-steps", n_rounds=2)):
        clf = LogisticRegression(inference=True, **params)
        with pytest.raises(InvalidParameterError, match="inference=True"):
            clf.fit(X, y)
        assert not hasattr(clf, "coef_")
    clf = LogisticRegression(inference=True).fit(X, y)
    before = _state(clf)

    class QuietSites(SiteData):
        offers_inference = False

    sites = QuietSites.from_rows(X, y, np.ones(len(y)), [np.arange(len(y))])
    with pytest.raises(NotImplementedError, match="does not offer"):
        clf.fit_sites(sites, classes=[0, 1])
    _assert_same(before, clf)
    learners = BatchLearners(X, y, np.array(["a"]), np.zeros(len(y), dtype=int), 1)
    with pytest.raises(ValueError, match="local-steps protocol"):
        clf.fit_sites(learners)  # solver='auto' resolves to the local steps here
    _assert_same(before, clf)
    stream = LogisticRegression(inference=True).partial_fit(X, y, classes=[0, 1])
    before = _state(stream.set_params(inference=False))
    with pytest.raises(ValueError, match="changed"):
        stream.partial_fit(X, y)
    _assert_same(before, stream)
    refit = LogisticRegression(inference=True).fit(X, y).set_params(inference=False).fit(X, y)
    assert not hasattr(refit, "coef_se_") and not hasattr(refit, "coef_cov_")


@parametrize_with_checks([LogisticRegression(inference=True)])
def test_sklearn_compatible_with_inference(estimator, check):
    check(estimator)
