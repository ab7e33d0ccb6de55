"""DWDClassifier: the objective it minimizes, the stream, sites, bad input."""

import pickle
import warnings

import numpy as np
import pytest
from _reference import gendwd_objective
from scipy.optimize import minimize
from sklearn.datasets import load_iris
from sklearn.svm import LinearSVC

from skfedpriv import DWDClassifier
from skfedpriv._losses import (
    gendwd_curvature,
    gendwd_curvature_bound,
    gendwd_derivative,
    gendwd_loss,
    gendwd_smoothed_curvature,
)
from skfedpriv.datasets import (
    gaussian_bayes_accuracy,
    load_breast_cancer_sites,
    make_federated_gaussians,
)
from skfedpriv.linear_model import _dwd_solver


def _standardized_cancer():
    X, y, sites = load_breast_cancer_sites(n_sites=4, random_state=0)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, y, sites


def _objective(theta, X, y_pm, weights, q, alpha):
    """genDWD objective (paper eq. 5) per unit weight, and its gradient."""
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    value, grad = gendwd_objective(theta, Xbar, y_pm, weights, q, alpha)
    return value / weights.sum(), grad / weights.sum()


# -- the loss -----------------------------------------------------------


@pytest.mark.parametrize("q", [0.5, 1.0, 2.0, 7.0])
def test_loss_derivatives_match_finite_differences(q):
    u = np.linspace(-2, 4, 2001)
    u = u[np.abs(u - q / (q + 1)) > 1e-3]
    h = 1e-6
    numeric = (gendwd_loss(u + h, q) - gendwd_loss(u - h, q)) / (2 * h)
    np.testing.assert_allclose(gendwd_derivative(u, q), numeric, atol=1e-6)
    # the loss is C^1: continuous value and slope at the kink
    u0 = q / (q + 1)
    assert gendwd_loss(u0 - 1e-12, q) == pytest.approx(gendwd_loss(u0 + 1e-12, q))
    assert gendwd_derivative(u0 + 1e-12, q) == pytest.approx(-1.0)


@pytest.mark.parametrize("q", [0.5, 1.0, 3.0])
def test_smoothed_curvature_is_continuous_and_bounded(q):
    u = np.linspace(-1, 5, 200001)
    curvature = gendwd_smoothed_curvature(u, q)
    assert curvature.min() >= 0
    assert curvature.max() <= gendwd_curvature_bound(q) + 1e-12
    assert np.max(np.abs(np.diff(curvature))) < 1e-2  # no jumps
    right = u > q / (q + 1) + 0.1
    h = 1e-5
    exact = (gendwd_derivative(u[right] + h, q) - gendwd_derivative(u[right] - h, q)) / (2 * h)
    np.testing.assert_allclose(curvature[right], exact, rtol=1e-5)


@pytest.mark.parametrize("q", [0.5, 1.0, 3.0, 16.0])
def test_curvature_is_the_second_derivative_and_its_right_limit_at_the_kink(q):
    u0 = q / (q + 1)
    u = np.linspace(-1, 5, 20001)
    u = u[np.abs(u - u0) > 1e-3]
    h = 1e-6
    numeric = (gendwd_derivative(u + h, q) - gendwd_derivative(u - h, q)) / (2 * h)
    np.testing.assert_allclose(gendwd_curvature(u, q), numeric, rtol=1e-5, atol=1e-8)
    assert np.all(gendwd_curvature(u[u < u0], q) == 0)
    assert gendwd_curvature(u0, q) == pytest.approx(gendwd_curvature_bound(q))
    # the smoothed model (eq. 8) is V_q'' outside its window around the kink
    far = np.abs(u - u0) > 0.051
    np.testing.assert_allclose(gendwd_smoothed_curvature(u[far], q), gendwd_curvature(u[far], q),
                               rtol=1e-12)


# -- fit: the minimizer of eq. 5 ------------------------------------------


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("alpha", [1e-4, 1e-2])
def test_fit_reaches_minimizer_of_gendwd_objective(q, alpha):
    X, y, sites = _standardized_cancer()
    y_pm = np.where(y == 1, 1.0, -1.0)
    weights = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    clf = DWDClassifier(q=q, alpha=alpha, tol=1e-10, max_iter=500)
    clf.fit(X, y, sample_group=sites, sample_weight=weights)
    ours = np.concatenate([clf.intercept_, clf.coef_.ravel()])
    reference = minimize(
        _objective,
        np.zeros(X.shape[1] + 1),
        args=(X, y_pm, weights, q, alpha),
        jac=True,
        method="L-BFGS-B",
        options=dict(maxiter=100000, maxfun=100000, gtol=1e-12, ftol=1e-16),
    )
    f_ours = _objective(ours, X, y_pm, weights, q, alpha)[0]
    assert f_ours <= reference.fun * (1 + 1e-6)
    assert reference.fun <= f_ours * (1 + 1e-6)  # same minimum value


def test_fit_objective_never_increases():
    X, y, sites = _standardized_cancer()
    recorded = []
    original = _dwd_solver.solve_batch

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        recorded.append(out[2]["objective"])
        return out

    _dwd_solver_module = __import__("skfedpriv.linear_model._renewable", fromlist=["x"])
    _dwd_solver_module.solve_batch = spy
    try:
        for q in (0.5, 1.0, 3.0):
            DWDClassifier(q=q, alpha=1e-4).fit(X, y, sample_group=sites)
    finally:
        _dwd_solver_module.solve_batch = original
    assert len(recorded) == 3
    for history in recorded:
        assert len(history) > 2
        assert np.all(np.diff(history, axis=0) <= 0)


def test_fit_does_not_depend_on_site_split():
    X, y, _ = _standardized_cancer()
    rng = np.random.default_rng(1)
    reference = DWDClassifier().fit(X, y)
    for n_sites in (2, 7, len(y)):
        sites = rng.integers(0, n_sites, size=len(y))
        clf = DWDClassifier().fit(X, y, sample_group=sites)
        np.testing.assert_allclose(clf.coef_, reference.coef_, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(clf.intercept_, reference.intercept_, atol=1e-7)


def test_sites_may_hold_one_class_or_one_row():
    X, y, _ = _standardized_cancer()
    sites = np.where(y == 1, "benign-only", "malignant-only").astype(object)
    sites[0] = ("a", 1)  # any hashable label, a single-row site
    clf = DWDClassifier().fit(X, y, sample_group=sites)
    pooled = DWDClassifier().fit(X, y)
    np.testing.assert_allclose(clf.coef_, pooled.coef_, rtol=1e-6, atol=1e-8)


def test_weights_equal_repeated_rows_and_class_weight():
    X, y, sites = _standardized_cancer()
    repeats = np.random.default_rng(2).integers(1, 4, size=len(y))
    weighted = DWDClassifier().fit(X, y, sample_weight=repeats)
    repeated = DWDClassifier().fit(np.repeat(X, repeats, axis=0), np.repeat(y, repeats))
    np.testing.assert_allclose(weighted.coef_, repeated.coef_, rtol=1e-6, atol=1e-8)
    by_class = DWDClassifier(class_weight={0: 3.0}).fit(X, y)
    by_rows = DWDClassifier().fit(X, y, sample_weight=np.where(y == 0, 3.0, 1.0))
    np.testing.assert_allclose(by_class.coef_, by_rows.coef_, rtol=1e-6, atol=1e-8)


def test_multiclass_one_vs_rest_matches_binary_fits():
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    clf = DWDClassifier().fit(X, y)
    assert clf.coef_.shape == (3, 4)
    Xbar = np.hstack([np.ones((len(X), 1)), X])
    for k in range(3):
        binary = DWDClassifier().fit(X, (y == k).astype(int))
        # three models take the L-BFGS phase first, one the Newton steps
        # throughout: the same optimum (objectives within tol = 1e-12 of
        # each other), parameters to the square root of that precision
        labels = np.where(y == k, 1.0, -1.0)
        values = [gendwd_objective(np.r_[intercept, coef], Xbar, labels, np.ones(len(X)),
                                   1.0, 1e-3)[0]
                  for intercept, coef in ((clf.intercept_[k], clf.coef_[k]),
                                          (binary.intercept_[0], binary.coef_[0]))]
        assert abs(values[0] - values[1]) <= 1e-11 * values[1]
        np.testing.assert_allclose(clf.coef_[k], binary.coef_[0], rtol=1e-4, atol=1e-6)
    scores = clf.decision_function(X)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[scores.argmax(1)])
    assert clf.score(X, y) > 0.9


def test_accuracy_comparable_to_linear_svc():
    X, y, _ = _standardized_cancer()
    train = np.arange(len(y)) % 3 != 0
    ours = DWDClassifier().fit(X[train], y[train]).score(X[~train], y[~train])
    svc = LinearSVC().fit(X[train], y[train]).score(X[~train], y[~train])
    assert ours >= svc - 0.02


# -- partial_fit: renewable estimation -----------------------------------


def _stream(clf, X, y, sites, batch):
    for b in np.unique(batch):
        m = batch == b
        clf.partial_fit(X[m], y[m], sample_group=sites[m], classes=[-1, 1])
    return clf


def test_stream_state_is_summaries_only():
    X, y, sites, batch = make_federated_gaussians(
        n_sites=4, n_batches=20, n_per_batch=25, n_features=5, random_state=0
    )
    clf = _stream(DWDClassifier(), X, y, sites, batch)
    arrays = [v for v in vars(clf).values() if isinstance(v, np.ndarray)]
    assert max(a.size for a in arrays) <= (X.shape[1] + 1) ** 2  # O(p^2), no rows
    assert clf.n_batches_ == 20
    assert clf.n_samples_seen_ == len(y)


@pytest.mark.parametrize("ratio", [1.0, 4.0])
def test_stream_gets_close_to_offline_fit(ratio):
    X, y, sites, batch = make_federated_gaussians(
        n_sites=10, n_batches=20, n_per_batch=50, n_features=20, ratio=ratio, random_state=0
    )
    X_test, y_test, _, _ = make_federated_gaussians(
        n_sites=10, n_batches=20, n_per_batch=50, n_features=20, ratio=ratio, random_state=1
    )
    offline = DWDClassifier().fit(X, y, sample_group=sites)
    online = _stream(DWDClassifier(), X, y, sites, batch)
    published = _stream(DWDClassifier(online_steps=1), X, y, sites, batch)
    offline_theta = np.concatenate([offline.intercept_, offline.coef_.ravel()])
    for stream, bound in ((online, 0.05), (published, 0.15)):
        theta = np.concatenate([stream.intercept_, stream.coef_.ravel()])
        gap = np.linalg.norm(theta - offline_theta) / np.linalg.norm(offline_theta)
        assert gap < bound
        assert abs(stream.score(X_test, y_test) - offline.score(X_test, y_test)) < 0.01
    bayes = gaussian_bayes_accuracy(n_features=20, ratio=ratio)
    assert online.score(X_test, y_test) > bayes - 0.015


def test_published_single_step_is_equation_37():
    X, y, sites, batch = make_federated_gaussians(
        n_sites=3, n_batches=2, n_per_batch=40, n_features=4, random_state=3
    )
    clf = DWDClassifier(online_steps=1, alpha=0.01)
    m1, m2 = batch == 0, batch == 1
    clf.partial_fit(X[m1], y[m1], sample_group=sites[m1], classes=[-1, 1])
    theta1 = np.concatenate([clf.intercept_, clf.coef_[0]])
    J1 = clf.curvature_[0].copy()
    clf.partial_fit(X[m2], y[m2], sample_group=sites[m2])
    # eq. 37-39 written out directly on the pooled rows of batch 2
    Xb = np.hstack([np.ones((m2.sum(), 1)), X[m2]])
    u = y[m2] * (Xb @ theta1)
    n2, lam = m2.sum(), 0.01
    W = np.eye(5)
    W[0, 0] = 0
    grad = Xb.T @ (y[m2] * gendwd_derivative(u, 1.0)) + n2 * lam * W @ theta1
    H2 = (Xb * gendwd_smoothed_curvature(u, 1.0)[:, None]).T @ Xb + n2 * lam * np.eye(5)
    expected = theta1 - np.linalg.solve(J1 + H2, grad)
    np.testing.assert_allclose(np.concatenate([clf.intercept_, clf.coef_[0]]), expected, rtol=1e-7)
    np.testing.assert_allclose(clf.curvature_[0], J1 + H2, rtol=1e-10)


def test_partial_fit_after_fit_continues_the_stream():
    X, y, sites, batch = make_federated_gaussians(
        n_sites=3, n_batches=2, n_per_batch=100, n_features=5, random_state=4
    )
    clf = DWDClassifier().fit(X[batch == 0], y[batch == 0])
    clf.partial_fit(X[batch == 1], y[batch == 1])
    assert clf.n_batches_ == 2
    assert clf.n_samples_seen_ == len(y)


def test_pickle_mid_stream_resumes_identically():
    X, y, sites, batch = make_federated_gaussians(
        n_sites=3, n_batches=6, n_per_batch=30, n_features=6, random_state=5
    )
    straight = _stream(DWDClassifier(), X, y, sites, batch)
    first = batch < 3
    half = _stream(DWDClassifier(), X[first], y[first], sites[first], batch[first])
    resumed = pickle.loads(pickle.dumps(half))
    _stream(resumed, X[~first], y[~first], sites[~first], batch[~first])
    np.testing.assert_array_equal(resumed.coef_, straight.coef_)
    np.testing.assert_array_equal(resumed.intercept_, straight.intercept_)
    np.testing.assert_array_equal(resumed.curvature_, straight.curvature_)


def test_partial_fit_first_batch_with_one_class():
    X, y, sites, batch = make_federated_gaussians(
        n_sites=2, n_batches=3, n_per_batch=60, n_features=3, random_state=6
    )
    clf = DWDClassifier(max_iter=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.partial_fit(X[y == 1][:10], y[y == 1][:10], classes=[-1, 1])
    # a model that has only seen one side has no minimizer: it stays put
    assert np.all(clf.coef_ == 0) and np.all(clf.intercept_ == 0)
    clf.partial_fit(X, y, sample_group=sites)
    offline = DWDClassifier().fit(X, y)
    np.testing.assert_allclose(clf.coef_, offline.coef_, rtol=1e-3)


# -- bad input: a clear error, nothing changed ----------------------------


def _state(clf):
    return pickle.dumps({k: v for k, v in vars(clf).items() if k.endswith("_")})


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda X, y, g, w: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), y, g, w), "NaN"),
        (lambda X, y, g, w: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.inf, X), y, g, w), "infinity"),
        (lambda X, y, g, w: (X[:, :-1], y, g, w), "features"),
        (lambda X, y, g, w: (X[:, 0], y, g, w), "2D"),
        (lambda X, y, g, w: (X, y, g[:-1], w), "sample_group"),
        (lambda X, y, g, w: (X, y, g, w[:-1]), "sample_weight"),
        (lambda X, y, g, w: (X, np.where(y == 1, 7, y), g, w), "not in classes"),
        (lambda X, y, g, w: (X, y + 0.5, g, w), "not in classes"),
        (lambda X, y, g, w: (X, y.astype(str), g, w), "not in classes"),
        (lambda X, y, g, w: (X, y[:-1], g, w), "inconsistent"),
        (lambda X, y, g, w: (X, y, g, -w), "Negative"),
    ],
)
def test_rejected_partial_fit_changes_nothing(mutate, message):
    X, y, sites, batch = make_federated_gaussians(
        n_sites=3, n_batches=2, n_per_batch=20, n_features=4, random_state=7
    )
    w = np.ones(len(y))
    clf = DWDClassifier().partial_fit(X, y, sample_group=sites, classes=[-1, 1])
    before = _state(clf)
    bad = mutate(X, y, sites, w)
    with pytest.raises(ValueError, match=message):
        clf.partial_fit(bad[0], bad[1], sample_group=bad[2], sample_weight=bad[3])
    assert _state(clf) == before


def test_first_partial_fit_rejected_leaves_estimator_unfitted():
    X, y, sites, _ = make_federated_gaussians(n_sites=2, n_batches=1, n_features=3, random_state=8)
    clf = DWDClassifier()
    with pytest.raises(ValueError, match="classes must be passed"):
        clf.partial_fit(X, y)
    with pytest.raises(ValueError, match="sample_group"):
        clf.partial_fit(X, y, sample_group=sites[:-1], classes=[-1, 1])
    assert not any(k.endswith("_") and not k.startswith("__") for k in vars(clf))


def test_partial_fit_rejects_changed_classes_and_balanced():
    X, y, sites, _ = make_federated_gaussians(n_sites=2, n_batches=1, n_features=3, random_state=9)
    clf = DWDClassifier().partial_fit(X, y, classes=[-1, 1])
    with pytest.raises(ValueError, match="not the same"):
        clf.partial_fit(X, y, classes=[-1, 1, 2])
    with pytest.raises(ValueError, match="balanced"):
        DWDClassifier(class_weight="balanced").partial_fit(X, y, classes=[-1, 1])


@pytest.mark.parametrize(
    "params",
    [dict(q=0), dict(q=np.nan), dict(alpha=-1), dict(tol=0), dict(max_iter=0),
     dict(online_steps=1.5), dict(class_weight="weird")],
)
def test_invalid_hyperparameters_raise(params):
    X, y, _, _ = make_federated_gaussians(n_sites=2, n_batches=1, n_features=3, random_state=10)
    with pytest.raises((ValueError, TypeError)):
        DWDClassifier(**params).fit(X, y)


def test_per_site_joblib_path_equals_in_process_path(monkeypatch):
    import joblib

    monkeypatch.setattr("skfedpriv._sites._MIN_ROWS_PER_JOB", 0)  # split even small batches
    from skfedpriv.linear_model._dwd_solver import SiteData

    X, y, sites = _standardized_cancer()
    in_process = DWDClassifier().fit(X, y, sample_group=sites)
    threaded = DWDClassifier(n_jobs=2).fit(X, y, sample_group=sites)
    with joblib.parallel_config(backend="threading", n_jobs=2):
        configured = DWDClassifier().fit(X, y, sample_group=sites)
        # under a parallel backend every site is its own task
        parts = SiteData(X, np.ones((len(y), 1)), np.ones(len(y)),
                         [np.flatnonzero(sites == s) for s in np.unique(sites)], None, True).parts
        assert len(parts) == 4
    for other in (threaded, configured):
        np.testing.assert_allclose(other.coef_, in_process.coef_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("q", [0.3, 0.5, 1.0, 2.0, 4.0, 5.0, 7.25])
def test_loss_and_derivative_in_one_pass_match_separate(q):
    # the separate functions (the loss bitwise); bitwise the form with both
    # branches selected (-1 left of the kink, -(u0/u)^q (u0/u) right of it)
    # at the kink, its neighbours, ±inf and NaN; the closed form of eq. 4
    # and its derivative
    from skfedpriv._losses import fast_power, gendwd_loss_and_derivative

    u0 = q / (q + 1.0)
    u = np.concatenate([np.linspace(-3, 6, 1001), np.nextafter(u0, [-1.0, 2.0]),
                        [u0, 0.0, np.inf, -np.inf, np.nan]]).reshape(-1, 2)
    loss, derivative = gendwd_loss_and_derivative(u, q)
    np.testing.assert_array_equal(loss, gendwd_loss(u, q))
    np.testing.assert_allclose(derivative, gendwd_derivative(u, q), rtol=1e-14)
    ratio = u0 / np.where(u > u0, u, u0)
    np.testing.assert_array_equal(
        derivative, np.where(u > u0, -fast_power(ratio, q) * ratio, -1.0))
    right, left = np.isfinite(u) & (u > u0), np.isfinite(u) & (u <= u0)
    np.testing.assert_allclose(loss[right], q**q / ((q + 1.0) ** (q + 1.0) * u[right] ** q),
                               rtol=1e-13)
    np.testing.assert_array_equal(loss[left], 1.0 - u[left])
    np.testing.assert_allclose(derivative[right], -((q / ((q + 1.0) * u[right])) ** (q + 1.0)),
                               rtol=1e-13)
    assert np.all(derivative[left] == -1.0)


def test_fit_intercept_changed_mid_stream_is_refused_before_any_state():
    X, y, _ = _standardized_cancer()
    clf = DWDClassifier().partial_fit(X[:200], y[:200], classes=[0, 1])
    before = clf.coef_.copy(), clf.n_batches_
    clf.set_params(fit_intercept=False)
    with pytest.raises(ValueError, match="changed in the middle of a stream"):
        clf.partial_fit(X[200:], y[200:])
    np.testing.assert_array_equal(clf.coef_, before[0])
    assert clf.n_batches_ == before[1]
    clf.fit(X, y)  # fit starts a new stream with the new layout
    assert clf.intercept_.tolist() == [0.0]
