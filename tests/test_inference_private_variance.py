"""The private refinement's variance (issue #24, calibration at ε = 1): the
curvature plug-in's shrinkage against its closed form, and the privacy
error's covariance against the spread of the refined estimate over many
noise draws on fixed data."""

import math

import numpy as np

from skfedpriv import DWDClassifier
from skfedpriv._loss import GenDWDLoss
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model._dwd_solver import SiteData
from skfedpriv.linear_model._inference_bootstrap import symmetric_draws
from skfedpriv.linear_model._inference_private import (
    private_refinement,
    privacy_error_covariance,
)
from skfedpriv.linear_model._inference_private_curvature import noise_spread, shrunk_curvature


def test_noise_spread_is_the_expected_spread_of_symmetric_noise():
    """``E ‖Ξ - tr Ξ / p1 I‖²_F = (p1² - 1) s²`` (Monte Carlo, 3 SE)."""
    p1, std, draws = 4, 1.5, 20_000
    noise = symmetric_draws(std, draws, p1, np.random.default_rng(0))
    centred = noise - np.trace(noise, axis1=1, axis2=2)[:, None, None] / p1 * np.eye(p1)
    spread = np.einsum("kij,kij->k", centred, centred)
    error = spread.std() / math.sqrt(draws)
    assert abs(spread.mean() - noise_spread(p1, std)) < 3 * error


def test_shrinkage_keeps_the_mean_and_matches_the_true_spread():
    """Over noise draws, ``tr Ĥ = tr C̃`` exactly and the spread
    ``‖Ĥ - μ I‖²_F`` is an (above zero: positive-part) estimate of the true
    ``‖H - tr H / p1 I‖²_F``; without noise ``Ĥ = C̃``."""
    rng = np.random.default_rng(1)
    p1, std, draws = 5, 2.0, 4000
    vectors = np.linalg.qr(rng.normal(size=(p1, p1)))[0]
    H = vectors @ np.diag([10.0, 20.0, 30.0, 60.0, 80.0]) @ vectors.T
    true_spread = np.sum((H - np.trace(H) / p1 * np.eye(p1)) ** 2)
    released = H + symmetric_draws(std, draws, p1, rng)
    estimate = shrunk_curvature(released, std)
    np.testing.assert_allclose(np.trace(estimate, axis1=1, axis2=2),
                               np.trace(released, axis1=1, axis2=2), rtol=1e-10)
    centred = estimate - np.trace(estimate, axis1=1, axis2=2)[:, None, None] / p1 * np.eye(p1)
    spread = np.einsum("kij,kij->k", centred, centred)
    # the signal dominates (spread 3 600 against noise_spread 96): the
    # positive part almost never binds and the estimate is unbiased
    assert abs(spread.mean() - true_spread) < 3 * spread.std() / math.sqrt(draws)
    np.testing.assert_allclose(shrunk_curvature(H[None], 0.0)[0], H, atol=1e-9)


def test_shrinkage_floor_and_pure_noise():
    """Noise only (``H = m I``): the estimate is ``m̃ I`` whenever the
    observed spread is below the noise's; the floor lifts eigenvalues."""
    rng = np.random.default_rng(2)
    p1, std, m = 4, 1.0, 50.0
    released = m * np.eye(p1) + symmetric_draws(std, 500, p1, rng)
    estimate = shrunk_curvature(released, std)
    centred = released - np.trace(released, axis1=1, axis2=2)[:, None, None] / p1 * np.eye(p1)
    below = np.einsum("kij,kij->k", centred, centred) <= noise_spread(p1, std)
    assert below.mean() > 0.5
    mean = np.trace(released[below], axis1=1, axis2=2) / p1
    np.testing.assert_allclose(estimate[below], mean[:, None, None] * np.eye(p1), atol=1e-9)
    floored = shrunk_curvature(np.diag([-1.0, 2.0, 3.0, 10.0])[None], 0.0, floor=2.5)
    np.testing.assert_allclose(np.linalg.eigvalsh(floored[0]), [2.5, 2.5, 3.0, 10.0])


# -- the privacy error's covariance -------------------------------------------------

P, N, SITES, SIGMA, DRAWS = 5, 4000, 3, 10.0, 250


def _fixed_sites():
    """Fixed rows (inside the clip, so clipping is the identity), their
    sites and the non-private minimizer at the same ``alpha``."""
    X, y, g, _ = make_federated_gaussians(n_sites=SITES, n_batches=1, n_per_batch=N // SITES,
                                          n_features=P, mu=0.2, sigma=1.0, random_state=0)
    clip = 2.0 * math.sqrt(1.0 + P)
    inside = np.sqrt(1.0 + (X**2).sum(axis=1)) <= clip
    X, y, g = X[inside], y[inside], g[inside]
    Y = np.where(y == 1, 1.0, -1.0)[:, None]
    sites = SiteData(X, Y, np.ones(len(X)), [np.flatnonzero(g == s) for s in range(SITES)],
                     None, True)
    public = DWDClassifier(q=1.0, alpha=1e-3, tol=1e-10).fit(X, y)
    return sites, np.r_[public.intercept_, public.coef_[0]][:, None], clip


def test_privacy_error_covariance_matches_the_spread_over_noise_draws():
    """Fixed data, the refinement started at the non-private minimizer
    ``θ̂`` and run on ``DRAWS`` independent noise streams at a σ that puts
    the last curvature below its noise floor (the ε = 1 regime): the
    standard deviation the formula gives (its mean variance over the
    draws) against the empirical deviation of ``θ̃ - θ̂``. Monte Carlo
    error of the latter: ``1 / sqrt(2 DRAWS)`` = 4.5 %; the band allows 3
    of them around [0.95, 1.2] (the plug-in, from one noised release,
    measured 1.1-1.25 here where the true curvature in its place gives
    0.97-1.11). The nearest-PSD plug-in it replaced gave 1.7-1.9."""
    sites, theta_hat, clip = _fixed_sites()
    loss = GenDWDLoss(1.0)
    errors, variances, lifted = [], [], 0
    for seed in range(DRAWS):
        out = private_refinement(sites, theta_hat, SIGMA, np.random.default_rng(seed),
                                 loss=loss, alpha=1e-3, fit_intercept=True, clip_norm=clip)
        errors.append(out.theta[:, 0] - theta_hat[:, 0])
        variances.append(np.diagonal(privacy_error_covariance(out)[0]))
        floor = 2.0 * out.floor_std() * math.sqrt(P + 1)
        lifted += np.linalg.eigvalsh(out.curvatures[-1][0]).min() < floor
    assert lifted > 0.9 * DRAWS  # the regime the plug-in is for
    ratio = np.sqrt(np.mean(variances, axis=0)) / np.std(errors, axis=0, ddof=1)
    slack = 3.0 / math.sqrt(2 * DRAWS)
    assert np.all((ratio > 0.95 - slack) & (ratio < 1.2 + slack)), ratio
