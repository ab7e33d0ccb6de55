"""DWD's prefix-sum mechanisms ('local-tree', 'local-blt'): the site's
summary, its sensitivity, the calibration, an audit, the estimator."""

import math
import warnings

import numpy as np
import pytest

from _streams import audit_summary_pair, resumed_stream, small_stream_warns_before_spending
from skfedpriv import DWDClassifier
from skfedpriv._losses import gendwd_derivative, gendwd_smoothed_curvature
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.linear_model import DWDSites
from skfedpriv.linear_model._dwd import CONTINUAL
from skfedpriv.linear_model._dwd_solver import SiteData
from skfedpriv.privacy import (
    NoiseDominatesWarning,
    PrivacyBudget,
    PrivacyBudgetError,
    gaussian_epsilon,
    make_factorization,
)
from skfedpriv.privacy._continual_summaries import (
    SiteNoiseStreams,
    COEFFICIENT_CLIP,
    continual_sensitivities,
    continual_sigma,
    linearized_summary,
    model_curvature,
    noise_to_signal,
)
from skfedpriv.privacy._objective_perturbation import PublishedCalibration, clip_augmented_rows

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")


def _rows(rng, n, p, c2, fit_intercept=True):
    return clip_augmented_rows(rng.normal(scale=3.0, size=(n, p)), c2, fit_intercept)


# -- the site's summary ---------------------------------------------------------


@pytest.mark.parametrize("q", [0.5, 1.0, 3.0])
def test_model_gradient_at_its_point_is_the_batch_gradient(q):
    """``a + J θ`` at the linearization point is the batch's gradient
    ``Σ y V'(u) x̄`` for rows whose coefficient is inside the clip (margins
    past the band: ``h`` is the smoothed ``V_q''``); a row beyond it has its
    coefficient clipped to norm ``COEFFICIENT_CLIP`` exactly."""
    rng = np.random.default_rng(0)
    X = _rows(rng, 50, 3, 3.0)
    Xb = np.hstack([np.ones((50, 1)), X])
    theta = rng.normal(size=(4, 1))
    theta *= 3.0 / np.min(np.abs(Xb @ theta))
    y = np.sign(Xb @ theta)  # every margin >= 3
    a, J = linearized_summary(X, y, theta, q, True)
    u = y[:, 0] * (Xb @ theta[:, 0])
    assert np.all(u >= 3.0 - 1e-9)
    np.testing.assert_allclose(model_curvature(u, q), gendwd_smoothed_curvature(u, q))
    gradient = Xb.T @ (y[:, 0] * gendwd_derivative(u, q))
    np.testing.assert_allclose(a[:, 0] + J[0] @ theta[:, 0], gradient, atol=1e-10)
    # a row at margin 0.9 (in the band, |V' - u h| > 1): coefficient -1 exactly
    point = theta * 0.9 / (Xb[:1] @ theta)
    a1, _ = linearized_summary(X[:1], np.ones((1, 1)), point, q, True)
    assert abs(gendwd_derivative(0.9, q) - 0.9 * model_curvature(0.9, q)) > COEFFICIENT_CLIP
    np.testing.assert_allclose(a1[:, 0], -COEFFICIENT_CLIP * Xb[0])


@pytest.mark.parametrize("q, n_models", [(1.0, 1), (0.5, 3), (3.0, 4)])
def test_summary_moves_within_the_sensitivity_brute_force(q, n_models):
    """Replace one row by random and adversarial rows, at random and large
    parameters: the stacked ``a`` and ``J`` move by at most (Δ_a, Δ_J), and
    some neighbour comes within a factor 2 of each (the bounds are not vacuous)."""
    rng = np.random.default_rng(1)
    c2, p = 3.0, 3
    delta_a, delta_J = continual_sensitivities(q, c2)
    worst = np.zeros(2)
    for trial in range(300):
        X = _rows(rng, 6, p, c2)
        Y = rng.choice([-1.0, 1.0], size=(6, n_models))
        theta = rng.normal(scale=[0.3, 1.0, 5.0][trial % 3], size=(p + 1, n_models))
        Xn, Yn = X.copy(), Y.copy()
        Xn[0] = [-X[0], _rows(rng, 1, p, c2)[0], np.zeros(p)][trial % 3]
        Yn[0] = rng.choice([-1.0, 1.0], size=n_models)
        a, J = linearized_summary(X, Y, theta, q, True)
        an, Jn = linearized_summary(Xn, Yn, theta, q, True)
        moved = np.array([np.linalg.norm(a - an), np.linalg.norm(J - Jn)])
        assert moved[0] <= delta_a * (1 + 1e-12) and moved[1] <= delta_J * (1 + 1e-12)
        worst = np.maximum(worst, moved / [delta_a, delta_J])
    assert np.all(worst > 0.35), worst


# -- calibration and accounting ---------------------------------------------------


@pytest.mark.parametrize("name, n_batches", [("honaker", 8), ("blt", 100)])
def test_sigma_is_one_gaussian_mechanism_of_the_factorization(name, n_batches):
    dp_accounting = pytest.importorskip("dp_accounting")
    factorization = make_factorization(name, n_batches)
    sigma = continual_sigma(1.0, 1e-5, factorization)
    reference = dp_accounting.get_sigma_gaussian(1.0, 1e-5) * factorization.sensitivity
    assert sigma == pytest.approx(reference, rel=1e-6)
    # a row enters one step of one site's stream: the column norm of C
    C = np.asarray(factorization.C)
    assert factorization.sensitivity == pytest.approx(np.linalg.norm(C, axis=0).max(), rel=1e-12)


def test_site_noise_is_the_factorization_noise_at_the_calibrated_std():
    """Every entry of the summed noise of the prefix sums has the variance
    ``n_sites σ² (Δ/w)² (BBᵀ)_rr`` (checked on many replicas)."""
    factorization = make_factorization("honaker", 4)
    sums = []
    for seed in range(2000):
        noise = SiteNoiseStreams(factorization, 2, 2, 1, 1.5, (1.0, 1.0),
                                 np.random.default_rng(seed))
        a = np.cumsum([noise.next()[0][0, 0] for _ in range(4)])
        sums.append(a)
    expected = 2 * noise.std[0] ** 2 * np.diag(factorization.B @ factorization.B.T)
    np.testing.assert_allclose(np.var(sums, axis=0), expected, rtol=0.15)
    assert noise.prefix_variance(3) == pytest.approx(
        2 * noise.std[1] ** 2 * (factorization.B @ factorization.B.T)[3, 3])


# -- empirical audit --------------------------------------------------------------


@pytest.mark.parametrize("noise_factor, should_violate", [(1.0, False), (0.5, True)])
def test_empirical_audit_of_a_site_stream(noise_factor, should_violate):
    """Two prefix sums of one site's 2-batch Honaker stream, on neighbouring
    batches (one row replaced, in the first batch), summaries from the
    package's site code and noise std from its calibration.

    The row pair is near the worst case: orthogonal rows of norm C2 at the
    margin where the coefficient is largest. Both prefix sums see the change;
    the audit projects them on the likelihood-ratio direction (the noise
    covariance is ``BBᵀ`` per entry, in units of each block's std). The ε
    lower bound (Clopper-Pearson, 95%) stays below ε; with half the noise it
    exceeds it (the audit has power).
    """
    q, c2, epsilon, delta = 1.0, 2.0, 1.0, 1e-5
    u = np.linspace(-2, 4, 60001)
    star = u[np.argmax(np.abs(gendwd_derivative(u, q) - u * model_curvature(u, q)))]
    theta = np.array([[star / c2], [star / c2]])
    rows = np.array([[c2, 0.0], [0.0, c2]])
    a, J = linearized_summary(rows[:1], np.ones((1, 1)), theta, q, False)
    an, Jn = linearized_summary(rows[1:], np.ones((1, 1)), theta, q, False)
    # the pair is close enough to the worst case that half the noise exceeds the claim
    ratio, lower = audit_summary_pair((a, J), (an, Jn), continual_sensitivities(q, c2), epsilon, delta,
                                      noise_factor)
    assert 0.6 < ratio < 1.0
    assert (lower > epsilon) if should_violate else (lower <= epsilon)


# -- the estimator ----------------------------------------------------------------


def _data(n_batches=4, seed=0):
    return make_federated_gaussians(n_sites=3, n_batches=n_batches, n_per_batch=100,
                                    n_features=5, mu=0.5, random_state=seed)


@pytest.mark.parametrize("mechanism", sorted(CONTINUAL))
def test_stream_charges_once_resumes_after_pickle_and_stops_at_its_horizon(mechanism):
    X, y, g, b = _data()
    budget = PrivacyBudget(epsilon=2.0, delta=1e-4)
    params = dict(mechanism=mechanism, epsilon=1.0, clip_norm=4.0, n_batches=4,
                  classes=[-1, 1], random_state=0)
    clf = resumed_stream(params, budget, X, y, g, b)
    (entry,) = budget.ledger.entries
    factorization = make_factorization(CONTINUAL[mechanism], 4)
    assert entry.mechanism == "gaussian"
    assert entry.sensitivity == pytest.approx(factorization.sensitivity)
    assert gaussian_epsilon(entry.sigma, 1e-5, entry.sensitivity) == pytest.approx(1.0, rel=1e-6)
    assert clf.privacy_spent_ == (1.0, 1e-5)
    assert not hasattr(clf, "curvature_")
    assert clf.score(X, y) > 0.75  # Bayes rate 0.87, chance 0.5


def test_continual_mechanism_needs_a_horizon_and_changes_nothing_without():
    X, y, g, b = _data(n_batches=1)
    clf = DWDClassifier(mechanism="local-blt", clip_norm=4.0, classes=[-1, 1])
    with pytest.raises(ValueError, match="n_batches"):
        clf.fit(X, y, sample_group=g)
    assert not hasattr(clf, "coef_")


def test_a_failed_batch_leaves_the_noise_streams_untouched():
    """More sites than the stream's noise was set up for: refused, and the
    next valid batch draws the same noise as without the failed call."""
    X, y, g, b = _data(n_batches=2)
    params = dict(mechanism="local-tree", clip_norm=4.0, n_batches=2, classes=[-1, 1],
                  random_state=3)
    one, two = DWDClassifier(**params), DWDClassifier(**params)
    for clf in (one, two):
        clf.partial_fit(X[b == 0], y[b == 0], sample_group=g[b == 0])
    with pytest.raises(ValueError, match="sites"):
        one.partial_fit(X[b == 1], y[b == 1], sample_group=np.arange((b == 1).sum()) % 5)
    for clf in (one, two):
        clf.partial_fit(X[b == 1], y[b == 1], sample_group=g[b == 1])
    np.testing.assert_array_equal(one.coef_, two.coef_)


def test_a_stream_too_small_for_its_epsilon_warns_before_spending():
    """Few rows at a small ε: the warning comes before the budget is charged
    (public quantities only) and the ratio it reports is the noise norm over
    ``n_rows C2``, checked against the empirical norm of the summed noise."""
    X, y, g, b = _data(n_batches=4)
    small_stream_warns_before_spending("local-blt", X, y, g, b)
    m = b == 0
    factorization = make_factorization("blt", 4)
    sigma = continual_sigma(0.1, 1e-5, factorization)
    ratio = noise_to_signal(factorization, sigma, 3, 6, 1, 1.0, 4.0, 80)
    noise = SiteNoiseStreams(factorization, 3, 6, 1, sigma, continual_sensitivities(1.0, 4.0),
                             np.random.default_rng(0))
    total = sum(noise.next()[0] for _ in range(4))
    assert np.linalg.norm(total) / (80 * 4.0) == pytest.approx(ratio, rel=0.6)
    assert ratio > 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        DWDClassifier(mechanism="local-blt", epsilon=1.0, clip_norm=4.0, n_batches=4,
                      classes=[-1, 1]).partial_fit(X[m], y[m], sample_group=g[m])


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_algorithm_2_warns_before_a_release_the_noise_would_swamp(mechanism):
    """Algorithm 2: the noise ξ of each release's linear term against the
    largest gradient sum the batch could give (n_b C2): warned before the
    charge on a small batch, silent on a large one; the expected norm the
    warning uses is checked against draws of ξ."""
    X, y, g, b = _data(n_batches=4)
    m = b == 0
    budget = PrivacyBudget(epsilon=0.5, delta=1e-4)
    small = DWDClassifier(mechanism=mechanism, epsilon=1.0, clip_norm=4.0, classes=[-1, 1],
                          budget=budget)
    with pytest.warns(NoiseDominatesWarning, match="mostly noise"):
        with pytest.raises(PrivacyBudgetError):  # the charge comes after the warning
            small.partial_fit(X[m][:30], y[m][:30], sample_group=g[m][:30])
    assert not hasattr(small, "coef_") and budget.spent == (0.0, 0.0)
    p1 = X.shape[1] + 1
    calibration = PublishedCalibration(mechanism, 1.0, 1e-5, loss=1.0, alpha=1e-3,
                                       clip_norm=4.0, step_radius=1 / (4.0 * 4.0), rho=None,
                                       p1=p1, n_seen=30)
    draws = np.array([calibration.draw(p1, np.random.default_rng(i)) for i in range(2000)])
    expected = np.sqrt(np.mean(np.sum(draws**2, axis=1)))
    assert expected > 30 * 4.0  # the case above: noise beyond any gradient sum
    factor = 2.0 if mechanism == "laplace" else 1.0
    assert calibration.scale * math.sqrt(factor * p1) == pytest.approx(expected, rel=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        rows = np.tile(np.flatnonzero(m), 20)  # a batch 20 times larger
        DWDClassifier(mechanism=mechanism, epsilon=1.0, clip_norm=4.0, classes=[-1, 1]
                      ).partial_fit(X[rows], y[rows], sample_group=g[rows])


class _ElsewhereSites(DWDSites):
    """Sites behind a transport: the answers of in-process sites, no rows."""

    def __init__(self, inner):
        self._inner = inner
        self.n_features, self.n_sites = inner.n_features, inner.n_sites

    def labels(self):
        return None

    def prepare(self, classes, **kwargs):
        self._inner.prepare(classes, **kwargs)
        self.weight_sum, self.two_sided = self._inner.weight_sum, self._inner.two_sided

    def summaries(self, *args):
        return self._inner.summaries(*args)

    def majorizer(self, q):
        return self._inner.majorizer(q)

    def curvature_product(self, *args, **kwargs):
        return self._inner.curvature_product(*args, **kwargs)

    def line_losses(self, *args):
        return self._inner.line_losses(*args)

    def noised_summary(self, *args):
        return self._inner.noised_summary(*args)


@pytest.mark.parametrize("mechanism", sorted(CONTINUAL))
def test_remote_sites_are_refused_before_any_charge(mechanism):
    X, y, g, b = _data(n_batches=1)
    codes = np.unique(g, return_inverse=True)[1]
    inner = SiteData.from_rows(X, y, np.ones(len(y)), [np.flatnonzero(codes == s) for s in range(3)])
    budget = PrivacyBudget(epsilon=2.0, delta=1e-4)
    clf = DWDClassifier(mechanism=mechanism, clip_norm=4.0, n_batches=2, classes=[-1, 1],
                        budget=budget)
    with pytest.raises(NotImplementedError, match="in this process"):
        clf.fit_sites(_ElsewhereSites(inner))
    assert budget.spent == (0.0, 0.0) and not hasattr(clf, "coef_")
