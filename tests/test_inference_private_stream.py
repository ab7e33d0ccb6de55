"""Intervals after every batch of a 'local-gaussian' stream (issue #24): the
later batches' releases and their calibration, refusals that change
nothing, the covariance against the spread of the private stream estimate over
simulated data sets, and a coverage check."""

import math
import warnings

import numpy as np
import pytest

from skfedpriv import DWDClassifier, PrivacyBudget
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians
from skfedpriv.federated import DWDSite, LocalTransport, RemoteSites
from skfedpriv.linear_model._inference_private_stream import stream_batch_releases
from skfedpriv.privacy._objective_perturbation import local_gaussian_sigma

from _inference_simulation import assert_covers, assert_spread_matches

MU, CLIP = 0.2, 2.0 * math.sqrt(3.0)


def _data(seed, n, p=2, sites=2):
    X, y, g, _ = make_federated_gaussians(n_sites=sites, n_batches=1, n_per_batch=n // sites,
                                          n_features=p, mu=MU, sigma=1.0, random_state=seed)
    return X, y, g


def _private(**params):
    defaults = dict(mechanism="local-gaussian", inference=True, epsilon=8.0, clip_norm=CLIP,
                    classes=[-1, 1], random_state=0)
    return DWDClassifier(**{**defaults, **params})


def _stream(clf, X, y, g, first, later):
    """``fit`` on the first ``first`` rows, then ``partial_fit`` batches of
    ``later`` rows."""
    clf.fit(X[:first], y[:first], sample_group=g[:first])
    for start in range(first, len(y), later):
        rows = slice(start, start + later)
        clf.partial_fit(X[rows], y[rows], sample_group=g[rows])
    return clf


# -- releases and their calibration ----------------------------------------------


def test_later_batches_publish_intervals_that_are_releases():
    X, y, g = _data(0, 4000)
    budget = PrivacyBudget(10.0, 1e-3)
    clf = _private(budget=budget)
    clf.fit(X[:2000], y[:2000], sample_group=g[:2000])
    spent, first_sigma = clf.privacy_spent_, clf.noise_scale_
    for batch in range(2):
        rows = slice(2000 + 1000 * batch, 3000 + 1000 * batch)
        clf.partial_fit(X[rows], y[rows], sample_group=g[rows])
        assert clf.n_batches_ == batch + 2 and clf.n_iter_ == 1
        assert np.all(np.isfinite(clf.coef_se_)) and np.all(clf.coef_se_ > 0)
        released = clf.release()
        for name in ("coef_", "intercept_", "coef_se_", "intercept_se_", "coef_cov_"):
            np.testing.assert_array_equal(getattr(released, name), getattr(clf, name))
        assert not hasattr(clf, "curvature_")
    # one charge for the stream (each row is in one batch); a later batch's
    # noise is calibrated for its own count of unit releases
    assert len(budget.ledger.entries) == 1 and clf.privacy_spent_ == spent
    assert clf.noise_scale_ == pytest.approx(
        local_gaussian_sigma(8.0, 1e-5, stream_batch_releases(1), "analytic"))
    assert clf.noise_scale_ < first_sigma
    assert clf.confint().shape == (1, 3, 2)


def test_every_draw_of_a_later_batch_is_counted_and_matches_dp_accounting(monkeypatch):
    """Every site noise draw of a later three-class batch, with the
    sensitivity of what it perturbs: the unit releases they add up to are
    ``stream_batch_releases(K)``, and dp-accounting's Gaussian mechanism at
    that count and the batch's σ gives the stream's ε, the figure charged
    once (a row is in one batch: the batches compose in parallel)."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import pld

    from _site_draws import SiteDraws
    q, n_sites, K = 1.0, 2, 3
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1800, 2)) + np.tile(np.eye(3, 2), (600, 1))
    y, g = np.tile([0, 1, 2], 600), np.arange(1800) % n_sites
    budget = PrivacyBudget(10.0, 1e-3)
    clf = _private(epsilon=1.0, budget=budget, classes=[0, 1, 2], q=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X[:1200], y[:1200], sample_group=g[:1200])
    draws = SiteDraws(monkeypatch, q, CLIP)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.partial_fit(X[1200:], y[1200:], sample_group=g[1200:])
    sigma = clf.noise_scale_
    units = draws.unit_releases(sigma, n_sites)
    # per model: one gradient (the curvature and score variance are the first batch's)
    assert units == pytest.approx(K) and stream_batch_releases(K) == K
    accountant = pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(sigma / math.sqrt(units)))
    assert accountant.get_epsilon(1e-5) == pytest.approx(1.0, abs=2e-3)
    (entry,) = budget.ledger.entries
    assert entry.sigma / entry.sensitivity == pytest.approx(sigma / math.sqrt(units))
    assert clf.privacy_spent_ == pytest.approx((1.0, 1e-5))


def _state(clf):
    return (clf.coef_.copy(), clf.intercept_.copy(), clf.coef_cov_.copy(), clf.n_batches_,
            clf.n_samples_seen_, clf.privacy_spent_, clf.noise_scale_)


def _assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float))


def test_refused_later_batches_change_nothing():
    """A later batch with an undeclared label, or on remote sites that do not
    noise their summaries, raises before any change: the state, the
    charge and the noise generator are as before, and the stream goes on."""
    X, y, g = _data(1, 4000)
    budget = PrivacyBudget(10.0, 1e-3)
    clf = _private(budget=budget).fit(X[:2000], y[:2000], sample_group=g[:2000])
    before, entries = _state(clf), budget.ledger.entries
    generator = clf._training_state.rng.bit_generator.state
    bad = y[2000:3000].copy()
    bad[0] = 7
    with pytest.raises(ValueError):
        clf.partial_fit(X[2000:3000], bad, sample_group=g[2000:3000])
    rows = [X[2000:3000][g[2000:3000] == s] for s in (0, 1)]
    labels = [y[2000:3000][g[2000:3000] == s] for s in (0, 1)]
    plain = [DWDSite(lambda b, s=s: (rows[s], labels[s]), name=f"s{s}") for s in (0, 1)]
    with pytest.raises(ValueError, match="noise its own summaries"):
        clf.partial_fit_sites(RemoteSites(LocalTransport(plain), 0))
    _assert_same(_state(clf), before)
    assert budget.ledger.entries == entries
    assert clf._training_state.rng.bit_generator.state == generator
    clf.partial_fit(X[3000:], y[3000:], sample_group=g[3000:])
    assert clf.n_batches_ == 2 and np.isfinite(clf.coef_se_).all()


def test_a_first_batch_without_interval_leaves_the_stream_without_one():
    """600 rows at 3 sites at ε = 1 (a noise draw, ``random_state=4``, for
    which the first batch publishes no interval: the one-batch check); a
    later batch, even a large one, publishes none either, and still
    updates the model."""
    X, y, g = _data(3, 4600, sites=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = _private(epsilon=1.0, random_state=4).fit(X[:600], y[:600], sample_group=g[:600])
        assert np.isnan(clf.coef_se_).all()
        before = clf.coef_.copy()
        clf.partial_fit(X[600:], y[600:], sample_group=g[600:])
    assert np.isnan(clf.coef_se_).all() and np.isnan(clf.confint()).all()
    assert np.isfinite(clf.coef_).all() and not np.array_equal(clf.coef_, before)


# -- the variance ------------------------------------------------------------------


def test_a_later_batch_adds_its_gradient_noise_through_the_scaled_first_system():
    """Fixed rows and first batch, 2 000 draws of a later batch's noise: the
    empirical covariance of the step's estimate is ``L⁻¹ (n_sites σ_g² I) L⁻¹``,
    computed here from public values only (``L`` the first batch's released
    system per row times the rows seen, ``σ_g`` the one-release calibration
    times the gradient's sensitivity ``2 C2``); the published covariance
    adds the carried and sampling terms to it."""
    from skfedpriv._loss import GenDWDLoss
    from skfedpriv.linear_model._dwd_solver import SiteData
    from skfedpriv.linear_model._inference_private_stream import (private_stream_rates,
                                                                  private_stream_step)

    X, y, g = _data(5, 3000)
    clf = _private(epsilon=4.0).fit(X[:2000], y[:2000], sample_group=g[:2000])
    refinement, state = clf.private_refinement_, clf._training_state
    sigma = local_gaussian_sigma(4.0, 1e-5, stream_batch_releases(1), "analytic")
    inverse = np.linalg.inv((3000.0 / 2000.0) * refinement.system(-1)[0])  # rows scale all
    expected = 2 * (sigma * 2.0 * CLIP) ** 2 * inverse @ inverse  # 2 sites
    sites = SiteData.from_site_codes(X[2000:], y[2000:], np.ones(1000), g[2000:], 2)
    sites.prepare(np.array([-1, 1]), fit_intercept=True, clip_norm=CLIP)
    rates = private_stream_rates(refinement, 2000.0)
    estimates = []
    for seed in range(2000):
        theta, _, cov = private_stream_step(
            sites, state.theta, state.curvature, rates, state.coef_cov, sigma,
            np.random.default_rng(seed), loss=GenDWDLoss(1.0), alpha=clf.alpha,
            fit_intercept=True, clip_norm=CLIP)
        estimates.append(theta[:, 0])
    empirical = np.cov(np.array(estimates).T)
    scale = np.sqrt(np.outer(np.diag(expected), np.diag(expected)))
    # 2 000 draws: the relative standard error of a variance is sqrt(2/1999) = 3 %
    np.testing.assert_allclose(empirical / scale, expected / scale, atol=0.1)
    assert np.linalg.eigvalsh(cov[0] - expected).min() > 0


def test_the_later_batches_score_variance_is_the_first_batchs_noisy_score_covariance():
    """``B̂ W_1`` (the later batches' score variance per row times the first
    batch's rows) is the refinement's own ``B̃``, the one its sandwich
    inverts, and (noise negligible, no row clipped) the brute-force
    ``Σ_i g_i g_iᵀ`` of the rows' penalized scores at the refined estimate."""
    from skfedpriv._loss import GenDWDLoss
    from skfedpriv.linear_model._inference_private_curvature import SANDWICH_FLOOR
    from skfedpriv.linear_model._inference_private_stream import private_stream_rates

    X, y, g = _data(6, 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = _private(epsilon=1e5, clip_norm=10.0).fit(X, y, sample_group=g)
    refinement = clf.private_refinement_
    outer = private_stream_rates(refinement, 2000.0)["outer"] * 2000.0
    np.testing.assert_array_equal(outer, refinement.score_cov)
    inverse = np.linalg.inv(refinement.hessian(SANDWICH_FLOOR * refinement.floor_std()))
    np.testing.assert_allclose(inverse @ outer @ inverse, refinement.sampling_cov, rtol=1e-8)
    theta = refinement.theta[:, 0]
    rows = np.c_[np.ones(len(X)), X]
    assert np.linalg.norm(rows, axis=1).max() < 10.0
    margins = GenDWDLoss(1.0).derivative(y * (rows @ theta))
    scores = (y * margins)[:, None] * rows + clf.alpha * np.r_[0.0, 1.0, 1.0] * theta
    brute = scores.T @ scores
    scale = np.sqrt(np.outer(np.diag(brute), np.diag(brute)))
    # the outer products are taken where the last stage starts, a few
    # converging steps before the refined estimate
    np.testing.assert_allclose(outer[0] / scale, brute / scale, atol=5e-3)


def _replication(seed):
    X, y, g = _data(seed, 7000)
    return _stream(_private(random_state=10_000 + seed), X, y, g, 4000, 1000)


@pytest.fixture(scope="module")
def simulated():
    """200 data sets, each streamed privately with fresh noise: a first
    batch of 4 000 rows, then 3 batches of 1 000, over 2 sites."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = [_replication(seed) for seed in range(200)]
    return fitted


def test_stream_variance_matches_the_spread_of_the_private_estimate(simulated):
    """The mean reported variance after the last batch against the empirical
    variance of the stream's estimates over data sets and noise."""
    variances = np.array([np.diagonal(clf.coef_cov_[0]) for clf in simulated])
    assert np.isfinite(variances).all()
    assert_spread_matches(np.array([np.r_[clf.intercept_, clf.coef_[0]] for clf in simulated]),
                          variances)


def test_private_stream_coverage(simulated):
    intercept, coef = gaussian_gendwd_target(2, MU, 1.0, 1.0, q=1.0)
    assert_covers(np.array([clf.confint()[0] for clf in simulated]), np.r_[intercept, coef])


def test_later_batch_publishes_only_releases_and_data_independent_values():
    """After a later batch, every public fitted attribute of the release is
    a noised release or declared data-independent; the declared ones are
    equal on neighbouring streams (one row of the later batch replaced, the
    same seed), and the release holds no secret."""
    from test_release_any import check_neighbouring_releases

    noised = {"coef_", "intercept_", "coef_cov_", "coef_se_", "intercept_se_"}
    independent = {"classes_", "n_batches_", "n_features_in_", "n_iter_", "n_samples_seen_",
                   "noise_scale_", "privacy_spent_", "rho_"}
    X, y, g = _data(4, 3000)
    Xn, yn = X.copy(), y.copy()
    Xn[2500], yn[2500] = -X[2500], -y[2500]
    check_neighbouring_releases(
        lambda rows, labels: _stream(_private(random_state=1), rows, labels, g, 2000, 1000),
        (X, y), (Xn, yn), noised, independent)


def test_a_stream_whose_first_batch_is_under_half_the_rows_publishes_no_interval():
    """Measured rule (FIRST_BATCH_SHARE): while the first batch holds half
    the rows seen the interval is published; from the batch that takes it
    below, the covariance is NaN, with a warning, and the model still moves."""
    from skfedpriv.linear_model._inference_private_stream import FIRST_BATCH_SHARE
    from skfedpriv.privacy import NoiseDominatesWarning

    assert FIRST_BATCH_SHARE == 0.5
    X, y, g = _data(0, 6000)
    clf = _private()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X[:2000], y[:2000], sample_group=g[:2000])
        clf.partial_fit(X[2000:4000], y[2000:4000], sample_group=g[2000:4000])
    assert np.isfinite(clf.coef_se_).all()
    before = clf.coef_.copy()
    with pytest.warns(NoiseDominatesWarning, match="first batch holds less than 50%"):
        clf.partial_fit(X[4000:], y[4000:], sample_group=g[4000:])
    assert np.isnan(clf.coef_se_).all() and np.isnan(clf.confint()).all()
    assert np.isfinite(clf.coef_).all() and not np.array_equal(clf.coef_, before)
