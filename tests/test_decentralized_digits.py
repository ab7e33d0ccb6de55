"""Private PD-FTGL / PD-OCG / PD-OGD on digits (issue #26): the calibration's
L1 bound of the softmax gradient, the pre-spend warning, and utility."""

import math
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits

from skfedpriv.linear_model._decentralized import (
    DecentralizedLogisticRegression as DLR,
    clipped_gradient_sum,
)
from skfedpriv.privacy import NoiseDominatesWarning
from skfedpriv.linear_model._decentralized_defaults import release_signal_to_noise
from skfedpriv.privacy import PrivacyBudget, TreeAggregator
from skfedpriv.privacy._tree_laplace import gradient_l1_bound


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X / 16.0, y, np.arange(len(y)) % 5  # pixels by their public bound, 5 learners


def _l1_of_clipped_gradients(W, X, y, G):
    """L1 norm of each row's clipped gradient, one row per 'learner'."""
    n = len(y)
    grads = clipped_gradient_sum(W, X[:, None, :], y[:, None], np.ones((n, 1), bool), G)
    return np.abs(grads).sum(axis=(1, 2))


@pytest.mark.parametrize("q", [2, 3, 10, 26])
def test_softmax_gradient_l1_bound_holds_and_is_attained(q):
    """Brute force over random decisions and rows: never above the bound; the
    zero decision on an all-ones row attains it (so it cannot be lowered)."""
    rng = np.random.default_rng(q)
    p1, G, n = 6, 0.3, 2000
    D = q * p1
    bound = gradient_l1_bound(G, D, n_classes=q)
    W = rng.normal(size=(n, q, p1)) * rng.choice([0.01, 1.0, 10.0], size=(n, 1, 1))
    X = rng.normal(size=(n, p1)) * rng.choice([0.1, 1.0, 100.0], size=(n, 1))
    y = rng.integers(q, size=n)
    l1 = _l1_of_clipped_gradients(W, X, y, G)
    assert l1.max() <= bound * (1 + 1e-12)
    assert l1.max() > 0.5 * bound
    attained = _l1_of_clipped_gradients(np.zeros((1, q, p1)), np.ones((1, p1)), y[:1], G)
    assert attained[0] == pytest.approx(bound, rel=1e-12)
    # the closed form: 2 sqrt((q-1)/q) sqrt(p) G, and G sqrt(D) for two classes
    assert bound == pytest.approx(2 * math.sqrt((q - 1) / q) * math.sqrt(p1) * G)
    if q == 2:
        assert bound == pytest.approx(G * math.sqrt(D))


def test_tree_sensitivity_uses_the_softmax_bound(digits):
    """On 10 classes the leaf sensitivity is the attained bound, 1.67x below 2G√D."""
    X, y, g = digits
    clf = DLR(mechanism="laplace", epsilon=1e3, classes=list(range(10)), random_state=0)
    clf.fit(X[:500], y[:500], sample_group=g[:500])
    D = 10 * 65
    assert clf.leaf_sensitivity_ == pytest.approx(2 * gradient_l1_bound(1.0, D, 10), rel=1e-6)
    assert 2 * math.sqrt(D) / clf.leaf_sensitivity_ == pytest.approx(10 / (2 * 3), rel=1e-6)


def test_warns_before_spending_when_noise_will_drown_the_model(digits):
    """eps = 4 on digits: the warning comes from public quantities before the
    budget is charged (as an error, nothing is spent)."""
    X, y, g = digits
    budget = PrivacyBudget(100.0)
    clf = DLR(mechanism="laplace", epsilon=4.0, classes=list(range(10)), budget=budget)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        with pytest.raises(NoiseDominatesWarning, match="far below a non-private"):
            clf.fit(X, y, sample_group=g)
    assert budget.spent == (0.0, 0.0)
    assert not hasattr(clf, "coef_")
    for solver in ("ocg", "ogd"):
        with pytest.warns(NoiseDominatesWarning):
            DLR(solver=solver, mechanism="laplace", epsilon=4.0,
                classes=list(range(10))).fit(X, y, sample_group=g)
    # no warning where the run learns (eps = 64: PD-FTGL scores ~0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseDominatesWarning)
        DLR(mechanism="laplace", epsilon=64.0, classes=list(range(10))).fit(
            X, y, sample_group=g)


def test_signal_to_noise_closed_form():
    """The ratio of the docstring, by hand: PD-FTGL, 4 blocks of 90 rounds."""
    ratio = release_signal_to_noise("ftgl", 360, 90, 5, 650, 1.0, 51.0, 15.0)
    nodes = TreeAggregator(3).nodes_in_prefix(3)  # leaves 1-3 = 2 nodes
    assert nodes == 2
    assert ratio == pytest.approx(0.1 * 270 / (15.0 * math.sqrt(2 * 650 * nodes / 5)))
    # PD-OCG has used one leaf less; zero scale is no noise
    assert release_signal_to_noise("ocg", 360, 90, 5, 650, 1.0, 51.0, 15.0) < ratio
    assert release_signal_to_noise("ftgl", 360, 90, 5, 650, 1.0, 51.0, 0.0) == math.inf


def test_private_ftgl_learns_digits_where_it_does_not_warn(digits):
    """Above chance by far at eps = 16 (it scored 0.22 on average before the
    softmax L1 bound; chance is 0.10), and the mean over seeds never below chance."""
    X, y, g = digits
    scores = {}
    for eps in (4.0, 16.0):
        scores[eps] = np.mean([
            DLR(mechanism="laplace", epsilon=eps, classes=list(range(10)),
                random_state=seed).fit(X, y, sample_group=g).score(X, y)
            for seed in range(4)
        ])
    assert scores[4.0] > 0.10
    assert scores[16.0] >= 0.28


def test_a_run_with_no_signal_warns_instead_of_failing():
    """One row, one round: the expected signal is 0, and the warning says so
    (it divided by it before)."""
    X = np.random.default_rng(0).uniform(size=(1, 10))
    est = DLR(mechanism="laplace", classes=[0, 1], random_state=0)
    with pytest.warns(UserWarning, match="zero decision"), \
            pytest.warns(NoiseDominatesWarning, match="infinitely many times"):
        est.fit(X, np.array([1]))
