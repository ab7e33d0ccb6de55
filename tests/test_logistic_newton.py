"""LogisticRegression(solver='newton'): scikit-learn's optimum, the renewable stream."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.linear_model import LogisticRegression as SklearnLogisticRegression
from sklearn.preprocessing import StandardScaler

from skfedpriv import LogisticRegression
from skfedpriv._param_validation import InvalidParameterError
from skfedpriv.linear_model._dwd_solver import SiteData
from skfedpriv.linear_model._local_steps import BatchLearners


def _rows(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _sklearn(X, y, alpha, fit_intercept=True):
    """scikit-learn at the matched C = 1 / (n alpha), solved to round-off."""
    return SklearnLogisticRegression(C=1.0 / (len(y) * alpha), fit_intercept=fit_intercept,
                                     solver="newton-cholesky", tol=1e-12,
                                     max_iter=1000).fit(X, y)


@pytest.mark.parametrize("loader", [load_breast_cancer, load_wine], ids=["binary", "multinomial"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_fit_reaches_sklearns_optimum(loader, fit_intercept):
    X, y = _rows(loader)
    sites = np.arange(len(y)) % 3
    alpha = 1e-3
    ours = LogisticRegression(alpha=alpha, fit_intercept=fit_intercept).fit(
        X, y, sample_group=sites)
    theirs = _sklearn(X, y, alpha, fit_intercept)
    assert ours.solver_ == "newton"
    scale = np.abs(theirs.coef_).max()
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), atol=1e-5)
    # a handful of Newton steps, two or three rounds each
    assert ours.n_iter_ <= 12 and ours.n_rounds_seen_ <= 30
    assert list(ours.learner_labels_) == [0, 1, 2]


def test_default_is_sklearns_at_the_matched_c():
    """The default: ``alpha=None`` is 1e-4 for Newton, i.e. C = 1e4 / n."""
    X, y = _rows(load_breast_cancer)
    ours = LogisticRegression().fit(X, y)
    theirs = _sklearn(X, y, 1e-4)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=0,
                               atol=1e-6 * np.abs(theirs.coef_).max())


def test_feature_clip_norm_is_a_local_steps_setting():
    """Newton neither clips the rows in training nor at prediction."""
    X, y = _rows(load_breast_cancer)
    plain = LogisticRegression(alpha=1e-2).fit(X, y)
    clipped = LogisticRegression(alpha=1e-2, feature_clip_norm=1.0).fit(X, y)
    np.testing.assert_array_equal(clipped.coef_, plain.coef_)
    np.testing.assert_array_equal(clipped.decision_function(X), plain.decision_function(X))


def test_fit_sites_on_summary_sites_is_fit():
    X, y = _rows(load_breast_cancer)
    sites = np.arange(len(y)) % 4
    a = LogisticRegression(alpha=1e-2).fit(X, y, sample_group=sites)
    rows = [np.flatnonzero(sites == s) for s in range(4)]
    b = LogisticRegression(alpha=1e-2).fit_sites(SiteData.from_rows(X, y, np.ones(len(y)), rows))
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-9, atol=1e-12)
    assert b.n_features_in_ == X.shape[1]
    X, y = _rows(load_wine)  # three classes: one-vs-rest sites cannot serve softmax
    est = LogisticRegression()
    with pytest.raises(ValueError, match="MultinomialSites"):
        est.fit_sites(SiteData.from_rows(X, y, np.ones(len(y)), [np.arange(len(y))]))
    assert not hasattr(est, "coef_")


def _logistic(theta, X, s, mask):
    """Loss sum, gradient and Hessian of the logistic loss on rows (1, x)."""
    Xa = np.hstack([np.ones((len(X), 1)), X])
    u = s * (Xa @ theta)
    p = expit(-u)
    value = np.logaddexp(0.0, -u).sum()
    grad = -Xa.T @ (s * p)
    hess = (Xa * (p * (1 - p))[:, None]).T @ Xa
    return value, grad, hess


def test_partial_fit_is_the_renewable_update():
    """Each batch's estimate minimizes the renewable objective (Luo & Song):
    the batch's loss, its ridge and ½ (θ - θ_{b-1})ᵀ P (θ - θ_{b-1}) with P
    the curvature of the earlier batches, each at its own estimate
    (``J̃_b = J̃_{b-1} + J_b(θ̃_b)``), here minimized by L-BFGS-B."""
    X, y = _rows(load_breast_cancer)
    order = np.random.default_rng(0).permutation(len(y))
    batches = np.array_split(order, 4)
    alpha = 1e-2
    mask = np.r_[0.0, np.ones(X.shape[1])]
    est = LogisticRegression(alpha=alpha)
    theta, prior = np.zeros(X.shape[1] + 1), None
    for b in batches:
        est.partial_fit(X[b], y[b], sample_group=b % 3, classes=[0, 1])
        s = np.where(y[b] == 1, 1.0, -1.0)
        ridge = alpha * len(b) * mask

        def objective(t, center=theta, prior=prior, Xb=X[b], s=s, ridge=ridge):
            value, grad, _ = _logistic(t, Xb, s, mask)
            value, grad = value + 0.5 * ridge @ (t * t), grad + ridge * t
            if prior is not None:
                d = t - center
                value, grad = value + 0.5 * d @ prior @ d, grad + prior @ d
            return value, grad

        found = minimize(objective, theta, jac=True, method="L-BFGS-B",
                         options=dict(gtol=1e-11, ftol=1e-15, maxiter=5000)).x
        ours = np.r_[est.intercept_, est.coef_.ravel()]
        np.testing.assert_allclose(ours, found, rtol=0, atol=1e-5 * np.abs(found).max())
        batch_curvature = _logistic(found, X[b], s, mask)[2] + np.diag(ridge)
        prior = batch_curvature if prior is None else prior + batch_curvature
        theta = found
    # the stream ends near the offline fit: its objective on all rows is
    # within 1% of the optimum's
    offline = LogisticRegression(alpha=alpha).fit(X, y)
    s = np.where(y == 1, 1.0, -1.0)

    def full(est):
        t = np.r_[est.intercept_, est.coef_.ravel()]
        return _logistic(t, X, s, mask)[0] + 0.5 * alpha * len(y) * (mask * t) @ t

    assert full(offline) <= full(est) <= 1.01 * full(offline)
    assert est.n_samples_seen_ == len(y)


def test_solver_resolution_and_refusals():
    X, y = _rows(load_breast_cancer)
    private = dict(mechanism="tree", feature_clip_norm=1.0, classes=[0, 1], n_rounds=4,
                   random_state=0, epsilon=5.0, delta=1e-3)
    assert LogisticRegression(**private).fit(X, y).solver_ == "local-steps"
    assert LogisticRegression(n_rounds=4, solver="local-steps").fit(X, y).solver_ == \
        "local-steps"
    refused = LogisticRegression(solver="newton", **private)
    with pytest.raises(InvalidParameterError, match="solver='newton' runs no privacy"):
        refused.fit(X, y)
    assert not hasattr(refused, "coef_")
    # a stream on local-steps learners continues there, not on rows here
    learners = BatchLearners(X, y, np.array([0]), np.zeros(len(y), dtype=int))
    est = LogisticRegression().partial_fit_sites(learners, classes=[0, 1])
    assert est.solver_ == "local-steps"
    before = est.coef_.copy()
    with pytest.raises(ValueError, match="this stream runs solver 'local-steps'"):
        est.partial_fit(X, y)
    np.testing.assert_array_equal(est.coef_, before)
    with pytest.raises(ValueError, match="solver='newton' needs sites that send sums"):
        LogisticRegression(solver="newton").fit_sites(learners)


def test_multinomial_stream_stays_in_the_symmetric_parametrization():
    """The intercepts' common shift leaves the softmax unchanged; the gauge
    term keeps every batch's Newton system regular there (a stream used to
    run off along it, faking descent by rounding), so the stream ends near
    the offline fit with intercepts summing to zero."""
    X, y = _rows(load_wine)
    order = np.random.default_rng(1).permutation(len(y))
    est = LogisticRegression(alpha=1.0 / len(y))
    for b in np.array_split(order, 4):
        est.partial_fit(X[b], y[b], sample_group=b % 3, classes=[0, 1, 2])
        assert est.n_iter_ <= 15
    offline = LogisticRegression(alpha=1.0 / len(y)).fit(X, y)
    assert abs(est.intercept_.sum()) < 1e-8
    assert np.abs(est.coef_ - offline.coef_).max() < 0.25 * np.abs(offline.coef_).max()
    assert est.score(X, y) >= offline.score(X, y) - 0.02
