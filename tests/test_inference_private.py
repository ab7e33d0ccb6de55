"""Coefficient inference under 'local-gaussian' (issue #24): the refusal of
other mechanisms, the charge of the extra summary, its sensitivity and an
audit of its release, the noise-aware variance against the spread of the
private estimator over simulated data sets, and a coverage check."""

import math
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from skfedpriv import DWDClassifier, PrivacyBudget
from skfedpriv._loss import GenDWDLoss
from skfedpriv._param_validation import InvalidParameterError
from skfedpriv.datasets import gaussian_gendwd_target, make_federated_gaussians
from skfedpriv.linear_model._inference_private import (
    CURVATURE_RELEASES,
    PRECISION,
    ROUNDS,
    STAGE_PRECISION,
    inference_releases,
)
from skfedpriv.linear_model._inference_sites import site_inference_summary
from skfedpriv.privacy import gaussian_noise
from skfedpriv.privacy._objective_perturbation import (
    clip_augmented_rows,
    local_gaussian_releases,
    local_gaussian_sigma,
)
from skfedpriv.privacy._score_outer import exact_curvature_sensitivity, score_outer_sensitivity

from _reference import audit_epsilon

MU, CLIP = 0.2, 2.0 * math.sqrt(3.0)


def _data(seed, n=5000, p=2, sites=1, ratio=1.0):
    X, y, g, _ = make_federated_gaussians(n_sites=sites, n_batches=1, n_per_batch=n // sites,
                                          n_features=p, mu=MU, sigma=1.0, ratio=ratio,
                                          random_state=seed)
    return X, y, g


def _private(**params):
    defaults = dict(mechanism="local-gaussian", inference=True, epsilon=8.0, clip_norm=CLIP,
                    classes=[-1, 1], random_state=0)
    return DWDClassifier(**{**defaults, **params})


# -- what is offered -----------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "local-tree", "local-blt"])
def test_other_mechanisms_refuse_inference_before_any_change(mechanism):
    X, y, g = _data(0, n=200)
    budget = PrivacyBudget(10.0, 1e-3)
    clf = _private(mechanism=mechanism, budget=budget, n_batches=2)
    with pytest.raises(InvalidParameterError, match="local-gaussian"):
        clf.fit(X, y, sample_group=g)
    assert not hasattr(clf, "coef_") and budget.spent == (0.0, 0.0)


def test_public_attributes_are_releases():
    X, y, g = _data(1, n=2000)
    clf = _private().fit(X, y, sample_group=g)
    released = clf.release()
    for name in ("coef_se_", "intercept_se_", "coef_cov_"):
        np.testing.assert_array_equal(getattr(released, name), getattr(clf, name))
    assert not hasattr(clf, "curvature_") and not hasattr(released, "_training_state")
    assert clf.n_iter_ == clf.online_steps + ROUNDS
    assert np.all(np.isfinite(clf.coef_se_)) and np.all(clf.coef_se_ > 0)
    assert clf.confint().shape == (1, 3, 2)


# -- the charge ------------------------------------------------------------------


def test_charge_counts_the_inference_summary_and_matches_dp_accounting():
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import pld

    X, y, g = _data(2, n=600, sites=3)
    budget = PrivacyBudget(10.0, 1e-3)
    clf = _private(epsilon=1.0, budget=budget, online_steps=4).fit(X, y, sample_group=g)
    (entry,) = budget.ledger.entries
    # per model: 4 pilot gradients + 1 curvature, the Gram, and the refinement:
    # 3 x 10 gradients, curvatures at 1/1.5, 1/1.5 and 1/5 the noise (2.25, 2.25
    # and 25 each) and 1 score outer product at 1/3 the noise (9)
    releases = (4 + 1) + 1 + (3 * 10 + 2.25 + 2.25 + 25 + 9)
    assert local_gaussian_releases(1, 4, True) + inference_releases(1) == releases
    assert entry.sensitivity == pytest.approx(math.sqrt(releases))
    assert entry.sigma == pytest.approx(clf.noise_scale_)
    accountant = pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(entry.sigma / entry.sensitivity))
    assert accountant.get_epsilon(1e-5) == pytest.approx(1.0, abs=2e-3)
    assert clf.privacy_spent_ == pytest.approx((1.0, 1e-5))


# -- sensitivity and audit ----------------------------------------------------------


def _upper(matrix):
    return matrix[np.triu_indices(matrix.shape[-1])]


@pytest.mark.parametrize("q", [0.5, 1.0, 4.0])
def test_inference_summary_sensitivity_brute_force(q):
    """Replace one row by many others (random, and the extreme ones): the
    upper triangles of both summaries move by at most their bounds, and the
    score outer product's bound is attained."""
    loss, c2, rng = GenDWDLoss(q), 2.5, np.random.default_rng(int(4 * q))
    X = clip_augmented_rows(rng.normal(size=(40, 3)) * 2, c2, True)
    y = rng.choice([-1.0, 1.0], size=(40, 1))
    theta = rng.normal(size=(4, 1)) * 0.5
    ones = np.ones(40)
    base = site_inference_summary(X, y, ones, theta, True, loss.derivative, loss.curvature)
    worst = [0.0, 0.0]
    candidates = [rng.normal(size=3) * s for s in (0.1, 1, 5) for _ in range(100)]
    scale = math.sqrt(c2**2 - 1)
    candidates += [X[0] / np.linalg.norm(X[0]) * scale * -1, np.zeros(3)]
    for row in candidates:
        for label in (-1.0, 1.0):
            Xn, yn = X.copy(), y.copy()
            Xn[0] = clip_augmented_rows(row[None], c2, True)[0]
            yn[0] = label
            other = site_inference_summary(Xn, yn, ones, theta, True, loss.derivative,
                                           loss.curvature)
            worst[0] = max(worst[0], np.linalg.norm(_upper(other.curvature[0] - base.curvature[0])))
            worst[1] = max(worst[1], np.linalg.norm(_upper(other.score_outer[0]
                                                           - base.score_outer[0])))
    assert worst[0] <= exact_curvature_sensitivity(loss, c2)
    assert worst[1] <= score_outer_sensitivity(loss, c2)
    # at theta = 0 every row has V' = -1: two rows at the clip with orthogonal
    # features move the score outer products by nearly sqrt(2) C2² (Frobenius),
    # at least 1/sqrt(2) of that in the upper triangle
    a, b = np.array([scale, 0.0, 0.0]), np.array([0.0, scale, 0.0])
    pair = [site_inference_summary(np.vstack([row, X[1:]]), y, ones, np.zeros((4, 1)), True,
                                   loss.derivative, loss.curvature).score_outer[0]
            for row in (a, b)]
    bound = score_outer_sensitivity(loss, c2)
    # augmented rows (1, a), (1, b) share the intercept: ‖āāᵀ - b̄b̄ᵀ‖² = 2 C2⁴ - 2 (āᵀb̄)²
    assert np.linalg.norm(pair[0] - pair[1]) == pytest.approx(math.sqrt(2 * c2**4 - 2))
    assert np.linalg.norm(pair[0] - pair[1]) >= 0.98 * bound
    assert np.linalg.norm(_upper(pair[0] - pair[1])) >= bound / math.sqrt(2)


@pytest.mark.parametrize("noise_factor, should_violate", [(1.0, False), (0.5, True)])
def test_empirical_audit_of_the_score_outer_release(noise_factor, should_violate):
    """One site's score outer product release (its share of the stream: noise
    multiplier σ / PRECISION), on neighbouring batches, projected on the
    direction the replaced row moves it. The Clopper-Pearson lower bound of ε
    stays below that release's exact ε, and exceeds it at half the noise."""
    from skfedpriv.privacy import gaussian_epsilon

    delta, c2, loss = 1e-5, 2.0, GenDWDLoss(1.0)
    rng = np.random.default_rng(5)
    X = clip_augmented_rows(rng.normal(size=(30, 2)), c2, True)
    y = rng.choice([-1.0, 1.0], size=(30, 1))
    Xn = X.copy()
    scale = math.sqrt(c2**2 - 1)
    X[0], Xn[0] = [scale, 0.0], [0.0, scale]
    theta = np.zeros((3, 1))  # V' = -1 for every row
    outer = [_upper(site_inference_summary(Z, y, np.ones(30), theta, True, loss.derivative,
                                           loss.curvature).score_outer[0]) for Z in (X, Xn)]
    releases = local_gaussian_releases(1, 10, True) + inference_releases(1)
    sigma = local_gaussian_sigma(1.0, delta, releases, "analytic") / PRECISION
    claimed = gaussian_epsilon(sigma, delta, 1.0)  # this release's share, exactly
    std = sigma * score_outer_sensitivity(loss, c2) * noise_factor
    direction = (outer[0] - outer[1]) / np.linalg.norm(outer[0] - outer[1])
    n = 400_000
    # symmetric noise projected on a unit vector of its upper triangle is N(0, std²)
    released_d = outer[0] @ direction + gaussian_noise(std, n, random_state=rng)
    released_n = outer[1] @ direction + gaussian_noise(std, n, random_state=rng)
    center = outer[1] @ direction
    grid = center + np.linspace(0, np.linalg.norm(outer[0] - outer[1]) + 5 * std, 200)
    lower = audit_epsilon(released_d, released_n, delta, grid)
    assert (lower > claimed) == should_violate


# -- the variance ------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulated():
    """200 data sets, each fitted privately with fresh noise."""
    p = 2
    intercept, coef = gaussian_gendwd_target(p, MU, 1.0, 1.0, q=1.0)
    target = np.r_[intercept, coef]
    estimates, variances = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(200):
            X, y, g = _data(seed, p=p)
            clf = _private(random_state=10_000 + seed).fit(X, y, sample_group=g)
            estimates.append(np.r_[clf.intercept_, clf.coef_[0]])
            variances.append(np.diagonal(clf.coef_cov_[0]))
    return target, np.array(estimates), np.array(variances)


def test_variance_matches_the_spread_of_the_private_estimator(simulated):
    """The mean reported variance against the empirical variance of the
    estimates over data sets and noise (relative Monte Carlo error of the
    latter about 10 % at 200 replications)."""
    _, estimates, variances = simulated
    ratio = variances.mean(axis=0) / estimates.var(axis=0, ddof=1)
    assert np.all((ratio > 0.7) & (ratio < 1.4)), ratio


def test_private_coverage(simulated):
    target, estimates, variances = simulated
    half = norm.ppf(0.975) * np.sqrt(variances)
    coverage = (np.abs(estimates - target) <= half).mean()
    assert 0.90 <= coverage <= 0.99, coverage


def test_unresolved_curvature_publishes_no_interval():
    """600 rows of 5 features at 3 sites: the noised curvature is below its
    noise level, the steps cannot be trusted to have removed the pilot's
    error: the covariance is NaN (no interval), with a warning; the model
    is kept."""
    from skfedpriv.privacy import NoiseDominatesWarning

    X, y, g = _data(3, n=600, sites=3, p=5)
    with pytest.warns(NoiseDominatesWarning, match="standard errors"):
        clf = _private(epsilon=1.0, clip_norm=2.0 * math.sqrt(6.0)).fit(X, y, sample_group=g)
    assert np.isnan(clf.coef_se_).all() and np.isnan(clf.confint()).all()
    assert np.isfinite(clf.coef_).all()


def test_the_charge_covers_every_draw_the_multiclass_fit_makes(monkeypatch):
    """Every site noise draw of a three-class fit is recorded with its std
    and the sensitivity of what it perturbs: the unit releases they add up
    to, ``Σ (σ Δ / std)²`` per site, are what the stream is charged, and
    dp-accounting's Gaussian mechanism at that count gives ε."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import pld

    from _site_draws import SiteDraws

    q, n_sites, K = 1.0, 2, 3
    draws = SiteDraws(monkeypatch, q, CLIP)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(900, 2)) + np.repeat(np.eye(3, 2), 300, axis=0)
    y, g = np.repeat([0, 1, 2], 300), np.tile(np.arange(n_sites), 450)
    budget = PrivacyBudget(10.0, 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = _private(epsilon=1.0, budget=budget, classes=[0, 1, 2], q=q, online_steps=2)
        clf.fit(X, y, sample_group=g)
    sigma = clf.noise_scale_
    units = draws.unit_releases(sigma, n_sites)
    # pilot: K (2 gradients + 1 curvature) + the Gram; refinement: K (30 + 2.25 · 2 + 25 + 9)
    assert CURVATURE_RELEASES == len(STAGE_PRECISION) == 3 and ROUNDS == 30
    assert units == pytest.approx(K * 3 + 1 + K * (30 + 2.25 * 2 + 25 + 9))
    (entry,) = budget.ledger.entries
    assert entry.sensitivity**2 == pytest.approx(units)
    accountant = pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(sigma / math.sqrt(units)))
    assert accountant.get_epsilon(1e-5) == pytest.approx(1.0, abs=2e-3)


def test_safeguarded_steps_converge_where_the_system_is_below_the_curvature(monkeypatch):
    """A system 4 times below the curvature along one direction: undamped
    steps diverge (factor |1 - 4| = 3 per step); the safeguard doubles the
    damping when the gradient grows and the steps converge. A system equal
    to the curvature is never damped (one step solves the quadratic)."""
    from skfedpriv.linear_model import _inference_private
    from skfedpriv.linear_model._inference_private import safeguarded_step

    hessian, target = np.diag([4.0, 1.0]), np.array([1.0, -2.0])

    def run(system, steps=40):
        theta, damping, last = np.zeros((1, 2)), np.ones(1), np.full(1, np.inf)
        for _ in range(steps):
            move, damping, last = safeguarded_step((theta - target) @ hessian, system[None],
                                                   damping, last)
            theta = theta - move
        return np.linalg.norm(theta - target), damping[0]

    error, damping = run(np.eye(2))
    assert error < 1e-6 and damping > 1
    error, damping = run(hessian, steps=1)
    assert error < 1e-12 and damping == 1
    monkeypatch.setattr(_inference_private, "GROWTH", np.inf)
    error, _ = run(np.eye(2), steps=10)
    assert error > 1e3
