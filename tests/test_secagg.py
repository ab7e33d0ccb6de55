"""'secagg-tree': integer noise shares under a modular sum. The discrete
Gaussian sampler and its distributed accounting, the rounded sensitivity,
the modular sum, an audit with power, the estimator."""

import math
import warnings

import numpy as np
import pytest

from _streams import resumed_stream, small_stream_warns_before_spending
from _reference import audit_epsilon
from skfedpriv import DWDClassifier
from skfedpriv.datasets import make_federated_gaussians
from skfedpriv.privacy import (
    NoiseDominatesWarning,
    PrivacyBudget,
    make_factorization,
    zcdp_to_dp,
)
from skfedpriv.privacy._continual_summaries import (
    continual_sensitivities,
    linearized_summary,
    pack_summary,
    unit_scales,
)
from skfedpriv.privacy._discrete_gaussian import (
    discrete_gaussian,
    distributed_epsilon,
    distributed_rho,
    distributed_sigma,
)
from skfedpriv.linear_model._dwd_secagg import SecAggPlan
from skfedpriv.privacy._objective_perturbation import clip_augmented_rows
from skfedpriv.privacy._secure_aggregation import (
    SecAggSiteStream,
    SecAggTreeAggregate,
    WrapAroundWarning,
    wrap_probability,
)

pytestmark = pytest.mark.filterwarnings("ignore::skfedpriv.privacy.SeededNoiseWarning")


def _pmf(sigma, support):
    """The discrete Gaussian's probabilities on ``support``, normalized by
    direct summation (independent of the sampler)."""
    grid = np.arange(-40 * math.ceil(sigma) - 40, 40 * math.ceil(sigma) + 41)
    weights = np.exp(-grid.astype(float) ** 2 / (2 * sigma**2))
    return np.exp(-support.astype(float) ** 2 / (2 * sigma**2)) / weights.sum(), grid, weights


# -- the sampler and the accounting ------------------------------------------------


@pytest.mark.parametrize("sigma", [0.7, 2.5])
def test_discrete_gaussian_draws_follow_the_pmf(sigma):
    """Frequencies of 2e5 draws within 5 binomial standard errors of the
    exact probabilities; integer dtype."""
    draws = discrete_gaussian(np.random.default_rng(0), sigma, 200_000)
    assert draws.dtype == np.int64
    support = np.arange(-4 * math.ceil(sigma) - 2, 4 * math.ceil(sigma) + 3)
    p, _, _ = _pmf(sigma, support)
    counts = np.array([(draws == k).sum() for k in support])
    se = np.sqrt(200_000 * p * (1 - p))
    assert np.all(np.abs(counts - 200_000 * p) <= 5 * se + 1)


def test_distributed_rho_against_an_independent_formula():
    """ρ = Δ²/(2nσ²) + τ d with τ = 10 Σ_{k<n} exp(-2π²σ² k/(k+1)) (KLS
    2021, Prop. 14), at a σ small enough that τ shows; one party: τ = 0."""
    sigma, delta_2, n, d = 0.6, 3.0, 3, 7
    tau = 10 * (math.exp(-2 * math.pi**2 * 0.36 / 2) + math.exp(-2 * math.pi**2 * 0.36 * 2 / 3))
    assert distributed_rho(sigma, delta_2, n, d) == pytest.approx(
        delta_2**2 / (2 * n * 0.36) + tau * d, rel=1e-12)
    assert distributed_rho(sigma, delta_2, 1, d) == pytest.approx(delta_2**2 / (2 * 0.36))
    with pytest.raises(ValueError, match="at least"):
        distributed_rho(0.4, 1.0, 2, 1)


@pytest.mark.parametrize("n_parties, epsilon", [(1, 1.0), (10, 1.0), (4, 4.0)])
def test_calibration_against_dp_accounting(n_parties, epsilon):
    """The calibrated σ meets ε and 0.1% less misses it; the ε is at most
    dp-accounting's RDP accountant for the Gaussian of the summed noise
    (same Rényi curve, its discrete orders) and within 3% of it; for one
    party it is above the exact ε of the 1-d discrete Gaussian (dp-accounting's
    PLD), the worst case over 1-d integer shifts of that norm."""
    dp_accounting = pytest.importorskip("dp_accounting")
    delta, sensitivity, dim = 1e-5, 40.0, 1000
    sigma = distributed_sigma(epsilon, delta, sensitivity, n_parties, dim)
    assert distributed_epsilon(sigma, delta, sensitivity, n_parties, dim) <= epsilon
    assert distributed_epsilon(0.999 * sigma, delta, sensitivity, n_parties, dim) > epsilon
    accountant = dp_accounting.rdp.RdpAccountant(orders=np.linspace(1.01, 200, 20000))
    accountant.compose(dp_accounting.GaussianDpEvent(math.sqrt(n_parties) * sigma / sensitivity))
    reference = accountant.get_epsilon(delta)
    ours = distributed_epsilon(sigma, delta, sensitivity, n_parties, dim)
    assert ours <= reference * (1 + 1e-9) and ours >= 0.97 * reference
    if n_parties == 1:
        pld = dp_accounting.pld.privacy_loss_distribution.from_discrete_gaussian_mechanism(
            sigma, sensitivity=int(sensitivity))
        assert pld.get_epsilon_for_delta(delta) <= ours


# -- rounding, nodes and the modular sum -------------------------------------------


@pytest.mark.parametrize("gamma", [0.6, 3.0, 1e4])
def test_rounded_summaries_move_within_the_inflated_sensitivity_brute_force(gamma):
    """Neighbouring batches (one row replaced) at random parameters and
    classes: the rounded unit-sensitivity input moves by at most
    ``γ + sqrt(d)`` (worst over 400 draws), the unrounded one by at most 1,
    the bound is not vacuous, and at coarse rounding the rounded change
    exceeds ``γ ‖Δu‖`` (the ``sqrt(d)`` term is needed)."""
    rng = np.random.default_rng(2)
    q, c2, p, n_models = 1.0, 2.0, 3, 3
    scales = unit_scales(continual_sensitivities(q, c2))
    stream = SecAggSiteStream(np.ones((1, 1)), gamma, 1.0, 1, rng)
    worst = beyond = 0.0
    for trial in range(400):
        X = clip_augmented_rows(rng.normal(scale=2.0, size=(5, p)), c2, True)
        Y = rng.choice([-1.0, 1.0], size=(5, n_models))
        Xn, Yn = X.copy(), Y.copy()
        Xn[0] = clip_augmented_rows(rng.normal(scale=2.0, size=(1, p)), c2, True)[0]
        Yn[0] = -Y[0]
        theta = rng.normal(scale=[0.0, 0.3, 2.0][trial % 3], size=(p + 1, n_models))
        u = pack_summary(*linearized_summary(X, Y, theta, q, True), scales)
        un = pack_summary(*linearized_summary(Xn, Yn, theta, q, True), scales)
        assert np.linalg.norm(u - un) <= 1 + 1e-12
        moved = np.linalg.norm(stream.encode(u) - stream.encode(un))
        bound = gamma + math.sqrt(u.size)
        assert moved <= bound
        worst = max(worst, moved / bound)
        beyond = max(beyond, moved / (gamma * np.linalg.norm(u - un)))
    assert worst > (0.15 if gamma < 1e3 else 0.8), worst
    if gamma < 1e3:  # rounding alone moves it past γ ‖Δu‖: the sqrt(d) is needed
        assert beyond > 1.0


def test_node_sums_move_by_the_tree_column_norm():
    """Two 5-step site streams with the same generator on neighbouring
    inputs (step 1 changed): their messages differ, mod 2^32, exactly by
    the rounded change on the nodes containing step 1 (leaf, its parents)."""
    factorization = make_factorization("honaker", 5)
    C = np.asarray(factorization.C)
    rng = np.random.default_rng(3)
    steps = rng.normal(size=(5, 4))
    changed = steps.copy()
    changed[1] += rng.normal(size=4)
    one = SecAggSiteStream(C, 100.0, 3.0, 4, np.random.default_rng(9))
    two = SecAggSiteStream(C, 100.0, 3.0, 4, np.random.default_rng(9))
    diff = np.zeros((C.shape[0], 4))
    for step in range(5):
        m1, m2 = one.send(steps[step]), two.send(changed[step])
        assert m1.keys() == m2.keys()
        for node in m1:
            d = np.mod(m1[node] - m2[node], 2**32)
            diff[node] = np.where(d >= 2**31, d - 2**32, d)
    r = one.encode(steps[1]) - one.encode(changed[1])
    np.testing.assert_array_equal(diff, C[:, [1]] * r[None])
    assert np.linalg.norm(diff) == pytest.approx(factorization.sensitivity * np.linalg.norm(r))


def test_summed_shares_are_the_central_noise_in_distribution():
    """Four sites' shares of σ_s, summed mod 2^32 and lifted: mean 0 and
    the variance of one discrete Gaussian of σ_s² times four (exact
    variance by summation), the kurtosis of a Gaussian; the prefix
    estimate is the Honaker estimate of the exact sums plus that noise."""
    factorization = make_factorization("honaker", 2)
    C = np.asarray(factorization.C)
    sigma, dim, gamma = 2.2, 20_000, 10.0
    streams = [SecAggSiteStream(C, gamma, sigma, dim, child)
               for child in np.random.default_rng(4).spawn(4)]
    aggregate = SecAggTreeAggregate(factorization, gamma)
    values = np.random.default_rng(5).integers(-1000, 1000, size=(4, 2, dim)) / gamma
    for step in range(2):
        estimate = aggregate.add([s.send(values[k, step]) for k, s in enumerate(streams)], 2**31)
    noise = np.concatenate([aggregate.nodes[n] * gamma - (C[n] @ values.sum(0)) * gamma
                            for n in range(C.shape[0])])
    _, grid, weights = _pmf(sigma, np.zeros(1))
    variance = 4 * (grid.astype(float) ** 2 @ weights) / weights.sum()
    assert abs(noise.mean()) < 5 * math.sqrt(variance / noise.size)
    assert noise.var() == pytest.approx(variance, rel=0.03)
    assert np.mean(noise**4) / noise.var() ** 2 == pytest.approx(3.0, abs=0.1)
    exact = values.sum(0).sum(0)
    honaker = np.asarray(factorization.B)[1] @ np.array([aggregate.nodes[n] for n in range(3)])
    np.testing.assert_allclose(estimate, honaker)
    assert np.abs(estimate - exact).max() < 10 * math.sqrt(variance) / gamma


def test_wrap_around_is_bounded_and_flagged():
    """A 12-bit field: the empirical frequency of wrapped sums stays below
    the union bound, and a wrapped node is flagged."""
    bits, sigma, bound = 12, 300.0, 800
    rng = np.random.default_rng(6)
    total = 800 + discrete_gaussian(rng, sigma, 200_000)
    wrapped = np.mean(np.abs(total) >= 2 ** (bits - 1))
    assert 0 < wrapped <= wrap_probability(bound, sigma, 1, bits)
    factorization = make_factorization("tree", 1)
    aggregate = SecAggTreeAggregate(factorization, 1.0, bits=bits)
    with pytest.warns(WrapAroundWarning, match="wrapped"):
        aggregate.add([{0: np.array([2**bits - 5])}, {0: np.array([3000])}], 900)


# -- empirical audit ---------------------------------------------------------------


@pytest.mark.parametrize("noise_factor, should_violate", [(1.0, False), (0.5, True)])
def test_empirical_audit_of_the_summed_shares(noise_factor, should_violate):
    """One row's label flipped in the first batch of a 2-batch stream at
    ``θ_0 = 0`` (the linear part's worst case: its coefficient goes from -y
    to y), two sites each adding the calibrated share, summed: the rounded
    node sums (the package's encoding) and the summed discrete Gaussian
    shares (scale, σ and sensitivity from the package's plan), projected on
    the likelihood-ratio direction (for integer shifts
    the discrete Gaussian's log-likelihood ratio is linear, as the
    Gaussian's). The Clopper-Pearson lower bound on ε stays below ε; with
    half the noise it exceeds it (the audit has power)."""
    q, c2, epsilon, delta = 1.0, 2.0, 1.0, 1e-5
    factorization = make_factorization("honaker", 2)
    scales = unit_scales(continual_sensitivities(q, c2))
    row = np.array([[c2, 0.0]])
    theta = np.zeros((2, 1))
    u = pack_summary(*linearized_summary(row, np.ones((1, 1)), theta, q, False), scales)
    un = pack_summary(*linearized_summary(row, -np.ones((1, 1)), theta, q, False), scales)
    # the package's plan of a 2-site stream of 100 rows: scale, σ, sensitivity
    plan = SecAggPlan(factorization, 2, 2, 2, 1, q, c2, 100, epsilon, delta)
    sensitivity, sigma = plan.sensitivity, plan.sigma * noise_factor
    assert sensitivity == pytest.approx(
        factorization.sensitivity * (plan.gamma + math.sqrt(u.size)))
    stream = SecAggSiteStream(np.asarray(factorization.C), plan.gamma, sigma, u.size,
                              np.random.default_rng(0))
    r = stream.encode(u) - stream.encode(un)
    shift = np.concatenate([r, r])  # the leaf of step 1 and the root
    ratio = np.linalg.norm(shift) / sensitivity
    assert 0.85 < ratio <= 1.0  # near the worst case the claim covers
    n = 300_000
    nonzero = np.flatnonzero(shift)
    rng = np.random.default_rng(7)

    def summed_noise():
        return sum(discrete_gaussian(rng, sigma, (n, nonzero.size)) for _ in range(2))

    unit = shift[nonzero] / np.linalg.norm(shift)
    released_d = (shift[nonzero] + summed_noise()) @ unit
    released_n = summed_noise() @ unit
    grid = np.linspace(0, np.linalg.norm(shift) + 5 * math.sqrt(2) * sigma, 200)
    lower = audit_epsilon(released_d, released_n, delta, grid)
    assert (lower > epsilon) if should_violate else (lower <= epsilon)


# -- the estimator -----------------------------------------------------------------


def _data(n_batches=4, seed=0):
    return make_federated_gaussians(n_sites=3, n_batches=n_batches, n_per_batch=100,
                                    n_features=5, mu=0.5, random_state=seed)


def test_stream_charges_one_zcdp_release_resumes_after_pickle_and_stops_at_its_horizon():
    X, y, g, b = _data()
    budget = PrivacyBudget(epsilon=1.0, delta=1e-5)
    params = dict(mechanism="secagg-tree", epsilon=1.0, clip_norm=4.0, n_batches=4,
                  classes=[-1, 1], random_state=0)
    clf = resumed_stream(params, budget, X, y, g, b)
    (entry,) = budget.ledger.entries
    assert entry.mechanism == "zcdp"
    assert zcdp_to_dp(entry.rho, 1e-5) == pytest.approx(clf.privacy_spent_[0])
    assert 0.999 < clf.privacy_spent_[0] <= 1.0
    assert not hasattr(clf, "curvature_")
    assert clf.score(X, y) > 0.75  # Bayes rate 0.87, chance 0.5


def test_honest_sites_sets_each_share_and_is_checked_before_any_charge():
    """Each site's share grows as 1/sqrt(honest_sites) (the sum of the
    honest shares keeps the calibrated σ); more honest sites than sites is
    refused with nothing charged or fitted."""
    X, y, g, b = _data(n_batches=2)
    m = b == 0
    shares = {}
    for honest in (None, 1):
        clf = DWDClassifier(mechanism="secagg-tree", clip_norm=4.0, n_batches=2,
                            classes=[-1, 1], honest_sites=honest)
        clf.partial_fit(X[m], y[m], sample_group=g[m])
        shares[honest] = clf.noise_scale_
    assert shares[1] / shares[None] == pytest.approx(math.sqrt(3), rel=1e-3)
    budget = PrivacyBudget(epsilon=2.0, delta=1e-4)
    clf = DWDClassifier(mechanism="secagg-tree", clip_norm=4.0, n_batches=2, classes=[-1, 1],
                        honest_sites=4, budget=budget)
    with pytest.raises(ValueError, match="honest_sites"):
        clf.partial_fit(X[m], y[m], sample_group=g[m])
    assert budget.spent == (0.0, 0.0) and not hasattr(clf, "coef_")


def test_secagg_noise_is_below_the_local_tree_noise():
    """The summed shares are about the central noise: per site, the share
    times sqrt(n_sites) is within 15% of one 'local-tree' site's σ (the
    zCDP conversion and rounding cost a little), so the summed noise is
    about sqrt(n_sites) times smaller."""
    X, y, g, b = _data(n_batches=2)
    m = b == 0
    scales = {}
    for mechanism in ("local-tree", "secagg-tree"):
        clf = DWDClassifier(mechanism=mechanism, clip_norm=4.0, n_batches=2, classes=[-1, 1])
        scales[mechanism] = clf.partial_fit(X[m], y[m], sample_group=g[m]).noise_scale_
    ratio = scales["secagg-tree"] * math.sqrt(3) / scales["local-tree"]
    assert 1.0 < ratio < 1.15


def test_a_small_stream_warns_before_spending():
    X, y, g, b = _data(n_batches=4)
    small_stream_warns_before_spending("secagg-tree", X, y, g, b)
    m = b == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        warnings.simplefilter("error", WrapAroundWarning)
        DWDClassifier(mechanism="secagg-tree", clip_norm=4.0, n_batches=4, classes=[-1, 1]
                      ).partial_fit(X[m], y[m], sample_group=g[m])


def test_secagg_needs_a_horizon():
    X, y, g, b = _data(n_batches=1)
    clf = DWDClassifier(mechanism="secagg-tree", clip_norm=4.0, classes=[-1, 1])
    with pytest.raises(ValueError, match="n_batches"):
        clf.fit(X, y, sample_group=g)
    assert not hasattr(clf, "coef_")
