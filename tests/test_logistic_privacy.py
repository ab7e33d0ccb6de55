"""Privacy of LogisticRegression: sensitivity by brute force, calibration,
horizon.

The sensitivity tests replace one client of a round, rerun the round with
the estimator's own code and compare the change of ``g_i^r`` with the bound
``gradient_sensitivity_`` the estimator calibrates for.
"""

import math
import pickle

import numpy as np
import pytest
from scipy.optimize import minimize

from skfedpriv.linear_model._local_steps import learner_messages
from skfedpriv.linear_model._logistic import LogisticRegression
from skfedpriv.privacy import PrivacyBudgetError, gaussian_epsilon, gaussian_sigma
from skfedpriv.privacy import make_factorization

# the tests seed their noise on purpose
pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")


def _round_g(clf, theta, X, y):
    """``g`` of a single learner for rows (X, y), with the estimator's code."""
    _, g = learner_messages(theta, X, y, np.zeros(len(y), dtype=np.intp), clf.classes_,
                            clf._settings)
    return g[0]


def _fitted(n_classes, d, **kw):
    rng = np.random.default_rng(0)
    clf = LogisticRegression(mechanism="independent", delta=1e-3, random_state=0, **kw)
    X = rng.normal(size=(10, d))
    y = np.arange(10) % n_classes
    return clf.partial_fit(X, y, classes=np.arange(n_classes))


REGIMES = [
    # (n_classes, tau, rows in the round, feature_clip_norm, alpha, fit_intercept)
    (2, 5, 5, 1.0, 0.0, True),
    (2, 5, 12, 3.0, 0.0, True),
    (2, 4, 3, 2.0, 0.5, True),
    (2, 3, 3, 1.0, 0.0, False),
    (3, 5, 5, 1.5, 0.0, True),
    (4, 3, 7, 1.0, 0.2, True),
]


@pytest.mark.parametrize("n_classes, tau, n_rows, cx, alpha, intercept", REGIMES)
def test_sensitivity_brute_force_in_the_non_expansive_regime(
        n_classes, tau, n_rows, cx, alpha, intercept):
    d = 2
    L = (cx**2 + intercept) / 4.0
    eta = 2.0 / (L + alpha)  # the largest step the code accepts
    clf = _fitted(n_classes, d, local_steps=tau, learning_rate=eta,
                  feature_clip_norm=cx, alpha=alpha, fit_intercept=intercept,
                  clip_norm=0.7)
    bound = clf.gradient_sensitivity_
    assert bound == pytest.approx(2 * 0.7 / tau)
    rng = np.random.default_rng(n_classes * 100 + tau)
    K = 1 if n_classes == 2 else n_classes
    p = d + intercept
    worst = 0.0
    # random search: large rows (clipped to cx), any labels, any model
    for _ in range(300):
        theta = rng.normal(size=(K, p)) * rng.uniform(0.1, 5)
        X = rng.normal(size=(n_rows, d)) * rng.uniform(0.1, 3 * cx)
        y = rng.integers(0, n_classes, size=n_rows)
        j = rng.integers(n_rows)
        X2, y2 = X.copy(), y.copy()
        X2[j] = rng.normal(size=d) * rng.uniform(0.1, 3 * cx)
        y2[j] = rng.integers(0, n_classes)
        change = np.linalg.norm(_round_g(clf, theta, X, y) - _round_g(clf, theta, X2, y2))
        worst = max(worst, change)
    # adversarial search: maximize the change over rows, replacement and model
    j = 0
    y = rng.integers(0, n_classes, size=n_rows)
    y2 = y.copy()
    y2[j] = (y[j] + 1) % n_classes

    def negative_change(v):
        X = v[: n_rows * d].reshape(n_rows, d)
        X2 = X.copy()
        X2[j] = v[n_rows * d: n_rows * d + d]
        theta = v[n_rows * d + d:].reshape(K, p)
        return -np.linalg.norm(_round_g(clf, theta, X, y) - _round_g(clf, theta, X2, y2))

    for _ in range(4):
        v0 = rng.normal(size=n_rows * d + d + K * p) * 2
        res = minimize(negative_change, v0, method="Nelder-Mead",
                       options=dict(maxiter=400))
        worst = max(worst, -res.fun)
    assert worst <= bound * (1 + 1e-9), (worst, bound)
    assert worst > 0.3 * bound  # the search does reach the scale of the bound


# A neighbouring pair found by a Nelder-Mead search (tau = 2, eta = 20, one
# feature, no row clipping): the clipped local steps are not non-expansive
# and g moves by more than 2 B_g / tau = 1.
COUNTEREXAMPLE = [1.7181549402401717, -0.7112530522797438, 1.7590765864055147,
                  -0.27084909595773654, 0.45326571858036013]


def test_lemma_iv8_bound_fails_outside_the_regime_and_code_uses_2Bg():
    clf = _fitted(2, 1, local_steps=2, learning_rate=20.0, clip_norm=1.0)
    assert clf.gradient_sensitivity_ == 2.0  # feature_clip_norm=None -> 2 B_g
    v = np.array(COUNTEREXAMPLE)
    X = v[:2].reshape(2, 1)
    X2 = X.copy()
    X2[0] = v[2]
    theta = v[[4, 3]].reshape(1, 2)  # (intercept, weight): intercept first
    y = np.array([1, 1])
    y2 = np.array([0, 1])
    change = np.linalg.norm(_round_g(clf, theta, X, y) - _round_g(clf, theta, X2, y2))
    assert change > 2 * 1.0 / 2 + 0.05  # Lemma IV.8's 2 B_g / tau is violated
    assert change <= clf.gradient_sensitivity_
    # and the regime check refuses this step size once rows are clipped
    with pytest.raises(ValueError, match="non-expansive"):
        LogisticRegression(mechanism="tree", learning_rate=20.0, feature_clip_norm=3.0,
                           delta=1e-3).fit(X, y)


@pytest.mark.parametrize("n_classes, alpha", [(2, 0.0), (3, 0.5)])
def test_sensitivity_brute_force_without_row_clipping(n_classes, alpha):
    eta = 30.0 if alpha == 0 else 2.0 / alpha  # eta * alpha <= 2 enforced
    clf = _fitted(n_classes, 2, local_steps=3, learning_rate=eta, alpha=alpha,
                  clip_norm=0.5)
    bound = clf.gradient_sensitivity_
    assert bound == pytest.approx(1.0)
    rng = np.random.default_rng(3)
    K = 1 if n_classes == 2 else n_classes
    worst = 0.0
    for _ in range(300):
        theta = rng.normal(size=(K, 3)) * 3
        X = rng.normal(size=(4, 2)) * rng.uniform(0.1, 10)
        y = rng.integers(0, n_classes, size=4)
        X2, y2 = X.copy(), y.copy()
        j = rng.integers(4)
        X2[j] = rng.normal(size=2) * 10
        y2[j] = rng.integers(0, n_classes)
        worst = max(worst, np.linalg.norm(_round_g(clf, theta, X, y)
                                          - _round_g(clf, theta, X2, y2)))
    assert worst <= bound * (1 + 1e-9)


@pytest.mark.parametrize("mechanism", ["independent", "tree", "honaker", "toeplitz",
                                       "optimal", "blt"])
def test_calibration(mechanism):
    R, tau, B, eps, delta = 10, 5, 0.8, 0.5, 1e-3
    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 2
    clf = LogisticRegression(mechanism=mechanism, n_rounds=R, local_steps=tau,
                             clip_norm=B, epsilon=eps, delta=delta,
                             feature_clip_norm=1.0, random_state=0)
    clf.partial_fit(X, y, classes=[0, 1])
    fact = make_factorization(mechanism, R)
    sens = fact.sensitivity * 2 * B / tau
    assert clf.factorization_sensitivity_ == pytest.approx(fact.sensitivity)
    assert clf.sensitivity_ == pytest.approx(sens)
    assert clf.noise_scale_ == pytest.approx(gaussian_sigma(eps, delta, sens), rel=1e-12)
    # Lemma IV.8: V_i^2 = 2 B_g^2 max||c_col||^2 / (tau^2 rho), rho from (eps, delta)
    L = math.log(1 / delta)
    rho = (math.sqrt(eps + L) - math.sqrt(L)) ** 2
    v_paper = math.sqrt(2 * B**2 * fact.sensitivity_squared / (tau**2 * rho))
    assert gaussian_sigma(eps, delta, sens, method="zcdp") == pytest.approx(v_paper)
    assert clf.noise_scale_ < 0.8 * v_paper
    assert clf.privacy_spent_ == (eps, delta)


def test_no_mechanism_attributes():
    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 2
    clf = LogisticRegression(n_rounds=3, solver="local-steps").fit(X, y)
    assert clf.noise_scale_ == 0.0
    assert math.isnan(clf.sensitivity_)
    assert clf.privacy_spent_ == (math.inf, 0.0)
    for _ in range(5):  # no horizon without noise
        clf.partial_fit(X, y)
    assert clf.n_rounds_seen_ == 8


@pytest.mark.parametrize("mechanism", ["independent", "tree", "toeplitz"])
def test_past_horizon_raises_before_changing_anything(mechanism):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    y = np.arange(12) % 2
    g = np.arange(12) % 3
    clf = LogisticRegression(mechanism=mechanism, n_rounds=3, delta=1e-3,
                             feature_clip_norm=1.0, random_state=0)
    for _ in range(3):
        clf.partial_fit(X, y, sample_group=g, classes=[0, 1])
    before = pickle.dumps(clf.__dict__)
    with pytest.raises(PrivacyBudgetError):
        clf.partial_fit(X, y, sample_group=g)
    with pytest.raises(PrivacyBudgetError):  # even with a new learner
        clf.partial_fit(X, y, sample_group=g + 10)
    assert pickle.dumps(clf.__dict__) == before
    # fit spends the whole horizon too
    clf.set_params(classes=[0, 1]).fit(X, y, sample_group=g)
    assert clf.n_rounds_seen_ == 3
    before = pickle.dumps(clf.__dict__)
    with pytest.raises(PrivacyBudgetError):
        clf.partial_fit(X, y, sample_group=g)
    assert pickle.dumps(clf.__dict__) == before


def test_noise_increments_have_the_calibrated_scale():
    """With clip_norm tiny the model is essentially the noise: check its law.

    One learner, independent noise, one round: x^1 = -eta_g eta tau (g + z)
    with z ~ N(0, sigma^2) per coordinate.
    """
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 20))
    y = np.arange(5) % 2
    draws = []
    for seed in range(40):
        clf = LogisticRegression(mechanism="independent", n_rounds=1, local_steps=5,
                                 clip_norm=1e-9, learning_rate=0.1,
                                 feature_clip_norm=1.0, epsilon=1.0, delta=1e-3,
                                 random_state=seed)
        clf.partial_fit(X, y, classes=[0, 1])
        draws.append(np.r_[clf.coef_.ravel(), clf.intercept_] / -(0.1 * 5))
    draws = np.concatenate(draws)
    sigma = clf.noise_scale_
    assert np.std(draws) == pytest.approx(sigma, rel=0.1)


def test_shared_budget_counts_grid_candidates_and_refuses_overspend():
    import pickle

    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    from skfedpriv import LogisticRegression as PublicLogisticRegression
    from skfedpriv import PrivacyBudget, PrivacyBudgetError

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + 0.3 * rng.normal(size=300) > 0).astype(int)
    budget = PrivacyBudget(epsilon=8.0, delta=7e-5)  # room for seven δ=1e-5 spends
    est = PublicLogisticRegression(mechanism="tree", epsilon=1.0, delta=1e-5, n_rounds=8,
                                   feature_clip_norm=3.0, learning_rate=0.3,
                                   random_state=0, budget=budget, classes=[0, 1])
    assert clone(est).budget is budget
    search = GridSearchCV(est, {"local_steps": [2, 4]}, cv=3, error_score="raise").fit(X, y)
    # 6 candidate fits + refit, each one Gaussian mechanism of the same μ: together
    # exactly one Gaussian mechanism of μ√7 (Dong, Roth, Su 2022, Cor. 3.3)
    fitted = search.best_estimator_
    assert len(budget.ledger.entries) == 7
    composed = gaussian_epsilon(fitted.noise_scale_, 7e-5, np.sqrt(7) * fitted.sensitivity_)
    assert budget.spent == pytest.approx((composed, 7e-5))
    assert composed < 7.0 / 2
    stream = clone(est).set_params(budget=budget)
    with pytest.raises(PrivacyBudgetError):  # δ is used up
        stream.partial_fit(X[:30], y[:30], classes=[0, 1])
    assert not [k for k in vars(stream) if k.endswith("_")]
    assert budget.spent == pytest.approx((composed, 7e-5))
    fresh = PrivacyBudget(epsilon=8.0, delta=1e-3)
    stream.set_params(budget=fresh).partial_fit(X[:30], y[:30], classes=[0, 1])
    before = fresh.spent
    stream.partial_fit(X[30:60], y[30:60])  # later rounds of the stream spend nothing
    assert fresh.spent == before == pytest.approx(stream.privacy_spent_)
    assert pickle.loads(pickle.dumps(stream)).privacy_spent_ == (1.0, 1e-5)
