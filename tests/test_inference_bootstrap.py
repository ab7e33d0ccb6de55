"""The parametric bootstrap of a private fit's intervals
(``confint(method='bootstrap')``, issue #24): its API, that it is
post-processing (no draw from the sites' generator, no charge), that it
reproduces the private estimator's error distribution simulated by brute
force (fresh data and fresh noise), and its coverage."""

import math
import pickle
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from skfedpriv import DWDClassifier, PrivacyBudget
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians
from skfedpriv.linear_model._inference_bootstrap import bootstrap_errors, replayable

MU, CLIP, N, P = 0.2, 2.0 * math.sqrt(3.0), 5000, 2


def _data(seed, n=N, ratio=1.0):
    X, y, g, _ = make_federated_gaussians(n_sites=1, n_batches=1, n_per_batch=n, n_features=P,
                                          mu=MU, sigma=1.0, ratio=ratio, random_state=seed)
    return X, y, g


def _private(**params):
    defaults = dict(mechanism="local-gaussian", inference=True, epsilon=8.0, clip_norm=CLIP,
                    classes=[-1, 1], random_state=0)
    return DWDClassifier(**{**defaults, **params})


def _fit(seed, **params):
    X, y, g = _data(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _private(random_state=10_000 + seed, **params).fit(X, y, sample_group=g)


# -- the API -------------------------------------------------------------------------


def test_bootstrap_is_post_processing_and_reproducible():
    """Same intervals for the same random_state, none of the sites'
    generator state or the budget used; the fit's attributes unchanged."""
    budget = PrivacyBudget(10.0, 1e-3)
    clf = _fit(0, budget=budget)
    state = pickle.dumps(clf._training_state.rng.bit_generator.state)
    before = (clf.coef_.copy(), clf.coef_se_.copy(), budget.spent)
    first = clf.confint(method="bootstrap", n_resamples=200, random_state=3)
    again = clf.confint(method="bootstrap", n_resamples=200, random_state=3)
    np.testing.assert_array_equal(first, again)
    assert first.shape == clf.confint().shape == (1, P + 1, 2)
    assert np.all(first[..., 0] < first[..., 1])
    assert pickle.dumps(clf._training_state.rng.bit_generator.state) == state
    np.testing.assert_array_equal(clf.coef_, before[0])
    np.testing.assert_array_equal(clf.coef_se_, before[1])
    assert budget.spent == before[2]
    # the release holds what the bootstrap needs
    np.testing.assert_array_equal(
        clf.release().confint(method="bootstrap", n_resamples=200, random_state=3), first)


def test_bootstrap_without_intercept_keeps_the_layout():
    clf = _fit(1, fit_intercept=False)
    intervals = clf.confint(method="bootstrap", n_resamples=100, random_state=0)
    assert intervals.shape == (1, P + 1, 2)
    np.testing.assert_array_equal(intervals[:, 0], 0.0)
    assert np.all(intervals[0, 1:, 0] < clf.coef_[0]) and np.all(clf.coef_[0] < intervals[0, 1:, 1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="percentile"), "method"),
    (dict(method="bootstrap", n_resamples=5), "n_resamples"),
    (dict(method="bootstrap", n_resamples=99.5), "n_resamples"),
])
def test_bad_arguments_raise(kwargs, match):
    clf = _fit(2)
    with pytest.raises(ValueError, match=match):
        clf.confint(**kwargs)


def test_non_private_fit_refuses_the_bootstrap():
    X, y, g = _data(3, n=500)
    clf = DWDClassifier(inference=True).fit(X, y, sample_group=g)
    with pytest.raises(ValueError, match="local-gaussian"):
        clf.confint(method="bootstrap")


def test_unresolved_curvature_gives_no_bootstrap_interval():
    """600 rows at 3 sites, ε = 1: the released curvature is below its noise
    floor, a replay would keep the pilot's offset: NaN, as the Wald one."""
    X, y, g, _ = make_federated_gaussians(n_sites=3, n_batches=1, n_per_batch=200,
                                          n_features=P, mu=MU, sigma=1.0, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = _private(epsilon=1.0).fit(X, y, sample_group=g)
    assert not replayable(clf.private_refinement_).any()
    assert np.isnan(clf.confint(method="bootstrap", n_resamples=50, random_state=0)).all()


# -- against the estimator's simulated error distribution ----------------------------


@pytest.fixture(scope="module")
def simulated():
    """200 data sets, each fitted privately with fresh noise; the bootstrap
    of the first 20 fits (1 000 replays each) and the basic intervals of
    every fit (199 replays)."""
    intercept, coef = gaussian_gendwd_target(P, MU, 1.0, 1.0, q=1.0)
    target = np.r_[intercept, coef]
    estimates, boot_errors, intervals = [], [], []
    for seed in range(200):
        clf = _fit(seed)
        estimates.append(np.r_[clf.intercept_, clf.coef_[0]])
        if seed < 20:
            boot_errors.append(bootstrap_errors(clf.private_refinement_, 1000, seed)[:, 0])
        intervals.append(clf.confint(method="bootstrap", n_resamples=199, random_state=seed)[0])
    return target, np.array(estimates), np.array(boot_errors), np.array(intervals)


def test_bootstrap_reproduces_the_error_distribution(simulated):
    """The 10 % and 90 % quantiles of the replayed errors (mean over 20 fits)
    against those of ``θ̃ - θ*`` over 200 fresh data sets and noise draws:
    within 3 Monte Carlo standard errors of the brute-force quantile
    (``sqrt(q (1-q) / R) / f(x_q)``, f normal with the errors' spread),
    plus the replays' own."""
    target, estimates, boot_errors, _ = simulated
    errors = estimates - target
    spread = errors.std(axis=0, ddof=1)
    for level in (0.1, 0.9):
        brute = np.quantile(errors, level, axis=0)
        replayed = np.quantile(boot_errors, level, axis=1).mean(axis=0)
        mc_se = math.sqrt(level * (1 - level) / len(errors)) / norm.pdf(norm.ppf(level))
        assert np.all(np.abs(replayed - brute) <= 3 * mc_se * spread), (level, replayed, brute)
    # the replays are about as spread as the estimator (not a degenerate match)
    ratio = boot_errors.std(axis=1).mean(axis=0) / spread
    assert np.all((ratio > 0.75) & (ratio < 1.33)), ratio


def test_bootstrap_coverage(simulated):
    target, _, _, intervals = simulated
    covered = (intervals[..., 0] <= target) & (target <= intervals[..., 1])
    assert 0.90 <= covered.mean() <= 0.99, covered.mean(axis=0)
