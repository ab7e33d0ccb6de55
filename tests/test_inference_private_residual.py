"""The pilot's error left by the private refinement (issue #24): the
steps' transfer against a replay of the steps, the residual bound against
the true residual (the non-private minimizer and the noiseless curvature
on the same rows) over many seeds, the published covariance (widened by
the bound or withheld), and the decision from released numbers only."""

import math
import warnings

import numpy as np
import pytest

from skfedpriv import DWDClassifier
from skfedpriv._loss import GenDWDLoss
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model import _dwd_solver, _inference_private
from skfedpriv.linear_model._inference_private import RESOLVED, privacy_error_covariance
from skfedpriv.linear_model._inference_residual import (
    bias_aware_critical,
    pilot_transfer,
    residual_bound,
)
from skfedpriv.linear_model._inference_sites import site_inference_summary
from skfedpriv.privacy import NoiseDominatesWarning
from skfedpriv.privacy._objective_perturbation import clip_augmented_rows

P, SITES = 5, 5
CLIP = 2.0 * math.sqrt(1.0 + P)


def _rows(seed, n=2000, ratio=1.0):
    X, y, g, _ = make_federated_gaussians(n_sites=SITES, n_batches=1, n_per_batch=n // SITES,
                                          n_features=P, mu=0.2, sigma=1.0, ratio=ratio,
                                          random_state=seed)
    return X, y, g


def _fit(X, y, g, seed, q=4.0, epsilon=1.0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DWDClassifier(q=q, inference=True, mechanism="local-gaussian", epsilon=epsilon,
                             clip_norm=CLIP, classes=[-1, 1],
                             random_state=10_000 + seed).fit(X, y, sample_group=g)


def _replayed(refinement, hessian, start, minimizer):
    """The refinement's steps replayed without noise on the quadratic with
    curvature ``hessian`` (ridge included) and minimizer ``minimizer``."""
    theta = start.copy()
    for stage in range(len(refinement.curvatures)):
        system = refinement.system(stage)[0]
        for damping in refinement.damping[stage][:, 0]:
            theta = theta - np.linalg.solve(damping * system, hessian @ (theta - minimizer))
    return theta


def test_pilot_transfer_is_the_product_of_the_steps():
    """``P e`` equals the noiseless replay of every step from ``e`` for a
    random curvature."""
    X, y, g = _rows(0, n=5000)
    refinement = _fit(X, y, g, 0, epsilon=4.0).private_refinement_
    rng = np.random.default_rng(1)
    root = rng.normal(size=(P + 1, P + 1))
    hessian = root @ root.T * 200.0
    start = rng.normal(size=P + 1)
    replay = _replayed(refinement, hessian, start, np.zeros(P + 1))
    assert np.allclose(pilot_transfer(refinement, hessian[None])[0] @ start, replay)


def test_the_bound_holds_against_the_true_residual():
    """n = 2 000, p = 5, q = 4, ε in {1, 2} (cells where the steps leave
    much of the pilot's error: the mean-eigenvalue check published
    intervals there with bias up to 2 SD): over 24 seeds, the pilot's
    error left after the fit's own steps on the true curvature at the
    non-private minimizer exceeds the bound (by more than 0.05 SE) in at
    most 1 % of the parameters; it is above half a standard error in most
    of them (ignoring it, as the intervals did, is wrong there)."""
    loss, exceed, large, count = GenDWDLoss(4.0), 0, 0, 0
    for seed in range(24):
        X, y, g = _rows(seed)
        private = _fit(X, y, g, seed, epsilon=1.0 + seed % 2)
        public = DWDClassifier(q=4.0, clip_norm=CLIP, classes=[-1, 1]).fit(X, y, sample_group=g)
        minimizer = np.r_[public.intercept_, public.coef_[0]]
        curvature = site_inference_summary(
            clip_augmented_rows(X, CLIP, True), y[:, None].astype(float), np.ones(len(y)),
            minimizer[:, None], True, loss.derivative, loss.curvature).curvature[0]
        refinement = private.private_refinement_
        residual = (_replayed(refinement, curvature + np.diag(refinement.ridge),
                              refinement.pilot[:, 0], minimizer) - minimizer)
        privacy = privacy_error_covariance(refinement)
        std_err = np.sqrt(np.diag(privacy[0] + refinement.sampling_cov[0]))
        bound = residual_bound(refinement, privacy)[0]
        exceed += np.sum(np.abs(residual) > bound + 0.05 * std_err)
        large += np.sum(np.abs(residual) > 0.5 * std_err)
        count += P + 1
    assert exceed <= 0.01 * count, exceed
    assert large >= 0.5 * count, large


def test_the_published_covariance_is_widened_by_the_bound_or_withheld():
    """Where every parameter's bound is at most RESOLVED standard errors the
    published variance is the noise-aware one plus the bound squared;
    elsewhere NaN, with a NoiseDominatesWarning."""
    seen = set()
    for seed, (n, epsilon) in enumerate([(20000, 4.0), (5000, 4.0), (2000, 1.0)]):
        X, y, g = _rows(seed, n=n)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf = DWDClassifier(q=1.0, inference=True, mechanism="local-gaussian",
                                epsilon=epsilon, clip_norm=CLIP, classes=[-1, 1],
                                random_state=seed).fit(X, y, sample_group=g)
        refinement = clf.private_refinement_
        noise_aware = np.diag((privacy_error_covariance(refinement)
                               + refinement.sampling_cov)[0])
        bound = refinement.residual_bound[0]
        published = bool(np.all(bound <= RESOLVED * np.sqrt(noise_aware)))
        warned = any(issubclass(w.category, NoiseDominatesWarning) for w in caught)
        assert warned != published
        variance = np.r_[clf.intercept_se_, clf.coef_se_[0]] ** 2
        if published:
            assert np.allclose(variance, noise_aware + bound**2)
        else:
            assert np.isnan(variance).all() and np.isnan(clf.confint()).all()
        seen.add(published)
    assert seen == {True, False}


class _Replay:
    """Records every noised release of a fit, or replays them in order."""

    def __init__(self, monkeypatch):
        self.log, self.replaying = [], False
        original_summary = _dwd_solver.SiteData.noised_summary
        original_inference = _inference_private.noised_inference_summary

        def wrap(original):
            def released(*args, **kwargs):
                if self.replaying:
                    return self.log.pop(0)
                value = original(*args, **kwargs)
                self.log.append(value)
                return value
            return released

        monkeypatch.setattr(_dwd_solver.SiteData, "noised_summary", wrap(original_summary))
        monkeypatch.setattr(_inference_private, "noised_inference_summary",
                            wrap(original_inference))


@pytest.mark.parametrize("n, epsilon", [(20000, 4.0), (600, 1.0)])
def test_the_decision_reads_released_numbers_only(monkeypatch, n, epsilon):
    """A fit on other rows (same sites and counts) fed the first fit's
    releases publishes exactly the same estimate, covariance and
    bias-aware intervals (NaN or not) and warning: whether an interval is
    published, and how wide, is post-processing."""
    replay = _Replay(monkeypatch)
    first, second = _rows(1, n), _rows(2, n)
    assert not np.allclose(first[0], second[0])
    with warnings.catch_warnings(record=True) as caught_first:
        warnings.simplefilter("always")
        a = DWDClassifier(q=1.0, inference=True, mechanism="local-gaussian", epsilon=epsilon,
                          clip_norm=CLIP, classes=[-1, 1], random_state=0)
        a.fit(*first[:2], sample_group=first[2])
    replay.replaying = True
    with warnings.catch_warnings(record=True) as caught_second:
        warnings.simplefilter("always")
        b = DWDClassifier(q=1.0, inference=True, mechanism="local-gaussian", epsilon=epsilon,
                          clip_norm=CLIP, classes=[-1, 1], random_state=1)
        b.fit(*second[:2], sample_group=second[2])
    assert replay.log == []
    assert np.array_equal(a.coef_, b.coef_)
    assert np.array_equal(a.coef_cov_, b.coef_cov_, equal_nan=True)
    assert np.array_equal(a.confint(), b.confint(), equal_nan=True)
    withheld = [np.isnan(a.coef_se_).any(), np.isnan(b.coef_se_).any()]
    assert withheld[0] == withheld[1] == (n == 600)
    noise = [[w for w in caught if issubclass(w.category, NoiseDominatesWarning)]
             for caught in (caught_first, caught_second)]
    assert len(noise[0]) == len(noise[1]) == (1 if n == 600 else 0)


def test_bias_aware_critical_value_is_the_quantile_of_the_folded_normal():
    """``cv(t)`` solves ``Φ(c - t) - Φ(-c - t) = level`` (root-found here),
    is the normal quantile at ``t = 0``, and the interval ``± cv(b / s) s``
    covers a centre of std ``s`` and any bias in ``[-b, b]`` at least
    ``level`` of the time (exactly at ``|bias| = b``)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    for level in (0.5, 0.9, 0.95, 0.99):
        ratios = np.array([0.0, 0.3, 1.0, 2.0, 5.0, 8.0])
        critical = bias_aware_critical(ratios, level)
        for t, c in zip(ratios, critical):
            root = brentq(lambda x, t=t, level=level: norm.cdf(x - t) - norm.cdf(-x - t) - level,
                          0.0, t + 10.0)
            assert math.isclose(c, root, rel_tol=1e-7, abs_tol=1e-9)
        assert math.isclose(critical[0], norm.ppf(0.5 + level / 2), rel_tol=1e-9)
        bias = np.linspace(-1.0, 1.0, 41)[:, None] * ratios  # std 1, |bias| <= t
        cover = norm.cdf(critical - bias) - norm.cdf(-critical - bias)
        assert np.all(cover >= level - 1e-9)
        assert np.allclose(cover[[0, -1]], level)
    assert np.isnan(bias_aware_critical(np.nan))


def test_published_bias_aware_intervals_hold_against_the_true_residual():
    """n = 20 000, p = 5, ε = 1, 12 seeds (fits whose bound is between 2 and
    RESOLVED standard errors: withheld before, published now): every
    published interval is ``θ̃ ± cv(b / s) s`` (and ``summary`` shows it),
    the true residual (the fit's own steps replayed on the non-private
    minimizer and the noiseless curvature) is within the bound in at least
    99 % of the published parameters, and some published fit has a bound
    above 2 standard errors."""
    loss, exceed, count, beyond_two = GenDWDLoss(1.0), 0, 0, 0
    for seed in range(12):
        X, y, g = _rows(seed, n=20000)
        private = _fit(X, y, g, seed, q=1.0, epsilon=1.0)
        refinement = private.private_refinement_
        if np.isnan(private.coef_se_).any():
            continue
        estimate = np.r_[private.intercept_, private.coef_[0]]
        std_err, bound = refinement.std_err[0], refinement.residual_bound[0]
        half = bias_aware_critical(bound / std_err) * std_err
        assert np.allclose(private.confint()[0], np.column_stack([estimate - half,
                                                                  estimate + half]))
        table = private.summary().records
        assert np.allclose(table.upper - table.lower, 2 * half)
        assert np.allclose(np.r_[private.intercept_se_, private.coef_se_[0]] ** 2,
                           std_err**2 + bound**2)
        public = DWDClassifier(q=1.0, clip_norm=CLIP, classes=[-1, 1]).fit(X, y, sample_group=g)
        minimizer = np.r_[public.intercept_, public.coef_[0]]
        curvature = site_inference_summary(
            clip_augmented_rows(X, CLIP, True), y[:, None].astype(float), np.ones(len(y)),
            minimizer[:, None], True, loss.derivative, loss.curvature).curvature[0]
        residual = (_replayed(refinement, curvature + np.diag(refinement.ridge),
                              refinement.pilot[:, 0], minimizer) - minimizer)
        exceed += np.sum(np.abs(residual) > bound + 0.05 * std_err)
        count += P + 1
        beyond_two += np.any(bound > 2.0 * std_err)
    assert count >= 2 * (P + 1) and beyond_two >= 1, (count, beyond_two)
    assert exceed <= 0.01 * count, exceed
