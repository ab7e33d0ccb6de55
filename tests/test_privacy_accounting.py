"""Tests for skfedpriv.privacy._calibration and ._ledger: validation,
calibration, zCDP, the ledger's composition rules and the shared PrivacyBudget."""

import copy
import math
import pickle
import threading

import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.model_selection import GridSearchCV

from skfedpriv.privacy import (
    PrivacyBudget,
    PrivacyBudgetError,
    PrivacyLedger,
    check_privacy_params,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma,
    gaussian_zcdp,
    laplace_scale,
    zcdp_rho,
    zcdp_to_dp,
)

dpa = pytest.importorskip("dp_accounting")

EPSILONS = [0.1, 0.5, 0.8, 1.0, 2.0, 5.0, 10.0]
DELTAS = [1e-3, 1e-5]
SENSITIVITIES = [1.0, 0.3, 7.0]


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "epsilon, exc",
    [
        (float("nan"), ValueError),
        (np.nan, ValueError),
        (float("inf"), ValueError),
        (-float("inf"), ValueError),
        (0, ValueError),
        (0.0, ValueError),
        (-1.0, ValueError),
        (True, TypeError),
        (np.bool_(True), TypeError),
        ("1", TypeError),
        (None, TypeError),
        (1 + 0j, TypeError),
    ],
)
def test_check_privacy_params_rejects_bad_epsilon(epsilon, exc):
    with pytest.raises(exc, match="epsilon"):
        check_privacy_params(epsilon, 1e-5)


@pytest.mark.parametrize(
    "delta, exc",
    [
        (1.0, ValueError),
        (1, ValueError),
        (1.5, ValueError),
        (-1e-12, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (False, TypeError),
        ("0.1", TypeError),
        (None, TypeError),
    ],
)
def test_check_privacy_params_rejects_bad_delta(delta, exc):
    with pytest.raises(exc, match="delta"):
        check_privacy_params(1.0, delta)


def test_check_privacy_params_accepts_and_converts():
    assert check_privacy_params(1) == (1.0, 0.0)
    eps, delta = check_privacy_params(np.float32(0.5), np.float64(1e-6))
    assert (eps, delta) == (0.5, 1e-6)
    assert type(eps) is float and type(delta) is float
    assert check_privacy_params(np.int64(3), 0)[0] == 3.0
    with pytest.raises(ValueError, match="delta"):
        check_privacy_params(1.0, 0.0, require_delta=True)


@pytest.mark.parametrize(
    "func, args",
    [
        (gaussian_sigma, (float("nan"), 1e-5, 1.0)),
        (gaussian_sigma, (1.0, 0.0, 1.0)),
        (gaussian_sigma, (1.0, 1e-5, 0.0)),
        (gaussian_sigma, (1.0, 1e-5, float("nan"))),
        (laplace_scale, (float("inf"), 1.0)),
        (laplace_scale, (1.0, -1.0)),
        (gaussian_delta, (0.0, 1.0, 1.0)),
        (gaussian_delta, (1.0, -1.0, 1.0)),
        (gaussian_epsilon, (1.0, 0.0, 1.0)),
        (gaussian_zcdp, (float("inf"), 1.0)),
        (zcdp_to_dp, (-0.1, 1e-5)),
        (zcdp_to_dp, (float("nan"), 1e-5)),
        (zcdp_to_dp, (0.1, 1.0)),
    ],
)
def test_calibration_functions_validate(func, args):
    with pytest.raises((ValueError, TypeError)):
        func(*args)


def test_gaussian_sigma_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        gaussian_sigma(1.0, 1e-5, 1.0, method="rdp")


# --------------------------------------------------------------------------
# Laplace and Gaussian calibration
# --------------------------------------------------------------------------


def test_laplace_scale():
    assert laplace_scale(0.5, 2.0) == 4.0
    assert laplace_scale(2, 1) == 0.5


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
def test_analytic_sigma_matches_dp_accounting(epsilon, delta, sensitivity):
    ours = gaussian_sigma(epsilon, delta, sensitivity)
    # dp_accounting calibrates for sensitivity 1; σ scales linearly in Δ.
    ref = sensitivity * dpa.get_sigma_gaussian(epsilon, delta)
    assert ours == pytest.approx(ref, rel=1e-9)
    # Valid: the exact profile at σ is at most δ ...
    assert gaussian_delta(ours, epsilon, sensitivity) <= delta
    # ... and minimal: 1e-6 less noise would break (ε, δ).
    assert gaussian_delta(ours * (1 - 1e-6), epsilon, sensitivity) > delta


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", DELTAS)
def test_gaussian_epsilon_matches_dp_accounting(epsilon, delta):
    for sigma, sens in [(0.7, 1.0), (3.0, 2.0), (25.0, 0.5)]:
        ours = gaussian_epsilon(sigma, delta, sens)
        ref = dpa.get_epsilon_gaussian(sigma / sens, delta)
        assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12)
        if ours > 0:
            assert gaussian_delta(sigma, ours, sens) <= delta
    # Round trip: ε -> σ -> ε.
    sigma = gaussian_sigma(epsilon, delta, 1.0)
    assert gaussian_epsilon(sigma, delta, 1.0) == pytest.approx(epsilon, rel=1e-9)


def test_gaussian_epsilon_zero_when_delta_large():
    # δ(0) = 2Φ(μ/2) − 1: at δ above it, the mechanism is (0, δ)-DP.
    d0 = 2 * stats.norm.cdf(0.5 / 2) - 1
    assert gaussian_epsilon(2.0, d0 * 1.01, 1.0) == 0.0
    assert gaussian_epsilon(2.0, d0 * 0.99, 1.0) > 0.0


@pytest.mark.parametrize(
    "sigma, epsilon, sensitivity",
    [(1.0, 0.5, 1.0), (4.0, 1.0, 1.0), (3.7, 1.0, 1.0), (0.9, 2.0, 0.5),
     (10.0, 0.1, 3.0), (0.5, 5.0, 1.0)],
)
def test_gaussian_delta_matches_brute_force_integration(sigma, epsilon, sensitivity):
    # δ(ε) = ∫ max(0, p(x) − e^ε q(x)) dx, p = N(Δ, σ²), q = N(0, σ²).
    p = stats.norm(loc=sensitivity, scale=sigma).pdf
    q = stats.norm(loc=0.0, scale=sigma).pdf

    def integrand(x):
        return max(0.0, p(x) - math.exp(epsilon) * q(x))

    # p − e^ε q changes sign once, at x* = Δ/2 + εσ²/Δ.
    x_star = sensitivity / 2 + epsilon * sigma**2 / sensitivity
    left, _ = integrate.quad(integrand, -np.inf, x_star, epsabs=0, epsrel=1e-11)
    right, _ = integrate.quad(integrand, x_star, np.inf, epsabs=0, epsrel=1e-11,
                              limit=200)
    brute = left + right
    assert left == pytest.approx(0.0, abs=1e-15)
    assert gaussian_delta(sigma, epsilon, sensitivity) == pytest.approx(brute, rel=1e-7)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_gaussian_delta_matches_dp_accounting_pld(epsilon):
    from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss

    for sigma, sens in [(1.0, 1.0), (5.0, 2.0), (0.8, 0.3)]:
        ref = GaussianPrivacyLoss(sigma, sensitivity=sens).get_delta_for_epsilon(epsilon)
        assert gaussian_delta(sigma, epsilon, sens) == pytest.approx(ref, rel=1e-6)


def test_analytic_sigma_large_epsilon_is_stable():
    for epsilon, delta in [(50.0, 1e-5), (200.0, 1e-12), (1000.0, 1e-3)]:
        sigma = gaussian_sigma(epsilon, delta, 1.0)
        assert np.isfinite(sigma) and sigma > 0
        assert gaussian_delta(sigma, epsilon, 1.0) <= delta
        assert gaussian_delta(sigma * 0.999, epsilon, 1.0) > delta
    # Tiny ε: σ large, still exact.
    sigma = gaussian_sigma(1e-3, 1e-5, 1.0)
    assert sigma == pytest.approx(dpa.get_sigma_gaussian(1e-3, 1e-5), rel=1e-9)


def test_classic_and_zcdp_calibrations():
    eps, delta, sens = 0.7, 1e-5, 2.0
    classic = gaussian_sigma(eps, delta, sens, method="classic")
    assert classic == pytest.approx(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps)
    zc = gaussian_sigma(eps, delta, sens, method="zcdp")
    rho = (math.sqrt(eps + math.log(1 / delta)) - math.sqrt(math.log(1 / delta))) ** 2
    assert zc == pytest.approx(sens / math.sqrt(2 * rho), rel=1e-12)
    # Both are valid (ε < 1 for the classic theorem); zCDP is valid for all ε.
    assert gaussian_delta(classic, eps, sens) <= delta
    for e in EPSILONS:
        for d in DELTAS:
            assert gaussian_delta(gaussian_sigma(e, d, 1.0, "zcdp"), e, 1.0) <= d


def test_classic_calibration_is_not_valid_for_large_epsilon():
    # Dwork & Roth Thm A.1 is proven for ε < 1 only; at ε = 10 the formula
    # gives less noise than the exact optimum, i.e. it is NOT (ε, δ)-DP.
    sigma = gaussian_sigma(10.0, 1e-5, 1.0, method="classic")
    assert sigma < gaussian_sigma(10.0, 1e-5, 1.0)
    assert gaussian_delta(sigma, 10.0, 1.0) > 1e-5


@pytest.mark.parametrize("epsilon, delta", [(0.8, 1e-5), (0.5, 1e-3), (2.0, 1e-3)])
def test_sigma_ratios_at_paper_settings(epsilon, delta):
    analytic = gaussian_sigma(epsilon, delta, 1.0)
    classic = gaussian_sigma(epsilon, delta, 1.0, method="classic")
    zc = gaussian_sigma(epsilon, delta, 1.0, method="zcdp")
    print(f"eps={epsilon} delta={delta}: analytic σ={analytic:.4f}, "
          f"classic/analytic={classic / analytic:.3f}, zcdp/analytic={zc / analytic:.3f}")
    # The project quotes "about 1.25–1.65x less σ" for the analytic mechanism.
    assert 1.25 <= classic / analytic <= 1.65
    assert 1.25 <= zc / analytic <= 1.65


# --------------------------------------------------------------------------
# zCDP
# --------------------------------------------------------------------------


def test_gaussian_zcdp_and_zcdp_rho():
    assert gaussian_zcdp(2.0, 1.0) == 0.125
    assert gaussian_zcdp(3.0, 6.0) == 2.0
    for eps in EPSILONS:
        for delta in DELTAS:
            rho = zcdp_rho(eps, delta)
            assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", DELTAS)
def test_zcdp_conversion_sandwiched(epsilon, delta):
    # One Gaussian release at the analytic σ is ρ-zCDP with ρ = Δ²/(2σ²); its
    # exact ε is a lower bound for any valid conversion, and the simple bound
    # ρ + 2√(ρ ln 1/δ) is an upper bound for ours.
    sigma = gaussian_sigma(epsilon, delta, 1.0)
    rho = gaussian_zcdp(sigma, 1.0)
    ours = zcdp_to_dp(rho, delta)
    simple = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    exact = gaussian_epsilon(sigma, delta, 1.0)
    assert exact <= ours <= simple
    assert ours < simple  # strictly tighter than the simple bound


def test_zcdp_conversion_matches_rdp_accountant_grid():
    # dp_accounting's RDP conversion uses the same CKS 2020 Prop. 12 bound on a
    # grid of orders; we minimise over continuous α, so we are never worse and
    # agree closely with a fine grid.
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    orders = np.concatenate([np.linspace(1.02, 10, 2000), np.linspace(10, 2000, 20000)])
    for rho in [1e-4, 0.01, 0.1, 1.0, 5.0]:
        for delta in [1e-3, 1e-5, 1e-9]:
            ref, _ = compute_epsilon(orders, orders * rho, delta)
            ours = zcdp_to_dp(rho, delta)
            assert ours <= ref + 1e-9
            assert ours == pytest.approx(ref, rel=1e-3)


def test_zcdp_to_dp_edge_cases():
    assert zcdp_to_dp(0.0, 1e-5) == 0.0
    assert zcdp_to_dp(1e-12, 0.5) >= 0.0
    # Monotone in ρ.
    values = [zcdp_to_dp(r, 1e-6) for r in (0.01, 0.1, 1.0, 10.0)]
    assert values == sorted(values)


# --------------------------------------------------------------------------
# ledger
# --------------------------------------------------------------------------


def test_ledger_laplace_and_approx_compose_by_sum():
    ledger = PrivacyLedger()
    ledger.record("a", "laplace", epsilon=0.5)
    ledger.record("b", "pure", epsilon=0.25, sensitivity=2.0)
    ledger.record("c", "approx", epsilon=1.0, delta=1e-6)
    ledger.record("d", "approx", epsilon=0.5, delta=2e-6)
    eps, delta = ledger.total()
    assert eps == pytest.approx(2.25)
    assert delta == pytest.approx(3e-6)
    assert [e.note for e in ledger.entries] == ["a", "b", "c", "d"]
    assert ledger.entries[0].mechanism == "laplace" and ledger.entries[0].delta == 0.0


def test_ledger_empty():
    assert PrivacyLedger().total() == (0.0, 0.0)
    assert len(PrivacyLedger().entries) == 0


def test_ledger_single_gaussian_reports_exact_epsilon():
    ledger = PrivacyLedger()
    sigma = gaussian_sigma(0.8, 1e-5, 2.0)
    entry = ledger.record("grad", "gaussian", delta=1e-5, sigma=sigma, sensitivity=2.0)
    assert entry.epsilon == pytest.approx(0.8, rel=1e-9)
    assert entry.rho == pytest.approx(4.0 / (2 * sigma**2))
    eps, delta = ledger.total()
    assert eps == pytest.approx(0.8, rel=1e-9) and delta == 1e-5
    # Tighter than the zCDP conversion of the same release.
    assert eps < zcdp_to_dp(entry.rho, 1e-5)


def test_ledger_k_gaussians_same_sigma_is_one_gaussian_with_sqrt_k_sensitivity():
    k, sigma, sens, d = 9, 5.0, 1.5, 1e-6
    ledger = PrivacyLedger()
    for t in range(k):
        ledger.record(f"round {t}", "gaussian", delta=d, sigma=sigma, sensitivity=sens)
    eps, delta = ledger.total()
    assert delta == pytest.approx(k * d)
    # By hand: one Gaussian with sensitivity Δ√k = 4.5 and σ = 5, at δ = 9e-6.
    assert eps == pytest.approx(gaussian_epsilon(5.0, 9e-6, 4.5), rel=1e-12)
    assert eps == pytest.approx(dpa.get_epsilon_gaussian(5.0 / 4.5, 9e-6), rel=1e-9)
    # Better than basic composition and than zCDP.
    assert eps < sum(e.epsilon for e in ledger.entries)
    assert eps < zcdp_to_dp(k * sens**2 / (2 * sigma**2), k * d)
    # Explicit target δ.
    eps2, delta2 = ledger.total(delta=1e-8)
    assert delta2 == 1e-8
    assert eps2 == pytest.approx(gaussian_epsilon(5.0, 1e-8, 4.5), rel=1e-12)


def test_ledger_gaussian_composition_agrees_with_pld_accountant():
    # Independent check of the exact-composition rule with dp_accounting's
    # PLD accountant (ADD_OR_REMOVE_ONE ~ sensitivity 1 per release).
    ledger = PrivacyLedger()
    k, z = 10, 4.0
    for _ in range(k):
        ledger.record("r", "gaussian", delta=1e-7, sigma=z, sensitivity=1.0)
    ours, delta = ledger.total()
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.GaussianDpEvent(z), k)
    ref = acc.get_epsilon(delta)
    assert ours <= ref + 1e-9
    assert ours == pytest.approx(ref, rel=1e-2)


def test_ledger_mixed_gaussians():
    specs = [(2.0, 1.0, 1e-6), (4.0, 3.0, 2e-6), (1.5, 0.5, 1e-6)]
    ledger = PrivacyLedger()
    for sigma, sens, d in specs:
        ledger.record("g", "gaussian", delta=d, sigma=sigma, sensitivity=sens)
    mu = math.sqrt((1 / 2) ** 2 + (3 / 4) ** 2 + (0.5 / 1.5) ** 2)
    eps, delta = ledger.total()
    assert delta == pytest.approx(4e-6)
    assert eps == pytest.approx(gaussian_epsilon(1.0, 4e-6, mu), rel=1e-12)
    assert ledger.rho == pytest.approx(mu**2 / 2)


def test_ledger_gaussian_plus_zcdp_uses_zcdp():
    ledger = PrivacyLedger()
    ledger.record("g", "gaussian", delta=1e-6, sigma=3.0, sensitivity=1.0)
    z = ledger.record("mf", "zcdp", delta=1e-6, rho=0.02)
    assert z.epsilon == pytest.approx(zcdp_to_dp(0.02, 1e-6))
    eps, delta = ledger.total()
    rho = 1 / 18 + 0.02
    by_hand = min(zcdp_to_dp(rho, 2e-6), sum(e.epsilon for e in ledger.entries))
    assert eps == pytest.approx(by_hand, rel=1e-12)
    assert delta == pytest.approx(2e-6)


def test_ledger_all_parts_add():
    ledger = PrivacyLedger()
    ledger.record("lap", "laplace", epsilon=0.3)
    ledger.record("ap", "approx", epsilon=0.2, delta=1e-7)
    ledger.record("g1", "gaussian", delta=1e-6, sigma=2.0, sensitivity=1.0)
    ledger.record("g2", "gaussian", delta=1e-6, sigma=2.0, sensitivity=1.0)
    eps, delta = ledger.total()
    gauss = gaussian_epsilon(2.0, 2e-6, math.sqrt(2))
    assert eps == pytest.approx(0.3 + 0.2 + gauss, rel=1e-12)
    assert delta == pytest.approx(1e-7 + 2e-6)


def test_ledger_rejects_invalid_spends():
    ledger = PrivacyLedger()
    sigma = gaussian_sigma(1.0, 1e-5, 1.0)
    with pytest.raises(ValueError, match="not a valid guarantee"):
        ledger.record("g", "gaussian", epsilon=0.5, delta=1e-5, sigma=sigma, sensitivity=1.0)
    with pytest.raises(ValueError):
        ledger.record("g", "gaussian", epsilon=1.0, delta=0.0, sigma=sigma, sensitivity=1.0)
    with pytest.raises(ValueError):
        ledger.record("g", "gaussian", delta=1e-5, sigma=sigma)
    with pytest.raises(ValueError):
        ledger.record("l", "laplace", epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError):
        ledger.record("z", "zcdp", epsilon=0.01, delta=1e-5, rho=0.1)
    with pytest.raises(ValueError, match="mechanism"):
        ledger.record("x", "exponential", epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        ledger.record("a", "approx", epsilon=float("nan"))
    with pytest.raises(TypeError):
        ledger.record(3, "approx", epsilon=1.0)
    assert len(ledger.entries) == 0
    # A valid, looser claim is accepted and kept as given.
    e = ledger.record("g", "gaussian", epsilon=1.5, delta=1e-5, sigma=sigma, sensitivity=1.0)
    assert e.epsilon == 1.5


def test_ledger_entries_read_only_and_picklable():
    ledger = PrivacyLedger()
    ledger.record("a", "laplace", epsilon=0.5)
    ledger.record("g", "gaussian", delta=1e-6, sigma=2.0, sensitivity=1.0)
    assert isinstance(ledger.entries, tuple)
    with pytest.raises(AttributeError):
        ledger.entries[0].epsilon = 0.0
    clone_ = pickle.loads(pickle.dumps(ledger))
    assert clone_.entries == ledger.entries
    assert clone_.total() == ledger.total()


# --------------------------------------------------------------------------
# PrivacyBudget
# --------------------------------------------------------------------------


def test_budget_spend_check_remaining():
    budget = PrivacyBudget(1.0, 1e-5)
    assert budget.spent == (0.0, 0.0)
    assert budget.remaining == (1.0, 1e-5)
    budget.check(1.0, 1e-5)  # fits exactly; changes nothing
    assert budget.spent == (0.0, 0.0) and len(budget.ledger.entries) == 0
    budget.spend(0.4, 4e-6, note="fit 1")
    budget.spend(0.5, 0.0, note="fit 2", mechanism="laplace")
    assert budget.spent == pytest.approx((0.9, 4e-6))
    assert budget.remaining == pytest.approx((0.1, 6e-6))
    assert [e.note for e in budget.ledger.entries] == ["fit 1", "fit 2"]
    assert budget.ledger.entries[1].mechanism == "laplace"


def test_budget_refuses_overspend_without_changing_state():
    budget = PrivacyBudget(1.0, 1e-5)
    budget.spend(0.7, 5e-6, note="first")
    before = (budget.spent, budget.ledger.entries)
    with pytest.raises(PrivacyBudgetError, match="second"):
        budget.check(0.4, 0.0, note="second")
    with pytest.raises(PrivacyBudgetError):
        budget.spend(0.4, 0.0, note="second")
    with pytest.raises(PrivacyBudgetError):
        budget.spend(0.1, 6e-6, note="delta over")
    assert (budget.spent, budget.ledger.entries) == before
    assert isinstance(PrivacyBudgetError("x"), RuntimeError)


def test_budget_pure_epsilon_refuses_any_delta():
    budget = PrivacyBudget(2.0)
    with pytest.raises(PrivacyBudgetError):
        budget.spend(0.1, 1e-9)
    budget.spend(2.0)
    assert budget.remaining == (0.0, 0.0)


def test_budget_tolerates_float_accumulation():
    budget = PrivacyBudget(1.0)
    for _ in range(10):
        budget.spend(0.1)
    with pytest.raises(PrivacyBudgetError):
        budget.spend(1e-6)
    assert len(budget.ledger.entries) == 10


def test_budget_validates():
    for bad in [float("nan"), 0.0, -1.0, float("inf"), True]:
        with pytest.raises((ValueError, TypeError)):
            PrivacyBudget(bad)
    with pytest.raises(ValueError):
        PrivacyBudget(1.0, 1.0)
    budget = PrivacyBudget(1.0, 1e-5)
    with pytest.raises(ValueError):
        budget.spend(float("nan"))
    with pytest.raises(ValueError):
        budget.check(0.1, -1e-6)
    # A gaussian spend with an invalid ε claim is rejected before spending.
    with pytest.raises(ValueError):
        budget.spend(0.01, 1e-6, mechanism="gaussian", sigma=1.0, sensitivity=1.0)
    assert budget.spent == (0.0, 0.0)


def test_budget_copy_and_deepcopy_return_self():
    budget = PrivacyBudget(1.0)
    assert copy.copy(budget) is budget
    assert copy.deepcopy(budget) is budget
    assert copy.deepcopy({"b": budget})["b"] is budget
    assert repr(budget) == "PrivacyBudget(epsilon=1.0, delta=0.0)"


def test_budget_pickle_in_process_returns_the_original():
    # Inside one process a pickle round trip shares the budget (no silent
    # independent copy); other processes: see tests/test_budget.py.
    budget = PrivacyBudget(1.0, 1e-5)
    budget.spend(0.2, note="before")
    other = pickle.loads(pickle.dumps(budget))
    assert other is budget
    other.spend(0.5, note="through the copy")
    assert budget.spent == pytest.approx((0.7, 0.0))


def test_budget_is_thread_safe():
    budget = PrivacyBudget(0.5)
    refused = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        for _ in range(100):
            try:
                budget.spend(0.001)
            except PrivacyBudgetError:
                refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(budget.ledger.entries) == 500
    assert len(refused) == 300
    assert budget.spent[0] == pytest.approx(0.5)


class _SpendingClassifier(ClassifierMixin, BaseEstimator):
    """Tiny estimator that spends ``epsilon`` from ``budget`` in every fit."""

    def __init__(self, budget=None, epsilon=0.1):
        self.budget = budget
        self.epsilon = epsilon

    def fit(self, X, y):
        self.budget.spend(self.epsilon, 0.0, note=f"fit on {len(y)} rows")
        self.classes_, counts = np.unique(y, return_counts=True)
        self.majority_ = self.classes_[np.argmax(counts)]
        return self

    def predict(self, X):
        return np.full(len(X), self.majority_)


def _toy_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = np.array([0, 1] * 15)
    return X, y


def test_budget_survives_clone():
    budget = PrivacyBudget(1.0)
    est = _SpendingClassifier(budget=budget, epsilon=0.3)
    cloned = clone(est)
    assert cloned.budget is est.budget
    cloned.fit(*_toy_data())
    assert budget.spent == (0.3, 0.0)


def test_grid_search_counts_every_candidate_fit():
    budget = PrivacyBudget(10.0)
    est = _SpendingClassifier(budget=budget)
    gs = GridSearchCV(est, {"epsilon": [0.1, 0.2]}, cv=3, error_score="raise")
    gs.fit(*_toy_data())
    # 2 candidates x 3 folds + the refit.
    assert len(budget.ledger.entries) == 7
    expected = 3 * 0.1 + 3 * 0.2 + gs.best_params_["epsilon"]
    assert budget.spent[0] == pytest.approx(expected)
    assert gs.best_estimator_.budget is budget


def test_grid_search_threading_backend_counts_every_fit():
    from joblib import parallel_backend

    budget = PrivacyBudget(10.0)
    gs = GridSearchCV(_SpendingClassifier(budget=budget),
                      {"epsilon": [0.1, 0.2, 0.3]}, cv=2, n_jobs=2,
                      error_score="raise")
    with parallel_backend("threading", n_jobs=2):
        gs.fit(*_toy_data())
    assert len(budget.ledger.entries) == 7
    assert budget.spent[0] == pytest.approx(2 * 0.6 + gs.best_params_["epsilon"])


def test_grid_search_raises_on_the_fit_that_would_overspend():
    budget = PrivacyBudget(1.0)
    gs = GridSearchCV(_SpendingClassifier(budget=budget), {"epsilon": [0.3]},
                      cv=5, error_score="raise")
    with pytest.raises(PrivacyBudgetError):
        gs.fit(*_toy_data())
    # Fits 1-3 spent 0.9; the 4th would reach 1.2 and was refused unrecorded.
    assert len(budget.ledger.entries) == 3
    assert budget.spent[0] == pytest.approx(0.9)
