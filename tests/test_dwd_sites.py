"""DWDClassifier.fit_sites / partial_fit_sites: the same update as fit / partial_fit."""

import pickle

import numpy as np
import pytest

from skfedpriv import DWDClassifier, PrivacyBudget, PrivacyBudgetError
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model import DWDSites, ReleasedModelError
from skfedpriv.linear_model._dwd_solver import SiteData


def _sites(X, y, g, w=None):
    codes = np.unique(g, return_inverse=True)[1]
    rows = [np.flatnonzero(codes == s) for s in range(codes.max() + 1)]
    return SiteData.from_rows(X, y, np.ones(len(y)) if w is None else w, rows)


def _data(seed=0):
    return make_federated_gaussians(n_sites=3, n_batches=3, n_per_batch=60, n_features=4,
                                    random_state=seed)


@pytest.mark.parametrize("params", [
    dict(), dict(q=0.5, class_weight={-1: 2.0}), dict(online_steps=1),
    dict(mechanism="local-gaussian", clip_norm=3.0, random_state=0, classes=[-1, 1]),
    dict(mechanism="laplace", clip_norm=3.0, random_state=0, classes=[-1, 1], epsilon=4.0),
])
def test_sites_methods_equal_fit_and_partial_fit(params):
    X, y, g, b = _data()
    rows = DWDClassifier(**params)
    sites = DWDClassifier(**params)
    for k in range(3):
        m = b == k
        rows.partial_fit(X[m], y[m], sample_group=g[m], classes=[-1, 1])
        sites.partial_fit_sites(_sites(X[m], y[m], g[m]), classes=[-1, 1])
        np.testing.assert_array_equal(sites.coef_, rows.coef_)
        np.testing.assert_array_equal(sites.intercept_, rows.intercept_)
        assert sites.privacy_spent_ == rows.privacy_spent_
        assert sites.n_features_in_ == rows.n_features_in_ == X.shape[1]
    fitted = DWDClassifier(**params).fit(X, y, sample_group=g)
    fitted_sites = DWDClassifier(**params).fit_sites(_sites(X, y, g))
    np.testing.assert_array_equal(fitted_sites.coef_, fitted.coef_)
    assert sorted(vars(fitted_sites)) == sorted(vars(fitted))


def test_sites_methods_check_and_charge_as_fit():
    X, y, g, b = _data(1)
    budget = PrivacyBudget(epsilon=1.0, delta=1e-3)
    est = DWDClassifier(mechanism="gaussian", epsilon=0.5, clip_norm=3.0, budget=budget)
    with pytest.raises(ValueError, match="label set must be declared"):
        est.fit_sites(_sites(X, y, g))
    assert not [k for k in vars(est) if k.endswith("_")] and len(budget.ledger) == 0
    est.set_params(classes=[-1, 1]).fit_sites(_sites(X[b == 0], y[b == 0], g[b == 0]))
    est.partial_fit_sites(_sites(X[b == 1], y[b == 1], g[b == 1]))
    assert len(budget.ledger) == 2 and est.privacy_spent_ == pytest.approx((1.0, 2e-5))
    before = pickle.dumps(est.__dict__)
    with pytest.raises(PrivacyBudgetError):
        est.partial_fit_sites(_sites(X[b == 2], y[b == 2], g[b == 2]))
    assert pickle.dumps(est.__dict__) == before
    with pytest.raises(ValueError, match="weighs one"):
        est.partial_fit_sites(_sites(X, y, g, np.full(len(y), 2.0)))
    assert pickle.dumps(est.__dict__) == before
    with pytest.raises(ValueError, match="features"):
        est.partial_fit_sites(_sites(X[:, :2], y, g))
    with pytest.raises(ReleasedModelError):
        est.release().partial_fit_sites(_sites(X, y, g))
    with pytest.raises(TypeError, match="DWDSites"):
        DWDClassifier().fit_sites((X, y))
    with pytest.raises(ValueError, match="balanced"):
        DWDClassifier(class_weight="balanced").partial_fit_sites(_sites(X, y, g), classes=[-1, 1])


def test_sites_interface_is_declared():
    assert issubclass(SiteData, DWDSites)
    declared = {"labels", "prepare", "summaries", "majorizer", "curvature_product",
                "line_losses", "noised_summary"}
    assert declared <= DWDSites.__abstractmethods__


def test_privacy_spent_and_tags():
    X, y, g, _ = _data(2)
    assert DWDClassifier().fit(X, y).privacy_spent_ == (float("inf"), 0.0)
    assert not DWDClassifier().__sklearn_tags__().non_deterministic
    assert DWDClassifier(mechanism="laplace").__sklearn_tags__().non_deterministic


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "local-gaussian"])
def test_prepared_sites_are_refused_under_a_mechanism(mechanism):
    """Rows prepared outside the estimator carry no clipping or unit-weight
    bound, so a private fit refuses them (raw rows: SiteData.from_rows)."""
    rng = np.random.default_rng(0)
    X = 100.0 * rng.normal(size=(40, 3))  # far outside clip_norm
    Y = np.where(rng.random(40) > 0.5, 1.0, -1.0)[:, None]
    weights = np.full(40, 5.0)
    prepared = SiteData(X, Y, weights, [np.arange(40)], None, True)
    est = DWDClassifier(mechanism=mechanism, clip_norm=2.0, classes=[0, 1])
    with pytest.raises(ValueError, match="prepared outside a privacy mechanism"):
        est.fit_sites(prepared)
    assert not hasattr(est, "classes_")
    # the same rows as raw rows go through: the estimator clips them itself
    y = (Y[:, 0] > 0).astype(int)
    raw = SiteData.from_rows(X, y, np.ones(40), [np.arange(40)])
    assert est.fit_sites(raw).n_samples_seen_ == 40


@pytest.mark.parametrize("mechanism", [None, "laplace", "gaussian", "local-gaussian"])
def test_delta_is_validated_in_the_open_interval_as_documented(mechanism):
    from skfedpriv import InvalidParameterError

    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.arange(20) % 2
    for delta in (0.0, 1.0):
        with pytest.raises(InvalidParameterError, match="'delta' parameter"):
            DWDClassifier(mechanism=mechanism, delta=delta, clip_norm=2.0,
                          classes=[0, 1]).fit(X, y)
